"""Lexical side of retrieval: a tokenizer that keeps config keys and flags whole, jieba for Chinese, and BM25."""

from __future__ import annotations

import logging
import re
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


def tokenize_corpus(texts: list[str], cache: Path | None = None) -> list[list[str]]:
    """Tokens of every unit; cached on disk by content hash, so a new process need not load jieba for the corpus."""
    import hashlib
    import json

    key = hashlib.sha256("\x1e".join(texts).encode("utf-8")).hexdigest()[:24] if cache else ""
    path = cache / f"bm25-tokens-{key}.json" if cache else None
    if path is not None and path.exists():
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            pass
    corpus = [tokenize(t) or ["\u2205"] for t in texts]
    if path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            for old in path.parent.glob("bm25-tokens-*.json"):
                old.unlink(missing_ok=True)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(corpus, ensure_ascii=False), encoding="utf-8")
            tmp.replace(path)
        except OSError:
            pass
    return corpus


class BM25Index:
    """BM25 over retrieval units (bm25s: sparse, fast enough for 100k units)."""

    def __init__(self, texts: list[str], cache: Path | None = None) -> None:
        import bm25s

        self.size = len(texts)
        self._bm = bm25s.BM25()
        corpus = tokenize_corpus(texts, cache)
        self._bm.index(corpus, show_progress=False)
        self._vocab = set(self._bm.vocab_dict) if hasattr(self._bm, "vocab_dict") else None

    def scores(self, query: str) -> np.ndarray:
        toks = tokenize(query)
        if self._vocab is not None:
            toks = [t for t in toks if t in self._vocab]
        if not toks or not self.size:
            return np.zeros(self.size, dtype=np.float32)
        return np.asarray(self._bm.get_scores(toks), dtype=np.float32)
