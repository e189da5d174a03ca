"""Run histories from trackers (TensorBoard, W&B, MLflow) give the same facts as the same run's text log.

The TensorBoard files are written here by real writers (torch's SummaryWriter and tensorboard's own Writer); the
W&B / MLflow fixtures follow the exports' documented shapes (see app/facts/runs.py). The chart's markers are read
from the figure's data, not pixels.
"""

from __future__ import annotations

import io
import math
import os
import struct
from pathlib import Path

import pytest
from conftest import FIXTURES

from app.chart import draw, read_series
from app.facts import Attachment, is_binary, read_attachments
from app.facts.runs import is_tfevents, read_tfevents, recall, sniff

RUNS = FIXTURES / "runs"
NAN_STEP, SPIKE_STEP = 37, 20


def _run():
    """The run every fixture holds: loss falls, grad_norm spikes to 5e3 at step 20, NaN from step 37, lr 1e-5."""
    for s in range(1, 61):
        if s >= NAN_STEP:
            yield s, math.nan, math.nan, 1e-5
        else:
            yield s, round(2.0 - s * 0.02, 4), (5000.0 if s == SPIKE_STEP else round(1.0 + (s % 5) * 0.1, 3)), 1e-5


def _text_log() -> str:
    """The same run as a transformers Trainer prints it (logging_steps=1)."""
    return "\n".join(f"{{'loss': {loss}, 'grad_norm': {g}, 'learning_rate': {lr}, 'epoch': {s / 60:.2f}}}" for s, loss, g, lr in _run())


def _log_facts(fs) -> set[tuple[str, object]]:
    return {(f.key, f.value) for f in fs.facts if f.key.startswith("log.") and f.key != "log.message"}


@pytest.fixture(scope="module")
def expected() -> set[tuple[str, object]]:
    got = _log_facts(read_attachments([Attachment("train.log", _text_log())]))
    assert ("log.nan_loss", float(NAN_STEP)) in got and ("log.grad_norm_explosion", float(SPIKE_STEP)) in got
    return got


def _write_torch(folder: Path) -> Path:
    from torch.utils.tensorboard import SummaryWriter

    w = SummaryWriter(str(folder))
    for s, loss, gn, lr in _run():
        w.add_scalar("train/loss", loss, s)
        w.add_scalar("train/grad_norm", gn, s)
        w.add_scalar("train/learning_rate", lr, s)
        w.add_scalar("train/epoch", s / 60, s)
    w.close()
    return next(folder.glob("events.out.tfevents.*"))


def _write_tb(folder: Path) -> Path:
    from tensorboard.summary import DirectoryOutput, Writer

    w = Writer(DirectoryOutput(str(folder)))
    for s, loss, gn, lr in _run():
        w.add_scalar("train/loss", loss, step=s)
        w.add_scalar("train/grad_norm", gn, step=s)
        w.add_scalar("train/learning_rate", lr, step=s)
    w.close()
    return next(folder.glob("events.out.tfevents.*"))


@pytest.fixture(scope="module")
def tb_file(tmp_path_factory) -> Path:
    return _write_torch(tmp_path_factory.mktemp("tb_torch"))


def test_tensorboard_file_gives_the_text_logs_facts(tb_file, tmp_path, expected):
    head = tb_file.read_bytes()[:8192]
    assert is_tfevents(head) and not is_binary(head)  # recognised by content, not refused
    fs = read_attachments([Attachment(tb_file.name, path=tb_file)])
    assert _log_facts(fs) == expected
    note = fs.files[0]
    assert note.ok and note.kind == "tensorboard" and "grad_norm, loss, lr" in note.message
    nan = next(f for f in fs.facts if f.key == "log.nan_loss")
    assert nan.kind == "log" and "train/loss = nan" in nan.text and f"step {NAN_STEP}" in nan.text
    # tensorboard's own writer stores scalars as 0-d tensors, not simple_value; an upload arrives as bytes
    other = _write_tb(tmp_path)
    assert _log_facts(read_attachments([Attachment("run.tfevents", other.read_bytes())])) == expected


@pytest.mark.parametrize(("name", "kind"), [
    ("wandb_panel_export.csv", "wandb_csv"),
    ("wandb_history.jsonl", "wandb_history"),
    ("mlflow_metrics.csv", "mlflow_csv"),
    ("mlflow_get_history.json", "mlflow_json"),
])
def test_tracker_exports_give_the_text_logs_facts(name, kind, expected):
    path = RUNS / name
    assert sniff(path.read_text()[:20000]) == kind
    fs = read_attachments([Attachment(name, path=path)])
    assert fs.files[0].ok and fs.files[0].kind == kind
    assert _log_facts(fs) == expected
    # an upload (bytes, no path) under a name that says nothing is detected the same way
    assert _log_facts(read_attachments([Attachment("export", path.read_bytes())])) == expected


def test_llamafactory_trainer_log_jsonl(expected):
    """LLaMA-Factory's trainer_log.jsonl (its LogCallback: current_steps, total_steps, loss, lr, ...) has no grad_norm."""
    import json

    rows = [json.dumps({"current_steps": s, "total_steps": 60, "loss": loss, "lr": lr, "epoch": round(s / 60, 2),
                        "percentage": round(s / 0.6, 2), "elapsed_time": "0:00:10", "remaining_time": "0:01:00"})
            for s, loss, _, lr in _run()]
    fs = read_attachments([Attachment("trainer_log.jsonl", "\n".join(rows))])
    assert fs.files[0].kind == "trainer_log"
    assert _log_facts(fs) == {(k, v) for k, v in expected if "grad_norm" not in k}


def test_wandb_panel_export_reads_the_first_run_and_says_so():
    fs = read_attachments([Attachment("export.csv", path=RUNS / "wandb_panel_export.csv")])
    msg = fs.files[0].message
    assert "2 runs" in msg and "brisk-pond-1" in msg
    # the second run's values (x1.1, never NaN) did not leak into the series
    assert ("log.grad_norm_max", 5000.0) in _log_facts(fs)


def test_random_binary_is_still_refused():
    blob = os.urandom(4096)
    assert is_binary(blob) and not is_tfevents(blob)
    fs = read_attachments([Attachment("weights.bin", blob)])
    note = fs.files[0]
    assert not note.ok and note.kind == "binary" and "TensorBoard" in note.message and not fs.facts


def test_cut_or_damaged_event_file_gives_a_note_not_an_exception(tb_file):
    data = tb_file.read_bytes()
    cut = data[: len(data) * 2 // 3]
    fs = read_attachments([Attachment("cut.tfevents", cut)])
    note = fs.files[0]
    assert note.kind == "tensorboard" and "cut short" in note.message
    assert any(k == "log.grad_norm_explosion" for k, _ in _log_facts(fs))  # what came before the cut is still used
    # a damaged length field in the middle: the length check stops the read there
    off = 0
    for _ in range(30):
        (n,) = struct.unpack("<Q", data[off : off + 8])
        off += 16 + n
    bad = data[:off] + b"\xff\xff" + data[off + 2 :]
    d = read_tfevents(io.BytesIO(bad), "bad")
    assert d.problem and "record 31 is damaged" in d.problem[0] and d.rows == 31
    # only the first record survives: recognised, nothing to read, a note
    first = struct.unpack("<Q", data[:8])[0] + 16
    fs = read_attachments([Attachment("stub.tfevents", data[:first] + b"\x00" * 7)])
    assert fs.files[0].kind == "tensorboard" and "cut short" in fs.files[0].message and not fs.facts


def test_chart_markers_sit_at_the_steps_of_a_tensorboard_run(tb_file, tmp_path):
    att = Attachment(tb_file.name, path=tb_file)
    read_attachments([att])
    assert recall(att) is not None  # the diagnosis's read is kept for the chart: the file is not read twice
    run = read_series(att)
    assert run is not None and {"loss", "grad_norm", "lr"} <= set(run.series)
    fig, markers = draw(run, "en", tmp_path / "tb.png")
    lines: dict[str, list[float]] = {}
    for ax in fig.axes:
        for ln in ax.get_lines():
            gid = ln.get_gid() or ""
            if gid.startswith("marker:"):
                lines.setdefault(gid.split(":")[1], []).append(float(ln.get_xdata()[0]))
    assert float(NAN_STEP) in lines["loss"] and float(NAN_STEP) in lines["grad_norm"]
    assert float(SPIKE_STEP) in lines["grad_norm"]
    assert any(m.label == f"first NaN loss at step {NAN_STEP}" for m in markers)
    loss_ax = next(ax for ax in fig.axes if ax.get_ylabel() == "loss")
    xs = [x for ln in loss_ax.get_lines() if not (ln.get_gid() or "").startswith("marker:") for x in ln.get_xdata()]
    assert xs == [float(s) for s in range(1, NAN_STEP)]  # the plotted curve is the run's own steps, NaNs left out
    import matplotlib.pyplot as plt

    plt.close(fig)


_BIG = """
import json
from app.facts.runs import read_long_csv
def rows():
    yield "key,value,step,timestamp\\n"
    for s in range(1, 1_000_001):
        v = "nan" if s == 765_432 else ("9000.0" if s == 123_457 else f"{1.5 + (s % 7) * 0.01:.2f}")
        yield f"grad_norm,{v},{s},{1763870000000 + s}\\n"
def status_kb(field):  # VmHWM is this process's own peak (ru_maxrss also counts the parent's image before exec)
    with open("/proc/self/status") as fh:
        return next(int(ln.split()[1]) for ln in fh if ln.startswith(field + ":"))
before = status_kb("VmRSS")
d = read_long_csv(rows(), "big.csv")
grew = status_kb("VmHWM") - before
print(json.dumps({"rows": d.rows, "points": len(d.series["grad_norm"].vals), "grew_kb": grew,
                  "facts": {f.key: f.value for f in d.facts}}))
"""


def test_a_million_rows_stream_in_bounded_memory():
    """1M MLflow rows, generated lazily in a fresh process: the read keeps a bounded series, not the rows.

    Peak RSS (VmHWM) growth of a child process, not tracemalloc: tracing every allocation makes a 1M-row read 8x slower
    (eval/bench_chart.py reports the tracemalloc peak of the same read). Keeping the rows would cost > 100 MB.
    """
    import json
    import subprocess
    import sys

    from conftest import ROOT

    out = subprocess.run([sys.executable, "-c", _BIG], capture_output=True, text=True, timeout=120, cwd=ROOT, check=True)
    got = json.loads(out.stdout)
    assert got["rows"] == 1_000_000 and got["points"] <= 20_000
    assert got["facts"]["log.nan_grad_norm"] == 765_432.0 and got["facts"]["log.grad_norm_explosion"] == 123_457.0
    assert got["grew_kb"] < 40 * 1024, f"peak RSS grew {got['grew_kb'] / 1024:.1f} MB"
