"""The HTTP API (FastAPI): diagnose, lint, cases, feedback, health — a thin adapter over app.diagnose and app.lint.

Everything that goes wrong answers JSON: {"error": {"code": "<stable code>", "message": "...", "request_id": "..."}}.
Every request has an id (X-Request-ID in and out) that every log line written while serving it carries.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import secrets
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal

from fastapi import APIRouter, Depends, FastAPI, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from app import plots
from app.channels.auth import TokenGate
from app.channels.errors import REQUEST_ID, ApiError, error_response
from app.feedback import COMMENT_MAX_CHARS, ITEM_MAX_CHARS
from app.models import Diagnosis
from app.runtime import NotReady, State, Warmup, store_message
from app.store import StoreError, StoreUnavailable

log = logging.getLogger("trainfix.api")

_RID_OK = re.compile(r"^[A-Za-z0-9._:\-]{1,128}$")
LIMITED_PREFIXES = ("/v1/", "/slack/")


# ---------------------------------------------------------------- logging with request ids


class RequestIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = REQUEST_ID.get()
        return True


_LOG_FORMAT = "%(asctime)s %(levelname)s [%(request_id)s] %(name)s: %(message)s"


def configure_logging(level: int = logging.INFO) -> None:
    """One handler on the `trainfix` logger (and uvicorn's) whose lines carry the request id."""
    root = logging.getLogger("trainfix")
    if not any(getattr(h, "_trainfix", False) for h in root.handlers):
        h = logging.StreamHandler()
        h._trainfix = True  # type: ignore[attr-defined]
        h.addFilter(RequestIdFilter())
        h.setFormatter(logging.Formatter(_LOG_FORMAT))
        root.addHandler(h)
    root.setLevel(level)
    for name in ("uvicorn.error",):
        lg = logging.getLogger(name)
        for h in lg.handlers:
            if not any(isinstance(f, RequestIdFilter) for f in h.filters):
                h.addFilter(RequestIdFilter())


# ---------------------------------------------------------------- errors


class ErrorBody(BaseModel):
    code: str = Field(description="A stable, machine-readable code.", examples=["index_unavailable"])
    message: str = Field(description="What went wrong and what to do, for a person.")
    request_id: str | None = Field(default=None, description="The X-Request-ID of the request (quote it in bug reports).")
    fields: list[dict[str, str]] | None = Field(default=None, description="For validation errors: each bad field and why.")


class ErrorResponse(BaseModel):
    error: ErrorBody


_HTTP_CODES = {
    400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found", 405: "method_not_allowed",
    406: "not_acceptable", 413: "payload_too_large", 415: "unsupported_media_type", 422: "invalid_request",
    429: "too_many_requests", 503: "unavailable",
}


def _field_name(loc: tuple | list) -> str:
    parts = [str(p) for p in loc]
    if parts and parts[0] in ("body", "query", "path", "header"):
        where, rest = parts[0], parts[1:]
        return ".".join(rest) if where == "body" and rest else (f"{where}:{'.'.join(rest)}" if rest else where)
    return ".".join(parts) or "body"


def _validation_fields(exc: RequestValidationError) -> tuple[str, str, list[dict[str, str]]]:
    fields = []
    code = "invalid_request"
    for e in exc.errors():
        typ = e.get("type", "")
        if typ == "json_invalid":
            code = "malformed_json"
            ctx = e.get("ctx") or {}
            pos = e.get("loc", ["body", 0])[-1]
            fields.append({"field": "body", "message": f"the body is not valid JSON (at character {pos}): {ctx.get('error', e.get('msg', ''))}"})
            continue
        name = _field_name(e.get("loc", ()))
        fields.append({"field": name, "message": e.get("msg", "invalid")})
    if not fields:
        fields = [{"field": "body", "message": "the request is not valid"}]
    msg = "; ".join(f"{f['field']}: {f['message']}" for f in fields[:8])
    return code, msg, fields


def install_error_handlers(app: FastAPI, state: State) -> None:
    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError):
        return error_response(exc.status, exc.code, exc.message, exc.headers, exc.fields)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException):
        code = _HTTP_CODES.get(exc.status_code, f"http_{exc.status_code}")
        msg = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
        if exc.status_code == 400 and "parsing the body" in msg:  # FastAPI's answer to a body that is not UTF-8 JSON
            return error_response(422, "malformed_json", "the body could not be parsed as JSON (is it UTF-8 text?)", fields=[{"field": "body", "message": "not valid JSON"}])
        if exc.status_code == 404:
            msg = f"no such endpoint: {request.method} {request.url.path} (see /docs)"
        elif exc.status_code == 405:
            msg = f"{request.method} is not allowed on {request.url.path} (see /docs)"
        return error_response(exc.status_code, code, msg, getattr(exc, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError):
        code, msg, fields = _validation_fields(exc)
        log.info("invalid request: %s", msg)
        return error_response(422, code, msg, fields=fields)

    @app.exception_handler(NotReady)
    async def _not_ready(request: Request, exc: NotReady):
        return error_response(503, exc.code, exc.message, {"Retry-After": str(exc.retry_after)})

    @app.exception_handler(StoreError)
    async def _store(request: Request, exc: StoreError):
        if isinstance(exc, StoreUnavailable):
            # the engine holds a client to a store that stopped answering: drop it so the next request rebuilds
            state._engine = None
        msg = store_message(state, exc)
        log.warning("index unavailable: %s", msg)
        return error_response(503, "index_unavailable", msg, {"Retry-After": "5"})

    from app.diagnose import InputError

    @app.exception_handler(InputError)
    async def _bad_input(request: Request, exc: InputError):
        return error_response(400, "bad_input", str(exc))

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception):
        log.exception("internal error on %s %s", request.method, request.url.path)
        return error_response(500, "internal_error", f"internal error; quote request id {REQUEST_ID.get()} when reporting it")


# ---------------------------------------------------------------- request id, size limit, access log (pure ASGI)


class RequestContextMiddleware:
    """Sets the request id, refuses bodies over the limit (413) on /v1 and /slack, and logs one line per request."""

    def __init__(self, app, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        rid = headers.get("x-request-id", "")
        if not _RID_OK.match(rid):
            rid = uuid.uuid4().hex[:16]
        token = REQUEST_ID.set(rid)
        t0 = time.perf_counter()
        status_box = [0]
        path = scope.get("path", "")

        async def send_with_id(message):
            if message["type"] == "http.response.start":
                status_box[0] = message["status"]
                hs = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"x-request-id"]
                hs.append((b"x-request-id", rid.encode("latin-1")))
                message = {**message, "headers": hs}
            await send(message)

        try:
            if path.startswith(LIMITED_PREFIXES) and scope.get("method") in ("POST", "PUT", "PATCH"):
                replay = await self._read_limited(headers, receive, send_with_id)
                if replay is None:
                    return
                receive = replay
            await self.app(scope, receive, send_with_id)
        finally:
            if path.startswith(LIMITED_PREFIXES) or path in ("/healthz", "/readyz"):
                log.info("%s %s %s %.0fms", scope.get("method"), path, status_box[0], (time.perf_counter() - t0) * 1000)
            REQUEST_ID.reset(token)

    async def _reply(self, send, status: int, code: str, message: str) -> None:
        resp = error_response(status, code, message)
        await resp({"type": "http"}, None, send)

    async def _read_limited(self, headers: dict[str, str], receive, send):
        limit = self.max_bytes
        too_big = f"the request body is over the {limit / 1024 / 1024:.3g} MB limit (TRAINFIX_MAX_UPLOAD_MB)"
        cl = headers.get("content-length")
        if cl is not None:
            try:
                n = int(cl)
            except ValueError:
                await self._reply(send, 400, "bad_request", "the Content-Length header is not a number")
                return None
            if n > limit:
                await self._reply(send, 413, "payload_too_large", too_big)
                return None
        chunks: list[bytes] = []
        total = 0
        while True:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                return None
            body = msg.get("body", b"")
            total += len(body)
            if total > limit:
                await self._reply(send, 413, "payload_too_large", too_big)
                return None
            chunks.append(body)
            if not msg.get("more_body", False):
                break
        data = b"".join(chunks)
        sent = [False]

        async def replay():
            if not sent[0]:
                sent[0] = True
                return {"type": "http.request", "body": data, "more_body": False}
            return await receive()

        return replay


# ---------------------------------------------------------------- the engine, warmed up in the background


# ---------------------------------------------------------------- request / response models

_DS_EXAMPLE = '{\n  "bf16": {"enabled": true},\n  "communication_data_type": "fp32",\n  "zero_optimization": {"stage": 2}\n}\n'


class AttachmentIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=255, description="File name (a hint; the format is detected from the content).", examples=["ds_config.json"])
    content: str = Field(description="The file's text: a config (JSON/YAML), a launch command, a Python snippet, a log or trainer_state.json.", examples=[_DS_EXAMPLE])


class TurnIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    role: Literal["user", "assistant"]
    content: str


class DiagnoseRequest(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "question": "Full fine-tune of Qwen-7B: loss goes to 0 after ~10 steps, grad norm spiked first",
                    "attachments": [{"name": "ds_config.json", "content": _DS_EXAMPLE}],
                    "history": [],
                    "lang": "en",
                    "top": 3,
                },
                {"question": "KTO 训练 loss 变成 NaN", "lang": "zh"},
            ]
        },
    )
    question: str = Field(default="", max_length=100_000, description="What you see. Fenced code blocks in it are read as attachments.")
    attachments: list[AttachmentIn] = Field(default=[], max_length=20)
    history: list[TurnIn] = Field(default=[], max_length=50, description="Earlier turns of the conversation, oldest first.")
    lang: Literal["en", "zh"] | None = Field(default=None, description="Answer language; default: the question's.")
    top: int = Field(default=3, ge=1, le=20, description="How many causes to return.")


class LintRequest(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"name": "ds_config.json", "content": _DS_EXAMPLE, "lang": "en"}]},
    )
    name: str = Field(min_length=1, max_length=255, examples=["ds_config.json"])
    content: str = Field(examples=[_DS_EXAMPLE])
    lang: Literal["en", "zh"] = "en"


class LspPosition(BaseModel):
    line: int = Field(description="0-based")
    character: int


class LspRange(BaseModel):
    start: LspPosition
    end: LspPosition


class LspDiagnostic(BaseModel):
    range: LspRange
    severity: int = Field(description="1 error, 2 warning, 3 information, 4 hint")
    code: str = Field(description="The case id, or trainfix.<kind> for a file that could not be read.")
    codeDescription: dict[str, str] | None = None
    message: str
    source: str = "trainfix"
    data: dict[str, Any] = {}


class LintResponse(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "diagnostics": [
                        {
                            "range": {"start": {"line": 2, "character": 2}, "end": {"line": 2, "character": 36}},
                            "severity": 2,
                            "code": "deepspeed-comm-dtype-fp32-loss-zero",
                            "codeDescription": {"href": "https://github.com/QwenLM/Qwen/issues/967"},
                            "message": "Full fine-tune loss drops to 0 ...\nFix: Delete communication_data_type ...",
                            "source": "trainfix",
                            "data": {"file": "ds_config.json", "fix": "...", "citation": "..."},
                        }
                    ]
                }
            ]
        }
    )
    diagnostics: list[LspDiagnostic]


class CaseSummary(BaseModel):
    id: str
    category: str
    title: dict[str, str]
    evidence: str
    sources: list[str]
    score: float | None = Field(default=None, description="Relevance to q (when q is given).")


class CaseList(BaseModel):
    total: int
    cases: list[CaseSummary]


class FeedbackRequest(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [{"kind": "fixed", "question": "loss goes to 0 after 10 steps", "case_id": "deepspeed-comm-dtype-fp32-loss-zero"}]
        },
    )
    kind: Literal["up", "down", "fixed"]
    question: str = Field(default="", max_length=100_000)
    case_id: str | None = Field(default=None, max_length=200)
    answer: dict[str, Any] | None = Field(default=None, description="The Diagnosis JSON the feedback is about (optional).")
    item: str | None = Field(default=None, max_length=ITEM_MAX_CHARS, description="The case or thread-note id the feedback is about "
                             "(a thumb on one cause, or the one that fixed it; defaults to case_id).", examples=["deepspeed-comm-dtype-fp32-loss-zero"])
    comment: str | None = Field(default=None, max_length=COMMENT_MAX_CHARS, description="An optional one-line comment (stored redacted, "
                                "line breaks folded into spaces).")


class FeedbackResponse(BaseModel):
    id: int
    stored: bool = True


class Health(BaseModel):
    status: str


class Ready(BaseModel):
    status: str
    cases: int
    units: int
    store: str
    embedder: str


_ERRS = {
    400: {"model": ErrorResponse, "description": "Bad input (code bad_input)"},
    401: {"model": ErrorResponse, "description": "Missing or wrong bearer token (code unauthorized)"},
    413: {"model": ErrorResponse, "description": "Body over TRAINFIX_MAX_UPLOAD_MB (code payload_too_large)"},
    422: {"model": ErrorResponse, "description": "Malformed JSON or a bad field (codes malformed_json, invalid_request)"},
    429: {"model": ErrorResponse, "description": "Too many requests from this client (code too_many_requests); see Retry-After"},
    503: {"model": ErrorResponse, "description": "Index not loaded, the Chroma server is down, or the diagnosis missed its deadline (codes not_ready, index_unavailable, busy)"},
}


class RateLimit:
    """A token bucket per client: `burst` requests at once, then `per_s` a second (feedback is cheap to send, not to store)."""

    def __init__(self, burst: int = 30, per_s: float = 1.0, max_clients: int = 10_000) -> None:
        self.burst, self.per_s, self.max_clients = burst, per_s, max_clients
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def allow(self, client: str) -> bool:
        now = time.monotonic()
        with self._lock:
            tokens, last = self._buckets.get(client, (float(self.burst), now))
            tokens = min(self.burst, tokens + (now - last) * self.per_s)
            if len(self._buckets) >= self.max_clients and client not in self._buckets:
                self._buckets.clear()  # bounded memory: a flood of addresses resets the table
            if tokens < 1:
                self._buckets[client] = (tokens, now)
                return False
            self._buckets[client] = (tokens - 1, now)
            return True


def _errs(*codes: int) -> dict[int | str, dict[str, Any]]:
    return {c: _ERRS[c] for c in codes}


# ---------------------------------------------------------------- routes


_LINT_CASES: dict[str, list] = {}
_LINT_LOCK = threading.Lock()


def _disk_cases() -> list:
    with _LINT_LOCK:
        if "disk" not in _LINT_CASES:
            from app.kb import load_cases

            _LINT_CASES["disk"] = load_cases().cases
        return _LINT_CASES["disk"]


def _case_summary(c, score: float | None = None) -> CaseSummary:
    return CaseSummary(
        id=c.id, category=c.category, title={"en": c.title.en, "zh": c.title.zh}, evidence=c.evidence,
        sources=[s.url for s in c.sources], score=None if score is None else round(score, 4),
    )


class _TitleIndex:
    """BM25 over case ids, titles and symptoms, built once per engine."""

    def __init__(self, eng) -> None:
        from app.lexical import BM25Index

        self.eng = eng
        self.ids = list(eng.case_ids)
        texts = []
        for cid in self.ids:
            c = eng.cases[cid]
            texts.append(" ".join([cid.replace("-", " "), c.title.en, c.title.zh, *c.symptoms.en, *c.symptoms.zh]))
        self.hay = [(cid + " " + eng.cases[cid].title.en + " " + eng.cases[cid].title.zh).lower() for cid in self.ids]
        self.bm25 = BM25Index(texts)

    def search(self, q: str) -> list[tuple[str, float]]:
        ql = q.lower().strip()
        scores = self.bm25.scores(q)
        out = []
        for i, cid in enumerate(self.ids):
            s = float(scores[i]) if i < len(scores) else 0.0
            if ql and ql in self.hay[i]:
                s += 100.0  # a literal substring of the id or a title ranks first
            if s > 0:
                out.append((cid, s))
        out.sort(key=lambda x: -x[1])
        return out




def _pools(workers: int) -> tuple[ThreadPoolExecutor, ThreadPoolExecutor]:
    """The diagnosis pool, and a one-thread lane for requests over HEAVY_CHARS: maximum-size inputs queue behind each
    other, not in front of everyone else's questions."""
    return (ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="trainfix-diagnose"),
            ThreadPoolExecutor(max_workers=1, thread_name_prefix="trainfix-heavy", initializer=_lower_priority))


def _lower_priority() -> None:
    """The heavy lane's thread runs at a lower CPU priority (Linux nices threads one by one): its embedding, outside
    the GIL, yields the cores to everyone else's questions."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), HEAVY_NICE)
    except (AttributeError, OSError):  # not Linux, or not allowed: same priority
        pass


HEAVY_NICE = 5


HEAVY_CHARS = 20_000  # question + history + attachments; a typical question with a config and a log is a few KB


def build_router(state: State, warm: Warmup, pools: tuple[ThreadPoolExecutor, ThreadPoolExecutor] | None = None) -> APIRouter:
    # diagnoses run in a bounded pool: health checks, static files and other requests keep their event loop
    pool, heavy = pools or _pools(state.settings.workers)
    feedback_limit = RateLimit()
    bearer = HTTPBearer(auto_error=False, description="Set TRAINFIX_API_TOKEN on the server to require it.")

    def auth(cred: HTTPAuthorizationCredentials | None = Depends(bearer)) -> None:
        want = state.settings.api_token
        if not want:
            return
        if cred is None or not secrets.compare_digest(cred.credentials.encode(), want.encode()):
            what = "missing" if cred is None else "wrong"
            raise ApiError(401, "unauthorized", f"{what} bearer token: send 'Authorization: Bearer <token>' (the server's TRAINFIX_API_TOKEN)", {"WWW-Authenticate": "Bearer"})

    r = APIRouter(prefix="/v1", dependencies=[Depends(auth)], tags=["v1"])
    title_ix: dict[int, _TitleIndex] = {}

    @r.post(
        "/diagnose",
        summary="Diagnose a training problem",
        description="Ranked causes with fixes, evidence and citations for a question, its attachments and the conversation so far.",
        response_model=Diagnosis,
        responses=_errs(400, 401, 413, 422, 503),
    )
    async def diagnose_ep(req: DiagnoseRequest) -> JSONResponse:
        from app.diagnose import Turn, diagnose
        from app.facts import Attachment
        from app.render import to_json

        budget = state.settings.diagnose_timeout_s
        deadline = time.monotonic() + budget
        rid = REQUEST_ID.get()

        def work() -> dict[str, Any] | None:
            if time.monotonic() > deadline:  # waited in the queue past its deadline: the client already got a 503
                return None
            REQUEST_ID.set(rid)
            eng = warm.engine()
            atts = [Attachment(name=a.name, content=a.content) for a in req.attachments]
            hist = [Turn(role=t.role, content=t.content) for t in req.history]
            t0 = time.perf_counter()
            d = diagnose(eng, req.question, atts, hist, lang=req.lang, top=req.top)
            d, _ = plots.plan(state.settings.home, d, atts, lazy=True)  # drawn when GET /v1/plots first asks for it
            top = (d.causes or d.related or [None])[0]
            log.info("diagnosed in %.0fms: confident=%s top=%s", (time.perf_counter() - t0) * 1000, d.confident, top.case_id if top else None)
            return to_json(d)

        size = len(req.question) + sum(len(t.content) for t in req.history) + sum(len(a.content) for a in req.attachments)
        try:
            fut = asyncio.get_running_loop().run_in_executor(heavy if size > HEAVY_CHARS else pool, work)
        except RuntimeError:  # the pool was shut down: the server is stopping
            raise ApiError(503, "busy", "the server is shutting down; try again shortly", {"Retry-After": "10"}) from None
        try:
            out = await asyncio.wait_for(asyncio.shield(fut), timeout=budget)
        except asyncio.CancelledError:
            if not fut.cancelled():
                raise  # this request itself was cancelled (the client left, or shutdown ran out of time)
            raise ApiError(503, "busy", "the server is shutting down; try again shortly", {"Retry-After": "10"}) from None
        except TimeoutError:
            raise ApiError(503, "busy", f"the diagnosis did not finish within {budget:g} s (the server is busy or the input is large); "
                           "try again shortly", {"Retry-After": "10"}) from None
        if out is None:
            raise ApiError(503, "busy", "the server is busy; try again shortly", {"Retry-After": "10"})
        return JSONResponse(out)

    @r.get("/plots/{name}", summary="A chart of a diagnosed run (PNG)", response_class=FileResponse,
           responses={404: {"model": ErrorResponse, "description": "No such chart (they are kept for a bounded time and count)"}, **_errs(401)})
    async def plot_ep(name: str = Path(pattern=plots.PLOT_NAME, max_length=40)) -> FileResponse:
        await asyncio.get_running_loop().run_in_executor(None, plots.wait, name, 15.0)  # drawn now, or still being drawn
        f = plots.plots_dir(state.settings.home) / name
        if not f.is_file():
            raise ApiError(404, "plot_not_found",
                           f"no chart {name!r}: charts are kept for {plots.PLOT_KEEP_S // 3600} h, the last {plots.PLOT_KEEP_N}")
        return FileResponse(f, media_type="image/png")

    @r.post(
        "/lint",
        summary="Lint a config, launch command or log",
        description="Language Server Protocol diagnostics (0-based lines) from the cases' triggers. A file that cannot be read, "
        "or whose type is unknown, yields a diagnostic saying so.",
        response_model=LintResponse,
        responses=_errs(401, 413, 422),
    )
    def lint_ep(req: LintRequest) -> dict[str, Any]:
        from app.facts import Attachment
        from app.lint import lint

        eng = state._engine
        cases = list(eng.cases.values()) if eng is not None else _disk_cases()
        results = lint([Attachment(name=req.name, content=req.content)], cases, req.lang)
        return {"diagnostics": [x.lsp() for x in results]}

    @r.get(
        "/cases/{case_id}",
        summary="One case, in full",
        responses={404: {"model": ErrorResponse, "description": "No such case (code case_not_found)"}, **_errs(401, 422, 503)},
    )
    def case_ep(case_id: str = Path(min_length=1, max_length=200, examples=["deepspeed-comm-dtype-fp32-loss-zero"])) -> dict[str, Any]:
        eng = warm.engine()
        c = eng.cases.get(case_id)
        if c is None:
            raise ApiError(404, "case_not_found", f"no case with id {case_id!r}; list them with GET /v1/cases")
        return c.model_dump(mode="json", by_alias=True, exclude={"path"})

    @r.get(
        "/cases",
        summary="List or search cases",
        description="Filter by category (a taxonomy id) and/or search ids, titles and symptoms with q (substring, then BM25).",
        response_model=CaseList,
        responses=_errs(401, 422, 503),
    )
    def cases_ep(
        category: str | None = Query(default=None, max_length=100, examples=["loss_zero"]),
        q: str | None = Query(default=None, max_length=1000, examples=["communication_data_type"]),
        limit: int = Query(default=50, ge=1, le=500),
    ) -> CaseList:
        eng = warm.engine()
        if q and q.strip():
            ix = title_ix.get(id(eng))
            if ix is None or ix.eng is not eng:
                title_ix.clear()
                ix = title_ix[id(eng)] = _TitleIndex(eng)
            found = [(eng.cases[cid], s) for cid, s in ix.search(q)]
        else:
            found = [(eng.cases[cid], None) for cid in eng.case_ids]
        if category:
            found = [(c, s) for c, s in found if c.category == category]
        return CaseList(total=len(found), cases=[_case_summary(c, s) for c, s in found[:limit]])

    @r.post(
        "/feedback",
        summary="Store feedback on an answer",
        status_code=201,
        response_model=FeedbackResponse,
        responses=_errs(401, 413, 422, 429),
    )
    def feedback_ep(req: FeedbackRequest, request: Request) -> FeedbackResponse:
        client = request.client.host if request.client else "?"
        if not feedback_limit.allow(client):
            raise ApiError(429, "too_many_requests", "too much feedback from this client; try again in a few seconds", {"Retry-After": "5"})
        rid = state.feedback.add(req.kind, req.question, answer=req.answer, case_id=req.case_id, channel="api",
                                 item=req.item or req.case_id, comment=req.comment)
        log.info("feedback %s stored (row %d, case %s)", req.kind, rid, req.case_id)
        return FeedbackResponse(id=rid)

    @r.api_route("/{rest:path}", methods=["GET", "POST", "PUT", "PATCH", "DELETE"], include_in_schema=False)
    def not_found(rest: str, request: Request):
        allowed = sorted(
            {m for rt in r.routes if getattr(rt, "name", "") != "not_found" and hasattr(rt, "path_regex")
             and rt.path_regex.match(request.url.path) for m in (getattr(rt, "methods", None) or ())}
        )
        if allowed:
            raise ApiError(405, "method_not_allowed", f"{request.method} is not allowed on {request.url.path}; use {', '.join(allowed)}", {"Allow": ", ".join(allowed)})
        raise ApiError(404, "not_found", f"no such endpoint: {request.method} /v1/{rest} (see /docs)")

    return r


def install(app: FastAPI, state: State, warm: Warmup) -> None:
    """Routes, error handlers, request ids and the size limit on `app` (CORS is added by the server, outermost)."""
    install_error_handlers(app, state)
    # the token gate covers every route of the app, the UI mounted later included; the request context wraps it
    app.add_middleware(TokenGate, token=state.settings.api_token)
    app.add_middleware(RequestContextMiddleware, max_bytes=int(state.settings.max_upload_mb * 1024 * 1024))
    # the server shuts these pools down on exit, dropping queued diagnoses (SIGTERM finishes in seconds)
    app.state.diagnose_pools = _pools(state.settings.workers)
    app.include_router(build_router(state, warm, app.state.diagnose_pools))

    @app.get("/healthz", tags=["health"], summary="Liveness: the process answers", response_model=Health)
    def healthz() -> Health:
        return Health(status="ok")

    @app.get(
        "/readyz",
        tags=["health"],
        summary="Readiness: the index is loaded and its store answers",
        response_model=Ready,
        responses={503: _ERRS[503]},
    )
    def readyz() -> Ready:
        eng = warm.engine(wait=2.0)
        try:
            state.check()
        except StoreError as e:
            warm.error = e
            raise ApiError(503, "index_unavailable", store_message(state, e), {"Retry-After": "5"}) from e
        eng = state._engine or eng
        s = state.settings
        return Ready(
            status="ready", cases=len(eng.cases), units=len(eng.unit_ids),
            store=f"chroma server {s.chroma_url}" if s.chroma_url else "embedded", embedder=eng.embedder.id,
        )
