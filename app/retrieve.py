"""The retrieve stage: dense (Chroma) + lexical (BM25) candidates over retrieval units, pooled per item.

It ranks nothing and knows no weights: `app.assess` owns every score. Items are cases and thread notes;
supporting articles ride along as extra documents.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from app import query_adapter, versions
from app.embeddings import CountingEmbeddings, VectorCache, make_embedder
from app.lexical import BM25Index
from app.models import Case, Leaf, Note
from app.settings import Settings
from app.store import Store, StoreError

MODES = ("full", "hybrid", "dense", "bm25")
DENSE_K = 80  # units fetched from Chroma per question (a retrieval budget, not a weight)
ADAPT = {"zh": 0.5, "en": 0.0}  # share of the learnt query adapter (ingest/adapter.py) by the question's language. Session O,
# calibration split, 502 cases: w 0.5 for Chinese questions lifts zh hit@1 / hit@3 0.281 / 0.416 -> 0.303 / 0.461 with
# confident-but-wrong 4 -> 3; for English ones it costs en hit@1 (0.341 -> 0.329) and the authored set 0.9 points, w 0.25 gains
# nothing for them (English questions already lean on BM25, see Scoring.w_dense_en)


@dataclass
class Source:
    """What an engine is made of: read from the store on a normal start, or straight from the KB folder and the
    shipped vectors on a first start, so answers need not wait for Chroma to be written (`app.runtime`)."""

    cases: list[Case]
    notes: list[Note]
    articles: list[dict]
    ids: list[str]  # unit ids, texts and metadata, in any order
    docs: list[str]
    metas: list[dict]
    vectors: np.ndarray | None  # one row per unit id; None: read from the store
    version: float | None


@dataclass
class Candidates:
    """Per-document raw channel scores (cases, then notes, then articles), as the retrieve stage found them."""

    dense: np.ndarray  # pooled cosine, -inf where the unit was not in the dense top-K
    lex: np.ndarray  # pooled BM25, 0 where nothing matched
    timings: dict[str, float] = field(default_factory=dict)
    left_out: tuple[int, ...] = ()  # item positions the question may not draw on (the eval's own-thread notes)
    closeness: np.ndarray | None = None  # pooled cosine of the embedder's own query vector when `dense` used the adapted
    # one: the confidence gate (Scoring.tau_cos) was calibrated on these, and adapted cosines sit ~0.26 lower


def _required(node) -> frozenset[str] | None:
    """Facts of which at least one must be present for `node` to hold; None when it can hold on absent facts."""
    if isinstance(node, Leaf):
        return None if node.op == ("exists", False) else frozenset({node.fact})
    if node.all is not None:
        reqs = [r for r in map(_required, node.all) if r is not None]
        return min(reqs, key=len) if reqs else None  # each child must hold: one child's need is the node's
    if node.any is not None:
        reqs = [_required(c) for c in node.any]
        return None if any(r is None for r in reqs) else frozenset().union(*reqs)
    return None  # a negation can hold when facts are absent


def _trigger_keys(case: Case, conds: list | None = None) -> frozenset[str] | None:
    """Facts of which one must be present for any of the case's triggers (or `conds`) to fire; None when one can fire
    on absent facts. Lets the assess stage skip the ~95 % of cases a question's facts cannot touch."""
    keys: set[str] = set()
    for t in case.triggers if conds is None else conds:
        r = _required(t)
        if r is None:
            return None
        keys |= r
    return frozenset(keys)


def _evidence_keys(case: Case) -> frozenset[str] | None:
    """Facts without which the assess stage finds nothing for the case (no trigger, signal or contradiction can fire)."""
    trig, contra = _trigger_keys(case), _trigger_keys(case, case.contradictions)
    if trig is None or contra is None:
        return None
    return trig | contra | frozenset(case.log_signals)


class Engine:
    """Everything a question needs, loaded once per process: the store, the BM25 index, the cases and notes."""

    def __init__(self, settings: Settings | None = None, embedder: CountingEmbeddings | None = None,
                 source: Source | None = None) -> None:
        self.settings = settings or Settings()
        self.embedder = embedder or make_embedder(self.settings.embedder, self.settings.threads)
        self.store = Store(self.settings, self.embedder, VectorCache(self.settings.vector_cache))
        if source is None:
            self.reload()
        else:
            self._load(source)

    def reload(self) -> None:
        """Read everything from the store (the normal start, and after an ingest)."""
        self.store.check_embedder()
        if self.store.count() == 0:
            raise StoreError(f"the index in {self.settings.chroma_url or self.settings.index_dir} is empty. Run `trainfix ingest` first.")
        cases, notes = self.store.read_cards(), self.store.read_notes()
        ids, docs, metas = self.store.all_units()
        from ingest.chunk import unit_texts

        docs = unit_texts(ids, docs, cases, notes)
        self._load(Source(cases, notes, self.store.read_articles(), ids, docs, metas, None, self.store.manifest().get("updated")))

    def _load(self, src: Source) -> None:
        self.cases: dict[str, Case] = {c.id: c for c in src.cases}
        self.notes: dict[str, Note] = {n.id: n for n in src.notes}
        self.case_ids = sorted(self.cases)
        self.note_ids = sorted(self.notes)
        self.item_ids = self.case_ids + self.note_ids  # what an answer can rank
        self.case_index = {cid: i for i, cid in enumerate(self.case_ids)}
        self.articles: dict[str, dict] = {a["id"]: a for a in src.articles}
        self.doc_ids = self.item_ids + sorted(self.articles)
        self.doc_index = ix = {cid: i for i, cid in enumerate(self.doc_ids)}  # an item's position is the same in item_ids
        ids, metas = src.ids, src.metas
        # units in id order whatever their source, so the saved BM25 index and dense matrix serve both
        keep = sorted((i for i, m in enumerate(metas) if m.get("case_id") in ix), key=ids.__getitem__)
        self.unit_ids = [ids[i] for i in keep]
        self.unit_case = np.array([ix[metas[i]["case_id"]] for i in keep], dtype=np.int64)
        self.unit_pos = {u: i for i, u in enumerate(self.unit_ids)}
        self.bm25 = BM25Index([src.docs[i] for i in keep], cache=self.settings.home / "cache")
        if self.settings.chroma_url:
            self.unit_vecs = None
        else:
            vecs = src.vectors
            self.unit_vecs = self._unit_vectors(None if vecs is None else lambda: vecs[keep])
        self.trigger_keys = [_trigger_keys(self.cases[cid]) for cid in self.case_ids]
        self.evidence_keys = [_evidence_keys(self.cases[cid]) for cid in self.case_ids]
        # by item position: the position of the case a thread note is traced to (-1 for cases and unlinked notes); the
        # count per case is how often the trackers' resolved threads had this cause
        self.note_case = np.array(
            [self.case_index.get(n.case or "", -1) if (n := self.notes.get(i)) else -1 for i in self.item_ids], dtype=np.int64
        )
        self.case_threads = np.bincount(self.note_case[self.note_case >= 0], minlength=len(self.case_ids)).astype(np.int64)
        self.ranges = {i: r for i, cid in enumerate(self.item_ids) if (r := versions.parse(self.item_versions(cid)))}
        self.version = src.version
        self.adapter = query_adapter.load(self.embedder.id)

    def _unit_vectors(self, given: Callable[[], np.ndarray] | None = None) -> np.ndarray:
        """Every unit's vector in one matrix, for an exact dense search: on an embedded index this process owns, a
        product over 9,000 x 384 takes ~1 ms where Chroma's HNSW query took ~4.3 ms and found 97 % of the exact top 80
        (measured on the real set's questions). Read from Chroma (or `given`, on a first start) once per index version
        and kept in the cache folder (0.5 s to read, ~20 ms to load). A shared Chroma server is asked on every question
        instead: other processes may rewrite it, and a server that is down must show as such."""
        import hashlib

        h = hashlib.sha256("\n".join([self.embedder.id, *self.unit_ids]).encode("utf-8")).hexdigest()[:24]
        path = self.settings.home / "cache" / f"dense-{h}.npy"
        try:
            m = np.load(path)
            if m.shape[0] == len(self.unit_ids):
                return m
        except (OSError, ValueError):
            pass
        m = given() if given is not None else self.store.vectors(self.unit_ids)
        norms = np.linalg.norm(m, axis=1, keepdims=True) if m.size else np.ones((0, 1), dtype=np.float32)
        m = (m / np.where(norms > 0, norms, 1.0)).astype(np.float32)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp.npy")
            np.save(tmp, m)
            tmp.replace(path)
            for old in path.parent.glob("dense-*.npy"):
                if old != path and not old.name.endswith(".tmp.npy"):
                    old.unlink(missing_ok=True)
        except OSError:  # a read-only data directory still answers, it only reads again next start
            pass
        return m

    def _dense_units(self, vec: list[float]) -> tuple[np.ndarray, np.ndarray]:
        """The top DENSE_K units for the question and their cosines: exact in memory, or the Chroma server."""
        if self.unit_vecs is not None:
            if not len(self.unit_ids):
                return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
            v = np.asarray(vec, dtype=np.float32)
            v = v / (float(np.linalg.norm(v)) or 1.0)
            sims = self.unit_vecs @ v
            k = min(DENSE_K, len(sims))
            top = np.argpartition(-sims, k - 1)[:k]
            return top, sims[top]
        pos, score = [], []
        for h in self.store.query(vec, DENSE_K):
            p = self.unit_pos.get(h.id)
            if p is not None:
                pos.append(p)
                score.append(h.score)
        return np.asarray(pos, dtype=np.int64), np.asarray(score, dtype=np.float32)

    def linked_notes(self, case_id: str) -> set[str]:
        """The thread notes traced to a case (its 'similar threads')."""
        i = self.case_index.get(case_id)
        return set() if i is None else {self.item_ids[j] for j in np.nonzero(self.note_case == i)[0]}

    def as_case(self, item_id: str) -> str:
        """The case a ranked item stands for: a thread note that links a case stands for it; anything else for itself."""
        n = self.notes.get(item_id)
        return n.case if n is not None and n.case else item_id

    def item_versions(self, item_id: str) -> str | None:
        c = self.cases.get(item_id)
        return c.applies_to.versions if c is not None else self.notes[item_id].versions

    def _pool(self, unit_scores: np.ndarray, units: np.ndarray | None = None) -> np.ndarray:
        """Each document's best unit score; `units` names the positions `unit_scores` belong to (all units when None)."""
        out = np.full(len(self.doc_ids), -np.inf, dtype=np.float32)
        np.maximum.at(out, self.unit_case if units is None else self.unit_case[units], unit_scores)
        return out

    def candidates(self, text: str, mode: str = "full", adapt: float = 0.0) -> Candidates:
        """Raw dense and lexical scores of every document for the question's text; `adapt` is the share of the
        learnt query adapter in the question's vector (0: the embedder's vector as it is)."""
        t: dict[str, float] = {}
        n = len(self.doc_ids)
        dense = np.full(n, -np.inf, dtype=np.float32)
        lex = np.zeros(n, dtype=np.float32)
        closeness = None
        if mode in ("full", "hybrid", "dense") and text.strip():
            t0 = time.perf_counter()
            raw = vec = self.embedder.embed_query(text)
            adapted = adapt > 0 and self.adapter is not None
            if adapted:
                vec = query_adapter.apply(self.adapter, np.asarray(raw, dtype=np.float32), adapt).tolist()
            t["embed"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            units, sims = self._dense_units(vec)
            dense = self._pool(sims, units)  # pooled over the top units only: the rest are -inf
            if adapted:
                raw_units, raw_sims = self._dense_units(raw)  # one more product (~1 ms in memory) for the gate
                closeness = self._pool(raw_sims, raw_units)
            t["dense"] = time.perf_counter() - t0
        if mode in ("full", "hybrid", "bm25") and text.strip():
            t0 = time.perf_counter()
            lex = self._pool(self.bm25.scores(text))
            lex[~np.isfinite(lex)] = 0
            t["bm25"] = time.perf_counter() - t0
        return Candidates(dense=dense, lex=lex, timings=t, closeness=closeness)
