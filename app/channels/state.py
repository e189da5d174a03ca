"""The process-wide engine every channel shares, built once (and the index built on first start if missing)."""

from __future__ import annotations

import logging
import threading

from app.feedback import FeedbackStore
from app.retrieve import Engine
from app.settings import Settings
from app.store import StoreError

log = logging.getLogger("trainfix")


class State:
    """Holds the engine and the feedback store; `engine()` raises StoreError (-> 503) while the index is not usable."""

    def __init__(self, settings: Settings | None = None, auto_ingest: bool = True) -> None:
        self.settings = settings or Settings()
        self.auto_ingest = auto_ingest
        self._engine: Engine | None = None
        self._lock = threading.Lock()
        self.status = "starting"
        self.feedback = FeedbackStore(self.settings.feedback_db)

    def engine(self) -> Engine:
        if self._engine is not None:
            return self._engine
        with self._lock:
            if self._engine is None:
                self._engine = self._build()
        return self._engine

    def _build(self) -> Engine:
        from app.embeddings import make_embedder
        from app.store import IndexMismatch, Store

        emb = make_embedder(self.settings.embedder, self.settings.threads)
        try:
            eng = Engine(self.settings, emb)
        except IndexMismatch:
            raise
        except StoreError:
            store = Store(self.settings, emb)  # raises StoreUnavailable when a Chroma server is down
            if not self.auto_ingest or (store.count() and store.manifest().get("complete")):
                raise
            self.status = "building the index (first start)"
            log.warning("no index yet: building it from the knowledge base")
            from app.embeddings import VectorCache
            from ingest.pipeline import ingest

            def progress(done: int, total: int) -> None:
                self.status = f"building the index (first start): {done}/{total} units embedded"

            ingest(Store(self.settings, emb, VectorCache(self.settings.vector_cache)), progress=progress)
            eng = Engine(self.settings, emb)
        self.status = "ready"
        return eng

    def check(self) -> None:
        """Readiness: the engine is loaded and its store answers (a Chroma server may have gone away)."""
        eng = self.engine()
        try:
            eng.store.count()
        except Exception as e:  # noqa: BLE001 - any failure of the store is "not ready"
            from app.store import StoreUnavailable

            self._engine = None
            raise StoreUnavailable(f"the index is not reachable: {e}") from e
