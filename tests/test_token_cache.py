"""BM25 tokens are cached per unit text and can be computed in another process while the index is written."""

from __future__ import annotations

import json

from app.lexical import CACHE_NAME, WARM_MIN_UNITS, tokenize, tokenize_corpus, wait_warm, warm_cache


def test_warm_cache_in_another_process_then_one_edit_changes_one_entry(tmp_path):
    texts = [f"step {i}: loss nan with deepspeed zero3 offload_optimizer 梯度爆炸 {i % 7}" for i in range(WARM_MIN_UNITS + 50)]
    proc = warm_cache(texts, tmp_path)
    assert proc is not None
    wait_warm(proc)
    assert proc.returncode == 0
    cached = json.loads((tmp_path / CACHE_NAME).read_text(encoding="utf-8"))
    assert len(cached) == len(set(texts))
    assert sorted(p.name for p in tmp_path.iterdir()) == [CACHE_NAME]  # the hand-over file is gone
    # the reader gets exactly what tokenize() gives, from the cache
    assert tokenize_corpus(texts, tmp_path) == [tokenize(t) for t in texts]
    before = set(cached)
    edited = texts[:-1] + ["an edited unit: grad_norm inf after resume_from_checkpoint"]
    assert tokenize_corpus(edited, tmp_path)[-1] == tokenize(edited[-1])
    after = set(json.loads((tmp_path / CACHE_NAME).read_text(encoding="utf-8")))
    assert len(before - after) == 1 and len(after - before) == 1  # one entry replaced, the rest reused


def test_small_corpus_is_not_worth_a_process_and_a_broken_cache_is_rebuilt(tmp_path):
    assert warm_cache(["one unit"], tmp_path) is None
    (tmp_path / CACHE_NAME).write_text("{not json", encoding="utf-8")
    assert tokenize_corpus(["loss 为 0"], tmp_path) == [tokenize("loss 为 0")]
    assert json.loads((tmp_path / CACHE_NAME).read_text(encoding="utf-8"))
