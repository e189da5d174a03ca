"""The five first cases are found from paraphrases in both languages, and answers come back in the asker's language."""

from __future__ import annotations

import re

import pytest

from app.diagnose import diagnose
from tests.conftest import SEED_IDS

PARAPHRASES = {
    "deepspeed-comm-dtype-fp32-loss-zero": (
        "Full-parameter tuning of a 7B base model: after about five iterations the training objective reads exactly zero and stays there; the gradient magnitude jumped into the thousands first. The 1.8B sibling trains fine.",
        "7B 底座全参训练，跑了五六步目标函数就变成 0 不动了，梯度先冲到几千然后也没了；同样的代码 1.8B 没问题",
    ),
    "openrlhf-kto-vanilla-loss-nan": (
        "OpenRLHF KTO on qwen2 7b after sft: the loss prints nan from the beginning, while qwen1.5 with the identical script converges",
        "用 OpenRLHF 对 sft 后的 qwen2 做 KTO，损失一开始就是 nan，换成 qwen1.5 同样的脚本却能收敛",
    ),
    "trl-padding-free-without-flash-attention": (
        "TRL SFT with sequences concatenated instead of padded: training loss is far higher than with normal batching and gets worse as the batch grows",
        "TRL 里把样本拼接不加 pad 的训练方式，loss 比普通 batch 高很多，batch 越大越离谱",
    ),
    "qwen2-full-sft-lr-3e-4-generation-nan": (
        "After ~3600 steps of SFT on qwen2-7b-instruct with all weights trainable, sampling from the checkpoint crashes because the probabilities contain invalid values",
        "qwen2-7b-instruct 全部参数都训练，SFT 三千多步之后一生成就报错，说概率里有 inf 或者 nan，采样失败",
    ),
    "grpo-kl-disabled-pg-loss-divergence": (
        "RL on a qwen2.5 7b math model: the policy objective keeps climbing and the run blows up once I removed the penalty toward the reference model",
        "qwen2.5 数学 7b 做强化学习，去掉对参考模型的约束项之后，策略损失一路上升，训练直接崩了",
    ),
}


@pytest.mark.parametrize("case_id", SEED_IDS)
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_seed_case_ranks_first_for_paraphrase(seed_engine, case_id, lang):
    q = PARAPHRASES[case_id][0 if lang == "en" else 1]
    d = diagnose(seed_engine, q, top=3)
    ranked = [c.case_id for c in (d.causes or d.related)]
    assert ranked[0] == case_id, f"{lang}: expected {case_id} first, got {ranked}"
    assert d.language == lang


_HAN = re.compile(r"[\u4e00-\u9fff]")


def test_chinese_question_gets_chinese_answer_even_for_english_source(seed_engine):
    # the GRPO case was written from English sources; the answer must still be Chinese
    d = diagnose(seed_engine, PARAPHRASES["grpo-kl-disabled-pg-loss-divergence"][1])
    top = (d.causes or d.related)[0]
    assert d.language == "zh"
    assert _HAN.search(top.cause) and _HAN.search(top.fixes[0]) and _HAN.search(top.title)


def test_english_question_gets_english_answer_for_chinese_source(seed_engine):
    # the DeepSpeed case was written from a Chinese issue; an English question gets English
    d = diagnose(seed_engine, PARAPHRASES["deepspeed-comm-dtype-fp32-loss-zero"][0])
    top = (d.causes or d.related)[0]
    assert d.language == "en"
    assert not _HAN.search(top.cause) and not _HAN.search(" ".join(top.fixes))


def test_mixed_chinese_with_english_terms_is_chinese(seed_engine):
    d = diagnose(seed_engine, "KTO 训练 loss 变成 NaN 了，qwen2 7b")
    assert d.language == "zh"


def test_lang_override(seed_engine):
    d = diagnose(seed_engine, "KTO 训练 loss 变成 NaN 了", lang="en")
    assert d.language == "en" and not _HAN.search((d.causes or d.related)[0].cause)


def test_citations_are_the_case_sources(seed_engine):
    d = diagnose(seed_engine, PARAPHRASES["openrlhf-kto-vanilla-loss-nan"][0])
    top = (d.causes or d.related)[0]
    assert top.citations and all(c.url.startswith("https://") for c in top.citations)
    assert [c.n for c in top.citations] == list(range(1, len(top.citations) + 1))


def test_unrelated_question_is_not_confident(seed_engine):
    d = diagnose(seed_engine, "what is a good recipe for sourdough bread with a crispy crust")
    assert d.confident is False
    assert d.causes == [] and d.related, "weak matches go to related, never presented as the cause"
    assert d.general_checks


def test_exact_dense_search_matches_chroma_and_is_cached(seed_engine):
    """The embedded index is searched exactly in memory: the same cosines Chroma gives, read once, then from the cache."""
    import numpy as np

    from app.retrieve import Engine

    eng = seed_engine
    assert eng.unit_vecs is not None and eng.unit_vecs.shape[0] == len(eng.unit_ids)
    vec = eng.embedder.embed_query("loss becomes 0 after a few steps with DeepSpeed bf16")
    exact = dict(zip(*(a.tolist() for a in eng._dense_units(vec)), strict=True))
    held, eng.unit_vecs = eng.unit_vecs, None
    try:
        via_chroma = dict(zip(*(a.tolist() for a in eng._dense_units(vec)), strict=True))  # a shared Chroma server's path
    finally:
        eng.unit_vecs = held
    both = sorted(set(exact) & set(via_chroma))
    assert len(both) >= min(10, len(eng.unit_ids))
    assert np.allclose([exact[u] for u in both], [via_chroma[u] for u in both], atol=1e-4)
    assert max(exact, key=exact.get) == max(via_chroma, key=via_chroma.get)
    cached = list((eng.settings.home / "cache").glob("dense-*.npy"))
    assert len(cached) == 1
    cached[0].write_bytes(b"not a matrix")  # a damaged cache is read again from the index, not trusted
    again = Engine(eng.settings, eng.embedder)
    assert np.allclose(again.unit_vecs, held)
    assert np.load(cached[0]).shape == held.shape
