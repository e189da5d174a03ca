"""Helpers for the browser tests of the chat UI: a small temp KB, a server in a thread, headless Chromium."""

from __future__ import annotations

import inspect
import os
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# screenshots go to a temporary folder unless TRAINFIX_TEST_ARTIFACTS names one (nothing is left in the clone)
ARTIFACTS = Path(os.environ.get("TRAINFIX_TEST_ARTIFACTS") or Path(os.environ.get("TMPDIR", "/tmp")) / "trainfix-test-artifacts")
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

# A small KB keeps ingest fast: the seed case plus cases that compete with it on "loss goes to 0 / NaN".
SMALL_KB = [
    "loss_zero/deepspeed-comm-dtype-fp32-loss-zero.md",
    "chat_template_labels/prompt-exceeds-cutoff-all-labels-masked.md",
    "chat_template_labels/assistant-only-loss-template-without-generation-tags.md",
    "fp16_overflow/fp16-loss-scale-exhausted-persistent-overflow.md",
    "deepspeed_zero/deepspeed-hardcoded-values-mismatch.md",
    "config_incompatibility/pure-bf16-with-zero3.md",
    "lr_schedule/qwen2-full-sft-lr-3e-4-generation-nan.md",
    "memory_oom/cuda-allocator-fragmentation-oom.md",
    "loss_zero/trainer-nan-filter-logs-zero-loss.md",  # the run-upload test: a trainer_state.json with NaN from a known step
]


def nan_trainer_state(nan_from: int = 210, spike_at: int = 200, last: int = 400, filtered: bool = False) -> str:
    """A trainer_state.json as the HF Trainer writes it: loss falls, grad_norm explodes at `spike_at`, then loss and
    grad_norm are NaN from `nan_from` on (json.dumps writes NaN literals, as the Trainer does). `filtered`: the loss
    is logged as 0.0 instead, as the Trainer's default logging_nan_inf_filter does, while grad_norm stays NaN."""
    import json

    hist = []
    for s in range(10, last + 1, 10):
        if s < spike_at:
            e = {"epoch": s / 1000, "grad_norm": 1.5 + (s % 30) / 20, "learning_rate": 2e-05, "loss": round(2.3 - s * 0.004, 4), "step": s}
        elif s < nan_from:
            e = {"epoch": s / 1000, "grad_norm": 15230.0, "learning_rate": 2e-05, "loss": 9.81, "step": s}
        else:
            e = {"epoch": s / 1000, "grad_norm": float("nan"), "learning_rate": 2e-05, "loss": 0.0 if filtered else float("nan"), "step": s}
        hist.append(e)
    return json.dumps({"global_step": last, "log_history": hist}, indent=2)


def small_kb(dest: Path) -> Path:
    """Copy the chosen case files (those that exist) into dest/cases and return dest."""
    cases = dest / "cases"
    for rel in SMALL_KB:
        src = REPO / "kb" / "cases" / rel
        if src.exists():
            (cases / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(src, cases / rel)
    return dest


def ingest_small_kb(kb: Path) -> None:
    """Index the small KB into the home of the current environment (TRAINFIX_HOME must already be set)."""
    from app.embeddings import VectorCache, make_embedder
    from app.settings import Settings
    from app.store import Store
    from ingest.pipeline import ingest

    s = Settings()
    emb = make_embedder(s.embedder, s.threads)
    ingest(Store(s, emb, VectorCache(s.vector_cache)), kb)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def make_app(state):
    """(FastAPI app serving the UI at "/", the State behind it).

    The real server (app.channels.server.create_app) when it exists, else (or with TRAINFIX_UI_TEST_STANDALONE=1)
    the UI alone: `gr.mount_gradio_app(FastAPI(), build_ui(state), path="/")`.
    """
    try:
        from app.channels.server import create_app
    except ImportError:
        create_app = None
    if create_app is not None and os.environ.get("TRAINFIX_UI_TEST_STANDALONE") != "1":
        params = inspect.signature(create_app).parameters
        if "state" in params:
            app = create_app(state=state)
        elif "settings" in params:
            app = create_app(settings=state.settings)
        else:
            app = create_app()
        if getattr(app.state, "ui", True) is False:
            raise RuntimeError("create_app() did not mount the chat UI (see the 'chat UI' warning in the log)")
        return app, getattr(app.state, "trainfix", state)
    import gradio as gr
    from fastapi import FastAPI

    from app.channels.ui import build_ui

    return gr.mount_gradio_app(FastAPI(), build_ui(state), path="/"), state


@contextmanager
def serve(app) -> Iterator[str]:
    """Run `app` with uvicorn on a free loopback port in a thread; yield its base URL."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on"))
    th = threading.Thread(target=server.run, daemon=True)
    th.start()
    deadline = time.time() + 60
    while not server.started:
        if not th.is_alive() or time.time() > deadline:
            raise RuntimeError("the UI server did not start")
        time.sleep(0.1)
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        server.should_exit = True
        th.join(timeout=15)
