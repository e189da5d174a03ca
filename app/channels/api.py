"""The HTTP API (FastAPI): diagnose, lint, cases, feedback, health — a thin adapter over app.diagnose and app.lint.

Everything that goes wrong answers JSON: {"error": {"code": "<stable code>", "message": "...", "request_id": "..."}}.
Every request has an id (X-Request-ID in and out) that every log line written while serving it carries.

This module holds the routes and `install`; the pieces they use live next to it: api_schemas (request/response
models), api_errors (error handlers), http_middleware (request id, size limit, access log), request_log (log lines
with the request id), case_index (the /v1/cases search), rate_limit, diagnose_pools.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from fastapi import APIRouter, Depends, FastAPI, Path, Query, Request
from fastapi.responses import FileResponse, JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from app import plots
from app.channels.api_errors import install_error_handlers
from app.channels.api_schemas import (
    ERRS,
    CaseList,
    CaseSummary,
    DiagnoseRequest,
    ErrorResponse,
    FeedbackRequest,
    FeedbackResponse,
    Health,
    LintRequest,
    LintResponse,
    Ready,
    errs,
)
from app.channels.auth import TokenGate
from app.channels.case_index import TitleIndex
from app.channels.diagnose_pools import HEAVY_CHARS, make_pools
from app.channels.errors import REQUEST_ID, ApiError
from app.channels.http_middleware import RequestContextMiddleware
from app.channels.rate_limit import RateLimit
from app.models import Diagnosis
from app.runtime import State, Warmup, store_message
from app.store import StoreError

log = logging.getLogger("trainfix.api")


_LINT_CASES: dict[str, list] = {}
_LINT_LOCK = threading.Lock()


def _disk_cases() -> list:
    """The cases on disk, read once: /v1/lint answers before the engine has loaded."""
    with _LINT_LOCK:
        if "disk" not in _LINT_CASES:
            from app.kb import load_cases

            _LINT_CASES["disk"] = load_cases().cases
        return _LINT_CASES["disk"]


def _case_summary(c: Any, score: float | None = None) -> CaseSummary:
    """A case as listed by GET /v1/cases (its score rounded, when searched)."""
    return CaseSummary(
        id=c.id, category=c.category, title={"en": c.title.en, "zh": c.title.zh}, evidence=c.evidence,
        sources=[s.url for s in c.sources], score=None if score is None else round(score, 4),
    )


def build_router(state: State, warm: Warmup, pools: tuple[ThreadPoolExecutor, ThreadPoolExecutor] | None = None) -> APIRouter:
    """The /v1 routes behind the bearer token; the catch-all that answers 404/405 in JSON comes last."""
    # diagnoses run in a bounded pool: health checks, static files and other requests keep their event loop
    pool, heavy = pools or make_pools(state.settings.workers)
    r = APIRouter(prefix="/v1", dependencies=[Depends(_bearer_auth(state))], tags=["v1"])
    _add_diagnose(r, state, warm, pool, heavy)
    _add_plots(r, state)
    _add_lint(r, state)
    _add_cases(r, warm)
    _add_feedback(r, state)
    _add_fallback(r)
    return r


def _bearer_auth(state: State) -> Callable[..., None]:
    """The dependency every /v1 route has: the server's TRAINFIX_API_TOKEN as a bearer token, when it sets one."""
    bearer = HTTPBearer(auto_error=False, description="Set TRAINFIX_API_TOKEN on the server to require it.")

    def auth(cred: HTTPAuthorizationCredentials | None = Depends(bearer)) -> None:
        want = state.settings.api_token
        if not want:
            return
        if cred is None or not secrets.compare_digest(cred.credentials.encode(), want.encode()):
            what = "missing" if cred is None else "wrong"
            raise ApiError(401, "unauthorized", f"{what} bearer token: send 'Authorization: Bearer <token>' (the server's TRAINFIX_API_TOKEN)", {"WWW-Authenticate": "Bearer"})

    return auth


def _add_diagnose(r: APIRouter, state: State, warm: Warmup, pool: ThreadPoolExecutor, heavy: ThreadPoolExecutor) -> None:
    """POST /v1/diagnose: run in `pool` (or the `heavy` lane for large inputs) within the diagnosis deadline."""

    @r.post(
        "/diagnose",
        summary="Diagnose a training problem",
        description="Ranked causes with fixes, evidence and citations for a question, its attachments and the conversation so far.",
        response_model=Diagnosis,
        responses=errs(400, 401, 413, 422, 503),
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


def _add_plots(r: APIRouter, state: State) -> None:
    """GET /v1/plots/{name}: a chart named by a diagnosis, drawn on first fetch."""

    @r.get("/plots/{name}", summary="A chart of a diagnosed run (PNG)", response_class=FileResponse,
           responses={404: {"model": ErrorResponse, "description": "No such chart (they are kept for a bounded time and count)"}, **errs(401)})
    async def plot_ep(name: str = Path(pattern=plots.PLOT_NAME, max_length=40)) -> FileResponse:
        await asyncio.get_running_loop().run_in_executor(None, plots.wait, name, 15.0)  # drawn now, or still being drawn
        f = plots.plots_dir(state.settings.home) / name
        if not f.is_file():
            raise ApiError(404, "plot_not_found",
                           f"no chart {name!r}: charts are kept for {plots.PLOT_KEEP_S // 3600} h, the last {plots.PLOT_KEEP_N}")
        return FileResponse(f, media_type="image/png")


def _add_lint(r: APIRouter, state: State) -> None:
    """POST /v1/lint: LSP diagnostics for one file (from the disk cases until the engine has loaded)."""

    @r.post(
        "/lint",
        summary="Lint a config, launch command or log",
        description="Language Server Protocol diagnostics (0-based lines) from the cases' triggers. A file that cannot be read, "
        "or whose type is unknown, yields a diagnostic saying so.",
        response_model=LintResponse,
        responses=errs(401, 413, 422),
    )
    def lint_ep(req: LintRequest) -> dict[str, Any]:
        from app.facts import Attachment
        from app.lint import lint

        eng = state._engine
        cases = list(eng.cases.values()) if eng is not None else _disk_cases()
        results = lint([Attachment(name=req.name, content=req.content)], cases, req.lang)
        return {"diagnostics": [x.lsp() for x in results]}


def _add_cases(r: APIRouter, warm: Warmup) -> None:
    """GET /v1/cases/{id} and GET /v1/cases (list, filter, search)."""
    title_ix: dict[int, TitleIndex] = {}

    @r.get(
        "/cases/{case_id}",
        summary="One case, in full",
        responses={404: {"model": ErrorResponse, "description": "No such case (code case_not_found)"}, **errs(401, 422, 503)},
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
        responses=errs(401, 422, 503),
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
                ix = title_ix[id(eng)] = TitleIndex(eng)
            found = [(eng.cases[cid], s) for cid, s in ix.search(q)]
        else:
            found = [(eng.cases[cid], None) for cid in eng.case_ids]
        if category:
            found = [(c, s) for c, s in found if c.category == category]
        return CaseList(total=len(found), cases=[_case_summary(c, s) for c, s in found[:limit]])


def _add_feedback(r: APIRouter, state: State) -> None:
    """POST /v1/feedback, rate-limited per client."""
    feedback_limit = RateLimit()

    @r.post(
        "/feedback",
        summary="Store feedback on an answer",
        status_code=201,
        response_model=FeedbackResponse,
        responses=errs(401, 413, 422, 429),
    )
    def feedback_ep(req: FeedbackRequest, request: Request) -> FeedbackResponse:
        client = request.client.host if request.client else "?"
        if not feedback_limit.allow(client):
            raise ApiError(429, "too_many_requests", "too much feedback from this client; try again in a few seconds", {"Retry-After": "5"})
        rid = state.feedback.add(req.kind, req.question, answer=req.answer, case_id=req.case_id, channel="api",
                                 item=req.item or req.case_id, comment=req.comment)
        log.info("feedback %s stored (row %d, case %s)", req.kind, rid, req.case_id)
        return FeedbackResponse(id=rid)


def _add_fallback(r: APIRouter) -> None:
    """Any other /v1 path: 405 with Allow when another method would match, else 404 — JSON either way."""

    @r.api_route("/{rest:path}", methods=["GET", "POST", "PUT", "PATCH", "DELETE"], include_in_schema=False)
    def not_found(rest: str, request: Request):
        allowed = sorted(
            {m for rt in r.routes if getattr(rt, "name", "") != "not_found" and hasattr(rt, "path_regex")
             and rt.path_regex.match(request.url.path) for m in (getattr(rt, "methods", None) or ())}
        )
        if allowed:
            raise ApiError(405, "method_not_allowed", f"{request.method} is not allowed on {request.url.path}; use {', '.join(allowed)}", {"Allow": ", ".join(allowed)})
        raise ApiError(404, "not_found", f"no such endpoint: {request.method} /v1/{rest} (see /docs)")


def install(app: FastAPI, state: State, warm: Warmup) -> None:
    """Routes, error handlers, request ids and the size limit on `app` (CORS is added by the server, outermost)."""
    install_error_handlers(app, state)
    # the token gate covers every route of the app, the UI mounted later included; the request context wraps it
    app.add_middleware(TokenGate, token=state.settings.api_token)
    app.add_middleware(RequestContextMiddleware, max_bytes=int(state.settings.max_upload_mb * 1024 * 1024))
    # the server shuts these pools down on exit, dropping queued diagnoses (SIGTERM finishes in seconds)
    app.state.diagnose_pools = make_pools(state.settings.workers)
    app.include_router(build_router(state, warm, app.state.diagnose_pools))

    @app.get("/healthz", tags=["health"], summary="Liveness: the process answers", response_model=Health)
    def healthz() -> Health:
        return Health(status="ok")

    @app.get(
        "/readyz",
        tags=["health"],
        summary="Readiness: the index is loaded and its store answers",
        response_model=Ready,
        responses={503: ERRS[503]},
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
            index=state.index_state(),
        )
