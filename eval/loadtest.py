"""Load test: N concurrent clients on POST /v1/diagnose against one trainfix process for a fixed time.

    python eval/loadtest.py                       # start one API process over the full KB, 16 clients, 60 s
    python eval/loadtest.py --url http://host:7860 --token T   # against a running server

Requests cycle through the labelled eval questions (eval/questions/*.yaml) with their attachments, so the mix is
realistic (zh/en, configs, logs). Prints a Markdown table and writes it into the "## Load test" section of
eval/bench.md (created if missing). Errors are any non-200 answer or transport failure.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import yaml

ROOT = Path(__file__).resolve().parent.parent
EVAL = ROOT / "eval"
BENCH = EVAL / "bench.md"


def load_requests(limit: int = 0) -> list[dict]:
    out = []
    for f in sorted((EVAL / "questions").glob("*.yaml")):
        for q in yaml.safe_load(f.read_text(encoding="utf-8")) or []:
            atts = []
            for name in q.get("attachments") or []:
                p = EVAL / "attachments" / name
                if p.is_file():
                    atts.append({"name": name, "content": p.read_text(encoding="utf-8", errors="replace")})
            out.append({"question": q.get("q", ""), "attachments": atts})
    if not out:
        out = [
            {"question": "loss goes to 0 after 10 steps", "attachments": [{"name": "ds_config.json", "content": '{"bf16": {"enabled": true}, "communication_data_type": "fp32"}'}]},
            {"question": "KTO 训练 loss 变成 NaN"},
            {"question": "NCCL watchdog timeout while the dataset is tokenized on rank 0"},
        ]
    return out[:limit] if limit else out


@dataclass
class Result:
    latencies: list[float] = field(default_factory=list)
    errors: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, dt: float, status: str) -> None:
        with self.lock:
            self.statuses[status] = self.statuses.get(status, 0) + 1
            if status == "200":
                self.latencies.append(dt)
            else:
                self.errors += 1


def client_loop(url: str, token: str | None, reqs: list[dict], offset: int, deadline: float, res: Result) -> None:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    i = offset
    with httpx.Client(base_url=url, headers=headers, timeout=120) as c:
        while time.monotonic() < deadline:
            body = reqs[i % len(reqs)]
            i += 1
            t0 = time.perf_counter()
            try:
                r = c.post("/v1/diagnose", json=body)
                status = str(r.status_code)
            except httpx.HTTPError as e:
                status = type(e).__name__
            res.add(time.perf_counter() - t0, status)


def pct(xs: list[float], p: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = (len(xs) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def run_load(url: str, token: str | None, clients: int, duration: float, reqs: list[dict]) -> tuple[Result, float]:
    res = Result()
    deadline = time.monotonic() + duration
    t0 = time.perf_counter()
    threads = [threading.Thread(target=client_loop, args=(url, token, reqs, k * 7, deadline, res), daemon=True) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return res, time.perf_counter() - t0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(home: Path, threads: int, log_path: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("TRAINFIX_API_TOKEN", "TRAINFIX_CHROMA_URL")}
    env.update(TRAINFIX_HOME=str(home), TRAINFIX_THREADS=str(threads), HF_HUB_OFFLINE="1", ANONYMIZED_TELEMETRY="False")
    if not (home / "index").exists():
        print(f"building the index in {home} (first run only) ...", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "app.cli", "ingest"], env=env, cwd=ROOT, check=True)
    log = open(log_path, "wb")  # noqa: SIM115 - lives as long as the server
    proc = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "--factory", "app.channels.server:create_api_app", "--host", "127.0.0.1", "--port", str(port), "--no-access-log", "--log-level", "warning"],
        env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited ({proc.returncode}); see {log_path}")
        try:
            if httpx.get(url + "/readyz", timeout=10).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    proc.terminate()
    raise SystemExit("server did not become ready in 600 s")


def table(res: Result, wall: float, clients: int, ready: dict, server_threads: str) -> str:
    n = len(res.latencies) + res.errors
    ms = [x * 1000 for x in res.latencies]
    cpu = os.cpu_count()
    lines = [
        f"{clients} concurrent clients on `POST /v1/diagnose` for {wall:.0f} s against one API process "
        f"(uvicorn, one worker; TRAINFIX_THREADS={server_threads}; {ready.get('cases', '?')} cases / {ready.get('units', '?')} units, "
        f"{ready.get('store', '?')} store, {ready.get('embedder', '?')}), on {cpu} CPU cores ({platform.machine()}, Python {platform.python_version()}). "
        "The clients run on the same machine and share its cores. Requests cycle through the labelled eval questions with their attachments.",
        "",
        "| clients | duration (s) | requests | throughput (req/s) | p50 (ms) | p95 (ms) | p99 (ms) | max (ms) | errors |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        f"| {clients} | {wall:.1f} | {n} | {len(res.latencies) / wall:.1f} | {pct(ms, 50):.0f} | {pct(ms, 95):.0f} | {pct(ms, 99):.0f} | "
        f"{max(ms) if ms else float('nan'):.0f} | {res.errors} |",
    ]
    if res.errors:
        lines += ["", "Errors by status: " + ", ".join(f"{k}: {v}" for k, v in sorted(res.statuses.items()) if k != "200")]
    if ms:
        lines += ["", f"Mean {statistics.mean(ms):.0f} ms per request; measured {time.strftime('%Y-%m-%d')}; reproduce with `python eval/loadtest.py`."]
    return "\n".join(lines)


def write_section(md: str, path: Path = BENCH) -> None:
    section = "## Load test\n\n" + md.strip() + "\n"
    text = path.read_text(encoding="utf-8") if path.exists() else "# Benchmarks\n"
    pat = re.compile(r"^## Load test\n.*?(?=^## |\Z)", re.S | re.M)
    if pat.search(text):
        text = pat.sub(lambda _m: section + "\n", text).rstrip() + "\n"
    else:
        text = text.rstrip() + "\n\n" + section
    path.write_text(text, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", help="a running server (default: start one API process)")
    ap.add_argument("--token", default=os.environ.get("TRAINFIX_API_TOKEN"))
    ap.add_argument("--home", type=Path, default=None, help="TRAINFIX_HOME for the started server (default: the usual data folder)")
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--duration", type=float, default=60.0)
    ap.add_argument("--threads", type=int, default=int(os.environ.get("TRAINFIX_THREADS", "1")), help="TRAINFIX_THREADS of the started server")
    ap.add_argument("--warmup", type=float, default=5.0, help="seconds of load before measuring")
    ap.add_argument("--no-write", action="store_true", help="do not update eval/bench.md")
    a = ap.parse_args(argv)

    reqs = load_requests()
    proc = None
    log_path = Path(os.environ.get("TMPDIR", "/tmp")) / f"trainfix-loadtest-{os.getpid()}.log"
    try:
        if a.url:
            url, server_threads = a.url.rstrip("/"), "?"
        else:
            from app.settings import Settings

            home = a.home or Settings().home
            proc, url = start_server(home, a.threads, log_path)
            server_threads = str(a.threads)
        headers = {"Authorization": f"Bearer {a.token}"} if a.token else {}
        ready = httpx.get(url + "/readyz", headers=headers, timeout=30).json()
        if a.warmup > 0:
            run_load(url, a.token, a.clients, a.warmup, reqs)
        res, wall = run_load(url, a.token, a.clients, a.duration, reqs)
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
    md = table(res, wall, a.clients, ready, server_threads)
    print(md)
    if not a.no_write:
        write_section(md)
        print(f"\nwritten to {BENCH.relative_to(ROOT)}", file=sys.stderr)
    if proc is not None and log_path.exists() and not res.errors:
        log_path.unlink(missing_ok=True)
    return 1 if res.errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
