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
    # every text cached (a first start's index write after the KB engine): no second process is started
    assert warm_cache(edited, tmp_path) is None
    proc = warm_cache(edited + ["a new unit: loss spikes after warmup"], tmp_path)
    assert proc is not None  # one text missing: the worker runs
    wait_warm(proc)


def test_small_corpus_is_not_worth_a_process_and_a_broken_cache_is_rebuilt(tmp_path):
    assert warm_cache(["one unit"], tmp_path) is None
    (tmp_path / CACHE_NAME).write_text("{not json", encoding="utf-8")
    assert tokenize_corpus(["loss 为 0"], tmp_path) == [tokenize("loss 为 0")]
    assert json.loads((tmp_path / CACHE_NAME).read_text(encoding="utf-8"))


def test_built_bm25_index_is_saved_and_reused_for_the_same_texts(tmp_path):
    from app.lexical import BM25Index

    texts = [f"unit {i}: loss nan after resume_from_checkpoint 梯度 {i % 5}" for i in range(200)]
    first = BM25Index(texts, cache=tmp_path)
    saved = sorted(p.name for p in tmp_path.glob("bm25-index-*"))
    assert len(saved) == 1
    # empty the token cache: a rebuild would tokenize and write it again; a reused index does not touch it
    (tmp_path / CACHE_NAME).write_text("{}", encoding="utf-8")
    again = BM25Index(texts, cache=tmp_path)
    q = "loss nan resume_from_checkpoint 梯度"
    assert (again.scores(q) == first.scores(q)).all() and first.scores(q).max() > 0
    assert (tmp_path / CACHE_NAME).read_text(encoding="utf-8") == "{}"  # not tokenized again: the index was loaded
    # other texts: a new index replaces the old one
    other = BM25Index(texts[:-1] + ["grad_norm inf with fp16"], cache=tmp_path)
    now = sorted(p.name for p in tmp_path.glob("bm25-index-*"))
    assert len(now) == 1 and now != saved and other.scores("fp16")[-1] > 0
