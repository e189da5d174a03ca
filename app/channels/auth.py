"""One auth story for the whole server: with TRAINFIX_API_TOKEN set, the API and the chat UI both need it.

The API takes `Authorization: Bearer <token>`; a browser signs in once at /login and gets an HttpOnly cookie. The
check runs before any body is read or validated. Health checks stay open; Slack requests carry Slack's signature.
"""

from __future__ import annotations

import hashlib
import html
import secrets
from urllib.parse import parse_qs

from app.channels.errors import error_response

COOKIE = "trainfix_token"
OPEN = ("/healthz", "/readyz", "/slack/", "/login", "/docs", "/openapi.json", "/redoc")
MAX_LOGIN_BODY = 4096

_FORM = """<!doctype html><html><head><meta charset="utf-8"><title>trainfix — sign in</title>
<meta name="viewport" content="width=device-width, initial-scale=1"></head>
<body style="font-family:sans-serif;max-width:28rem;margin:4rem auto">
<h1>trainfix</h1><p>This server needs its access token (TRAINFIX_API_TOKEN).</p>{error}
<form method="post" action="/login"><input type="password" name="token" autofocus style="width:100%;padding:.5rem">
<button type="submit" style="margin-top:.5rem;padding:.5rem 1rem">Sign in</button></form></body></html>"""


def _cookie_value(token: str) -> str:
    """The cookie holds a digest of the token, not the token itself."""
    return hashlib.sha256(("trainfix-ui:" + token).encode()).hexdigest()


class TokenGate:
    """ASGI middleware: bearer token for /v1/*, bearer or sign-in cookie for everything else that is not open."""

    def __init__(self, app, token: str | None) -> None:
        self.app, self.token = app, token

    async def __call__(self, scope, receive, send):
        if not self.token or scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        path = scope.get("path", "")
        if path == "/login" and scope["type"] == "http":
            return await self._login(scope, receive, send)
        if path.startswith(OPEN):
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or [])
        auth = headers.get(b"authorization", b"").decode("latin-1")
        given = auth[7:].strip() if auth[:7].lower() == "bearer " else ""
        if given and secrets.compare_digest(given.encode(), self.token.encode()):
            return await self.app(scope, receive, send)
        if not path.startswith("/v1/") and self._cookie_ok(headers.get(b"cookie", b"").decode("latin-1")):
            return await self.app(scope, receive, send)
        if scope["type"] == "websocket":
            return await send({"type": "websocket.close", "code": 4401})
        if not path.startswith("/v1/") and scope.get("method") == "GET" and b"text/html" in headers.get(b"accept", b""):
            return await _redirect(send, "/login")
        what = "wrong" if given else "missing"
        resp = error_response(401, "unauthorized", f"{what} bearer token: send 'Authorization: Bearer <token>' (the server's TRAINFIX_API_TOKEN)"
                              + ("" if path.startswith("/v1/") else ", or sign in at /login"), {"WWW-Authenticate": "Bearer"})
        await resp(scope, receive, send)

    def _cookie_ok(self, cookie: str) -> bool:
        want = _cookie_value(self.token or "")
        for part in cookie.split(";"):
            k, _, v = part.strip().partition("=")
            if k == COOKIE and secrets.compare_digest(v.encode(), want.encode()):
                return True
        return False

    async def _login(self, scope, receive, send):
        if scope.get("method") != "POST":
            return await _html(send, 200, _FORM.format(error=""))
        body = b""
        while True:
            msg = await receive()
            body += msg.get("body", b"")
            if len(body) > MAX_LOGIN_BODY:
                return await _html(send, 413, _FORM.format(error="<p>Too long.</p>"))
            if not msg.get("more_body"):
                break
        token = (parse_qs(body.decode("utf-8", "replace")).get("token") or [""])[0]
        if not secrets.compare_digest(token.encode(), (self.token or "").encode()):
            return await _html(send, 401, _FORM.format(error="<p style='color:#b00'>" + html.escape("Wrong token.") + "</p>"))
        cookie = f"{COOKIE}={_cookie_value(self.token or '')}; Path=/; HttpOnly; SameSite=Strict; Max-Age=2592000"
        await send({"type": "http.response.start", "status": 303, "headers": [(b"location", b"/"), (b"set-cookie", cookie.encode())]})
        await send({"type": "http.response.body", "body": b""})


async def _html(send, status: int, page: str) -> None:
    body = page.encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/html; charset=utf-8"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


async def _redirect(send, to: str) -> None:
    await send({"type": "http.response.start", "status": 303, "headers": [(b"location", to.encode())]})
    await send({"type": "http.response.body", "body": b""})
