"""Set the assess stage's weights on the real set's calibration split (never on the frozen part).

The retrieve stage does not depend on `Scoring`, so each question's candidates are computed once and the grid
only re-runs `assess`. `trainfix eval --tune` prints the best settings and how the frozen part fares with them.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from app.assess import SCORING, Scoring, assess
from app.diagnose import _retrieval_text, error_lines, gather
from app.lang import detect_lang
from eval.real import RealQuestion


@dataclass
class Prepared:
    q: RealQuestion
    facts: dict
    prose: str
    tried: list[str]
    earlier: set[str]
    cand: object


def prepare(engine, questions: list[RealQuestion]) -> list[Prepared]:
    out = []
    for q in questions:
        prose, earlier, fs, tried = gather(q.q, [], [], 20 * 1024 * 1024)
        lang = detect_lang(prose or q.q, default="en")
        facts = fs.by_key()
        text = _retrieval_text(prose, earlier, facts, lang, error_lines(list(fs.redacted_texts.values())))
        out.append(Prepared(q, facts, prose, tried, fs.earlier_files, engine.candidates(text, "full")))
    return out


def score(engine, prepared: list[Prepared], sc: Scoring, mode: str = "full") -> dict[str, float]:
    n = max(len(prepared), 1)
    hit1 = hit3 = cbw = abst = none = 0
    for p in prepared:
        a = assess(engine, p.cand, p.facts, p.prose, p.tried, mode, sc, p.earlier)
        ids = []
        for it in a.ranked[:3]:
            ids.append({it.item_id} | ({it.note.case} if it.note is not None and it.note.case else set()))
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
