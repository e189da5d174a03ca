"""The labelled eval set is what the issue asks for, and it does not copy the cases it is labelled with."""

from __future__ import annotations

import re

import pytest

from app.kb import load_cases
from eval.run import EvalError, load_questions, metrics


@pytest.fixture(scope="module")
def cases():
    return {c.id: c for c in load_cases().cases}


@pytest.fixture(scope="module")
def questions(cases):
    return [q for q in load_questions(cases) if not q.offtopic]


def test_composition(questions):
    n = len(questions)
    assert n >= 200
    assert sum(q.lang == "zh" for q in questions) >= 0.4 * n
    assert sum(q.lang == "en" for q in questions) >= 0.4 * n
    assert sum(bool(q.attachments) for q in questions) >= 0.3 * n
    assert sum(q.lang != q.source_lang for q in questions) >= 0.2 * n


def _spans(text: str, k: int) -> set[str]:
    """Word k-grams for Latin text, character k-grams for Chinese."""
    t = text.lower()
    words = re.findall(r"[a-z0-9_.\-]+", t)
    grams = {" ".join(words[i : i + k]) for i in range(len(words) - k + 1)}
    han = "".join(re.findall(r"[\u4e00-\u9fff]", t))
    grams |= {han[i : i + 2 * k] for i in range(len(han) - 2 * k + 1)}
    return grams


# A symptom that quotes a library's error message is not the case's wording: users paste the same message.
_ERROR_QUOTE = re.compile(r"error|exception|warning|cannot|expected to|not found|contains either|does not match|unexpected keyword|not compatible|attempting to", re.I)


def _without_quoted_errors(text: str) -> str:
    """Drop what the user pasted from a program: quoted/backticked text and `SomethingError: ...` messages."""
    text = re.sub(r"`[^`]*`|'[^']{12,}'|\"[^\"]{12,}\"", " ", text)
    return re.sub(r"\b\w*(Error|Exception|Warning)\b:[^\n。]*", " ", text)


def test_questions_do_not_reuse_case_wording_or_examples(questions, cases):
    copied = []
    for q in questions:
        case = cases[q.expected[0]]
        own = [case.title.en, case.title.zh] + [s for s in case.symptoms.en + case.symptoms.zh if not _ERROR_QUOTE.search(s)]
        own += [e.query for e in case.examples.match + case.examples.no_match]
        theirs = set().union(*(_spans(t, 7) for t in own))
        if _spans(_without_quoted_errors(q.q), 7) & theirs:
            copied.append(q.id)
    assert not copied, f"questions sharing a 7-word (or 14-character) span with their case: {copied}"


def test_metrics():
    assert metrics(["a", "b", "c"], ["a"]) == {"hit@1": 1.0, "hit@3": 1.0, "mrr": 1.0, "ndcg@5": 1.0}
    m = metrics(["x", "y", "a"], ["a"])
    assert m["hit@1"] == 0 and m["hit@3"] == 1 and abs(m["mrr"] - 1 / 3) < 1e-9 and 0 < m["ndcg@5"] < 1
    assert metrics(["x"], ["a"])["hit@3"] == 0


def test_bad_eval_files_stop_with_file_and_line(tmp_path, cases):
    (tmp_path / "a.yaml").write_text("- id: x-1\n  lang: en\n  q: hello\n  expected: [no-such-case]\n")
    with pytest.raises(EvalError, match=r"a.yaml:1: expected case 'no-such-case' does not exist"):
        load_questions(cases, tmp_path)
    (tmp_path / "a.yaml").write_text("- id: x-1\n  lang: en\n  q: [unclosed\n")
    with pytest.raises(EvalError, match=r"a.yaml:\d+: the file does not parse"):
        load_questions(cases, tmp_path)
