"""The frozen part of the real-thread set stays unseen: kb check refuses a note that cites a frozen thread or retells
one on another page, and the eval leaves a question's retelling notes out as it does its own thread's notes."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import yaml

from app.kbcheck import check_frozen
from app.models import Note
from eval.real import RealError, load_real, own_thread_items

FROZEN_URL = "https://github.com/example/trainer/issues/7"
OPEN_URL = "https://github.com/example/trainer/issues/8"


def _note(nid: str, url: str) -> Note:
    bi = {"en": "loss is nan after 10 steps", "zh": "训练 10 步后 loss 为 nan"}
    return Note(id=nid, url=url, title="t", lang="en", category="nan_inf_loss", evidence="community-advice",
                symptom=bi, resolution=bi, path="kb/notes/x.yaml:3")


@pytest.fixture()
def real_dir(tmp_path):
    qs = [
        {"id": "q-frozen", "lang": "en", "q": "loss nan", "source": FROZEN_URL, "frozen": True, "expected": "none",
         "retold_by": ["blog-retelling"]},
        {"id": "q-open", "lang": "en", "q": "loss nan", "source": OPEN_URL, "frozen": False, "expected": "none",
         "retold_by": ["blog-other"]},
    ]
    (tmp_path / "set.yaml").write_text(yaml.safe_dump(qs), encoding="utf-8")
    return tmp_path


def test_kb_check_refuses_a_frozen_thread_and_its_retelling_but_not_calibration_ones(real_dir):
    notes = [_note("cites-frozen", FROZEN_URL + "#issuecomment-1"), _note("blog-retelling", "https://blog.example.com/a"),
             _note("cites-open", OPEN_URL), _note("blog-other", "https://blog.example.com/b")]
    problems = check_frozen([], notes, folder=real_dir)
    flagged = sorted(p.message.split(":")[0] for p in problems)
    assert flagged == ["note blog-retelling", "note cites-frozen"]
    assert all(p.file == "kb/notes/x.yaml" and p.line == 3 for p in problems)


def test_eval_leaves_out_notes_that_retell_the_question_thread(real_dir):
    qs = {q.id: q for q in load_real(real_dir)}
    notes = {n.id: n for n in [_note("blog-other", "https://blog.example.com/b"), _note("cites-open", OPEN_URL),
                                _note("unrelated", "https://github.com/example/trainer/issues/9")]}
    item_ids = ["case-a", "blog-other", "cites-open", "unrelated"]
    engine = SimpleNamespace(item_ids=item_ids, doc_index={iid: i for i, iid in enumerate(item_ids)}, notes=notes)
    assert sorted(own_thread_items(engine, qs["q-open"])) == [1, 2]
    assert own_thread_items(engine, qs["q-frozen"]) == []  # its retelling is not in this KB


def test_unknown_retelling_id_stops_the_eval_with_its_place(real_dir):
    with pytest.raises(RealError, match=r"set.yaml\[0\].*blog-retelling"):
        load_real(real_dir, known={"blog-other"})


def test_a_single_retelling_id_is_read_like_a_list(tmp_path):
    q = {"id": "q1", "lang": "en", "q": "loss nan", "source": OPEN_URL, "frozen": False, "expected": "none", "retold_by": "blog-a"}
    (tmp_path / "set.yaml").write_text(yaml.safe_dump([q]), encoding="utf-8")
    assert load_real(tmp_path, known={"blog-a"})[0].retold_by == ["blog-a"]
    with pytest.raises(RealError, match=r"\['blog-a'\]"):
        load_real(tmp_path, known=set())
