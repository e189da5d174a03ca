"""Load test: N concurrent clients on POST /v1/diagnose against one trainfix process for a fixed time.

    python eval/loadtest.py                       # start one API process over the full KB, 16 clients, 60 s
    python eval/loadtest.py --url http://host:7860 --token T   # against a running server
    python eval/loadtest.py --attacker --clients 15 --duration 30  # 15 normal clients, without then with 1 attacker

With --attacker the normal clients run twice for the same time: alone, then beside one client that sends only
maximum-size inputs (100,000-character questions in English and Chinese, an 18 MB history, a billion-laughs YAML,
10,000-deep JSON and YAML). The report compares the normal clients' p95 and errors, and the worst /healthz time.

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


def attack_requests() -> list[dict]:
    """Maximum-size inputs, one of each kind the API accepts (each must finish or be cut within 5 s)."""
    en = ("Full fine-tune of Qwen-7B with DeepSpeed ZeRO-2: the loss drops to 0 after ten steps and grad norm spikes. " * 1100)[:100_000]
    zh = ("全参微调 Qwen2-7B，训练几步之后 loss 变成 0，梯度范数先暴涨，已经试过降低学习率，还是不行。" * 2600)[:100_000]
    turn = ("earlier: loss nan at step 10, bf16, zero3, lr 3e-4 " * 7400)[:360_000]
    laughs = "a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n" + "".join(
        f"{c}: &{c} [{', '.join(['*' + p] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi", strict=True))
    return [
        {"question": en},
        {"question": zh},
        {"question": "what should I change first?", "history": [{"role": "user", "content": turn}] * 50},  # 18 MB
        {"question": "loss nan with this config", "attachments": [{"name": "lol.yaml", "content": laughs}]},
        {"question": "deep config", "attachments": [{"name": "deep.json", "content": '{"a": ' * 10_000 + "1" + "}" * 10_000},
                                                    {"name": "deep.yaml", "content": "a: " + "[" * 10_000 + "]" * 10_000}]},
    ]


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


def health_loop(url: str, deadline: float, out: list[float]) -> None:
    """/healthz every 100 ms; its latencies (a transport failure counts as infinite)."""
    with httpx.Client(base_url=url, timeout=10) as c:
        while time.monotonic() < deadline:
            t0 = time.perf_counter()
            try:
                ok = c.get("/healthz").status_code == 200
            except httpx.HTTPError:
                ok = False
            out.append(time.perf_counter() - t0 if ok else float("inf"))
            time.sleep(0.1)


def run_load(url: str, token: str | None, clients: int, duration: float, reqs: list[dict],
             attacker: Result | None = None, health: list[float] | None = None) -> tuple[Result, float]:
    """`clients` normal clients for `duration` s; with `attacker`, one more client sending attack_requests()."""
    res = Result()
    deadline = time.monotonic() + duration
    t0 = time.perf_counter()
    threads = [threading.Thread(target=client_loop, args=(url, token, reqs, k * 7, deadline, res), daemon=True) for k in range(clients)]
    if attacker is not None:
        threads.append(threading.Thread(target=client_loop, args=(url, token, attack_requests(), 0, deadline, attacker), daemon=True))
    if health is not None:
        threads.append(threading.Thread(target=health_loop, args=(url, deadline, health), daemon=True))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return res, time.perf_counter() - t0


def attacker_mix(url: str, token: str | None, clients: int, duration: float, reqs: list[dict], baseline: float | None = None) -> dict:
    """Normal clients alone for `baseline` s (default `duration`), then beside one attacker for `duration` s: p95,
    errors and the worst /healthz."""
    base, wall0 = run_load(url, token, clients, baseline or duration, reqs)
    att, health = Result(), []
    mixed, wall1 = run_load(url, token, clients, duration, reqs, attacker=att, health=health)
    ms = lambda r: [x * 1000 for x in r.latencies]  # noqa: E731
    return {
        "clients": clients, "duration_s": duration, "baseline_s": baseline or duration,
        "p95_alone_ms": pct(ms(base), 95), "p95_with_attacker_ms": pct(ms(mixed), 95),
        "p50_alone_ms": pct(ms(base), 50), "p50_with_attacker_ms": pct(ms(mixed), 50),
        "rps_alone": len(base.latencies) / wall0, "rps_with_attacker": len(mixed.latencies) / wall1,
        "errors_alone": base.errors, "errors_with_attacker": mixed.errors, "error_statuses": {**base.statuses, **mixed.statuses},
        "attacker_requests": len(att.latencies) + att.errors, "attacker_statuses": att.statuses,
        "attacker_max_s": max(att.latencies, default=float("nan")),
        "healthz_max_ms": max(health, default=float("nan")) * 1000, "healthz_p95_ms": pct(health, 95) * 1000,
    }


def attacker_table(r: dict) -> str:
    return "\n".join([
        f"{r['clients']} normal clients on `POST /v1/diagnose`, {r['baseline_s']:.0f} s alone, then {r['duration_s']:.0f} s beside one client "
        "sending only maximum-size inputs (100,000-character en and zh questions, an 18 MB history, a billion-laughs YAML, "
        "10,000-deep JSON and YAML), on the same machine.",
        "",
        "| normal clients | p50 alone (ms) | p95 alone (ms) | p50 with attacker (ms) | p95 with attacker (ms) | ratio p95 | errors (normal) | attacker requests | attacker statuses | /healthz max (ms) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|",
        f"| {r['clients']} | {r['p50_alone_ms']:.0f} | {r['p95_alone_ms']:.0f} | {r['p50_with_attacker_ms']:.0f} | {r['p95_with_attacker_ms']:.0f} | "
        f"{r['p95_with_attacker_ms'] / r['p95_alone_ms']:.2f} | {r['errors_alone'] + r['errors_with_attacker']} | {r['attacker_requests']} | "
        f"{', '.join(f'{k}: {v}' for k, v in sorted(r['attacker_statuses'].items()))} | {r['healthz_max_ms']:.0f} |",
    ])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(home: Path, threads: int, log_path: Path, workers: int | None = None, processes: int = 1,
                 chroma_url: str | None = None) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("TRAINFIX_API_TOKEN", "TRAINFIX_CHROMA_URL")}
    env.update(TRAINFIX_HOME=str(home), TRAINFIX_THREADS=str(threads), HF_HUB_OFFLINE="1", ANONYMIZED_TELEMETRY="False")
    if workers:
        env["TRAINFIX_WORKERS"] = str(workers)
    if chroma_url:
        env["TRAINFIX_CHROMA_URL"] = chroma_url
    if not chroma_url and not (home / "index").exists():
        print(f"building the index in {home} (first run only) ...", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "app.cli", "ingest"], env=env, cwd=ROOT, check=True)
    log = open(log_path, "wb")  # noqa: SIM115 - lives as long as the server
    proc = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "--factory", "app.channels.server:create_api_app", "--host", "127.0.0.1", "--port", str(port), "--no-access-log",
         "--log-level", "warning", "--workers", str(processes), "--timeout-graceful-shutdown", "4"],
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


def write_section(md: str, path: Path = BENCH, heading: str = "Load test") -> None:
    section = f"## {heading}\n\n" + md.strip() + "\n"
    text = path.read_text(encoding="utf-8") if path.exists() else "# Benchmarks\n"
    pat = re.compile(rf"^## {re.escape(heading)}\n.*?(?=^## |\Z)", re.S | re.M)
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
    ap.add_argument("--threads", type=int, default=int(os.environ.get("TRAINFIX_THREADS", "0")), help="TRAINFIX_THREADS of the started server (0: every core up to 4)")
    ap.add_argument("--warmup", type=float, default=5.0, help="seconds of load before measuring")
    ap.add_argument("--no-write", action="store_true", help="do not update eval/bench.md")
    ap.add_argument("--attacker", action="store_true", help="normal clients alone, then beside one client sending maximum-size inputs")
    ap.add_argument("--workers", type=int, default=None, help="TRAINFIX_WORKERS of the started server (diagnoses at once)")
    ap.add_argument("--processes", type=int, default=1, help="uvicorn worker processes of the started server")
    ap.add_argument("--chroma-url", default=None, help="TRAINFIX_CHROMA_URL of the started server (a shared Chroma server)")
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
            proc, url = start_server(home, a.threads, log_path, a.workers, a.processes, a.chroma_url)
            server_threads = str(a.threads)
        headers = {"Authorization": f"Bearer {a.token}"} if a.token else {}
        ready = httpx.get(url + "/readyz", headers=headers, timeout=30).json()
        if a.warmup > 0:
            run_load(url, a.token, a.clients, a.warmup, reqs)
        if a.attacker:
            mix = attacker_mix(url, a.token, a.clients, a.duration, reqs)
        else:
            res, wall = run_load(url, a.token, a.clients, a.duration, reqs)
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
    if a.attacker:
        md = attacker_table(mix) + f"\n\nMeasured {time.strftime('%Y-%m-%d')}; reproduce with `python eval/loadtest.py --attacker --clients {a.clients} --duration {a.duration:g}`."
        print(md)
        if not a.no_write:
            write_section(md, heading="Attacker mix")
        ok = mix["errors_with_attacker"] == 0 and mix["p95_with_attacker_ms"] <= 2 * mix["p95_alone_ms"]
        return 0 if ok else 1
    md = table(res, wall, a.clients, ready, server_threads)
    if a.processes > 1 or a.chroma_url:
        md = md.replace("against one API process (uvicorn, one worker;", f"against {a.processes} API processes (uvicorn --workers {a.processes}"
                        + (", a Chroma server" if a.chroma_url else "") + ";")
    print(md)
    if not a.no_write:
        write_section(md)
        print(f"\nwritten to {BENCH.relative_to(ROOT)}", file=sys.stderr)
    if proc is not None and log_path.exists() and not res.errors:
        log_path.unlink(missing_ok=True)
    return 1 if res.errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
