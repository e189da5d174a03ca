"""The thread pools diagnoses run in: a bounded pool for ordinary questions and a low-priority one-thread lane for
large inputs, so health checks and the event loop never wait behind a diagnosis."""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor


def make_pools(workers: int) -> tuple[ThreadPoolExecutor, ThreadPoolExecutor]:
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
