"""The API's error handlers: everything that goes wrong answers the one JSON error shape of app.channels.errors
(validation errors name each bad field; a store that stops answering is a 503 with Retry-After)."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from app.channels.errors import REQUEST_ID, ApiError, error_response
from app.runtime import NotReady, State, store_message
from app.store import StoreError, StoreUnavailable

log = logging.getLogger("trainfix.api")

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
    """Every exception the routes may raise, answered as {"error": {...}} with a stable code."""
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
