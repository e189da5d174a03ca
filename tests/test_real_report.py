"""The real-set report keeps the newest draw apart, so a fresh sample is never averaged into the older ones."""
from __future__ import annotations

from eval.real import HEADROOM_HEADER, RealQuestion, headroom, margin, report_lines, sample_of


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


def _pair(qid: str, full_first: int | None, bm25_first: int | None, lang: str = "en") -> tuple[dict, dict]:
    q = RealQuestion(id=qid, lang=lang, q="loss nan", expected=["case-a"], source=f"https://x/{qid}", frozen=True)
    row = {"q": q, "confident": False, "lat": 0.01}

    def hits(first: int | None) -> dict:
        return {"first": first, "hit@1": float(first == 0), "hit@3": float(first is not None and first < 3)}

    return {**row, **hits(full_first)}, {**row, **hits(bm25_first)}


def test_margin_counts_won_and_lost_questions_and_brackets_the_margin() -> None:
    pairs = [_pair("a", 0, None), _pair("b", 0, 2), _pair("c", None, 0), _pair("d", 1, 1), _pair("e", 0, 0)]
    full, bm25 = [p[0] for p in pairs], [p[1] for p in pairs]
    m1 = margin(full, bm25, 1)
    assert (m1["won"], m1["lost"], m1["n"]) == (2, 1, 5)
    assert abs(m1["margin"] - 0.2) < 1e-9
    assert m1["lo"] <= m1["margin"] <= m1["hi"] and m1["lo"] < 0 < m1["hi"]  # 5 questions cannot show a +0.2 margin
    m3 = margin(full, bm25, 3)
    assert (m3["won"], m3["lost"]) == (1, 1)  # b and d are top-3 hits for both


def test_margin_interval_narrows_with_more_questions() -> None:
    small = [_pair(f"s{i}", 0 if i % 3 else None, None) for i in range(12)]
    big = [_pair(f"b{i}", 0 if i % 3 else None, None) for i in range(300)]
    ms = margin([p[0] for p in small], [p[1] for p in small], 1)
    mb = margin([p[0] for p in big], [p[1] for p in big], 1)
    assert mb["hi"] - mb["lo"] < ms["hi"] - ms["lo"]


def test_report_has_a_margin_table_marking_met_targets() -> None:
    pairs = [_pair(f"e{i}", 0, None if i < 3 else 0) for i in range(10)] + [_pair(f"z{i}", 0, 0, "zh") for i in range(10)]
    text = "\n".join(report_lines({"full": [p[0] for p in pairs], "bm25": [p[1] for p in pairs]}))
    part = text.split("### margin over BM25")[1]
    en = next(line for line in part.splitlines() if line.startswith("| all | en |"))
    zh = next(line for line in part.splitlines() if line.startswith("| all | zh |"))
    assert "+0.300 ✓" in en and "3 / 0" in en
    assert "+0.000 |" in zh and "✓" not in zh


def test_headroom_takes_the_best_ranker_per_question_and_says_when_a_target_is_out_of_reach() -> None:
    def rows(firsts: list[int | None], lang: str = "en") -> list[dict]:
        out = []
        for i, f in enumerate(firsts):
            q = RealQuestion(id=f"{lang}{i}", lang=lang, q="x", expected=["case-a"], source=f"https://x/{lang}{i}", frozen=True)
            out.append({"q": q, "first": f, "confident": False, "lat": 0.01, "hit@1": float(f == 0), "hit@3": float(f is not None and f < 3)})
        return out

    # 10 questions: BM25 first on q0; full on q1; dense on q2 and q0; nobody first on q3..q9 (q3 is 2nd for dense)
    by_mode = {
        "full": rows([1, 0, 4, None, None, None, None, None, None, None]),
        "dense": rows([0, 3, 0, 1, None, None, None, None, None, None]),
        "bm25": rows([0, None, None, None, None, None, None, None, None, None]),
    }
    h1 = headroom(by_mode, {f"en{i}" for i in range(10)}, 1)
    assert (h1["n"], round(h1["oracle"], 3), round(h1["margin"], 3)) == (10, 0.3, 0.2)  # q0, q1, q2 vs BM25's q0
    h3 = headroom(by_mode, {f"en{i}" for i in range(10)}, 3)
    assert round(h3["oracle"], 3) == 0.4  # q3 is a top-3 hit for dense only
    text = "\n".join(report_lines(by_mode))
    part = text.split(HEADROOM_HEADER)[1]
    en = next(line for line in part.splitlines() if line.startswith("| all | en |"))
    assert "| 0.300 | +0.200 | yes |" in en and "| 0.400 | +0.300 | yes |" in en
    by_mode["bm25"] = rows([0, 0, 0, 1, None, None, None, None, None, None])  # BM25 now finds all the oracle does
    en = next(line for line in "\n".join(report_lines(by_mode)).split(HEADROOM_HEADER)[1].splitlines() if line.startswith("| all | en |"))
    assert "| +0.000 | **no** |" in en
