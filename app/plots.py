"""Charts of users' runs as files: drawn off the request's critical path, kept in a bounded folder.

Every channel uses this one path (the API's `plot_url`, the chat UI's image, the Slack upload), so a chart is drawn
the same way everywhere. `plan()` decides whether there is a run and names its file at once; the drawing (~0.2-0.5 s
of matplotlib) is not done in the request. The API draws lazily, when the chart is first fetched (most API clients
never fetch it: under load, eager drawing was 14 % of the server's CPU); the chat UI and Slack draw at once, after
the answer is out. Runs waiting to be drawn are kept in a small bounded table.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from app.models import Diagnosis

log = logging.getLogger("trainfix.plots")

PLOT_KEEP_N = 200  # charts kept in the data directory, newest first
PLOT_KEEP_S = 24 * 3600
PLOT_NAME = r"^[0-9a-f]{32}\.png$"

_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="trainfix-plot")
_pending: dict[str, Future] = {}
_lazy: OrderedDict[str, tuple] = OrderedDict()  # name -> (run, lang, path), drawn on first fetch
LAZY_KEEP_N = 64  # runs kept for a lazy chart (a run holds at most a few decimated series)
LAZY_KEEP_S = 3600
_lock = threading.Lock()


def plots_dir(home: Path) -> Path:
    d = home / "plots"
    d.mkdir(parents=True, exist_ok=True)
    return d


def _draw(run, lang: str, path: Path) -> None:
    import matplotlib.pyplot as plt

    from app.chart import draw

    tmp = path.with_suffix(".tmp.png")
    fig, _ = draw(run, lang, tmp)
    plt.close(fig)
    tmp.replace(path)  # whoever serves the file sees it whole or not at all
    old = sorted(path.parent.glob("*.png"), key=lambda p: p.stat().st_mtime, reverse=True)
    now = time.time()
    for k, p in enumerate(old):
        if k >= PLOT_KEEP_N or now - p.stat().st_mtime > PLOT_KEEP_S:
            p.unlink(missing_ok=True)


def plan(home: Path, d: Diagnosis, atts: list, lazy: bool = False) -> tuple[Diagnosis, Future | None]:
    """The diagnosis with `plot_url`/`plot_alt` set when an attachment holds a run. The drawing is under way
    (returned future), or, with `lazy`, waits for the first `wait()` on its name."""
    from app.chart import alt_text, first_run

    run = first_run(atts)
    if run is None:
        return d, None
    try:
        import matplotlib  # noqa: F401 - an install without it answers without a chart
    except ImportError:
        log.warning("no chart: matplotlib is not installed (pip install 'trainfix[serve]')")
        return d, None
    name = f"{uuid.uuid4().hex}.png"
    path = plots_dir(home) / name
    drawn = d.model_copy(update={"plot_url": f"/v1/plots/{name}", "plot_alt": alt_text(run, d.language)})
    if lazy:
        with _lock:
            _lazy[name] = (run, d.language, path, time.monotonic())
            while len(_lazy) > LAZY_KEEP_N or (_lazy and time.monotonic() - next(iter(_lazy.values()))[3] > LAZY_KEEP_S):
                _lazy.popitem(last=False)
        return drawn, None
    return drawn, _submit(name, run, d.language, path)


def _submit(name: str, run, lang: str, path: Path) -> Future:
    fut = _pool.submit(_draw, run, lang, path)
    with _lock:
        _pending[name] = fut
    fut.add_done_callback(lambda f: _forget(name, f))
    return fut


def _forget(name: str, fut: Future) -> None:
    with _lock:
        _pending.pop(name, None)
    if fut.exception() is not None:
        log.warning("chart %s could not be drawn: %s", name, fut.exception())


def draw_now(home: Path, d: Diagnosis, atts: list, timeout: float = 30.0) -> tuple[Diagnosis, Path | None]:
    """Plan and wait: for channels that need the file itself (the chat UI's image, the Slack upload)."""
    drawn, fut = plan(home, d, atts)
    if fut is None:
        return d, None
    fut.result(timeout=timeout)
    return drawn, plots_dir(home) / drawn.plot_url.rsplit("/", 1)[-1]


def wait(name: str, timeout: float) -> None:
    """Draw a lazy chart now, or wait (bounded) for one being drawn; returns at once for an unknown or finished one."""
    with _lock:
        fut = _pending.get(name)
        recipe = _lazy.pop(name, None) if fut is None else None
    if recipe is not None:
        fut = _submit(name, *recipe[:3])
    if fut is not None:
        try:
            fut.result(timeout=timeout)
        except Exception:  # noqa: BLE001 - the caller answers 404 when the file is not there
            pass
