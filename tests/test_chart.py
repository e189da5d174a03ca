"""The run chart: markers sit at the detected steps (read from the figure's data, not pixels), in both languages."""

from __future__ import annotations

import json
import math

from conftest import ROOT

from app.chart import alt_text, draw, read_series
from app.facts import Attachment


def _state(nan_from: int) -> str:
    hist = []
    for s in range(1, 61):
        if s < nan_from:
            hist.append({"step": s, "loss": 2.0 - s * 0.01, "grad_norm": 1.0 + (s % 5) * 0.1, "learning_rate": 1e-5})
        else:
            hist.append({"step": s, "loss": float("nan"), "grad_norm": float("nan"), "learning_rate": 1e-5})
    return json.dumps({"global_step": 60, "log_history": hist}).replace("NaN", "NaN")


def _vlines(fig):
    out = {}
    for ax in fig.axes:
        for ln in ax.get_lines():
            gid = ln.get_gid() or ""
            if gid.startswith("marker:"):
                out.setdefault(gid.split(":")[1], []).append(ln.get_xdata()[0])
    return out


def test_markers_sit_at_the_detected_steps(tmp_path):
    run = read_series(Attachment("trainer_state.json", _state(37)))
    assert run is not None and {"loss", "grad_norm", "lr"} <= set(run.series)
    fig, markers = draw(run, "en", tmp_path / "run.png")
    lines = _vlines(fig)
    assert 37.0 in lines["loss"] and 37.0 in lines["grad_norm"]
    assert any(m.label == "first NaN loss at step 37" for m in markers)
    assert (tmp_path / "run.png").stat().st_size > 5000
    assert "step 37" in alt_text(run, "en")
    # NaN points are left out of the plotted line, not drawn as zeros
    loss_ax = next(ax for ax in fig.axes if ax.get_ylabel() == "loss")
    ys = [y for ln in loss_ax.get_lines() if not (ln.get_gid() or "").startswith("marker:") for y in ln.get_ydata()]
    assert ys and all(math.isfinite(y) for y in ys) and len(ys) == 36


def test_chinese_labels_and_log_scale(tmp_path):
    log = "\n".join(f"{{'loss': {1.5 - i * 0.01:.3f}, 'grad_norm': {(1e5 if i == 30 else 1.2)}, 'learning_rate': 1e-05, 'epoch': {i / 100:.2f}}}" for i in range(1, 50))
    run = read_series(Attachment("train.log", log))
    fig, markers = draw(run, "zh", tmp_path / "zh.png")
    gn = next(ax for ax in fig.axes if ax.get_ylabel() == "grad_norm")
    assert gn.get_yscale() == "log"  # 1.2 .. 1e5 spans five orders of magnitude
    assert any("grad_norm 爆炸" in m.label for m in markers)
    assert "训练曲线" in alt_text(run, "zh")


def test_example_state_and_non_series_files():
    run = read_series(Attachment("trainer_state.json", path=ROOT / "examples" / "trainer_state.json"))
    assert run is not None and any(m.step == 210.0 for m in __import__("app.chart", fromlist=["markers"]).markers(run, "en"))
    assert read_series(Attachment("ds_config.json", path=ROOT / "examples" / "ds_config.json")) is None
