"""The outermost HTTP wrapper of our own (pure ASGI): request id in and out, the body-size limit (413) on /v1 and /slack,
and one access-log line per request. CORS is added by the server, outside it."""

from __future__ import annotations

import logging
import re
import time
import uuid

from starlette.types import ASGIApp, Receive, Scope, Send

from app.channels.errors import REQUEST_ID, error_response

log = logging.getLogger("trainfix.api")

_RID_OK = re.compile(r"^[A-Za-z0-9._:\-]{1,128}$")
LIMITED_PREFIXES = ("/v1/", "/slack/")


class RequestContextMiddleware:
    """Sets the request id, refuses bodies over the limit (413) on /v1 and /slack, and logs one line per request."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
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

