"""Recent Slack answers by thread (bounded, in memory): what the "more" and feedback buttons act on, and the history
of a thread when conversations.replies is not allowed."""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field

from app.models import Diagnosis

SHOW = 3  # causes per message


@dataclass
class Conversation:
    """One answered thread (or slash command): the diagnosis, how many causes are shown, and the turns so far."""

    channel: str
    thread_ts: str | None
    user: str
    question: str
    diagnosis: Diagnosis
    ephemeral: bool = False
    shown: int = SHOW
    turns: list[tuple[str, str]] = field(default_factory=list)


class Conversations:
    """Recent answers by thread, for the buttons and as a fallback history when conversations.replies is not allowed."""

    def __init__(self, size: int = 2000) -> None:
        self.size = size
        self._d: OrderedDict[str, Conversation] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str) -> Conversation | None:
        """The conversation of `key` ("channel:thread_ts"), marked as recently used; None once it was evicted."""
        with self._lock:
            c = self._d.get(key)
            if c is not None:
                self._d.move_to_end(key)
            return c

    def put(self, key: str, conv: Conversation) -> None:
        """Remember `conv`, dropping the least recently used beyond `size`."""
        with self._lock:
            self._d[key] = conv
            self._d.move_to_end(key)
            while len(self._d) > self.size:
                self._d.popitem(last=False)
