"""The KB's own vectors, shipped in git for the default embedder, so a fresh machine embeds nothing it need not.

`kb/vectors.npz`: for each retrieval unit of kb/, the first 8 bytes of the sha256 of its text (as the vector cache
keys it), the vector in int8 with one float16 scale per vector, and the embedder id. About 390 bytes a unit.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path

import numpy as np

from app.kb import KB_DIR

SHIPPED = KB_DIR / "vectors.npz"


def key64(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "little", signed=True)


class ShippedVectors:
    """Read-only lookup of shipped vectors by unit text."""

    def __init__(self, path: Path = SHIPPED) -> None:
        self.path = path
        self.embedder = ""
        self._index: dict[int, int] = {}
        self._q = np.zeros((0, 0), dtype=np.int8)
        self._s = np.zeros(0, dtype=np.float16)
        if path.exists():
            with np.load(path, allow_pickle=False) as z:
                self.embedder = str(z["embedder"])
                keys = z["keys"]
                self._q = z["vecs"]
                self._s = z["scales"]
            self._index = {int(k): i for i, k in enumerate(keys)}

    def __len__(self) -> int:
        return len(self._index)

    def get(self, embedder_id: str, text: str) -> list[float] | None:
        if embedder_id != self.embedder:
            return None
        i = self._index.get(key64(text))
        if i is None:
            return None
        v = self._q[i].astype(np.float32) * float(self._s[i])
        n = float(np.linalg.norm(v))
        return (v / n if n > 0 else v).tolist()

    def keys(self) -> set[int]:
        return set(self._index)


@lru_cache(maxsize=2)
def shipped(path: Path = SHIPPED) -> ShippedVectors:
    return ShippedVectors(path)


def export(texts: list[str], vectors: list[list[float]], embedder_id: str, path: Path = SHIPPED) -> int:
    """Write the shipped file for these unit texts (sorted, deduplicated: the same KB gives the same bytes)."""
    uniq: dict[int, list[float]] = {}
    for t, v in zip(texts, vectors, strict=True):
        uniq[key64(t)] = v
    keys = np.array(sorted(uniq), dtype=np.int64)
    mat = np.asarray([uniq[int(k)] for k in keys], dtype=np.float32).reshape(len(keys), -1)
    scale = np.abs(mat).max(axis=1) / 127.0 if len(keys) else np.zeros(0, dtype=np.float32)
    scale[scale == 0] = 1.0
    q = np.clip(np.rint(mat / scale[:, None]), -127, 127).astype(np.int8)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.npz")
    np.savez_compressed(tmp, keys=keys, vecs=q, scales=scale.astype(np.float16), embedder=np.array(embedder_id))
    tmp.replace(path)
    shipped.cache_clear()
    return len(keys)


def stale(texts: list[str], embedder_id: str, path: Path = SHIPPED) -> tuple[int, int]:
    """(units without a shipped vector, shipped vectors no unit uses) for the default embedder's KB."""
    sv = shipped(path)
    if sv.embedder and sv.embedder != embedder_id:
        return len(texts), len(sv)
    want = {key64(t) for t in texts}
    have = sv.keys()
    return len(want - have), len(have - want)
