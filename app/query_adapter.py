"""The learnt query adapter: a d x d map that moves a question's vector toward the cases that explain such reports.

The embedder was never trained on training-failure threads. Each thread note linked to a case is a real report (its
title and symptom, embedded as a question) with a known answer (the case), so a map A, started at the identity and kept
near it, is fitted (ingest/adapter.py, `trainfix kb adapt`, torch, offline) to move such questions toward their case's
units. At question time the vector becomes normalise((1 - w) q + w normalise(A q)), w by language
(`app.retrieve.ADAPT`). Shipped as kb/adapter.npz for the default embedder; the runtime only multiplies.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from app.kb import KB_DIR

ADAPTER = KB_DIR / "adapter.npz"


def load(embedder_id: str, path: Path = ADAPTER) -> np.ndarray | None:
    """The shipped adapter for this embedder, or None (another embedder, or no file: queries go unchanged)."""
    if not path.exists():
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            m = z["matrix"]
            if str(z["embedder"]) != embedder_id or m.ndim != 2 or m.shape[0] != m.shape[1]:
                return None
            return m.astype(np.float32)
    except (OSError, KeyError, ValueError):
        return None


def apply(matrix: np.ndarray | None, vec: np.ndarray, weight: float) -> np.ndarray:
    """normalise((1 - w) q + w normalise(A q)); q itself when there is no adapter or w is 0."""
    v = np.asarray(vec, dtype=np.float32)
    v = v / (float(np.linalg.norm(v)) or 1.0)
    if matrix is None or weight <= 0 or matrix.shape[1] != v.shape[0]:
        return v
    a = matrix @ v
    a = a / (float(np.linalg.norm(a)) or 1.0)
    z = (1 - weight) * v + weight * a
    return z / (float(np.linalg.norm(z)) or 1.0)


def kb_fingerprint(cases: Iterable, notes: Iterable) -> str:
    """What a fit reads from the KB: the case ids and every linked note's report (title, symptom). A shipped
    adapter with another fingerprint still maps queries, but the KB has changed under it (`trainfix kb check` says so)."""
    ids = sorted(c.id for c in cases)
    known = set(ids)
    h = hashlib.sha256("\n".join(ids).encode("utf-8"))
    for n in sorted(notes, key=lambda n: n.id):
        if n.case in known:
            h.update(f"\x01{n.id}\x00{n.case}\x00{n.title}\x00{n.symptom.en}\x00{n.symptom.zh}".encode())
    return h.hexdigest()[:16]


def fitted_on(path: Path = ADAPTER) -> str | None:
    """The KB fingerprint stored with the adapter (None: no file, or one written before fingerprints)."""
    try:
        with np.load(path, allow_pickle=False) as z:
            return str(z["kb"]) if "kb" in z.files else None
    except (OSError, ValueError):
        return None
