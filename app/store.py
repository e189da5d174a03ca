"""The vector store: Chroma through langchain-chroma, embedded on disk or a shared Chroma server.

We always hand Chroma our own vectors; its default embedding function (which downloads a model) is never used.
The manifest (which embedder built the index, whether the last ingest finished) lives in a side collection, so
it is shared when the store is a server.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from urllib.parse import urlparse

import numpy as np
from langchain_core.embeddings import Embeddings

from app.embeddings import CountingEmbeddings, VectorCache
from app.settings import Settings

CARD_BUNDLES = 64


class StoreError(Exception):
    """A problem with the index the user can act on; the message says what to do."""


class IndexMismatch(StoreError):
    pass


class StoreUnavailable(StoreError):
    pass


class _Cached(Embeddings):
    """Hands langchain-chroma vectors from the content-hash cache, embedding only what is new."""

    def __init__(self, emb: CountingEmbeddings, cache: VectorCache | None, progress=None) -> None:
        self.emb, self.cache, self.progress = emb, cache, progress

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        if self.cache is None:
            vecs = self.emb.embed_documents(texts)
            if self.progress:
                self.progress(len(texts))
            return vecs
        return self.cache.embed_documents(self.emb, texts, progress=self.progress)

    def embed_query(self, text: str) -> list[float]:
        return self.emb.embed_query(text)


@dataclass
class Hit:
    id: str
    score: float


def make_client(settings: Settings):
    import chromadb

    if settings.chroma_url:
        u = urlparse(settings.chroma_url if "://" in settings.chroma_url else f"http://{settings.chroma_url}")
        try:
            return chromadb.HttpClient(host=u.hostname or "127.0.0.1", port=u.port or 8000, ssl=u.scheme == "https")
        except Exception as e:  # chromadb raises plain ValueError/ConnectError when the server is down
            raise StoreUnavailable(f"Chroma server at {settings.chroma_url} is not reachable: {e}") from e
    settings.index_dir.mkdir(parents=True, exist_ok=True)
    from chromadb.config import Settings as ChromaSettings

    return chromadb.PersistentClient(path=str(settings.index_dir), settings=ChromaSettings(anonymized_telemetry=False))


class Store:
    """One collection of retrieval units plus its manifest."""

    def __init__(self, settings: Settings, embedder: CountingEmbeddings, cache: VectorCache | None = None) -> None:
        self.settings = settings
        self.embedder = embedder
        self.cache = cache
        self.client = make_client(settings)
        self._wrapped = _Cached(embedder, cache)
        self._vs = None
        try:
            # the same collection langchain-chroma writes to (cosine space); queries use it directly with our vectors
            self._collection = _open_collection(self.client, settings.collection, light_hnsw=not settings.chroma_url)
            self._manifest_col = _open_collection(self.client, settings.collection + "-manifest")
            self._cards_col = _open_collection(self.client, settings.collection + "-cards")
        except StoreError:
            raise
        except Exception as e:
            raise StoreUnavailable(f"cannot open the index ({_where(settings)}): {e}") from e

    @property
    def collection(self):
        return self._collection

    @property
    def vs(self):
        """The langchain-chroma vector store, for writes (imported lazily: it costs ~0.5 s that queries never need)."""
        if self._vs is None:
            from langchain_chroma import Chroma

            self._vs = Chroma(
                client=self.client,
                collection_name=self.settings.collection,
                embedding_function=self._wrapped,
                collection_metadata={"hnsw:space": "cosine"},
            )
        return self._vs

    # ------------------------------------------------------------ manifest
    def manifest(self) -> dict:
        got = self._manifest_col.get(ids=["manifest"], include=["documents"])
        if not got["ids"]:
            return {}
        return json.loads(got["documents"][0])

    def write_manifest(self, **fields) -> None:
        m = {**self.manifest(), **fields, "updated": time.time()}
        self._manifest_col.upsert(ids=["manifest"], documents=[json.dumps(m)], embeddings=[[0.0]])

    def check_embedder(self, for_write: bool = False) -> None:
        m = self.manifest()
        built = m.get("embedder")
        if built and built != self.embedder.id:
            raise IndexMismatch(
                f"the index in {_where(self.settings)} was built with embedder {built!r}, but {self.embedder.id!r} is "
                f"configured. Re-ingest with `trainfix ingest --rebuild`, or set TRAINFIX_EMBEDDER to match, "
                f"or point TRAINFIX_HOME at another folder."
            )
        if not for_write and m and not m.get("complete", False):
            raise StoreError(
                f"the index in {_where(self.settings)} is incomplete (an ingest was interrupted). Run `trainfix ingest` to finish it."
            )

    # ------------------------------------------------------------ case cards (full case JSON, so a shared index is self-contained)
    def write_cards(self, cases: list, origin: str, articles: list | None = None, notes: list | None = None) -> None:
        """Store the full case, note and article records, so any process sharing the index can render answers.

        Cards live in `CARD_BUNDLES` bundles (a card goes to one by a hash of its id, with its origin): Chroma's cost
        per record made 1,913 separate cards take 3.6 s on a first start, the same bytes in bundles ~1 s. The cards
        of `origin` are replaced; a card of another origin with the same id is taken over, as a unit is. Only
        bundles whose content changed are written, so an edited case rewrites one bundle."""
        items = (
            [["case", c.id, origin, c.model_dump_json(by_alias=True)] for c in cases]
            + [["article", a.id, origin, json.dumps(a.card(), ensure_ascii=False)] for a in articles or []]
            + [["note", n.id, origin, n.model_dump_json()] for n in notes or []]
        )
        new_ids = {m[1] for m in items}
        old = self._cards_col.get(include=["documents", "metadatas"])
        held: dict[str, str] = {}
        bundles: dict[str, list] = {}
        legacy: list[str] = []
        for rid, doc, meta in zip(old["ids"], old["documents"], old["metadatas"], strict=True):
            meta = meta or {}
            if meta.get("kind") == "bundle":
                held[rid] = meta.get("h", "")
                members = json.loads(doc)
            else:  # one card per record, as older versions wrote them: moved into bundles
                legacy.append(rid)
                members = [[meta.get("kind", "case"), rid, meta.get("origin", ""), doc]]
            for m in members:
                if m[2] != origin and m[1] not in new_ids:
                    bundles.setdefault(_bundle_id(m[1]), []).append(m)
        for m in items:
            bundles.setdefault(_bundle_id(m[1]), []).append(m)
        ids, docs, metas = [], [], []
        for bid, members in sorted(bundles.items()):
            doc = json.dumps(sorted(members, key=lambda m: m[1]), ensure_ascii=False)
            h = hashlib.sha256(doc.encode("utf-8")).hexdigest()[:16]
            if held.get(bid) == h:
                continue
            ids.append(bid)
            docs.append(doc)
            metas.append({"kind": "bundle", "h": h, **{f"n_{k}": sum(1 for m in members if m[0] == k) for k in ("case", "note", "article")}})
        for s in range(0, len(ids), 100):
            self._cards_col.upsert(ids=ids[s : s + 100], documents=docs[s : s + 100], metadatas=metas[s : s + 100],
                                   embeddings=[[0.0]] * len(ids[s : s + 100]))
        gone = sorted((set(held) - set(bundles)) | set(legacy))
        if gone:
            self._cards_col.delete(ids=gone)

    def count_cards(self, kind: str = "case") -> int:
        """How many cards of a kind the index holds, from metadata only (no card is parsed)."""
        got = self._cards_col.get(include=["metadatas"])
        metas = [m or {} for m in got["metadatas"]]
        return sum(m.get(f"n_{kind}", 0) if m.get("kind") == "bundle" else int(m.get("kind", "case") == kind) for m in metas)

    def _cards(self, kind: str) -> list[str]:
        got = self._cards_col.get(include=["documents", "metadatas"])
        out: list[str] = []
        for d, m in zip(got["documents"], got["metadatas"], strict=True):
            m = m or {}
            if m.get("kind") == "bundle":
                out += [doc for k, _, _, doc in json.loads(d) if k == kind]
            elif m.get("kind", "case") == kind:  # one card per record (an index written by an older version)
                out.append(d)
        return out

    def read_cards(self) -> list:
        from app.models import Case

        return [Case.model_validate_json(d) for d in self._cards("case")]

    def read_notes(self) -> list:
        from app.models import Note

        return [Note.model_validate_json(d) for d in self._cards("note")]

    def read_articles(self) -> list[dict]:
        return [json.loads(d) for d in self._cards("article")]

    # ------------------------------------------------------------ units
    def all_units(self, with_documents: bool = True) -> tuple[list[str], list[str], list[dict]]:
        """Every unit's id, stored text (empty when not asked for or not stored) and metadata, read in pages."""
        col = self.collection
        n = col.count()
        ids: list[str] = []
        docs: list[str] = []
        metas: list[dict] = []
        step = 5000
        include = ["documents", "metadatas"] if with_documents else ["metadatas"]
        for off in range(0, n, step):
            got = col.get(include=include, limit=step, offset=off)
            ids += got["ids"]
            docs += [d or "" for d in got["documents"]] if with_documents else [""] * len(got["ids"])
            metas += got["metadatas"]
        return ids, docs, metas

    def vectors(self, ids: list[str]) -> np.ndarray:
        """The stored vectors of these units, in this order (rows of zeros for an id the index does not hold)."""
        out: np.ndarray | None = None
        for i in range(0, len(ids), 5000):
            part = ids[i : i + 5000]
            got = self.collection.get(ids=part, include=["embeddings"])
            emb = got["embeddings"]
            if out is None:
                dim = len(emb[0]) if len(emb) else 0
                out = np.zeros((len(ids), dim), dtype=np.float32)
            pos = {u: i + k for k, u in enumerate(part)}
            for u, v in zip(got["ids"], emb, strict=True):
                out[pos[u]] = v
        return out if out is not None else np.zeros((0, 0), dtype=np.float32)

    def add(self, ids: list[str], texts: list[str], metas: list[dict], progress=None, keep_text: list[bool] | None = None) -> None:
        """Write units: vectors from the cache (shipped or earlier) or embedded now, inserted with `add`.

        A unit id already in the index (written from another folder, say) only gets its metadata updated: the id
        holds a hash of the text and the index one embedder, so its vector is the same, and an upsert that rewrites
        the vector took 32 s for 8,140 units against 2 s. A unit's text is stored only where `keep_text` says so:
        a case's or note's unit text is rebuilt from its card (`ingest.chunk.unit_texts`); storing 8,000 texts was
        half of the time of writing the KB on a first start. Batches of 2,048: Chroma pays per call (256 took 3 s
        more on 8,140 units); progress still moves per 32 embedded units."""
        keep = keep_text if keep_text is not None else [True] * len(ids)

        def stored(part: list[int]) -> list[str | None]:
            return [texts[k] if keep[k] else None for k in part]

        batch = max(1, min(self.client.get_max_batch_size(), 2048))
        held: set[str] = set()
        for i in range(0, len(ids), 5000):
            held.update(self.collection.get(ids=ids[i : i + 5000], include=[])["ids"])
        old = [k for k, i in enumerate(ids) if i in held]
        new = [k for k, i in enumerate(ids) if i not in held]
        for s in range(0, len(old), batch):
            part = old[s : s + batch]
            self.collection.update(ids=[ids[k] for k in part], metadatas=[metas[k] for k in part],
                                   documents=stored(part) if any(keep[k] for k in part) else None)
            if progress:
                progress(len(part))
        self._wrapped.progress = progress
        for s in range(0, len(new), batch):
            part = new[s : s + batch]
            vecs = self._wrapped.embed_documents([texts[k] for k in part])
            self.collection.add(ids=[ids[k] for k in part], documents=stored(part),
                                metadatas=[metas[k] for k in part], embeddings=vecs)
        self._wrapped.progress = None

    def add_vectors(self, ids: list[str], texts: list[str], metas: list[dict], vectors: list[list[float]]) -> None:
        """Bulk path for benchmarks that bring their own vectors."""
        batch = self.client.get_max_batch_size()
        for i in range(0, len(ids), batch):
            self.collection.upsert(
                ids=ids[i : i + batch], documents=texts[i : i + batch], metadatas=metas[i : i + batch], embeddings=vectors[i : i + batch]
            )

    def delete(self, ids: list[str]) -> None:
        for i in range(0, len(ids), 5000):
            self.vs.delete(ids=ids[i : i + 5000])

    def count(self) -> int:
        return self.collection.count()

    def query(self, vector: list[float], k: int) -> list[Hit]:
        try:
            k = min(k, max(self.count(), 1))
            res = self.collection.query(query_embeddings=[vector], n_results=k, include=["distances"])
        except Exception as e:
            raise StoreUnavailable(f"the index did not answer ({_where(self.settings)}): {e}") from e
        return [Hit(i, 1.0 - float(d)) for i, d in zip(res["ids"][0], res["distances"][0], strict=True)]

    def reset(self) -> None:
        for name in (self.settings.collection, self.settings.collection + "-manifest", self.settings.collection + "-cards"):
            try:
                self.client.delete_collection(name)
            except Exception:  # noqa: S110 - absent is fine
                pass


def _open_collection(client, name: str, light_hnsw: bool = False):
    """The collection, created in cosine space without Chroma's full-text index on documents: trainfix never searches
    documents inside Chroma (BM25 is its own), and that index was a third of the time of writing the KB on a first
    start. A collection made by an older version (with the index) is opened as it is.

    `light_hnsw` (an embedded index): the engine searches this process's own index exactly in memory
    (`Engine._unit_vectors`), so Chroma's HNSW graph is never queried and is built cheaply (ef_construction 16,
    8 neighbours): 9,088 units were written in 3.4 s instead of 6.0 s. A Chroma server keeps its defaults."""
    try:
        return client.get_collection(name, embedding_function=None)
    except Exception:  # noqa: S110 - absent: created below
        pass
    from chromadb.api.types import FtsIndexConfig, HnswIndexConfig, Schema, VectorIndexConfig

    hnsw = HnswIndexConfig(ef_construction=16, max_neighbors=8) if light_hnsw else None
    schema = Schema().create_index(config=VectorIndexConfig(space="cosine", embedding_function=None, hnsw=hnsw))
    schema = schema.delete_index(config=FtsIndexConfig(), key="#document")
    try:
        return client.create_collection(name, schema=schema, embedding_function=None)
    except Exception:  # another process created it meanwhile, or a server without schemas: the plain way
        return client.get_or_create_collection(name, embedding_function=None, metadata={"hnsw:space": "cosine"})


def _bundle_id(item_id: str) -> str:
    return f"cards:{int(hashlib.sha256(item_id.encode('utf-8')).hexdigest()[:8], 16) % CARD_BUNDLES}"


def _where(settings: Settings) -> str:
    return settings.chroma_url or str(settings.index_dir)
