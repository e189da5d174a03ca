"""Every shell command in README.md and docs/*.md runs as written from the repository root.

A bash block is either run (each `trainfix` line on its own, a `curl` block as one script against a real
`trainfix serve` on 127.0.0.1:7860: tests/test_docs_server.py) or marked in the Markdown with
`<!-- not run by tests: why -->`. A comment `# -> <case id>` names a case the output must contain.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

from conftest import PY, ROOT
from docs_blocks import _env, _trainfix_line, blocks, expected_ids


def test_fresh_start_embeds_nothing_then_only_the_edited_case(first_ingest, tmp_path):
    """Issue 12: with current shipped vectors a fresh start embeds 0 units; after one case is edited, exactly the
    changed unit is embedded."""
    home, rep = first_ingest
    assert rep["embedded"] == 0 and rep["added"] > 3000 and not rep["problems"], rep
    kb, home2 = tmp_path / "kb", tmp_path / "home"
    shutil.copytree(ROOT / "kb" / "cases", kb / "cases")
    shutil.copytree(ROOT / "kb" / "notes", kb / "notes")
    shutil.copytree(home, home2)  # the same index and vector cache, so only the edit differs
    path = kb / "cases" / "loss_zero" / "deepspeed-comm-dtype-fp32-loss-zero.md"
    text = path.read_text(encoding="utf-8")
    path.write_text(text.replace("## English", "## English\n\n### Note\nEdited in a test: this section is new.", 1), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINFIX_")}
    env.update(TRAINFIX_HOME=str(home2), HF_HUB_OFFLINE="1")
    r = subprocess.run([PY, "-m", "app.cli", "ingest", str(kb), "--json"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    rep2 = json.loads(r.stdout)
    assert rep2["embedded"] == 1, rep2  # the new section; the case's other units only moved or are unchanged
    assert rep2["added"] + rep2["updated"] >= 1 and rep2["removed"] == 0, rep2


def test_every_block_is_run_or_says_why_not():
    found = blocks()
    assert len(found) >= 6
    for name, line, body, skip in found:
        runnable = all(ln.strip().startswith(("#", ".venv/bin/trainfix", "trainfix", "curl", "-", '"', "'", "|", "{", "}", "]")) or not ln.strip() or ln.startswith(" ")
                       for ln in body.splitlines())
        assert skip or runnable, f"{name}:{line}: a bash block the tests cannot run; mark it <!-- not run by tests: why -->"


def test_trainfix_commands_run_as_written(docs_home, known_ids):
    ran = 0
    for name, line, body, skip in blocks():
        if skip:
            continue
        for ln in body.splitlines():
            if not ln.strip().startswith((".venv/bin/trainfix", "trainfix ")):
                continue
            r = subprocess.run(["bash", "-c", _trainfix_line(ln)], cwd=ROOT, env=_env(docs_home), capture_output=True, text=True, timeout=300)
            lint = " lint " in ln
            assert r.returncode in ((0, 1) if lint else (0,)), f"{name}:{line}: `{ln}` exited {r.returncode}: {r.stderr[-500:]}"
            for cid in expected_ids(ln, known_ids):
                assert cid in r.stdout, f"{name}:{line}: `{ln}` did not name {cid}"
            if "--json" not in ln and not lint:
                assert re.search(r"^\[1\] .* — https?://", r.stdout, re.M), "the text answer ends with the sources and their URLs"
            ran += 1
    assert ran >= 5


