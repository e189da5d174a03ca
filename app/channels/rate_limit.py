"""A per-client rate limit for cheap-to-send, costly-to-store requests (feedback)."""

from __future__ import annotations

import threading
import time


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

