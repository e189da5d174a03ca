"""Set the assess stage's weights on the real set's calibration split (never on the frozen part).

The gather and retrieve stages do not depend on `Scoring`, so each question is prepared once (the same `prepare` a
diagnosis runs) and the grid only re-runs the assess stage. Used from a Python session; the chosen values and the
measurements behind them are written next to each field of `app.assess.Scoring`.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from app.assess import SCORING, Scoring
from app.diagnose import Question, assess_question, prepare
from eval.real import RealQuestion, item_labels, leave_out, own_thread_ids, own_thread_items


@dataclass
class Prepared:
    q: RealQuestion
    question: Question
    own: frozenset[str] = frozenset()  # ids of the notes on the question's own thread (left out, lend nothing)


def _prepared(engine, q: RealQuestion) -> Prepared:
    items = own_thread_items(engine, q)
    return Prepared(q, leave_out(prepare(engine, q.q), items), own_thread_ids(engine, items))


def prepare_all(engine, questions: list[RealQuestion]) -> list[Prepared]:
    return [_prepared(engine, q) for q in questions]


def score(engine, prepared: list[Prepared], sc: Scoring, mode: str = "full") -> dict[str, float]:
    n = max(len(prepared), 1)
    hit1 = hit3 = cbw = abst = none = 0
    for p in prepared:
        a = assess_question(engine, p.question, mode, sc)
        ids = [item_labels(engine, it.item_id, p.own) for it in a.ranked[:3]]
        exp = set(p.q.expected)
        first = next((i for i, s in enumerate(ids) if s & exp), None)
        hit1 += first == 0
        hit3 += first is not None
        if a.confident and (not exp or first != 0):
            cbw += 1
        if not exp:
            none += 1
            abst += not a.confident
    return {"hit@1": hit1 / n, "hit@3": hit3 / n, "cbw": cbw / n, "abstention": abst / none if none else 1.0}


def objective(m: dict[str, float]) -> float:
    """Ranking first, then honesty: confident-but-wrong over 10 % and abstention under 70 % cost heavily."""
    return m["hit@1"] + 0.5 * m["hit@3"] - 3 * max(0.0, m["cbw"] - 0.08) - 1 * max(0.0, 0.72 - m["abstention"])


GRID = {
    "w_dense": [0.3, 0.5],
    "note_factor": [1.0, 1.2],
    "w_trigger": [0.3, 0.6],
    "w_signal": [0.0, 0.08, 0.15],
    "tau_conf": [0.6, 0.8, 1.0],
    "tau_cos": [0.88, 0.895, 0.91],
    "w_threads": [0.0, 0.15],
}


def tune(engine, calib: list[Prepared], base: Scoring = SCORING) -> tuple[Scoring, dict[str, float]]:
    best, best_m, best_o = base, score(engine, calib, base), -1e9
    keys = list(GRID)
    for values in itertools.product(*(GRID[k] for k in keys)):
        kw = dict(zip(keys, values, strict=True))
        kw["w_lex"] = 1.0 - kw["w_dense"]
        sc = base.model_copy(update=kw)
        m = score(engine, calib, sc)
        o = objective(m)
        if o > best_o:
            best, best_m, best_o = sc, m, o
    return best, best_m
