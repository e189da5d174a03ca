"""Every shell command in README.md and docs/*.md runs as written from the repository root.

A bash block is either run (each `trainfix` line on its own, a `curl` block as one script against a real
`trainfix serve` on 127.0.0.1:7860) or marked in the Markdown with `<!-- not run by tests: why -->`. A comment
`# -> <case id>` names a case the output must contain.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import time
from pathlib import Path

import httpx
import pytest
from conftest import PY, ROOT

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_BLOCK = re.compile(r"(?P<pre>(?:<!--[^\n]*-->\n)?)^```bash\n(?P<body>.*?)^```\s*$", re.S | re.M)


def blocks() -> list[tuple[str, int, str, str]]:
    """(file, line, body, skip reason or '') for every bash block."""
    out = []
    for f in DOCS:
        text = f.read_text(encoding="utf-8")
        for m in _BLOCK.finditer(text):
            skip = re.match(r"<!--\s*not run by tests:\s*(.*?)\s*-->", m.group("pre") or "")
            out.append((f.name, text[: m.start()].count("\n") + 1, m.group("body"), skip.group(1) if skip else ""))
    return out


def expected_ids(body: str, known: set[str]) -> set[str]:
    return {w for c in re.findall(r"#\s*->(.*)", body) for w in re.findall(r"[a-z0-9][a-z0-9-]{4,}", c) if w in known}


@pytest.fixture(scope="module")
def first_ingest(tmp_path_factory) -> tuple[Path, dict]:
    """The session's one index of the whole KB: a fresh data directory (empty vector cache), built by the real CLI
    from the shipped vectors. The README's commands run against it; the shipped-vector test below edits a copy."""
    home = tmp_path_factory.mktemp("docs-home")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINFIX_")}
    env.update(TRAINFIX_HOME=str(home), HF_HUB_OFFLINE="1")
    r = subprocess.run([PY, "-m", "app.cli", "ingest", "--json"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return home, json.loads(r.stdout)


@pytest.fixture(scope="module")
def docs_home(first_ingest) -> Path:
    return first_ingest[0]


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


@pytest.fixture(scope="module")
def known_ids():
    from app.kb import load_cases

    return {c.id for c in load_cases().cases}


def _env(home: Path) -> dict[str, str]:
    venv_bin = ROOT / ".venv" / "bin"
    path = f"{venv_bin}:{os.environ.get('PATH', '')}" if venv_bin.exists() else os.environ.get("PATH", "")
    env = {**os.environ, "TRAINFIX_HOME": str(home), "HF_HUB_OFFLINE": "1", "GRADIO_ANALYTICS_ENABLED": "False", "PATH": path}
    env.pop("TRAINFIX_API_TOKEN", None)
    return env


def _trainfix_line(line: str) -> str:
    """The line as written; only when this checkout has no .venv (tests run from another env) use this interpreter."""
    if line.startswith(".venv/bin/trainfix") and not (ROOT / ".venv" / "bin" / "trainfix").exists():
        return line.replace(".venv/bin/trainfix", f"{PY} -m app.cli", 1)
    return line


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


def _free(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_curl_examples_against_a_live_server(docs_home, known_ids, tmp_path):
    port = 7860 if _free(7860) else next(p for p in range(7861, 7960) if _free(p))
    log = (tmp_path / "serve.log").open("w")
    proc = subprocess.Popen([PY, "-m", "app.cli", "serve", "--port", str(port)], cwd=ROOT, env=_env(docs_home), stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        else:
            raise AssertionError("trainfix serve did not become ready: " + (tmp_path / "serve.log").read_text()[-2000:])
        ran = 0
        for name, line, body, skip in blocks():
            if skip or "curl" not in body:
                continue
            if "jq" in body and shutil.which("jq") is None:
                pytest.fail("jq is needed by a documented command (tests/run.sh installs it)")
            script = body.replace("127.0.0.1:7860", f"127.0.0.1:{port}")  # only when 7860 was taken
            r = subprocess.run(["bash", "-o", "pipefail", "-c", script], cwd=ROOT, env=_env(docs_home), capture_output=True, text=True, timeout=120)
            assert r.returncode == 0, f"{name}:{line}: exited {r.returncode}: {r.stderr[-500:]}"
            assert '"error"' not in r.stdout.replace('"errors"', ""), f"{name}:{line}: {r.stdout[:500]}"
            for cid in expected_ids(body, known_ids):
                assert cid in r.stdout, f"{name}:{line}: output does not name {cid}"
            ran += 1
        assert ran >= 4
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_eval_regression_guard(docs_home):
    """The retrieval-quality floor (README, "Test it"): the authored set's first 80 questions keep hit@3 ≥ 0.92.
    Runs on the session's full index (the ingest inside `trainfix eval` finds it unchanged)."""
    cmd = [PY, "-m", "app.cli", "eval", "--set", "authored", "--subset", "80", "--no-baselines", "--st-model", "", "--no-write", "--min-hit3", "0.92"]
    r = subprocess.run(cmd, cwd=ROOT, env=_env(docs_home), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    assert re.search(r"full\s+hit@1 [0-9.]+\s+hit@3 (0\.9[2-9]|1\.0)", r.stdout), r.stdout[-2000:]


def test_kb_check_counts_a_linked_note_as_its_case(docs_home, monkeypatch):
    """`kb check --retrieval` scores a case's examples the way the eval does: a note that links the case stands for it."""
    from app.retrieve import Engine
    from app.settings import Settings

    monkeypatch.setenv("TRAINFIX_HOME", str(docs_home))
    eng = Engine(Settings())
    linked = next(n for n in eng.notes.values() if n.case)
    assert eng.as_case(linked.id) == linked.case
    plain = next(n for n in eng.notes.values() if not n.case)
    assert eng.as_case(plain.id) == plain.id and eng.as_case(linked.case) == linked.case
