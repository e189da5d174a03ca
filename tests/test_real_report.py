"""The real-set report keeps the newest draw apart, so a fresh sample is never averaged into the older ones."""
from __future__ import annotations

from eval.real import RealQuestion, report_lines, sample_of


def _row(qid: str, sample: str, hit: bool) -> dict:
    q = RealQuestion(id=qid, lang="en", q="loss nan", expected=["case-a"], source=f"https://x/{qid}", frozen=True, sample=sample)
    first = 0 if hit else None
    return {"q": q, "first": first, "confident": False, "lat": 0.01, "hit@1": float(hit), "hit@3": float(hit)}


def test_sample_of_reads_the_draw_from_the_file_name() -> None:
    assert [sample_of(s) for s in ("en", "zh", "en2", "s3-zh", "s5-en-a", "s12-zh-b")] == ["s1", "s1", "s2", "s3", "s5", "s12"]


def test_report_has_a_part_for_the_newest_draw_with_its_own_figures() -> None:
    rows = [_row("a", "s1", True), _row("b", "s1", True), _row("c", "s5", False), _row("d", "s5", True)]
    text = "\n".join(report_lines({"full": rows}))
    assert "### newest draw (s5) alone" in text
    part = text.split("### newest draw (s5) alone")[1]
    assert "| full | en | 2 | 0.500 |" in part  # only the two s5 questions, one hit
    assert "| full | en | 4 | 0.750 |" in text.split("### frozen")[0]


def test_report_without_later_draws_has_no_newest_part() -> None:
    assert "newest draw" not in "\n".join(report_lines({"full": [_row("a", "s1", True)]}))
