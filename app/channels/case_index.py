"""The search behind GET /v1/cases?q=: BM25 over case ids, titles and symptoms, with literal substrings first."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from app.retrieve import Engine


class TitleIndex:
    """BM25 over case ids, titles and symptoms, built once per engine."""

    def __init__(self, eng: Engine) -> None:
        from app.lexical import BM25Index

        self.eng = eng
        self.ids = list(eng.case_ids)
        texts: list[str] = []
        for cid in self.ids:
            c = eng.cases[cid]
            texts.append(" ".join([cid.replace("-", " "), c.title.en, c.title.zh, *c.symptoms.en, *c.symptoms.zh]))
        self.hay = [(cid + " " + eng.cases[cid].title.en + " " + eng.cases[cid].title.zh).lower() for cid in self.ids]
        self.bm25 = BM25Index(texts)

    def search(self, q: str) -> list[tuple[str, float]]:
        """(case id, score), best first; only cases that match at all."""
        ql = q.lower().strip()
        scores = self.bm25.scores(q)
        out: list[tuple[str, float]] = []
        for i, cid in enumerate(self.ids):
            s = float(scores[i]) if i < len(scores) else 0.0
            if ql and ql in self.hay[i]:
                s += 100.0  # a literal substring of the id or a title ranks first
            if s > 0:
                out.append((cid, s))
        out.sort(key=lambda x: -x[1])
        return out

