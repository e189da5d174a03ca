"""Version ranges: a bug fixed in a later release is not the cause when the user's log shows that release."""

from __future__ import annotations

import pytest

from app.diagnose import diagnose
from app.facts import Attachment
from app.versions import check, parse
from tests.conftest import SEED_CASES, copy_cases, make_settings

PRE = "transformers-pre-4-46-grad-accum-loss-mismatch"
POST = "transformers-4-46-loss-scaled-by-grad-accum"


def test_parse_free_text_ranges():
    assert parse("transformers>=4.46.0,<4.47.1 (all models); later versions for ...") == [
        ("transformers", "env.transformers_version", [(">=", "4.46.0"), ("<", "4.47.1")])
    ]
    assert parse("flash-attn v1 kernel, or flash-attn<=2.3.2") == [("flash-attn", "env.flash_attn_version", [("<=", "2.3.2")])]
    assert parse("older TRL SFTTrainer that pads on the tokenizer's side") == []
    assert check("deepspeed<0.14.3 on Ascend NPU", {}) == (None, "", None)


@pytest.fixture(scope="module")
def ga_engine(tmp_path_factory, vector_cache, embedder):
    from app.embeddings import VectorCache
    from app.retrieve import Engine
    from app.store import Store
    from ingest.pipeline import ingest

    kb = copy_cases(tmp_path_factory.mktemp("gakb"), SEED_CASES + [f"grad_accum_loss_norm/{PRE}", f"grad_accum_loss_norm/{POST}"])
    settings = make_settings(tmp_path_factory.mktemp("gahome"), vector_cache)
    ingest(Store(settings, embedder, VectorCache(vector_cache)), kb)
    return Engine(settings, embedder)


@pytest.mark.parametrize("version,first,unlikely", [("4.45.2", PRE, POST), ("4.46.1", POST, PRE)])
def test_installed_version_decides_between_neighbour_cases(ga_engine, version, first, unlikely):
    env = f"- `transformers` version: {version}\n- Platform: Linux\n- Python version: 3.10.12\n"
    q = "with gradient_accumulation_steps 8 my loss is way off compared with a bigger per-device batch, is this a known bug?"
    d = diagnose(ga_engine, q, [Attachment("env.txt", env)], top=5)
    ranked = d.causes or d.related
    assert ranked[0].case_id == first, [c.case_id for c in ranked]
    assert any(f"transformers {version}" in e and "env.txt:1" in e and "in the affected range" in e for e in ranked[0].evidence), ranked[0].evidence
    other = next(c for c in ranked if c.case_id == unlikely)
    assert any(e.startswith("Unlikely") for e in other.evidence)
