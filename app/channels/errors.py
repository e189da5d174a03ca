"""HTTP errors shared by the API and the Slack endpoint: one JSON error shape, with the request id."""

from __future__ import annotations

import contextvars
from typing import Any

from fastapi.responses import JSONResponse

REQUEST_ID: contextvars.ContextVar[str] = contextvars.ContextVar("trainfix_request_id", default="-")


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, headers: dict[str, str] | None = None, fields: list[dict[str, str]] | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.headers, self.fields = status, code, message, headers or {}, fields


def error_response(status: int, code: str, message: str, headers: dict[str, str] | None = None, fields: list[dict[str, str]] | None = None) -> JSONResponse:
    body: dict[str, Any] = {"code": code, "message": message, "request_id": REQUEST_ID.get()}
    if fields:
        body["fields"] = fields
    return JSONResponse({"error": body}, status_code=status, headers=headers)
