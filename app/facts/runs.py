"""Run histories people export from their trackers -> the same series and symptom facts as a training log.

Read here, each recognised by its content (the file name is only a hint):

- TensorBoard event files (``events.out.tfevents.*``): TFRecord framing, each record one ``Event`` proto parsed
  with tensorboard's own compiled protos; the first record carries ``file_version: "brain.Event:2"``. Scalars
  written either way are read: ``simple_value`` (torch's SummaryWriter, tensorboardX, TF1) and 0-d tensors with
  the scalars plugin (``tensorboard.summary.Writer``, TF2).
- W&B: the chart panel's CSV export (``Step, "<run> - train/loss", "<run> - train/loss__MIN", ...``) and a run's
  history dumped from the public API (``run.history()`` / ``run.scan_history()``: one row per ``_step``), as
  JSON Lines, a JSON array or a CSV.
- LLaMA-Factory's ``trainer_log.jsonl`` (one row per logging step: ``current_steps``, ``loss``, ``lr``, ...).
- MLflow: metric history in long form (the fields of ``get_metric_history`` / ``GET metrics/get-history``:
  ``key, value, step, timestamp``), as the REST JSON ``{"metrics": [...]}``, a JSON array, JSON Lines or a CSV.

Every reader streams: points go through ``LogReader.point`` into the bounded, decimated series, so a file of a
million rows costs a few MB, and the facts come from the same detectors as a text log. A file cut short or
damaged gives a note saying where, with what was read before that point.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
import struct
import threading
import weakref
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING

from app.facts.logs import _SERIES, LogReader, Series, _f
from app.models import Fact

if TYPE_CHECKING:
    from app.facts import Attachment

RUN_KINDS = ("tensorboard", "wandb_csv", "wandb_history", "wandb_json", "mlflow_csv", "mlflow_json", "trainer_log")
STREAMED_KINDS = ("tensorboard", "wandb_csv", "wandb_history", "mlflow_csv", "trainer_log")  # read without holding the file
MAX_RECORD = 1 << 20  # TensorBoard records above 1 MB (images, graphs, histograms of big layers) are skipped unread
MAX_ROW_CHARS = 1 << 20  # a JSON line / CSV field longer than this is not a metrics row

# metric names trackers use that the log reader's table does not have
_EXTRA = {
    "critic/rewards/mean": "reward", "train/rewards/mean": "reward", "train/entropy": "entropy", "train/lr": "lr",
    "loss/train": "loss", "train/train_loss_step": "loss", "train_loss_step": "loss", "lr-adamw": "lr", "lr-adam": "lr",
    "eval/eval_loss": "eval_loss", "val/loss": "eval_loss", "val_loss": "eval_loss",
}
_STEP_KEYS = ("train/global_step", "global_step", "trainer/global_step", "_step", "current_steps", "step", "iteration", "iter")
_WANDB_PREFIX = re.compile(r"^(?:Group: )?.+? - (?=\S)")  # "<run name> - train/loss" (a panel export's column)


def series_name(metric: str) -> str | None:
    """The series a tracker's metric name feeds (loss, grad_norm, lr, ...), or None."""
    got = _NAMES.get(metric, "")
    if got == "":
        low = metric.strip().lower()
        got = _SERIES.get(low) or _EXTRA.get(low)
        if len(_NAMES) < 4096:
            _NAMES[metric] = got
    return got


_NAMES: dict[str, str | None] = {}


@dataclass
class RunData:
    """What one run file holds: its series, the facts the detectors find in them, and any problem reading it."""

    file: str
    kind: str
    series: dict[str, Series] = field(default_factory=dict)
    facts: list[Fact] = field(default_factory=list)
    problem: tuple[str, str] | None = None  # (en, zh): the file was cut short / damaged at some point
    rows: int = 0  # records or rows read

    @classmethod
    def of(cls, r: LogReader, kind: str, rows: int, problem: tuple[str, str] | None = None) -> RunData:
        return cls(r.file, kind, r.series, r.facts(), problem, rows)


# ---------------------------------------------------------------- TensorBoard


def _crc_table() -> tuple[int, ...]:
    """CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum TFRecord uses."""
    out = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        out.append(c)
    return tuple(out)


_CRC: tuple[int, ...] | None = None
_LEN_CRC: dict[int, int] = {}  # record lengths repeat (every scalar event is about the same size): one CRC each


def _masked_crc(data: bytes) -> int:
    """TFRecord's masked CRC-32C of a few bytes (a table loop, as tensorboard's own stub reader does)."""
    global _CRC
    if _CRC is None:
        _CRC = _crc_table()
    t = _CRC
    crc = 0xFFFFFFFF
    for b in data:
        crc = t[(crc ^ b) & 0xFF] ^ (crc >> 8)
    crc ^= 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _len_ok(header: bytes) -> bool:
    """The record's length field matches its CRC (a damaged length would otherwise send the read astray)."""
    (length,) = struct.unpack("<Q", header[:8])
    want = _LEN_CRC.get(length)
    if want is None:
        want = _masked_crc(header[:8])
        if len(_LEN_CRC) < 65536:
            _LEN_CRC[length] = want
    return struct.unpack("<I", header[8:12])[0] == want


def is_tfevents(head: bytes) -> bool:
    """True when `head` starts a TensorBoard event file: a TFRecord whose Event has file_version brain.Event:N."""
    if len(head) < 16:
        return False
    (n,) = struct.unpack("<Q", head[:8])
    if n > len(head) - 16 or n > 4096 or not _len_ok(head[:12]):
        return False
    try:
        from google.protobuf.message import DecodeError
        from tensorboard.compat.proto import event_pb2
    except ImportError:  # pragma: no cover - tensorboard is a dependency of the serve extra
        return False
    try:
        ev = event_pb2.Event.FromString(head[12 : 12 + n])
    except DecodeError:
        return False
    return ev.file_version.startswith("brain.Event:")


def _tensor_scalar(t) -> float | None:  # noqa: ANN001 - a TensorProto
    """The value of a 0-d float/int tensor (TF2-style scalar summaries), else None."""
    if t.tensor_shape.dim:
        return None
    if t.float_val:
        return float(t.float_val[0])
    if t.double_val:
        return float(t.double_val[0])
    if t.int_val:
        return float(t.int_val[0])
    if t.int64_val:
        return float(t.int64_val[0])
    fmt = {1: "<f", 2: "<d", 3: "<i", 9: "<q"}.get(t.dtype)
    if t.tensor_content and fmt and len(t.tensor_content) == struct.calcsize(fmt):
        return float(struct.unpack(fmt, t.tensor_content)[0])
    if t.half_val and t.dtype == 19:  # DT_HALF: the 16 bits sit in an int32
        return float(struct.unpack("<e", struct.pack("<H", t.half_val[0] & 0xFFFF))[0])
    return None


def read_tfevents(fh: IO[bytes], name: str) -> RunData:
    """Stream a TensorBoard event file: scalar summaries -> series -> facts (a cut or damaged record ends the read)."""
    from google.protobuf.message import DecodeError
    from tensorboard.compat.proto import event_pb2

    r = LogReader(name)
    parse = event_pb2.Event.FromString
    n = 0
    problem = None
    tags: dict[str, str | None] = {}
    while True:
        header = fh.read(12)
        if not header:
            break
        n += 1
        if len(header) < 12:
            problem = (f"the file ends inside record {n} (it was cut short); the {n - 1} records before it were read",
                       f"文件在第 {n} 条记录中途结束（文件被截断）；已读取之前的 {n - 1} 条记录")
            break
        if not _len_ok(header):
            problem = (f"record {n} is damaged (its length check fails); the {n - 1} records before it were read",
                       f"第 {n} 条记录已损坏（长度校验失败）；已读取之前的 {n - 1} 条记录")
            break
        (length,) = struct.unpack("<Q", header[:8])
        if length > MAX_RECORD:
            skipped = fh.seek(length + 4, io.SEEK_CUR) if fh.seekable() else None
            if skipped is None:
                fh.read(length + 4)
            continue
        body = fh.read(length + 4)
        if len(body) < length + 4:
            problem = (f"the file ends inside record {n} (it was cut short); the {n - 1} records before it were read",
                       f"文件在第 {n} 条记录中途结束（文件被截断）；已读取之前的 {n - 1} 条记录")
            break
        try:
            ev = parse(body[:length])
        except DecodeError:
            problem = (f"record {n} is not a TensorBoard event (damaged data); the {n - 1} records before it were read",
                       f"第 {n} 条记录不是有效的 TensorBoard 事件（数据损坏）；已读取之前的 {n - 1} 条记录")
            break
        if not ev.HasField("summary"):
            continue
        step = float(ev.step)
        for v in ev.summary.value:
            tag = v.tag
            ser = tags.get(tag, "")
            if ser == "":
                ser = tags[tag] = series_name(tag) if len(tags) < 10000 else None
            if ser is None:
                continue
            kind = v.WhichOneof("value")
            if kind == "simple_value":
                val = float(v.simple_value)
            elif kind == "tensor":
                val = _tensor_scalar(v.tensor)
                if val is None:
                    continue
            else:
                continue
            r.point(ser, step, val, n, lambda s=ev.step, t=tag, x=val, k=n: f"step {s}: {t} = {x:g}  (event record {k})")
    return RunData.of(r, "tensorboard", n, problem)


# ---------------------------------------------------------------- W&B / MLflow text exports


def _num(x: object) -> float | None:
    """A metric cell: numbers, "NaN"/"inf" strings; empty cells and non-numbers are None."""
    if x is None or isinstance(x, bool):
        return None
    if isinstance(x, int | float):
        return float(x)
    if isinstance(x, str):
        s = x.strip()
        if not s:
            return None
        try:
            return float(s)
        except ValueError:
            low = s.lower()
            return _f(s) if low.lstrip("+-") in ("nan", "inf", "infinity") else None
    return None


def _step_of(row: dict, keys: Iterable[str], fallback: float) -> float:
    for k in keys:
        v = _num(row.get(k))
        if v is not None and math.isfinite(v):
            return v
    return fallback


def _wide_row(r: LogReader, row: dict, step: float, n: int, cols: dict[str, str]) -> None:
    """One row of a wide export (a column per metric): each known column becomes a point of its series."""
    pts = []
    for col, ser in cols.items():
        v = _num(row.get(col))
        if v is not None:
            pts.append((ser, col, v))

    def text() -> str:
        return (f"step {step:g}: " + ", ".join(f"{c} = {v:g}" for _, c, v in pts[:8]) + f"  (row {n})")[:300]

    for ser, _, v in pts:
        r.point(ser, step, v, n, text)


def _long_row(r: LogReader, key: str, value: object, step: float, n: int) -> None:
    ser = series_name(key)
    v = _num(value) if ser is not None else None
    if v is not None:
        r.point(ser, step, v, n, lambda: f"{key} = {v:g} at step {step:g}  (row {n})")


def _csv_columns(header: list[str]) -> tuple[str, dict[str, str], list[str]]:
    """A wide CSV's step column, its metric columns -> series (first run only), and the other runs' names."""
    step_col = next((c for c in header if c.strip().lower() in ("step", *_STEP_KEYS)), header[0] if header else "")
    cols: dict[str, str] = {}
    first_run: str | None = None
    others: list[str] = []
    for c in header:
        if c == step_col or c.endswith(("__MIN", "__MAX")):
            continue
        m = _WANDB_PREFIX.match(c)
        run_name, metric = (c[: m.end() - 3], c[m.end() :]) if m else ("", c)
        ser = series_name(metric)
        if ser is None:
            continue
        if first_run is None:
            first_run = run_name
        if run_name != first_run:
            if run_name not in others:
                others.append(run_name)
            continue
        cols.setdefault(c, ser)
    return step_col, cols, others


def _csv_problem(n: int, e: Exception) -> tuple[str, str]:
    return (f"row {n} could not be read as CSV ({e}); the rows before it were read", f"第 {n} 行无法按 CSV 读取（{e}）；已读取之前的行")


def read_wide_csv(lines: Iterable[str], name: str) -> RunData:
    """W&B panel CSV or a history CSV: a step column and a column per metric (other runs' columns are noted)."""
    r = LogReader(name)
    rows = csv.reader(lines)
    problem = None
    n = 0
    try:
        header = next(rows, [])
        step_col, cols, others = _csv_columns(header)
        idx = {c: i for i, c in enumerate(header)}
        si = idx.get(step_col, 0)
        ci = [(idx[c], c, s) for c, s in cols.items()]
        for n, row in enumerate(rows, 2):
            if not row:
                continue
            step = _num(row[si]) if si < len(row) else None
            step = float(n - 1) if step is None or not math.isfinite(step) else step
            _wide_row(r, {c: row[i] for i, c, _ in ci if i < len(row)}, step, n, cols)
    except csv.Error as e:
        problem = _csv_problem(n + 1, e)
    else:
        if others:
            problem = (f"this export holds {len(others) + 1} runs; only the first ({next(iter(cols), '?').split(' - ')[0]}) was read",
                       f"该导出包含 {len(others) + 1} 个 run；只读取了第一个（{next(iter(cols), '?').split(' - ')[0]}）")
    return RunData.of(r, "wandb_csv", max(n - 1, 0), problem)


def read_long_csv(lines: Iterable[str], name: str) -> RunData:
    """MLflow metric history as CSV: key, value, step[, timestamp][, run_id] (the first run's rows only)."""
    r = LogReader(name)
    rows = csv.reader(lines)
    problem = None
    n = 1
    run_id = None
    try:
        col = {c.strip().lower(): i for i, c in enumerate(next(rows, []))}
        ki = col.get("key", col.get("metric", col.get("name", 0)))
        vi, si, ri = col.get("value", 1), col.get("step", 2), col.get("run_id", col.get("run_uuid"))
        width = max(ki, vi, si, ri or 0)
        for n, row in enumerate(rows, 2):
            if len(row) <= width:
                continue
            if ri is not None:
                run_id = run_id or row[ri]
                if row[ri] != run_id:
                    continue
            step = _num(row[si])
            _long_row(r, row[ki], row[vi], float(n - 1) if step is None or not math.isfinite(step) else step, n)
    except csv.Error as e:
        problem = _csv_problem(n + 1, e)
    return RunData.of(r, "mlflow_csv", max(n - 1, 0), problem)


def _rows_from(r: LogReader, rows: Iterable[tuple[int, object]]) -> tuple[int, int]:
    """JSON rows: W&B history rows (a column per metric, `_step`) or MLflow metric rows (key/value/step)."""
    count = bad = 0
    cols: dict[str, str | None] = {}
    for n, row in rows:
        if not isinstance(row, dict):
            bad += 1
            continue
        count += 1
        if "key" in row and "value" in row:
            _long_row(r, str(row.get("key")), row.get("value"), _step_of(row, ("step",), float(count)), n)
            continue
        for k in row:
            if k not in cols and len(cols) < 10000:
                cols[k] = series_name(str(k)) if not str(k).startswith("_") else None
        known = {k: s for k in row if (s := cols.get(k))}
        if known:
            _wide_row(r, row, _step_of(row, _STEP_KEYS, float(count)), n, known)
    return count, bad


def _jsonl(lines: Iterable[str]) -> Iterator[tuple[int, object]]:
    for n, line in enumerate(lines, 1):
        s = line.strip()
        if not s:
            continue
        if len(s) > MAX_ROW_CHARS:
            yield n, None
            continue
        try:
            yield n, json.loads(s)
        except (ValueError, RecursionError):
            yield n, None


def read_jsonl(lines: Iterable[str], name: str, kind: str = "wandb_history") -> RunData:
    """W&B history dumped one JSON object per line, or LLaMA-Factory's trainer_log.jsonl (`current_steps`, loss, lr)."""
    r = LogReader(name)
    count, bad = _rows_from(r, _jsonl(lines))
    problem = None
    if bad:
        problem = (f"{bad} line(s) were not JSON objects and were skipped", f"{bad} 行不是 JSON 对象，已跳过")
    return RunData.of(r, kind, count, problem)


def read_json(text: str, name: str, kind: str) -> RunData:
    """A whole JSON export: MLflow's {"metrics": [...]}, or a JSON array of history / metric rows."""
    r = LogReader(name)
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as e:
        msg = getattr(e, "msg", str(e)[:80])
        return RunData(name, kind, problem=(f"not valid JSON ({msg}); nothing was read", f"不是有效的 JSON（{msg}），没有读取任何内容"))
    rows = data.get("metrics") if isinstance(data, dict) else data
    if not isinstance(rows, list):
        return RunData(name, kind, problem=("no list of metric rows in this JSON", "该 JSON 中没有指标行列表"))
    line_of = _row_lines(text)
    count, _ = _rows_from(r, ((line_of.get(i, 0), row) for i, row in enumerate(rows)))
    return RunData.of(r, kind, count)


def _row_lines(text: str) -> dict[int, int]:
    """The line of each row: rows carry one "key" (MLflow) or "_step" (W&B), pretty-printed or one per line."""
    out: dict[int, int] = {}
    i = 0
    for n, ln in enumerate(text.splitlines(), 1):
        for _ in _ROW_KEY.finditer(ln):
            out[i] = n
            i += 1
    return out


_ROW_KEY = re.compile(r'"(?:key|_step)"\s*:')


# ---------------------------------------------------------------- recognising a run file


def sniff(text: str) -> str | None:
    """The run-history kind of a text export, from its first lines, or None (then it is not one of these)."""
    s = text.lstrip("\ufeff \t\r\n")
    if not s:
        return None
    first = s.split("\n", 1)[0].strip()
    if s.startswith("{"):
        if re.match(r'\{\s*"metrics"\s*:\s*\[\s*(\{\s*"(key|value|step|timestamp)"|\])', s):
            return "mlflow_json"
        try:
            row = json.loads(first)
        except (ValueError, RecursionError):
            return None
        if isinstance(row, dict) and "_step" in row:
            return "wandb_history"
        if isinstance(row, dict) and "current_steps" in row and "total_steps" in row:
            return "trainer_log"
        return None
    if s.startswith("["):
        m = re.match(r"\[\s*\{([^{}]{0,4000})\}", s)
        if not m:
            return None
        head = m.group(1)
        if '"_step"' in head:
            return "wandb_json"
        if re.search(r'"key"\s*:', head) and re.search(r'"value"\s*:', head) and re.search(r'"step"\s*:', head):
            return "mlflow_json"
        return None
    if "," not in first or len(first) > 100000:
        return None
    try:
        header = [c.strip() for c in next(csv.reader([first]))]
    except (csv.Error, StopIteration):
        return None
    low = {c.lower() for c in header}
    if {"value", "step"} <= low and low & {"key", "metric"}:
        return "mlflow_csv"
    _, cols, _ = _csv_columns(header)
    has_step = bool(low & {"step", *_STEP_KEYS}) or any(c.endswith(("__MIN", "__MAX")) for c in header)
    if cols and has_step:
        return "wandb_csv"
    return None


def read_text(kind: str, text: str | None, lines: Iterable[str] | None, name: str) -> RunData:
    """Read a text export of `kind` (from `sniff`) given either its text or a stream of its lines."""
    src: Iterable[str] = lines if lines is not None else io.StringIO(text or "")
    if kind == "wandb_csv":
        return read_wide_csv(src, name)
    if kind == "mlflow_csv":
        return read_long_csv(src, name)
    if kind in ("wandb_history", "trainer_log"):
        return read_jsonl(src, name, kind)
    whole = text if text is not None else "".join(src)
    return read_json(whole, name, kind)


# ---------------------------------------------------------------- the chart and the diagnosis share one read

_CACHE: OrderedDict[tuple, tuple[object, RunData]] = OrderedDict()
_CACHE_N = 8
_LOCK = threading.Lock()  # the API answers requests on several threads


def _key(att: Attachment) -> tuple | None:
    """The diagnosis and the chart share one read of a file.

    A file given by path is known by (path, size, mtime); an upload by the Attachment object itself (the channels
    pass the same object to the diagnosis and to the chart), held by a weak reference so a new object that happens
    to get the same id() is never taken for it.
    """
    if att.path is None:
        return ("obj", id(att))
    try:
        st = Path(att.path).stat()
    except OSError:
        return None
    return ("path", str(Path(att.path).resolve()), st.st_size, st.st_mtime_ns)


def remember(att: Attachment, data: RunData) -> None:
    k = _key(att)
    if k is None:
        return
    owner = weakref.ref(att) if k[0] == "obj" else None
    with _LOCK:
        _CACHE[k] = (owner, data)
        _CACHE.move_to_end(k)
        while len(_CACHE) > _CACHE_N:
            _CACHE.popitem(last=False)


def recall(att: Attachment) -> RunData | None:
    k = _key(att)
    if k is None:
        return None
    with _LOCK:
        hit = _CACHE.get(k)
    if hit is None or (hit[0] is not None and hit[0]() is not att):
        return None
    return hit[1]


def read_tfevents_att(att: Attachment) -> RunData:
    if att.path is not None:
        with Path(att.path).open("rb") as fh:
            return read_tfevents(fh, att.name)
    c = att.content or b""
    return read_tfevents(io.BytesIO(c if isinstance(c, bytes) else c.encode("utf-8", "surrogateescape")), att.name)
