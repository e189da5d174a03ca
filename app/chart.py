"""A picture of the user's run: the series in an attached log, trainer_state.json, TensorBoard event file or W&B /
MLflow export, with the detected anomalies marked.

The same log reader and detectors as the diagnosis (bounded memory: series are decimated past 20k points), drawn
with matplotlib's Agg backend. Labels are in the question's language; Chinese uses an installed CJK font.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from app.facts import DEFAULT_MAX_BYTES, Attachment, detect_kind, is_binary
from app.facts.logs import LogReader, trainer_state_reader
from app.facts.runs import (
    RUN_KINDS,
    STREAMED_KINDS,
    RunData,
    is_tfevents,
    read_text,
    read_tfevents_att,
    recall,
    remember,
)
from app.models import Fact

PANELS = ("loss", "grad_norm", "lr", "reward", "kl", "entropy", "eval_loss")
_ANOMALY = {  # fact -> (panel, en, zh)
    "log.nan_loss": ("loss", "first NaN loss at step {s}", "第 {s} 步首次出现 NaN loss"),
    "log.inf_loss": ("loss", "first inf loss at step {s}", "第 {s} 步首次出现 inf loss"),
    "log.loss_zero": ("loss", "loss → 0 from step {s}", "从第 {s} 步起 loss → 0"),
    "log.loss_spike": ("loss", "loss spike at step {s}", "第 {s} 步 loss 尖峰"),
    "log.loss_divergence": ("loss", "diverges after step {s}", "第 {s} 步后发散"),
    "log.nan_grad_norm": ("grad_norm", "grad_norm NaN from step {s}", "第 {s} 步起 grad_norm 为 NaN"),
    "log.grad_norm_explosion": ("grad_norm", "grad_norm explodes at step {s}", "第 {s} 步 grad_norm 爆炸"),
    "log.lr_zero": ("lr", "lr is 0 from step {s}", "从第 {s} 步起学习率为 0"),
    "log.grad_norm_zero": ("grad_norm", "grad_norm is 0 from step {s}", "从第 {s} 步起 grad_norm 为 0"),
    "log.kl_explosion": ("kl", "KL explodes at step {s}", "第 {s} 步 KL 爆炸"),
    "log.entropy_collapse": ("entropy", "entropy collapses at step {s}", "第 {s} 步 entropy 坍缩"),
}
_CJK_FONTS = ["WenQuanYi Micro Hei", "Noto Sans CJK SC", "Source Han Sans SC", "SimHei"]


@dataclass
class Marker:
    panel: str
    step: float
    label: str


@dataclass
class RunSeries:
    file: str
    series: dict[str, tuple[list[float], list[float]]] = field(default_factory=dict)
    facts: list[Fact] = field(default_factory=list)


def read_series(att: Attachment) -> RunSeries | None:
    """The series of one attachment, or None when it has none.

    Reads what the diagnosis reads: a log, trainer_state.json, a TensorBoard event file, a W&B or MLflow export.
    A file given by path that the diagnosis already read is not read again.
    """
    data = recall(att) or _read(att)
    if data is None:
        return None
    out = RunSeries(att.name, {k: (list(s.steps), list(s.vals)) for k, s in data.series.items() if k in PANELS and len(s.vals) >= 2}, data.facts)
    return out if out.series else None


def _read(att: Attachment) -> RunData | None:
    try:
        head_b = att.head(200_000)
    except OSError:
        return None
    if is_tfevents(head_b):
        data = read_tfevents_att(att)
        remember(att, data)
        return data
    if is_binary(head_b[:8192]):
        return None
    kind = detect_kind(att.name, head_b.decode("utf-8", errors="replace"))
    if kind == "trainer_state":
        if att.size() > DEFAULT_MAX_BYTES:  # parsed whole: the same bound as a config upload (logs stream instead)
            return None
        text = att.text()
        try:
            state = json.loads(text)
        except (ValueError, RecursionError):
            return None
        r = trainer_state_reader(text, state, att.name)
        return RunData.of(r, kind, len(r.line_texts))
    if kind == "log":
        r = LogReader(att.name)
        for n, line in enumerate(att.lines(), 1):
            r.feed(line, n)
        data = RunData.of(r, kind, r.n)
    elif kind in STREAMED_KINDS:
        data = read_text(kind, None, att.lines(), att.name)
    elif kind in RUN_KINDS:
        if att.size() > DEFAULT_MAX_BYTES:  # a whole-JSON export is parsed whole: bounded like a config
            return None
        data = read_text(kind, att.text(), None, att.name)
    else:
        return None
    remember(att, data)
    return data


def first_run(atts: list[Attachment]) -> RunSeries | None:
    """The series of the first attachment that has one (what the CLI and the API chart)."""
    return next((r for a in atts if (r := read_series(a)) is not None), None)


def markers(run: RunSeries, lang: str) -> list[Marker]:
    out = []
    for f in run.facts:
        spec = _ANOMALY.get(f.key)
        if spec is None or spec[0] not in run.series or not isinstance(f.value, int | float) or isinstance(f.value, bool):
            continue
        step = float(f.value)
        s = int(step) if step.is_integer() else step
        out.append(Marker(spec[0], step, (spec[2] if lang == "zh" else spec[1]).format(s=s)))
    return out


def alt_text(run: RunSeries, lang: str) -> str:
    ms = markers(run, lang)
    panels = ", ".join(k for k in PANELS if k in run.series)
    if lang == "zh":
        return f"{run.file} 的训练曲线（{panels}）" + ("：" + "；".join(m.label for m in ms) if ms else "")
    return f"Training curves of {run.file} ({panels})" + (": " + "; ".join(m.label for m in ms) if ms else "")


PLOT_POINTS = 1400  # per panel: two points per pixel column of a 700 px wide chart


def _envelope(pts: list[tuple[float, float]], n: int = PLOT_POINTS) -> tuple[list[float], list[float]]:
    """At most ~n points that draw the same line: each bucket's lowest and highest point, in step order."""
    if len(pts) <= n:
        return [s for s, _ in pts], [v for _, v in pts]
    k = math.ceil(len(pts) / (n // 2))
    xs: list[float] = []
    ys: list[float] = []
    for i in range(0, len(pts), k):
        b = pts[i : i + k]
        lo = min(b, key=lambda p: p[1])
        hi = max(b, key=lambda p: p[1])
        for s, v in sorted({lo, hi}):
            xs.append(s)
            ys.append(v)
    return xs, ys


def draw(run: RunSeries, lang: str, path: Path | None = None):
    """A compact multi-panel figure; returns (figure, markers). Written to `path` as PNG when given."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib import font_manager
    from matplotlib.ticker import FuncFormatter, NullLocator

    if lang == "zh":
        have = {f.name for f in font_manager.fontManager.ttflist}
        fonts = [f for f in _CJK_FONTS if f in have]
        if fonts:
            plt.rcParams["font.sans-serif"] = fonts + list(plt.rcParams["font.sans-serif"])
            plt.rcParams["axes.unicode_minus"] = False
    panels = [k for k in PANELS if k in run.series]
    fig, axes = plt.subplots(len(panels), 1, figsize=(7, 1.9 * len(panels) + 0.4), sharex=True, squeeze=False)
    ms = markers(run, lang)
    for ax, key in zip(axes[:, 0], panels, strict=True):
        steps, vals = run.series[key]
        fin = [(s, v) for s, v in zip(steps, vals, strict=True) if math.isfinite(v)]
        if fin:
            xs, ys = _envelope(fin)
            ax.plot(xs, ys, lw=1.1, color="#1f6feb")
        pos = [v for _, v in fin if v > 0]
        if pos and max(pos) / max(min(pos), 1e-300) > 1e3:
            ax.set_yscale("log")
            ax.yaxis.set_minor_locator(NullLocator())  # dozens of minor ticks cost more to draw than the curve
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))  # 1e+04, not mathtext (slow to typeset)
        ax.set_ylabel(key, fontsize=8)
        ax.tick_params(labelsize=7)
        for k, m in enumerate(sorted((m for m in ms if m.panel == key), key=lambda m: m.step)):
            ax.axvline(m.step, color="#d1242f", lw=1, ls="--", gid=f"marker:{key}:{m.step}")
            ax.annotate(m.label, xy=(m.step, 1.0), xycoords=("data", "axes fraction"), fontsize=7, color="#d1242f",
                        xytext=(3, -10 - 11 * k), textcoords="offset points",
                        ha="left" if m.step <= (steps[0] + steps[-1]) / 2 else "right")
    axes[-1, 0].set_xlabel("step" if lang != "zh" else "步数", fontsize=8)
    # fixed margins in inches: tight_layout measured every tick label and cost ~1 s per chart
    h = fig.get_figheight()
    fig.subplots_adjust(left=0.1, right=0.98, top=1 - 0.12 / h, bottom=0.42 / h, hspace=0.18)
    if path is not None:
        fig.savefig(path, dpi=100)
    return fig, ms
