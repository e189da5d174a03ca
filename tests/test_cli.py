"""The `trainfix` command as a user runs it: ask --json shape, lint, kb check, and the error messages."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import SEED_CASES, copy_cases

EXE = [sys.executable, "-m", "app.cli"]


def run(args, env, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(EXE + args, env=env, capture_output=True, text=True, timeout=600, **kw)


@pytest.fixture(scope="module")
def cli_env(tmp_path_factory, seed_kb, vector_cache):
    env = {**os.environ, "TRAINFIX_HOME": str(tmp_path_factory.mktemp("clihome")), "TRAINFIX_VECTOR_CACHE_PATH": str(vector_cache), "COLUMNS": "120"}
    r = run(["ingest", str(seed_kb)], env)
    assert r.returncode == 0, r.stderr
    assert "added" in r.stdout
    return env


def test_ask_json_shape(cli_env, tmp_path):
    cfg = tmp_path / "ds_config.json"
    cfg.write_text('{\n  "bf16": {"enabled": true},\n  "communication_data_type": "fp32"\n}\n')
    r = run(["ask", "training broke, please help", "--attach", str(cfg), "--json", "--top", "2"], cli_env)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["language"] in ("zh", "en") and isinstance(d["confident"], bool)
    assert isinstance(d["causes"], list) and 1 <= len(d["causes"]) <= 2
    for c in d["causes"]:
        assert isinstance(c["case_id"], str) and isinstance(c["title"], str) and isinstance(c["cause"], str)
        assert isinstance(c["score"], float) and all(isinstance(x, str) for x in c["fixes"] + c["evidence"])
        assert all(isinstance(x["url"], str) and isinstance(x["title"], str) for x in c["citations"])
    assert [c["score"] for c in d["causes"]] == sorted((c["score"] for c in d["causes"]), reverse=True)
    assert d["causes"][0]["case_id"] == "deepspeed-comm-dtype-fp32-loss-zero"
    assert any("ds_config.json:3" in e for e in d["causes"][0]["evidence"])


def test_ask_markdown_in_chinese(cli_env):
    r = run(["ask", "用 OpenRLHF 做 KTO，qwen2 的 loss 一开始就是 nan"], cli_env)
    assert r.returncode == 0, r.stderr
    assert "可能的原因" in r.stdout or "没有找到" in r.stdout


def test_ask_empty_question(cli_env):
    r = run(["ask", "  "], cli_env)
    assert r.returncode == 2 and "question is empty" in r.stderr and "Traceback" not in r.stderr


def test_ask_unreadable_attachment(cli_env, tmp_path):
    r = run(["ask", "loss is nan", "--attach", str(tmp_path / "missing.yaml")], cli_env)
    assert r.returncode == 2 and "cannot read attachment" in r.stderr and "Traceback" not in r.stderr


def test_ask_against_index_of_other_embedder(cli_env, tmp_path):
    env = {**cli_env, "TRAINFIX_EMBEDDER": "st:minilm"}
    r = run(["ask", "loss is nan"], env)
    assert r.returncode == 3 and "re-ingest" in r.stderr.lower() and "Traceback" not in r.stderr


def test_ingest_of_folder_without_cases(cli_env, tmp_path):
    (tmp_path / "nothing").mkdir()
    r = run(["ingest", str(tmp_path / "nothing")], cli_env)
    assert r.returncode == 2 and "no usable cases" in r.stderr


def test_reingest_reports_unchanged(cli_env, seed_kb):
    r = run(["ingest", str(seed_kb), "--json"], cli_env)
    rep = json.loads(r.stdout)
    assert rep["embedded"] == 0 and rep["added"] == 0 and rep["unchanged"] > 0


def test_lint_reports_the_line_and_clean_config_is_clean(tmp_path):
    bad = tmp_path / "ds_config.json"
    bad.write_text('{\n  "fp16": {"enabled": "auto"},\n  "zero_optimization": {"stage": 2},\n  "communication_data_type": "fp32"\n}\n')
    clean = tmp_path / "clean.json"
    clean.write_text('{\n  "bf16": {"enabled": "auto"},\n  "zero_optimization": {"stage": 2}\n}\n')
    r = run(["lint", str(bad), "--json"], os.environ.copy())
    diags = json.loads(r.stdout)
    hit = [d for d in diags if d["code"] == "deepspeed-comm-dtype-fp32-loss-zero"]
    assert hit and hit[0]["range"]["start"]["line"] == 3 and hit[0]["source"] == "trainfix"
    assert hit[0]["codeDescription"]["href"].startswith("https://") and hit[0]["severity"] in (1, 2, 3)
    assert hit[0]["range"]["end"]["character"] > hit[0]["range"]["start"]["character"]
    r = run(["lint", str(clean)], os.environ.copy())
    assert r.returncode == 0 and "no problems found" in r.stdout, r.stdout
    r = run(["lint", str(bad)], os.environ.copy())
    assert f"{bad}:4:" in r.stdout and r.returncode == 1


def test_kb_check_reports_file_and_line(tmp_path):
    kb = copy_cases(tmp_path / "kb", SEED_CASES[:1])
    broken = kb / "cases" / "loss_zero" / "no-source.md"
    src = (Path(__file__).resolve().parent.parent / "kb" / "cases" / "loss_zero" / "deepspeed-comm-dtype-fp32-loss-zero.md").read_text()
    text = src.replace("id: deepspeed-comm-dtype-fp32-loss-zero", "id: no-source").replace('url: "https://github.com/QwenLM/Qwen/issues/967"', 'url: "not a url"')
    broken.write_text(text.replace("\n## 中文", "\n## Deutsch"))
    r = run(["kb", "check", str(kb / "cases")], os.environ.copy())
    assert r.returncode == 1
    lines = r.stdout.splitlines()
    assert any(ln.startswith("loss_zero/no-source.md:") and "not a URL" in ln for ln in lines), lines
    assert any(ln.startswith("loss_zero/no-source.md:") and "中文" in ln for ln in lines), lines
    assert "2 cases" not in r.stderr and "1 cases and 0 thread notes checked in 2 files" in r.stderr


def test_help_everywhere():
    for args in (["--help"], ["ask", "--help"], ["kb", "check", "--help"], ["lint", "--help"], ["ingest", "--help"], ["serve", "--help"], ["eval", "--help"]):
        r = run(args, os.environ.copy())
        assert r.returncode == 0 and "Usage" in r.stdout, args


def test_ask_does_not_import_the_ui_stack(cli_env):
    code = (
        "import sys, app.cli as c\n"
        "from typer.testing import CliRunner\n"
        "r = CliRunner().invoke(c.app, ['ask', 'loss nan with kto', '--json'])\n"
        "assert r.exit_code == 0, r.output\n"
        "print(sorted(m for m in ('gradio', 'fastapi', 'slack_bolt', 'torch', 'sentence_transformers') if m in sys.modules))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], env=cli_env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "[]"


def test_feedback_export_jsonl_redacted(tmp_path):
    from app.feedback import FeedbackStore

    home = tmp_path / "fbhome"
    fb = FeedbackStore(home / "feedback.sqlite")
    fb.add("up", "loss is 0, token hf_SECRETSECRETSECRETSECRETSECRET", answer={"causes": []}, channel="api")
    fb.add("fixed", "kto nan", case_id="openrlhf-kto-vanilla-loss-nan", attachments={"run.sh": "--hub_token hf_ABCDEFGHIJKLMNOPQRSTUVWXYZ --vanilla_loss"}, channel="ui")
    with pytest.raises(ValueError):
        fb.add("meh", "x")
    out = tmp_path / "fb.jsonl"
    r = run(["feedback", "export", "-o", str(out)], {**os.environ, "TRAINFIX_HOME": str(home)})
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [x["kind"] for x in rows] == ["up", "fixed"] and rows[1]["case_id"] == "openrlhf-kto-vanilla-loss-nan"
    assert "hf_SECRET" not in out.read_text() and "hf_ABCDEF" not in out.read_text()
    assert rows[1]["attachments"]["run.sh"].endswith("--vanilla_loss") and rows[0]["channel"] == "api"
