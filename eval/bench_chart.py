"""Chart and run-reader timings: medians of a few runs, printed as a Markdown table (paste into eval/bench.md).

    python eval/bench_chart.py [--runs 3] [--mb 50] [--no-cli] [--out FILE]

Measures:
- draw time of the chart for 100k logged points (the series is decimated to <= 20k points per metric first);
- chart of a 50 MB training log: read the series + draw, and draw alone;
- `trainfix ask ... --attach <50 MB log> --plot out.png` end to end (a new process each time, warm index), and the
  same command without --plot;
- read time of a 50 MB TensorBoard event file (the diagnosis's facts, and the chart's series);
- peak traced memory (tracemalloc) of streaming 1M MLflow rows.

The 50 MB log and event file are generated (seeded) into a temporary folder: the same run in both, loss falling,
a grad_norm spike and NaN from a known step, so the timings include the anomaly detectors' work.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import random
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _value(step: int, nan_from: int, spike_at: int, rnd: random.Random) -> tuple[float, float]:
    loss = math.nan if step >= nan_from else 2.0 * math.exp(-step / 20000) + rnd.random() * 0.05
    gn = 5e4 if step == spike_at else 1.0 + rnd.random()
    return loss, gn


def make_log(path: Path, mb: float) -> int:
    """A transformers-style log with progress-bar lines; returns the number of logged steps."""
    rnd = random.Random(1)
    target = int(mb * 1e6)
    steps = int(target / 88)
    nan_from, spike_at = int(steps * 0.8), int(steps * 0.4)
    with path.open("w") as f:
        step = 0
        while f.tell() < target:
            step += 1
            loss, gn = _value(step, nan_from, spike_at, rnd)
            f.write(f"{{'loss': {loss:.4f}, 'grad_norm': {gn:.4f}, 'learning_rate': {1e-5:.3e}, 'epoch': {step / 1e5:.4f}}}\n")
            if step % 10 == 0:
                f.write(f" {step % 100}%|###4      | {step}/{steps} [01:23<10:00, 12.3it/s]\n")
    return step


def make_tfevents(path: Path, mb: float) -> int:
    """A TensorBoard event file as torch's SummaryWriter writes it (simple_value scalars), with real CRCs."""
    from tensorboard.compat.proto import event_pb2, summary_pb2

    from app.facts.runs import _masked_crc

    rnd = random.Random(2)
    target = int(mb * 1e6)
    steps = target // (3 * 62)
    nan_from, spike_at = int(steps * 0.8), int(steps * 0.4)

    def record(ev) -> bytes:
        data = ev.SerializeToString()
        head = struct.pack("<Q", len(data))
        return head + struct.pack("<I", _masked_crc(head)) + data + struct.pack("<I", _masked_crc(data))

    with path.open("wb") as f:
        f.write(record(event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2")))
        step = 0
        t0 = 1.76e9
        while f.tell() < target:
            step += 1
            loss, gn = _value(step, nan_from, spike_at, rnd)
            for tag, v in (("train/loss", loss), ("train/grad_norm", gn), ("train/learning_rate", 1e-5)):
                s = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, simple_value=v)])
                f.write(record(event_pb2.Event(wall_time=t0 + step, step=step, summary=s)))
    return step


def median_time(fn, runs: int, cpu: list[float] | None = None) -> tuple[float, object]:
    """Median wall time of `runs` calls (and, into `cpu`, this process's CPU time of each: less hit by other load)."""
    times, out = [], None
    for _ in range(runs):
        t, c = time.perf_counter(), time.process_time()
        out = fn()
        times.append(time.perf_counter() - t)
        if cpu is not None:
            cpu.append(time.process_time() - c)
    return statistics.median(times), out


def bench_draw_100k(runs: int, tmp: Path) -> tuple[float, float]:
    from app.chart import draw, read_series
    from app.facts import Attachment

    lines = []
    for s in range(1, 100_001):
        loss = math.nan if s >= 90_000 else 2.0 - s * 1e-5
        lines.append(f"{{'loss': {loss}, 'grad_norm': {5e4 if s == 50_000 else 1.2}, 'learning_rate': 1e-05, 'epoch': {s / 1e4:.2f}}}")
    run = read_series(Attachment("100k.log", "\n".join(lines)))
    import matplotlib.pyplot as plt

    def once():
        fig, _ = draw(run, "en", tmp / "100k.png")
        plt.close(fig)

    once()  # matplotlib's first figure loads fonts; not counted
    cpu: list[float] = []
    return median_time(once, max(runs, 5), cpu)[0], statistics.median(cpu)


def bench_log_chart(log: Path, runs: int, tmp: Path) -> tuple[float, float, float, str]:
    import matplotlib.pyplot as plt

    from app.chart import alt_text, draw, read_series
    from app.facts import Attachment

    def read_draw():
        run = read_series(Attachment(log.name, path=log))
        fig, _ = draw(run, "en", tmp / "log.png")
        plt.close(fig)
        return run

    def fresh_read_draw():
        from app.facts import runs

        runs._CACHE.clear()
        return read_draw()

    t_all, run = median_time(fresh_read_draw, runs)

    def draw_only():
        fig, _ = draw(run, "en", tmp / "log.png")
        plt.close(fig)

    cpu: list[float] = []
    t_draw, _ = median_time(draw_only, max(runs, 5), cpu)
    return t_all, t_draw, statistics.median(cpu), alt_text(run, "en")


def bench_tfevents(tb: Path, runs: int) -> tuple[float, float, str]:
    from app.chart import read_series
    from app.facts import Attachment, read_attachments
    from app.facts import runs as runs_mod

    def facts():
        runs_mod._CACHE.clear()
        return read_attachments([Attachment(tb.name, path=tb)])

    t_facts, fs = median_time(facts, runs)

    def series():
        runs_mod._CACHE.clear()
        return read_series(Attachment(tb.name, path=tb))

    t_series, _ = median_time(series, runs)
    return t_facts, t_series, fs.files[0].message


def bench_cli(log: Path, runs: int, tmp: Path) -> tuple[float, float]:
    exe = Path(sys.executable).with_name("trainfix")
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    q = "loss becomes nan after a while, grad_norm spiked before"
    base = [str(exe), "ask", q, "--attach", str(log)]
    subprocess.run(base, env=env, capture_output=True, check=False, timeout=900)  # warm: builds the index if missing

    def with_plot():
        out = tmp / "cli.png"
        r = subprocess.run([*base, "--plot", str(out)], env=env, capture_output=True, text=True, timeout=900)
        assert out.exists() and out.stat().st_size > 5000, r.stderr[-500:]
        out.unlink()

    def without():
        subprocess.run(base, env=env, capture_output=True, timeout=900)

    a, b = [], []
    for _ in range(runs):  # interleaved, so a change in the machine's load hits both alike
        a.append(median_time(with_plot, 1)[0])
        b.append(median_time(without, 1)[0])
    return statistics.median(a), statistics.median(b)


def bench_tracemalloc_rows(n: int = 1_000_000) -> tuple[float, float]:
    from app.facts.runs import read_long_csv

    def rows():
        yield "key,value,step,timestamp\n"
        for s in range(1, n + 1):
            yield f"loss,{1.5 + (s % 7) * 0.01:.2f},{s},{1763870000000 + s}\n"

    tracemalloc.start()
    t = time.perf_counter()
    read_long_csv(rows(), "rows.csv")
    dt = time.perf_counter() - t
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak / 2**20, dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--mb", type=float, default=50)
    ap.add_argument("--no-cli", action="store_true", help="skip the end-to-end trainfix ask runs")
    ap.add_argument("--no-trace", action="store_true", help="skip the tracemalloc run (it is slow: every allocation is traced)")
    ap.add_argument("--out", type=Path, default=None, help="also write the table to this file")
    a = ap.parse_args()
    load = os.getloadavg()[0]
    rows: list[tuple[str, str]] = []
    with tempfile.TemporaryDirectory(prefix="trainfix-bench-chart-") as d:
        tmp = Path(d)
        os.environ.setdefault("TRAINFIX_HOME", str(tmp / "home"))
        log, tb = tmp / "train.log", tmp / "events.out.tfevents.1760000000.bench.1.0"
        t = time.perf_counter()
        n_log = make_log(log, a.mb)
        n_tb = make_tfevents(tb, a.mb)
        print(f"generated {log.stat().st_size / 1e6:.1f} MB log ({n_log} steps), {tb.stat().st_size / 1e6:.1f} MB event file ({n_tb} steps) in {time.perf_counter() - t:.0f} s", file=sys.stderr)
        t100k, c100k = bench_draw_100k(a.runs, tmp)
        rows.append(("chart draw, 100k logged points (decimated to <= 20k per series), PNG written", f"{t100k * 1000:.0f} ms (CPU {c100k * 1000:.0f} ms)"))
        t_all, t_draw, c_draw, alt = bench_log_chart(log, a.runs, tmp)
        rows.append((f"chart of a {log.stat().st_size / 1e6:.0f} MB log: read series + draw", f"{t_all:.2f} s"))
        rows.append((f"chart of a {log.stat().st_size / 1e6:.0f} MB log: draw only (series already read)", f"{t_draw * 1000:.0f} ms (CPU {c_draw * 1000:.0f} ms)"))
        print("chart:", alt, file=sys.stderr)
        t_facts, t_series, note = bench_tfevents(tb, a.runs)
        rows.append((f"{tb.stat().st_size / 1e6:.0f} MB TensorBoard event file ({n_tb * 3:,} scalars): read into facts", f"{t_facts:.2f} s"))
        rows.append((f"{tb.stat().st_size / 1e6:.0f} MB TensorBoard event file: read into chart series", f"{t_series:.2f} s"))
        print("tfevents:", note, file=sys.stderr)
        if not a.no_cli:
            t_plot, t_plain = bench_cli(log, a.runs, tmp)
            rows.append((f"`trainfix ask ... --attach <{log.stat().st_size / 1e6:.0f} MB log> --plot out.png`, end to end (new process)", f"{t_plot:.2f} s"))
            rows.append(("the same without `--plot`", f"{t_plain:.2f} s"))
        if not a.no_trace:
            peak, dt = bench_tracemalloc_rows()
            rows.append(("1M MLflow rows streamed: peak traced memory (tracemalloc)", f"{peak:.1f} MB"))
    cpu = platform.processor() or platform.machine()
    lines = [
        f"Medians of {a.runs} runs (draw: of {max(a.runs, 5)}); {os.cpu_count()} cores ({cpu}), Python {platform.python_version()}; "
        f"load average {load:.1f} at the start (other workers shared the machine). Reproduce: `python eval/bench_chart.py`.",
        "",
        "| measure | value |",
        "|---|---|",
        *[f"| {k} | {v} |" for k, v in rows],
    ]
    text = "\n".join(lines)
    print(text)
    if a.out:
        a.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
