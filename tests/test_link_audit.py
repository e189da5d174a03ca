"""A link the audit rejected stays rejected: kb check fails a note linked again to a case it was judged not to explain,
and says where; other links of that note and of that case pass, and an unreadable audit file is named."""

from __future__ import annotations

import yaml

from app.kbcheck import check_audited_links
from app.models import Note


def _note(nid: str, case: str | None) -> Note:
    bi = {"en": "loss is nan after 10 steps", "zh": "训练 10 步后 loss 为 nan"}
    return Note(id=nid, url=f"https://github.com/example/trainer/issues/{nid.split('-')[-1]}", title="t", lang="en", category="nan_inf_loss",
                evidence="community-advice", symptom=bi, resolution=bi, case=case, path="kb/notes/x.yaml:12")


def _audit(folder, changes):
    folder.mkdir(exist_ok=True)
    (folder / "links.yaml").write_text(yaml.safe_dump({"shares": [{"share": "A", "changes": changes}]}), encoding="utf-8")
    return folder


def test_a_rejected_link_that_comes_back_fails_with_its_reason(tmp_path):
    folder = _audit(tmp_path / "audits", [
        {"note": "trainer-7", "case": "lr-too-high", "verdict": "unlink", "why": "the thread was an fp16 overflow"},
        {"note": "trainer-8", "case": "lr-too-high", "verdict": "relink", "to": "fp16-overflow", "why": "fp16 overflow"},
    ])
    notes = [_note("trainer-7", "lr-too-high"), _note("trainer-8", "fp16-overflow"), _note("trainer-9", "lr-too-high"), _note("trainer-10", None)]
    problems = check_audited_links(notes, folder)
    assert [(p.file, p.line) for p in problems] == [("kb/notes/x.yaml", 12)]
    assert "note trainer-7" in problems[0].message and "lr-too-high" in problems[0].message
    assert "fp16 overflow" in problems[0].message and "links.yaml" in problems[0].message


def test_a_malformed_audit_is_named_and_the_rest_still_checked(tmp_path):
    folder = _audit(tmp_path / "audits", [{"note": "trainer-7", "case": "lr-too-high", "verdict": "unlink", "why": "other cause"}])
    (folder / "broken.yaml").write_text("shares: [{changes: [{note: 1, verdict: maybe}]}]", encoding="utf-8")
    problems = check_audited_links([_note("trainer-7", "lr-too-high")], folder)
    assert any("broken.yaml" in p.file and "not a link audit" in p.message for p in problems)
    assert any("note trainer-7" in p.message for p in problems)


def test_a_relink_without_its_target_is_refused(tmp_path):
    folder = _audit(tmp_path / "audits", [{"note": "trainer-8", "case": "lr-too-high", "verdict": "relink", "why": "x"}])
    (problem,) = check_audited_links([], folder)
    assert "not a link audit" in problem.message and problem.file.endswith("links.yaml")


def test_the_shipped_kb_keeps_every_audited_link_out():
    from app.kb import load_notes

    assert check_audited_links(load_notes().notes) == []
