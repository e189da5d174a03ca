"""Logging with request ids: every line written while serving a request carries its X-Request-ID."""

from __future__ import annotations

import logging

from app.channels.errors import REQUEST_ID


class RequestIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        """Stamp the record with the current request id ('-' outside a request)."""
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
