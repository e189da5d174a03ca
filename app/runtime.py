"""Setup and readiness, shared by the CLI, the server and the eval: open the index, build it on first start
(from the shipped vectors), refuse an embedder mismatch, and report honest progress while it builds."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from app.feedback import FeedbackStore
from app.retrieve import Engine
from app.settings import Settings
from app.store import StoreError

log = logging.getLogger("trainfix")


class NotReady(Exception):
    """The engine cannot answer yet (still building) or at all (the store failed); channels turn this into a 503."""

    def __init__(self, code: str, message: str, retry_after: int = 5) -> None:
        super().__init__(message)
        self.code, self.message, self.retry_after = code, message, retry_after


@dataclass
class Progress:
    """Units done and total of an index build, with an estimate of the time left from the rate so far."""

    done: int = 0
    total: int = 0
    started: float = field(default_factory=time.monotonic)

    def update(self, done: int, total: int) -> None:
        if self.total == 0 and done == 0:
            self.started = time.monotonic()
        self.done, self.total = done, total

    @property
    def eta_s(self) -> float | None:
        if not self.total or not self.done:
            return None
        rate = self.done / max(time.monotonic() - self.started, 1e-3)
        return max(0.0, (self.total - self.done) / rate)

    def text(self) -> str:
        eta = self.eta_s
        left = f", about {eta:.0f} s left" if eta is not None and self.done < self.total else ""
        return f"{self.done}/{self.total} units{left}"



def open_engine(
    settings: Settings,
    auto_ingest: bool,
    build: Callable[[Settings, Any], None],
    answer_first: Callable[[Settings, Any], Engine | None] | None = None,
) -> Engine:
    """The engine over the index; on a first start (no index, or an interrupted one) `build(settings, embedder)` makes
    it first. A long-lived process passes `answer_first`, which may return an engine read from the KB folder at once
    and write the index behind it. An index built by another embedder is refused, never rebuilt behind the user's back."""
    from app.embeddings import NamedOnly, embedder_id, make_embedder
    from app.store import IndexMismatch, Store

    Store(settings, NamedOnly(embedder_id(settings.embedder))).check_embedder(for_write=True)  # refuse before loading a model
    emb = make_embedder(settings.embedder, settings.threads)
    try:
        return Engine(settings, emb)
    except IndexMismatch:
        raise
    except StoreError:
        store = Store(settings, emb)  # raises StoreUnavailable when a Chroma server is down
        if not auto_ingest or (store.count() and store.manifest().get("complete")):
            raise
        if answer_first is not None and (eng := answer_first(settings, emb)) is not None:
            return eng
        build(settings, emb)
        return Engine(settings, emb)


def kb_engine(settings: Settings, emb) -> Engine | None:
    """An engine read straight from the project's KB folder and its shipped vectors, without the index: a first
    start answers in the ~5 s this takes instead of after the ~8 s of writing Chroma too. None for a Chroma server
    (its engine asks the server on every question) or a KB that does not load cleanly (the normal build reports it)."""
    import json

    import numpy as np

    from app.embeddings import VectorCache
    from app.lexical import wait_warm, warm_cache
    from app.retrieve import Source
    from ingest.pipeline import KB_DIR, collect

    if settings.chroma_url:
        return None
    cases, units, problems, arts, notes = collect(KB_DIR.resolve())
    if problems or not units:
        return None
    # jieba over the KB (~6 s) runs in another process: in this one it would hold the GIL against the server's own
    # start (importing gradio), and the engine waits for both anyway
    texts = [u.text for u in units]
    warm = warm_cache(texts, settings.home / "cache")
    cache = VectorCache(settings.vector_cache)
    try:
        vecs = np.asarray(cache.embed_documents(emb, texts), dtype=np.float32)
    finally:
        cache.close()
    wait_warm(warm)
    src = Source(cases, notes, [json.loads(json.dumps(a.card(), ensure_ascii=False)) for a in arts],
                 [u.id for u in units], texts, [u.meta for u in units], vecs, time.time())
    return Engine(settings, emb, source=src)


class State:
    """Holds the engine and the feedback store; `engine()` raises StoreError (-> 503) while the index is not usable."""

    def __init__(self, settings: Settings | None = None, auto_ingest: bool = True) -> None:
        self.settings = settings or Settings()
        self.auto_ingest = auto_ingest
        self._engine: Engine | None = None
        self._lock = threading.Lock()
        self.status = "starting"
        self.writer: threading.Thread | None = None  # writes the index behind a first start's KB engine
        self.write_error: BaseException | None = None
        self.progress = Progress()
        self.feedback = FeedbackStore(self.settings.feedback_db)

    def engine(self) -> Engine:
        if self._engine is not None:
            return self._engine
        with self._lock:
            if self._engine is None:
                self._engine = self._build()
        return self._engine

    def _write_index(self, settings: Settings, emb, status: str) -> None:
        from app.embeddings import VectorCache
        from app.store import Store
        from ingest.pipeline import ingest

        def progress(done: int, total: int) -> None:
            self.progress.update(done, total)
            self.status = f"{status}: {self.progress.text()}"

        ingest(Store(settings, emb, VectorCache(settings.vector_cache)), progress=progress)

    def _build(self) -> Engine:
        def build(settings: Settings, emb) -> None:
            self.status = "building the index (first start)"
            log.warning("no index yet: building it from the knowledge base")
            self._write_index(settings, emb, self.status)

        def answer_first(settings: Settings, emb) -> Engine | None:
            self.status = "reading the knowledge base (first start)"
            log.warning("no index yet: answering from the knowledge base while the index is written")
            eng = kb_engine(settings, emb)
            if eng is not None:
                self.status = "ready; writing the index"  # the writer owns the status from here on
                self.writer = threading.Thread(target=self._write_behind, args=(settings, emb), name="trainfix-index-writer", daemon=True)
                self.writer.start()
            return eng

        eng = open_engine(self.settings, self.auto_ingest, build, answer_first)
        from app.lexical import tokenize

        tokenize("预热 warm-up")  # load jieba's dictionary now, not on the first Chinese question
        if self.writer is None:  # else the writer says when it is done (or that it failed)
            self.status = "ready"
        return eng

    def index_state(self) -> str:
        """`writing` while a first start's index is written behind the KB engine, `not written` if that failed."""
        if self.writer is not None and self.writer.is_alive():
            return "writing"
        return "not written" if self.write_error is not None else "written"

    def _write_behind(self, settings: Settings, emb) -> None:
        """Write the index while the engine read from the KB answers; then swap in the engine read from the index
        (the same items, plus any team notes the data directory held). A failure leaves the KB engine answering and
        the index incomplete, which the next start finishes."""
        try:
            self._write_index(settings, emb, "ready; writing the index")
            eng = Engine(settings, emb)
        except Exception as e:  # noqa: BLE001 - logged; answers go on from the KB engine
            log.warning("writing the index failed (%s): answering from the knowledge base; the next start retries", e)
            self.status = "ready (index not written)"
            self.write_error = e
            return
        self._engine = eng
        self.status = "ready"
        log.info("index written: %d units", len(eng.unit_ids))

    def check(self) -> None:
        """Readiness: the engine is loaded and its store answers (a Chroma server may have gone away)."""
        eng = self.engine()
        try:
            eng.store.count()
        except Exception as e:  # noqa: BLE001 - any failure of the store is "not ready"
            from app.store import StoreUnavailable

            self._engine = None
            raise StoreUnavailable(f"the index is not reachable: {e}") from e


class Warmup:
    """Builds State.engine() in a background thread so /healthz answers at once and /readyz says 503 until ready."""

    def __init__(self, state: State) -> None:
        self.state = state
        self.error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    @property
    def building(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def loaded(self) -> bool:
        return self.state._engine is not None

    def start(self) -> threading.Thread | None:
        with self._lock:
            if self.loaded:
                return None
            if not self.building:
                self._thread = threading.Thread(target=self._run, name="trainfix-warmup", daemon=True)
                self._thread.start()
            return self._thread

    def _run(self) -> None:
        t0 = time.perf_counter()
        try:
            eng = self.state.engine()
            self.error = None
            logging.getLogger("trainfix").info("index loaded: %d cases in %.1fs", len(eng.cases), time.perf_counter() - t0)
        except Exception as e:  # noqa: BLE001 - reported by /readyz and every request until it works
            self.error = e
            logging.getLogger("trainfix").warning("index not ready: %s", e)

    def engine(self, wait: float = 30.0):
        eng = self.state._engine
        if eng is not None:
            return eng
        t = self.start()
        if t is not None:
            t.join(wait)
        eng = self.state._engine
        if eng is not None:
            return eng
        if self.building:
            eta = self.state.progress.eta_s
            wait = int(min(max(eta or 5, 1), 60))
            raise NotReady("not_ready", f"trainfix is starting ({self.state.status}); try again in {wait} s", wait)
        err = self.error
        if isinstance(err, StoreError):
            raise NotReady("index_unavailable", store_message(self.state, err))
        raise NotReady("index_unavailable", f"the index could not be loaded: {err}")


def store_message(state: State, exc: BaseException) -> str:
    """The store's message, naming the Chroma server when there is one (so the 503 says where to look)."""
    from app.store import StoreUnavailable

    msg = str(exc)
    url = state.settings.chroma_url
    if url and url not in msg and isinstance(exc, StoreUnavailable):
        msg += f" (Chroma server {url}: is it running?)"
    return msg
