"""One process for every channel: the HTTP API (/v1), the Slack endpoint (/slack/events), the Gradio UI at "/".

`trainfix serve` calls run(). The engine loads in a background thread: /healthz answers at once, /readyz says 503
until the index is loaded (and whenever its store, e.g. a Chroma server, stops answering).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from contextlib import asynccontextmanager

from fastapi import FastAPI

from app.channels import api, slack
from app.channels.request_log import configure_logging
from app.runtime import State, Warmup
from app.settings import Settings

log = logging.getLogger("trainfix.server")

# SIGTERM: in-flight requests get this long to finish, then they are cancelled; queued diagnoses are dropped and the
# running ones (bounded by the input budgets to a few seconds) end before the process exits with status 0
GRACEFUL_SHUTDOWN_S = 4

DESCRIPTION = """Diagnose LLM / deep-learning training failures: ranked causes with fixes, evidence and citations.

* `POST /v1/diagnose` — a question, attachments (configs, launch commands, logs) and the conversation so far
* `POST /v1/lint` — Language Server Protocol diagnostics for one file, for editor plugins
* `GET /v1/cases`, `GET /v1/cases/{id}` — the knowledge base
* `POST /v1/feedback` — thumbs up/down, "this fixed it"

When the server sets `TRAINFIX_API_TOKEN`, send `Authorization: Bearer <token>` on /v1/*.
Errors are JSON: `{"error": {"code": "...", "message": "...", "request_id": "..."}}`.
"""


def _mount_ui(app: FastAPI, state: State) -> bool:
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        import gradio as gr

        from app.channels.ui import build_ui
    except Exception as e:  # noqa: BLE001 - the API and Slack still serve without the UI
        log.warning("chat UI not available (%s: %s): serving the API and Slack only", type(e).__name__, e)
        return False
    try:
        # uploads are bounded like every other channel's files (the UI reads them as attachments)
        max_mb = max(1, int(state.settings.max_upload_mb))
        gr.mount_gradio_app(app, build_ui(state), path="/", max_file_size=f"{max_mb}mb")
    except Exception as e:  # noqa: BLE001
        log.warning("chat UI failed to build (%s: %s): serving the API and Slack only", type(e).__name__, e)
        return False
    log.info("chat UI mounted at /")
    return True


def create_app(settings: Settings | None = None, with_ui: bool = True, warm_now: bool = False) -> FastAPI:
    """The FastAPI app with the API router, /slack/events and (when with_ui and app.channels.ui imports) the Gradio UI.

    warm_now starts loading (or building) the index before Gradio is imported and the UI built, instead of when
    the server starts: `trainfix serve` uses it, so a first start's index build overlaps those seconds."""
    from fastapi.middleware.cors import CORSMiddleware

    configure_logging()
    settings = settings or Settings()
    state = State(settings)
    warm = Warmup(state)

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        warm.start()
        yield
        _drop_queued(_app)

    app = FastAPI(
        title="trainfix",
        version="0.1.0",
        description=DESCRIPTION,
        lifespan=lifespan,
        openapi_tags=[{"name": "v1", "description": "Diagnosis, lint, cases, feedback"}, {"name": "health", "description": "Liveness and readiness"}],
    )
    api.install(app, state, warm)
    bot = slack.install(app, state, warm)
    origins = [o.strip() for o in settings.cors_origins.split(",") if o.strip()]
    if origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=origins,
            allow_methods=["GET", "POST", "OPTIONS"],
            allow_headers=["Authorization", "Content-Type", "X-Request-ID"],
            expose_headers=["X-Request-ID"],
            max_age=600,
        )
    app.state.trainfix = state
    app.state.warmup = warm
    app.state.slack_bot = bot
    log.info("API at /v1 (docs at /docs); Slack events at /slack/events%s", "" if bot else " (not configured)")
    if warm_now:
        warm.start()
    app.state.ui = _mount_ui(app, state) if with_ui else False
    return app


def create_api_app() -> FastAPI:
    """Factory without the UI (`uvicorn --factory app.channels.server:create_api_app`), for API-only processes."""
    return create_app(with_ui=False)


def _drop_queued(app: FastAPI) -> None:
    """Cancel the diagnoses still waiting for a worker (their clients get 503 at once); running ones finish."""
    for pool in getattr(app.state, "diagnose_pools", ()):
        pool.shutdown(wait=False, cancel_futures=True)


def run(host: str = "127.0.0.1", port: int = 7860) -> None:
    import uvicorn

    class _Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame) -> None:
            # from a signal handler: take the pool's lock in a thread, never here (the loop may hold it)
            threading.Thread(target=_drop_queued, args=(app,), name="trainfix-stop", daemon=True).start()
            super().handle_exit(sig, frame)

    settings = Settings()
    app = create_app(settings, warm_now=True)
    server = _Server(uvicorn.Config(app, host=host, port=port, log_level="info", access_log=False, timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S))
    warm: Warmup = app.state.warmup
    if settings.slack_app_token:
        if app.state.slack_bot is None:
            log.warning("TRAINFIX_SLACK_APP_TOKEN is set but Slack is not configured (signing secret and bot token): no Socket Mode")
        else:
            slack.start_socket_mode(app.state.slack_bot, settings.slack_app_token)

    def announce() -> None:
        said_error = None
        while not server.should_exit:
            if server.started and warm.loaded:
                print(f"trainfix ready on http://{host}:{port}", flush=True)
                return
            if server.started and not warm.building and not warm.loaded:
                if warm.error is not None and str(warm.error) != said_error:
                    said_error = str(warm.error)
                    print(f"trainfix is up on http://{host}:{port} but the index is not ready: {warm.error} (retrying)", flush=True)
                warm.start()  # keep trying, e.g. until the Chroma server answers
                time.sleep(5)
            time.sleep(0.2)

    threading.Thread(target=announce, name="trainfix-announce", daemon=True).start()
    # uvicorn re-raises the SIGTERM/SIGINT it handled once it has shut down, which would end the process by that signal
    # (status 143) before the worker threads are joined: the re-raise lands here, and a clean stop exits 0
    stopped: list[int] = []
    previous = {sig: signal.signal(sig, lambda s, _f: stopped.append(s)) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        server.run()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if stopped:
        log.info("stopped by %s", signal.Signals(stopped[0]).name)
