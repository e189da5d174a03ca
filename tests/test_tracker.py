"""`trainfix ingest --issues`: a team's tracker export becomes thread notes (REST, gh and JSONL shapes; zh and en)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from conftest import FIXTURES, ROOT

from ingest.tracker import TrackerError, import_export, load_export, pick_resolution

TRACKER = FIXTURES / "tracker"


def test_picks_the_resolving_comment():
    """Figure reported in the README: how often the picker takes the comment that resolved the thread."""
    answers = json.loads((TRACKER / "answers.json").read_text(encoding="utf-8"))
    threads = {t.url: t for t in load_export(TRACKER / "rest_export.json")}
    assert len(threads) == len(answers) >= 30
    assert {t.title[:1] for t in threads.values()} & set("全多训显")  # Chinese threads are in the set
    right = 0
    for url, t in threads.items():
        p = pick_resolution(t)
        right += (None if p is None else p.index) == answers[url]
    assert right / len(answers) >= 0.9, f"{right}/{len(answers)}"


def test_import_is_idempotent_redacted_and_skips_unresolved(tmp_path):
    rep = import_export(TRACKER / "rest_export.json", tmp_path)
    answers = json.loads((TRACKER / "answers.json").read_text(encoding="utf-8"))
    resolved = sum(v is not None for v in answers.values())
    assert rep.added == resolved and rep.unresolved == len(answers) - resolved and rep.duplicates == 1
    stored = (tmp_path / "team" / "notes" / "team.yaml").read_text(encoding="utf-8")
    assert "hf_abcdefghijklmnop" not in stored and "hunter22" not in stored and "<redacted>" in stored
    assert "pull/999" not in stored  # pull requests in the export are not reports
    again = import_export(TRACKER / "rest_export.json", tmp_path)
    assert again.added == 0 and again.unchanged == resolved
    note = next(n for n in rep.notes if n.url.endswith("/issues/101"))
    assert note.evidence == "maintainer-confirmed" and note.origin == "team"
    zh = next(n for n in rep.notes if n.lang == "zh")
    assert any("\u4e00" <= ch <= "\u9fff" for ch in zh.resolution.zh)
    pr = next(n for n in rep.notes if "pull/" in n.resolution.en)
    assert pr.resolution.en.startswith("Closed by https://github.com/acme-ml/trainer/pull/")
    with_env = next(n for n in rep.notes if n.versions)
    assert "transformers==4.46.0" in with_env.versions


def test_gh_and_jsonl_shapes(tmp_path):
    gh = import_export(TRACKER / "gh_export.json", tmp_path / "a", dry_run=True)
    assert gh.threads == 6 and gh.added >= 4
    assert not (tmp_path / "a" / "team").exists()  # a dry run writes nothing
    jl = import_export(TRACKER / "export.jsonl", tmp_path / "b")
    assert jl.threads == 4 and jl.added + jl.unresolved == 4


def test_bad_export_is_a_clear_error(tmp_path):
    bad = tmp_path / "x.jsonl"
    bad.write_text('{"title": "a", "url": "https://x/1"}\nnot json\n', encoding="utf-8")
    try:
        load_export(bad)
    except TrackerError as e:
        assert "x.jsonl:2" in str(e)
    else:
        raise AssertionError("no error")


def test_cli_dry_run_json(tmp_path):
    env = {"TRAINFIX_HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"}
    env |= {k: v for k, v in os.environ.items() if k.startswith("PYTHON")}  # where bytecode goes: not into the clone
    out = subprocess.run([sys.executable, "-m", "app.cli", "ingest", "--issues", str(TRACKER / "rest_export.json"), "--dry-run", "--json"],
                         capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["dry_run"] and data["added"] >= 25 and data["unresolved_skipped"] >= 4
    assert not (tmp_path / "team").exists()
