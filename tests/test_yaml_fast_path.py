"""libyaml composes configs ~30x faster than PyYAML's pure-Python reader; both must give the very same facts, and
input that could nest deep enough to crash libyaml's C recursion must never reach it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from app.facts import structured

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = sorted(
    p for d in (ROOT / "examples", ROOT / "tests" / "fixtures", ROOT / "eval" / "attachments") if d.exists()
    for p in d.rglob("*") if p.suffix in (".yaml", ".yml", ".json") and p.stat().st_size < 1_000_000
)


def _facts(text: str, kind: str) -> list[tuple]:
    try:
        facts, _ = structured.parse_structured(text, "f", kind)
    except structured.ParseError as e:
        return [("error", str(e))]
    return [(f.key, repr(f.value), f.line, f.col_start, f.col_end) for f in facts]


@pytest.mark.skipif(structured._FAST is None, reason="PyYAML built without libyaml: there is no fast path to compare")
def test_fast_and_pure_python_readers_agree(monkeypatch):
    assert len(CONFIGS) >= 10, CONFIGS
    compared = 0
    for p in CONFIGS:
        text = p.read_text(encoding="utf-8", errors="replace")
        kind = "json" if p.suffix == ".json" else "yaml"
        fast = _facts(text, kind)
        with monkeypatch.context() as m:
            m.setattr(structured, "_FAST", None)
            slow = _facts(text, kind)
        assert fast == slow, p
        compared += bool(fast)
    assert compared >= 10


@pytest.mark.parametrize("text", ["- " * 100_000 + "x", "[" * 100_000 + "]" * 100_000, "a:\n" + "".join(" " * i + f"k{i}:\n" for i in range(1, 300))])
def test_deep_input_never_reaches_libyaml(text):
    # in a child process: a crash in C would otherwise take the test runner with it
    code = "import sys; from app.facts.structured import parse_structured, ParseError\n" \
           "try:\n    parse_structured(sys.stdin.read(), 'f', 'yaml')\nexcept ParseError:\n    pass\nprint('ok')"
    r = subprocess.run([sys.executable, "-c", code], input=text, capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert r.returncode == 0 and r.stdout.strip() == "ok", (r.returncode, r.stderr[-500:])
