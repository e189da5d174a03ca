"""Lexical side of retrieval: a tokenizer that keeps config keys and flags whole, jieba for Chinese, and BM25."""

from __future__ import annotations

import logging
import os
import re
import subprocess
from functools import lru_cache
from pathlib import Path

import numpy as np

_TOKEN = re.compile(r"\d+(?:\.\d+)?e[-+]?\d+|--?[a-z][a-z0-9_.\-]*|[a-z0-9][a-z0-9_.]*[a-z0-9]|[a-z0-9]|[\u4e00-\u9fff\u3400-\u4dbf]+")
_HAN = re.compile(r"[\u4e00-\u9fff\u3400-\u4dbf]")
_EN_STOP = set(
    "a an the and or of to in on for with is are was were be been it its this that my i we you our your at by "
    "from as but not no so if then than when after before do does did have has had can could should would "
    "please help anyone any get got getting what why how there here just very also into out up down".split()
)
_ZH_STOP = set("的 了 是 在 我 也 和 就 都 而 及 与 着 或 一个 没有 我们 你们 他们 这个 那个 什么 怎么 为什么 吗 呢 吧 啊 请问 一下 时候 出现 问题".split())
_USERDICT = Path(__file__).resolve().parent.parent / "kb" / "userdict.txt"


@lru_cache(maxsize=1)
def _jieba():
    import tempfile

    import jieba

    jieba.setLogLevel(logging.WARNING)
    jieba.dt.tmp_dir = tempfile.gettempdir()
    if _USERDICT.exists():
        jieba.load_userdict(str(_USERDICT))
    return jieba


def tokenize(text: str) -> list[str]:
    """Lower-cased tokens; `communication_data_type` and `--vanilla_loss` stay whole (their parts are added too)."""
    out: list[str] = []
    for tok in _TOKEN.findall((text or "").lower()):
        if _HAN.match(tok):
            for w in _jieba().cut_for_search(tok):
                w = w.strip()
                if w and w not in _ZH_STOP:
                    out.append(w)
            continue
        tok = tok.strip(".-")
        if not tok or tok in _EN_STOP:
            continue
        out.append(tok)
        bare = tok.lstrip("-")
        if bare != tok:
            out.append(bare)
        if "_" in bare or "." in bare:
            out.extend(p for p in re.split(r"[_.]", bare) if len(p) > 1 and p not in _EN_STOP)
    return out


CACHE_NAME = "bm25-tokens.json"
WARM_MIN_UNITS = 1000  # below this, tokenizing in the caller is quicker than starting another process


@lru_cache(maxsize=1)
def _salt() -> str:
    """Tokens depend on this module's rules and on the user dictionary: a change to either empties the cache."""
    import hashlib

    h = hashlib.sha256(_TOKEN.pattern.encode("utf-8"))
    h.update(" ".join(sorted(_EN_STOP | _ZH_STOP)).encode("utf-8"))
    if _USERDICT.exists():
        h.update(_USERDICT.read_bytes())
    return h.hexdigest()[:8]


def _key(text: str) -> str:
    import hashlib

    return hashlib.blake2b((_salt() + text).encode("utf-8"), digest_size=8).hexdigest()


def _read_cache(cache: Path) -> dict[str, list[str]]:
    """The cached tokens by text key; empty when the file is missing or unreadable (it is then rebuilt)."""
    import json

    try:
        return json.loads((cache / CACHE_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def tokenize_corpus(texts: list[str], cache: Path | None = None) -> list[list[str]]:
    """Tokens of every unit, cached on disk per unit text: a new process, or a KB with one edited case, tokenizes only
    what is new (jieba on the whole KB costs ~6 s here)."""
    import json

    path = cache / CACHE_NAME if cache else None
    known = _read_cache(cache) if cache else {}
    keys = [_key(t) for t in texts]
    out: list[list[str]] = []
    missing = 0
    for k, t in zip(keys, texts, strict=True):
        toks = known.get(k)
        if toks is None:
            toks = tokenize(t) or ["\u2205"]
            known[k] = toks
            missing += 1
        out.append(toks)
    if path is not None and (missing or len(known) != len(set(keys))):
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps({k: known[k] for k in keys}, ensure_ascii=False), encoding="utf-8")
            tmp.replace(path)
        except OSError:
            pass
    return out


def _all_cached(texts: list[str], cache: Path) -> bool:
    """Every text's tokens are in the cache already (a first start's index write after the KB engine made them):
    reading the cache takes ~0.2 s where a worker process took ~1 s of the second core."""
    known = _read_cache(cache)
    return all(_key(t) in known for t in texts)


def warm_cache(texts: list[str], cache: Path) -> subprocess.Popen | None:
    """Tokenize a large corpus into the cache in another process, so it uses the second core while the caller writes
    the index; the caller waits for it before building the BM25 index. None when not worth it or not possible."""
    import json
    import sys
    import tempfile

    if len(texts) < WARM_MIN_UNITS or _all_cached(texts, cache):
        return None
    try:
        cache.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix="bm25-texts-", suffix=".json", dir=cache)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(texts, f, ensure_ascii=False)
        return subprocess.Popen(
            [sys.executable, "-m", "app.lexical", str(cache), name],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
    except OSError:
        return None


def wait_warm(proc: subprocess.Popen | None, timeout: float = 120.0) -> None:
    """Let the warming process finish (or stop it): whatever it did not write is tokenized by the reader."""
    if proc is None:
        return
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _index_dir(texts: list[str], cache: Path) -> Path:
    import hashlib

    import bm25s

    h = hashlib.sha256(f"{_salt()}\0{bm25s.__version__}".encode())
    for t in texts:
        h.update(t.encode("utf-8") + b"\0")
    return cache / f"bm25-index-{h.hexdigest()[:16]}"


def _load_index(d: Path | None):
    """The built index saved in `d` by an earlier process (0.01 s against ~0.9 s to build it from the cached tokens of
    8,000 units: every warm `trainfix ask` paid that). None when absent or unreadable."""
    if d is None or not (d / "params.index.json").exists():
        return None
    try:
        import bm25s

        bm = bm25s.BM25.load(str(d), mmap=False, show_progress=False)
        return bm if getattr(bm, "vocab_dict", None) else None
    except Exception:  # noqa: BLE001 - a damaged or foreign folder: rebuilt
        return None


def _save_index(bm, d: Path | None) -> None:
    """Keep the built index beside the token cache (one per corpus: older ones are removed)."""
    if d is None:
        return
    import shutil
    import tempfile

    cache = d.parent
    try:
        cache.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".bm25-index-", dir=cache))
        bm.save(str(tmp), show_progress=False)
        try:
            tmp.rename(d)
        except OSError:  # another process saved it first
            shutil.rmtree(tmp, ignore_errors=True)
        for old in cache.glob("bm25-index-*"):
            if old != d:
                shutil.rmtree(old, ignore_errors=True)
    except OSError:
        pass


class BM25Index:
    """BM25 over retrieval units (bm25s: sparse, fast enough for 100k units)."""

    def __init__(self, texts: list[str], cache: Path | None = None) -> None:
        import bm25s

        self.size = len(texts)
        saved = _index_dir(texts, cache) if cache is not None and texts else None
        self._bm = _load_index(saved)
        if self._bm is None:
            self._bm = bm25s.BM25()
            self._bm.index(tokenize_corpus(texts, cache), show_progress=False)
            _save_index(self._bm, saved)
        self._vocab = set(self._bm.vocab_dict) if hasattr(self._bm, "vocab_dict") else None

    def scores(self, query: str) -> np.ndarray:
        toks = tokenize(query)
        if self._vocab is not None:
            toks = [t for t in toks if t in self._vocab]
        if not toks or not self.size:
            return np.zeros(self.size, dtype=np.float32)
        return np.asarray(self._bm.get_scores(toks), dtype=np.float32)


if __name__ == "__main__":  # `python -m app.lexical CACHE_DIR TEXTS.json`: the worker behind warm_cache
    import json
    import sys

    _cache, _texts = Path(sys.argv[1]), Path(sys.argv[2])
    try:
        tokenize_corpus(json.loads(_texts.read_text(encoding="utf-8")), _cache)
    finally:
        _texts.unlink(missing_ok=True)
