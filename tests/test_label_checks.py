"""The real set's labels carry the outcome of the pooled label check (eval/sampling/pool-*.yaml), and no label added
by it rests on an item that cites the question's own thread (such a hit would be in-sample)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from app.kb import canonical_url, load_cases, load_notes
from eval.real import load_real

ROOT = Path(__file__).resolve().parents[1]
RECORDS = sorted((ROOT / "eval" / "sampling").glob("pool-*.yaml"))


@pytest.fixture(scope="module")
def questions():
    return {q.id: q for q in load_real()}


@pytest.mark.parametrize("record", RECORDS, ids=[r.name for r in RECORDS])
def test_pooled_check_is_applied(record: Path, questions):
    rec = yaml.safe_load(record.read_text(encoding="utf-8"))
    pooled = {q["id"]: q for q in rec["questions"]}
    assert set(pooled) <= set(questions), "the record names questions the real set does not have"
    assert rec["changes"], "a pooled check with no change is recorded as such, not as an empty list of changes"
    for ch in rec["changes"]:
        now = set(questions[ch["id"]].expected)
        assert set(ch["added"]) <= now, f"{ch['id']}: added labels {ch['added']} are not in the question file"
        assert not set(ch["removed"]) & now, f"{ch['id']}: removed labels are back: {set(ch['removed']) & now}"
        yes = set(pooled[ch["id"]]["yes"])
        assert set(ch["added"]) <= yes, f"{ch['id']}: a label was added that the pooled judge did not say yes to"
        assert ch["added"] or ch["removed"], f"{ch['id']}: a change that adds and removes nothing"


def test_pooled_additions_do_not_cite_their_own_thread(questions):
    cases = {c.id: c for c in load_cases().cases}
    notes = {n.id: n for n in load_notes().notes}

    def cited(item: str) -> set[str]:
        if item in cases:
            return {canonical_url(s.url) for s in cases[item].sources}
        return {canonical_url(notes[item].url)} if item in notes else set()

    bad = []
    for record in RECORDS:
        for ch in yaml.safe_load(record.read_text(encoding="utf-8"))["changes"]:
            src = canonical_url(questions[ch["id"]].source)
            bad += [(ch["id"], item) for item in ch["added"] if src in cited(item)]
    assert not bad, f"labels added by a pooled check that cite the question's own thread: {bad}"
