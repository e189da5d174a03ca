"""Dedupe of Slack events: Slack retries an event it thinks was not acknowledged in time; it is answered once."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict


class Seen:
    """Event ids already taken (Slack retries an event it thinks was not acknowledged in time)."""

    def __init__(self, ttl: float = 3600.0) -> None:
        self.ttl = ttl
        self._d: OrderedDict[str, float] = OrderedDict()
        self._lock = threading.Lock()

    def take(self, key: str) -> bool:
        """True the first time a key is seen (the caller handles it), False for a repeat."""
        now = time.monotonic()
        with self._lock:
            while self._d and next(iter(self._d.values())) < now - self.ttl:
                self._d.popitem(last=False)
            if key in self._d:
                return False
            self._d[key] = now
            return True

    def forget(self, key: str) -> None:
        """Let a key be taken again (its first handling failed, so Slack's retry should be answered)."""
        with self._lock:
            self._d.pop(key, None)

