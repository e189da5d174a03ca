"""Fitting the linear query adapter (app/query_adapter.py) from the KB's own thread notes: a reporter's words -> the case.

The embedder was never trained on training-failure threads. Each thread note linked to a case is a real report (its
title and symptom, embedded as a question) with a known answer (the case), so a 384 x 384 map A, started at the
identity and kept near it, is fitted to move such questions toward their case's units (softmax over cases, a case scored
by its best unit). Offline, with torch (`trainfix kb adapt`); the runtime only multiplies. Notes written on a thread of
the real-thread eval are never trained on, so the eval measures the adapter on threads it did not see.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np

from app.query_adapter import ADAPTER

TEMPERATURE = 0.02  # softmax temperature over cosines (e5 cosines sit in a narrow band); session O grid 0.02 / 0.05
WEIGHT_DECAY = 0.01  # on A - I: keeps the map near the identity (0.001 overfits, 0.1 barely moves)
EPOCHS = 100  # full-batch Adam steps, lr 1e-3 (session O: ~1 min on 2 cores for ~3,700 examples)


def training_pairs(engine, exclude_urls: Iterable[str] = (), exclude_ids: Iterable[str] = ()) -> tuple[list[str], np.ndarray]:
    """(question-like text, case position) for every linked note in both languages, minus notes on excluded threads
    (by URL, or by id for notes that retell such a thread on another page)."""
    from app.kb import canonical_url

    skip = {canonical_url(u) for u in exclude_urls}
    skip_ids = set(exclude_ids)
    texts, ys = [], []
    for nid in sorted(engine.notes):
        n = engine.notes[nid]
        if not n.case or n.case not in engine.case_index or canonical_url(n.url) in skip or nid in skip_ids:
            continue
        for lang in ("en", "zh"):
            texts.append(f"{n.title}. {n.symptom.get(lang)}")
            ys.append(engine.case_index[n.case])
    return texts, np.asarray(ys, dtype=np.int64)


def fit(queries: np.ndarray, targets: np.ndarray, unit_vecs: np.ndarray, unit_case: np.ndarray, n_cases: int,
        epochs: int = EPOCHS, temperature: float = TEMPERATURE, weight_decay: float = WEIGHT_DECAY, lr: float = 1e-3, seed: int = 0,
        progress: Callable[[int], None] | None = None) -> np.ndarray:
    """Fit A (d x d). `unit_vecs` are normalised unit vectors, `unit_case` each unit's case position (units of other
    documents are ignored). Deterministic for a seed."""
    try:
        import torch
    except ImportError as e:  # the runtime never needs torch; only refitting does
        raise RuntimeError("fitting the query adapter needs torch: pip install torch==2.13.0 (CPU wheel)") from e
    torch.manual_seed(seed)
    keep = unit_case < n_cases
    U = torch.tensor(unit_vecs[keep], dtype=torch.float32)
    uc = torch.tensor(unit_case[keep], dtype=torch.int64)
    X = torch.nn.functional.normalize(torch.tensor(queries, dtype=torch.float32), dim=1)
    y = torch.tensor(targets, dtype=torch.int64)
    d = X.shape[1]
    eye = torch.eye(d)
    W = torch.zeros(d, d, requires_grad=True)
    opt = torch.optim.Adam([W], lr=lr)
    for ep in range(epochs):
        opt.zero_grad()
        q = torch.nn.functional.normalize(X @ (eye + W).T, dim=1)
        pooled = torch.full((len(X), n_cases), -1e9).scatter_reduce(1, uc.expand(len(X), -1), q @ U.T, reduce="amax")
        loss = torch.nn.functional.cross_entropy(pooled / temperature, y) + weight_decay * (W**2).sum()
        loss.backward()
        opt.step()
        if progress:
            progress(ep)
    return (eye + W).detach().numpy().astype(np.float32)


def save(matrix: np.ndarray, embedder_id: str, path: Path = ADAPTER, kb: str = "") -> None:
    """`kb`: the fingerprint of the KB it was fitted on (app.query_adapter.kb_fingerprint), for `kb check`."""
    np.savez_compressed(path, matrix=matrix.astype(np.float16), embedder=np.array(embedder_id), kb=np.array(kb))
