"""A first start answers from the KB folder read into memory while the index is written behind it, then swaps in
the engine read from the index; both must give the same answers (app.runtime.kb_engine, State._write_behind)."""

from __future__ import annotations

from pathlib import Path

from conftest import make_settings

QUESTIONS = [
    ("DPO training: loss goes to 0 after a few hundred steps and grad_norm is nan, bf16 on 8 A100s", "en"),
    ("用 LLaMA-Factory 全参微调 Qwen2-7B，学习率 1e-4，loss 突然变成 nan", "zh"),
    ("ZeRO-3 with communication_data_type fp32 and the loss is exactly 0.0 from the first step", "en"),
]


def _answers(engine) -> list[list[tuple[str, float]]]:
    from app.diagnose import diagnose

    out = []
    for q, lang in QUESTIONS:
        d = diagnose(engine, q, lang=lang, top=5)
        out.append([(c.case_id, round(c.score, 4)) for c in d.causes + d.related])
    return out


def test_first_start_answers_before_the_index_is_written(tmp_path: Path, vector_cache: Path) -> None:
    from app.runtime import State
    from app.store import Store

    state = State(make_settings(tmp_path / "home", vector_cache))
    first = state.engine()
    assert state.writer is not None, "a first start on an embedded index answers from the KB folder"
    store = Store(state.settings, first.embedder)
    n_kb = len(first.unit_ids)
    # the KB engine holds the whole KB although the index may not hold it yet
    assert n_kb > 10_000 and len(first.cases) >= 400 and len(first.notes) >= 1500
    before = _answers(first)
    assert all(before), "every question gets ranked causes from the KB engine"

    state.writer.join(timeout=300)
    assert not state.writer.is_alive()
    assert state.status == "ready"
    second = state.engine()
    assert second is not first, "the engine read from the written index replaces the KB engine"
    m = store.manifest()
    assert m.get("complete") is True and store.count() == n_kb
    assert second.unit_ids == first.unit_ids and set(second.cases) == set(first.cases)
    assert _answers(second) == before


def test_a_second_start_reads_the_index(tmp_path: Path, vector_cache: Path) -> None:
    from app.runtime import State

    settings = make_settings(tmp_path / "home", vector_cache)
    s1 = State(settings)
    s1.engine()
    s1.writer.join(timeout=300)
    s2 = State(settings)
    eng = s2.engine()
    assert s2.writer is None, "an index that is complete is read, not written again"
    assert s2.status == "ready" and len(eng.unit_ids) == len(s1.engine().unit_ids)


def test_a_chroma_server_gets_no_kb_engine(tmp_path: Path, vector_cache: Path) -> None:
    """A shared server is asked on every question, so there is nothing to answer from before it is written."""
    from app.embeddings import NamedOnly, embedder_id
    from app.runtime import kb_engine

    settings = make_settings(tmp_path / "home", vector_cache, chroma_url="http://127.0.0.1:9")
    assert kb_engine(settings, NamedOnly(embedder_id(settings.embedder))) is None


def test_cli_first_run_answers_then_writes_the_index(tmp_path: Path, vector_cache: Path) -> None:
    """`trainfix ask` on a fresh data directory answers from the KB, finishes writing the index before it exits, and
    the next run reads that index and answers the same."""
    import json
    import os
    import subprocess
    import sys

    from conftest import ROOT

    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINFIX_")}
    env.update(TRAINFIX_HOME=str(tmp_path / "home"), TRAINFIX_VECTOR_CACHE_PATH=str(vector_cache), HF_HUB_OFFLINE="1")
    args = [sys.executable, "-m", "app.cli", "ask", "KTO 训练 loss 变成 NaN", "--attach", "examples/run_kto.sh", "--json"]
    runs = [subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600) for _ in range(2)]
    for r in runs:
        assert r.returncode == 0, r.stderr
    assert "answering from the knowledge base" in runs[0].stderr and "index written: " in runs[0].stderr
    assert "No index yet" not in runs[1].stderr and "index written" not in runs[1].stderr
    tops = [[c["case_id"] for c in json.loads(r.stdout)["causes"]] for r in runs]
    assert tops[0] and tops[0] == tops[1]



def test_a_failed_index_write_keeps_answering_and_says_so(tmp_path: Path, vector_cache: Path) -> None:
    """A writer that fails (here: it is pointed at a Chroma server that is not running) leaves the KB engine answering,
    and readiness says `not written` instead of claiming an index."""
    from app.embeddings import NamedOnly, embedder_id
    from app.runtime import State

    state = State(make_settings(tmp_path / "home", vector_cache))
    assert state.index_state() == "written" and state.write_error is None
    dead = make_settings(tmp_path / "home2", vector_cache, chroma_url="http://127.0.0.1:9")
    state._write_behind(dead, NamedOnly(embedder_id(dead.embedder)))
    assert state.write_error is not None
    assert state.index_state() == "not written" and state.status == "ready (index not written)"
