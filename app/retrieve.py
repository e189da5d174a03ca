"""Hybrid retrieval: dense (Chroma) + lexical (BM25) over retrieval units, pooled to cases, fused with trigger hits.

`mode` selects the baselines the eval compares: bm25, dense, hybrid (no triggers), full.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from app import versions
from app.embeddings import CountingEmbeddings, VectorCache, make_embedder
from app.lexical import BM25Index
from app.models import Case, Fact, Leaf
from app.settings import Settings
from app.store import Store, StoreError
from app.triggers import TriggerHit, fire

MODES = ("full", "hybrid", "dense", "bm25")

# Fusion weights (chosen on the eval set; see eval/report.md).
W_DENSE = 0.55
W_LEX = 0.45
W_TRIGGER = 1.0
W_SIGNAL = 0.12
W_VERSION_IN = 0.1  # the user's library version is in the case's affected range
VERSION_OUT = 0.3  # ... or outside it: the score is multiplied by this
DENSE_K = 80


@dataclass
class Scored:
    case: Case
    score: float
    dense: float = 0.0  # raw best cosine of the case's units
    lex: float = 0.0  # best BM25 of the case's units
    triggers: list[TriggerHit] = field(default_factory=list)
    signals: list[Fact] = field(default_factory=list)
    bonus: float = 0.0  # the part of `score` that came from triggers and log signals
    version: tuple[bool, str, Fact] | None = None  # (user's version in the case's range?, range, version fact)


@dataclass
class Retrieval:
    ranked: list[Scored]
    timings: dict[str, float]
    top_cos: float
    top_lex: float
    supporting: list[tuple[dict, float]] = field(default_factory=list)


PROSE = ("question", "earlier message")
W_PROSE = 0.5  # a trigger that fired only on facts stated in prose ("we use fp16") is weaker evidence than a file


def _strength(hit: TriggerHit) -> float:
    return W_PROSE if hit.facts and all(f.file in PROSE for f in hit.facts) else 1.0


def _trigger_keys(case: Case) -> frozenset[str] | None:
    """Facts that must be present for any trigger of the case to fire; None when a trigger can fire on absence."""
    from app.kb import iter_leaves

    def has_not(node) -> bool:
        if isinstance(node, Leaf):
            return node.op == ("exists", False)
        return node.not_ is not None or any(has_not(c) for c in (node.all or []) + (node.any or []))

    keys: set[str] = set()
    for t in case.triggers:
        if has_not(t):  # a negation can hold when facts are absent: always evaluate this case
            return None
        keys |= {leaf.fact for leaf in iter_leaves(t)}
    return frozenset(keys)


class Engine:
    """Everything a question needs, loaded once per process: the store, the BM25 index, the cases."""

    def __init__(self, settings: Settings | None = None, embedder: CountingEmbeddings | None = None) -> None:
        self.settings = settings or Settings()
        self.embedder = embedder or make_embedder(self.settings.embedder, self.settings.threads)
        self.store = Store(self.settings, self.embedder, VectorCache(self.settings.vector_cache))
        self.reload()

    def reload(self) -> None:
        self.store.check_embedder()
        if self.store.count() == 0:
            raise StoreError(f"the index in {self.settings.chroma_url or self.settings.index_dir} is empty. Run `trainfix ingest` first.")
        cards = self.store.read_cards()
        self.cases: dict[str, Case] = {c.id: c for c in cards}
        self.case_ids = sorted(self.cases)
        self.articles: dict[str, dict] = {a["id"]: a for a in self.store.read_articles()}
        # documents = cases, then supporting articles; ranking of causes is over cases only
        self.doc_ids = self.case_ids + sorted(self.articles)
        ix = {cid: i for i, cid in enumerate(self.doc_ids)}
        ids, docs, metas = self.store.all_units()
        keep = [i for i, m in enumerate(metas) if m.get("case_id") in ix]
        self.unit_ids = [ids[i] for i in keep]
        self.unit_case = np.array([ix[metas[i]["case_id"]] for i in keep], dtype=np.int64)
        self.unit_pos = {u: i for i, u in enumerate(self.unit_ids)}
        self.bm25 = BM25Index([docs[i] for i in keep], cache=self.settings.home / "cache")
        self._trigger_keys = [_trigger_keys(self.cases[cid]) for cid in self.case_ids]
        self._ranges = {i: r for i, cid in enumerate(self.case_ids) if (r := versions.parse(self.cases[cid].applies_to.versions))}
        self.version = self.store.manifest().get("updated")

    def _pool(self, unit_scores: np.ndarray) -> np.ndarray:
        out = np.full(len(self.doc_ids), -np.inf, dtype=np.float32)
        np.maximum.at(out, self.unit_case, unit_scores)
        return out

    def retrieve(self, text: str, facts: dict[str, Fact], mode: str = "full") -> Retrieval:
        t: dict[str, float] = {}
        n_cases = len(self.doc_ids)
        dense = np.zeros(n_cases, dtype=np.float32)
        lex = np.zeros(n_cases, dtype=np.float32)
        top_cos = top_lex = 0.0
        if mode in ("full", "hybrid", "dense") and text.strip():
            t0 = time.perf_counter()
            vec = self.embedder.embed_query(text)
            t["embed"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            hits = self.store.query(vec, DENSE_K)
            t["dense"] = time.perf_counter() - t0
            unit_scores = np.full(len(self.unit_ids), -np.inf, dtype=np.float32)
            for h in hits:
                p = self.unit_pos.get(h.id)
                if p is not None:
                    unit_scores[p] = h.score
            pooled = self._pool(unit_scores)
            found = np.isfinite(pooled)
            case_found = found[: len(self.case_ids)]
            if case_found.any():
                top_cos = float(pooled[: len(self.case_ids)][case_found].max())
            if found.any():
                top_cos_all = float(pooled[found].max())
                floor = float(pooled[found].min()) if found.sum() > 1 else top_cos_all - 0.1
                span = max(top_cos_all - floor, 1e-6)
                dense = np.where(found, (pooled - floor) / span, 0.0).astype(np.float32)
        if mode in ("full", "hybrid", "bm25") and text.strip():
            t0 = time.perf_counter()
            pooled = self._pool(self.bm25.scores(text))
            pooled[~np.isfinite(pooled)] = 0
            top_all = float(pooled.max()) if len(pooled) else 0.0
            top_lex = float(pooled[: len(self.case_ids)].max()) if len(self.case_ids) else 0.0
            lex = pooled / top_all if top_all > 0 else pooled
            t["bm25"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        if mode == "dense":
            base = dense
        elif mode == "bm25":
            base = lex
        else:
            base = W_DENSE * dense + W_LEX * lex
        trig: dict[int, list[TriggerHit]] = {}
        sig: dict[int, list[Fact]] = {}
        ver: dict[int, tuple[bool, str, Fact]] = {}
        if mode == "full" and facts and any(k.startswith("env.") for k in facts):
            for i, ranges in self._ranges.items():
                ok, rng, f = versions.check(ranges, facts)
                if ok is not None and f is not None:
                    ver[i] = (ok, rng, f)
        if mode == "full" and facts:
            present = set(facts)
            for i, cid in enumerate(self.case_ids):  # articles have no triggers
                case = self.cases[cid]
                keys = self._trigger_keys[i]
                if case.triggers and (keys is None or not keys.isdisjoint(present)):
                    hits_ = fire(case, facts)
                    if hits_:
                        trig[i] = hits_
                s = [facts[k] for k in case.log_signals if k in facts]
                if s:
                    sig[i] = s
        t["triggers"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        score = base.astype(np.float64).copy()
        for i, hs in trig.items():
            score[i] += W_TRIGGER * min(sum(h.trigger.weight * _strength(h) for h in hs), 2.0)
        for i, s in sig.items():
            score[i] += W_SIGNAL * min(len(s), 3)
        for i, (ok, _, _) in ver.items():
            score[i] = score[i] + W_VERSION_IN if ok else score[i] * VERSION_OUT
        n_c = len(self.case_ids)
        art_scores = score[n_c:]
        score = score[:n_c]
        supporting = [
            (self.articles[self.doc_ids[n_c + j]], float(art_scores[j]))
            for j in np.argsort(-art_scores, kind="stable")[:3]
            if art_scores[j] > 0
        ]
        order = np.argsort(-score, kind="stable")
        ranked = [
            Scored(
                case=self.cases[self.case_ids[i]],
                score=float(score[i]),
                dense=float(dense[i]),
                lex=float(lex[i]),
                triggers=trig.get(i, []),
                signals=sig.get(i, []),
                bonus=float(score[i] - base[i]),
                version=ver.get(i),
            )
            for i in order[:50]
        ]
        t["fusion"] = time.perf_counter() - t0
        return Retrieval(ranked=ranked, timings=t, top_cos=top_cos, top_lex=top_lex, supporting=supporting)
