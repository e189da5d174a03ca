"""Redaction as a property: generated secrets embedded anywhere never reach a stored byte or an answer."""

from __future__ import annotations

import json
import string
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.facts import Attachment, read_attachments
from app.facts.redact import redact
from app.feedback import FeedbackStore

ALNUM = string.ascii_letters + string.digits
_tok = st.text(alphabet=ALNUM, min_size=24, max_size=40)
# a password starts with "Pw9" so it cannot equal a word the stored row holds anyway ("summary", "cfg.yaml", ...)
_pw = st.text(alphabet=ALNUM + "!$%^*", min_size=5, max_size=20).map(lambda s: "Pw9" + s)

SECRETS = st.one_of(
    _tok.map(lambda t: ("hf_" + t, "hf_" + t)),
    _tok.map(lambda t: ("sk-" + t, "sk-" + t)),
    _tok.map(lambda t: ("ghp_" + t + "abcdef", "ghp_" + t + "abcdef")),
    _pw.map(lambda p: (f"https://alice:{p}@example.org/repo", p)),
    _pw.map(lambda p: (f"postgres://ml:{p}@db.internal:5432/runs", p)),
    _tok.map(lambda t: (f"Authorization: Bearer {t}", t)),
    _tok.map(lambda t: (f"Authorization: Basic {t}", t)),
    _tok.map(lambda t: (f"eyJ{t[:10]}.eyJ{t[10:20]}.{t}", t)),
    _tok.map(lambda t: (f"machine api.example.org login bob password {t}", t)),
    _tok.map(lambda t: (f'"api_key": "{t}"', t)),
    _tok.map(lambda t: (f"--hub_token {t}", t)),
    _tok.map(lambda t: (f"-----BEGIN RSA PRIVATE KEY-----\n{t}\n{t[::-1]}\n-----END RSA PRIVATE KEY-----", t)),
)
FILLER = st.text(alphabet=string.ascii_letters + " \n:=,{}\"'-_./训练损失", max_size=200)


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True, database=None)
@given(before=FILLER, secret=SECRETS, after=FILLER)
def test_redact_removes_every_generated_secret(before, secret, after):
    shown, raw = secret
    text, n = redact(f"{before} {shown} {after}")
    assert text.count(raw) <= (before + after).count(raw) and n >= 1  # the filler may contain the same letters


SHM = "/dev/shm" if Path("/dev/shm").is_dir() else None  # a fresh database per example: in memory when we can
CHANNELS = ["question", "comment", "answer", "config", "log", "history", "item", "case_id", "file name"]


@pytest.mark.parametrize("where", CHANNELS)
def test_nothing_stored_holds_a_secret(where):
    """500 generated secrets per channel (where the secret is embedded), each stored in a fresh feedback database."""

    @settings(max_examples=250, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True, database=None)
    @given(before=FILLER, secret=SECRETS)
    def prop(before, secret):
        shown, raw = secret
        payload = f"{before}\n{shown}\nloss nan at step 10"
        with tempfile.TemporaryDirectory(dir=SHM) as d:
            fb = FeedbackStore(Path(d) / "fb.sqlite")
            fb.add(
                "up",
                payload if where == "question" else "q",
                answer={"summary": payload} if where == "answer" else {"summary": "a"},
                attachments=({"train.log" if where == "log" else "cfg.yaml": payload} if where in ("config", "log")
                             else {payload[:250]: "x"} if where == "file name" else None),
                case_id=payload[:200] if where == "case_id" else None,
                extra={"history": [{"role": "user", "content": payload}]} if where == "history" else None,
                comment=payload if where == "comment" else None,
                item=payload[:200] if where == "item" else None,
            )
            stored = (Path(d) / "fb.sqlite").read_bytes() + b"".join(p.read_bytes() for p in Path(d).glob("fb.sqlite-*"))
            if raw not in before:
                assert raw.encode() not in stored
                assert raw not in json.dumps(fb.export(), ensure_ascii=False)

    prop()


@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True, database=None)
@given(secret=SECRETS)
def test_facts_read_from_files_hold_no_secret(secret):
    shown, raw = secret
    fs = read_attachments([Attachment("run.sh", f"torchrun train.py --lr 1e-5 \\\n  {shown}\n"), Attachment("train.log", f"{shown}\n{{'loss': 1.0}}\n")])
    dumped = json.dumps([f.model_dump() for f in fs.facts] + list(fs.redacted_texts.values()), ensure_ascii=False)
    assert raw not in dumped


_JSON = st.recursive(
    st.none() | st.booleans() | st.floats(allow_nan=False) | st.text(max_size=30),
    lambda kids: st.lists(kids, max_size=5) | st.dictionaries(st.sampled_from(["title", "url", "html_url", "body", "comments", "user", "log_history",
                                                                                "loss", "step", "grad_norm", "author_association", "pull_request"]), kids, max_size=6),
    max_leaves=30,
)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True, database=None)
@given(text=st.text(max_size=2000) | _JSON.map(json.dumps), name=st.sampled_from(["export.json", "export.jsonl", "trainer_state.json", "train.log"]))
def test_new_input_paths_fail_only_with_their_own_errors(tmp_path_factory, text, name):
    """Fuzz the inputs this version added: a tracker export either loads or raises TrackerError; a run chart's
    reader returns a series or None, whatever the bytes."""
    from app.chart import read_series
    from ingest.tracker import TrackerError, load_export

    f = tmp_path_factory.mktemp("fuzz") / name
    f.write_text(text, encoding="utf-8")
    try:
        load_export(f)
    except TrackerError:
        pass
    out = read_series(Attachment(name, text))
    assert out is None or out.series
    fs = read_attachments([Attachment(name, text)])  # every parser behind it: a note, never an exception
    assert all(n.file == name for n in fs.files)
