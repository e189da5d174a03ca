"""Charts are drawn off the request path: lazily for the API (on the first fetch), at once for the UI and Slack,
with a bounded table of runs waiting to be drawn."""

from __future__ import annotations

import json

from app import plots
from app.facts import Attachment
from app.models import Diagnosis


def _state_json(nan_from: int = 25) -> str:
    hist = [{"step": s, "loss": 2.0 - s * 0.01 if s < nan_from else float("nan"), "grad_norm": 1.0, "learning_rate": 1e-5} for s in range(1, 40)]
    return json.dumps({"global_step": 39, "log_history": hist})


def _diag(lang: str = "en") -> Diagnosis:
    return Diagnosis(language=lang, confident=False, question="loss became nan", causes=[])


def test_lazy_chart_is_drawn_on_first_fetch_only(tmp_path):
    d, fut = plots.plan(tmp_path, _diag(), [Attachment(name="trainer_state.json", content=_state_json())], lazy=True)
    assert fut is None and d.plot_url.startswith("/v1/plots/") and "25" in d.plot_alt
    name = d.plot_url.rsplit("/", 1)[-1]
    path = plots.plots_dir(tmp_path) / name
    assert not path.exists(), "a lazy chart is not drawn in the request"
    plots.wait(name, 30)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list(path.parent.glob("*.tmp.png"))


def test_no_run_no_chart_and_the_lazy_table_is_bounded(tmp_path):
    d, fut = plots.plan(tmp_path, _diag(), [Attachment(name="ds.json", content='{"zero_optimization": {"stage": 2}}')], lazy=True)
    assert fut is None and d.plot_url == ""
    names = []
    for _ in range(plots.LAZY_KEEP_N + 5):
        d, _ = plots.plan(tmp_path, _diag("zh"), [Attachment(name="trainer_state.json", content=_state_json())], lazy=True)
        names.append(d.plot_url.rsplit("/", 1)[-1])
    assert len(plots._lazy) <= plots.LAZY_KEEP_N
    plots.wait(names[0], 5)  # evicted: nothing to draw, and it returns at once
    assert not (plots.plots_dir(tmp_path) / names[0]).exists()
    plots.wait(names[-1], 30)
    assert (plots.plots_dir(tmp_path) / names[-1]).exists()


def test_draw_now_gives_the_file(tmp_path):
    d, path = plots.draw_now(tmp_path, _diag("zh"), [Attachment(name="trainer_state.json", content=_state_json(10))])
    assert path is not None and path.is_file() and "10" in d.plot_alt
