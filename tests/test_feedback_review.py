"""Feedback that helps the KB, end to end on the real server and the real CLI: feedback with the item it is about and
a one-line comment -> `trainfix feedback export --review` -> `trainfix kb draft --entry` -> a draft `kb check` accepts."""

from __future__ import annotations

import json
import subprocess

import httpx
from conftest import API_TOKEN, PY, ROOT, clean_env

from app.kb import load_case_file

SECRET = "hf_abcdefghijklmnopqrstuvwxyz123456"
QUESTION = "Qwen2 full fine-tune: loss goes to 0 after 10 steps with bf16 and ZeRO-2"
CONFIG = '{\n  "bf16": {"enabled": true},\n  "communication_data_type": "fp32"\n}\n'


def cli(home, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "-m", "app.cli", *args], env=clean_env(home), cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_feedback_item_and_comment_to_review_to_draft(api_server, server_home, tmp_path):
    h = {"Authorization": f"Bearer {API_TOKEN}"}
    d = httpx.post(api_server.url + "/v1/diagnose", headers=h, timeout=120,
                   json={"question": QUESTION, "attachments": [{"name": "ds_config.json", "content": CONFIG}]}).json()
    top = (d["causes"] or d["related"])[0]
    comment = f"removing communication_data_type fixed it\nthanks! (token {SECRET})"
    r = httpx.post(api_server.url + "/v1/feedback", headers=h, timeout=30,
                   json={"kind": "fixed", "question": QUESTION, "item": top["case_id"], "answer": d, "comment": comment})
    assert r.status_code == 201, r.text
    fid = r.json()["id"]
    # a thumb on one item, with no comment, is recorded with its item too
    r = httpx.post(api_server.url + "/v1/feedback", headers=h, timeout=30, json={"kind": "up", "question": "q", "item": "some-note-id"})
    assert r.status_code == 201
    # a comment over the cap is refused with a field error, not cut silently
    r = httpx.post(api_server.url + "/v1/feedback", headers=h, timeout=30, json={"kind": "down", "question": "q", "comment": "x" * 501})
    assert r.status_code == 422 and r.json()["error"]["fields"][0]["field"] == "comment"

    review = tmp_path / "review.json"
    res = cli(server_home, "feedback", "export", "--review", str(review))
    assert res.returncode == 0, res.stderr
    doc = json.loads(review.read_text(encoding="utf-8"))
    assert doc["format"] == "trainfix-feedback-review"
    entry = next(e for e in doc["entries"] if e["id"] == fid)
    assert entry["kind"] == "fixed" and entry["item"] == top["case_id"]
    assert entry["comment"].startswith("removing communication_data_type fixed it thanks!")  # one line
    assert SECRET not in review.read_text(encoding="utf-8")  # redacted everywhere in the file
    assert entry["shown"][0]["id"] == top["case_id"] and entry["question"] == QUESTION
    assert all(e["kind"] != "up" for e in doc["entries"])  # a bare thumbs-up teaches the KB nothing: not for review

    # several entries and no --entry: a clear error that names the option
    if len(doc["entries"]) > 1:
        res = cli(server_home, "kb", "draft", str(review), "-o", str(tmp_path))
        assert res.returncode == 2 and "--entry" in res.stderr
    cases = tmp_path / "cases" / "loss_zero"
    cases.mkdir(parents=True)
    res = cli(server_home, "kb", "draft", str(review), "--entry", str(fid), "-o", str(cases))
    assert res.returncode == 0, res.stderr
    out = next(cases.glob("draft-feedback-*.md"))
    case, problems = load_case_file(out)
    assert case is not None and not problems, problems
    assert case.status == "draft" and case.id.startswith(f"draft-feedback-{fid}-")
    assert case.category == top["category"]  # a confirmed fix starts in its case's category
    assert case.evidence == "reporter-confirmed"
    assert case.title.en == QUESTION
    text = out.read_text(encoding="utf-8")
    assert "removing communication_data_type fixed it" in text and SECRET not in text
    check = cli(server_home, "kb", "check", str(tmp_path / "cases"))
    assert check.returncode == 0, check.stdout + check.stderr
    assert "1 cases" in check.stderr and "0 problem(s)" in check.stderr

    res = cli(server_home, "kb", "draft", str(review), "--entry", "999999", "-o", str(cases))
    assert res.returncode == 2 and "no entry with id 999999" in res.stderr
