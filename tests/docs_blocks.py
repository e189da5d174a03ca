"""The bash blocks of README.md and docs/*.md, and how the docs tests run them (shared by two test files)."""

from __future__ import annotations

import os
import re
from pathlib import Path

from conftest import PY, ROOT

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_BLOCK = re.compile(r"(?P<pre>(?:<!--[^\n]*-->\n)?)^```bash\n(?P<body>.*?)^```\s*$", re.S | re.M)


def blocks() -> list[tuple[str, int, str, str]]:
    """(file, line, body, skip reason or '') for every bash block."""
    out = []
    for f in DOCS:
        text = f.read_text(encoding="utf-8")
        for m in _BLOCK.finditer(text):
            skip = re.match(r"<!--\s*not run by tests:\s*(.*?)\s*-->", m.group("pre") or "")
            out.append((f.name, text[: m.start()].count("\n") + 1, m.group("body"), skip.group(1) if skip else ""))
    return out


def expected_ids(body: str, known: set[str]) -> set[str]:
    return {w for c in re.findall(r"#\s*->(.*)", body) for w in re.findall(r"[a-z0-9][a-z0-9-]{4,}", c) if w in known}



def _env(home: Path) -> dict[str, str]:
    venv_bin = ROOT / ".venv" / "bin"
    path = f"{venv_bin}:{os.environ.get('PATH', '')}" if venv_bin.exists() else os.environ.get("PATH", "")
    env = {**os.environ, "TRAINFIX_HOME": str(home), "HF_HUB_OFFLINE": "1", "GRADIO_ANALYTICS_ENABLED": "False", "PATH": path}
    env.pop("TRAINFIX_API_TOKEN", None)
    return env


def _trainfix_line(line: str) -> str:
    """The line as written; only when this checkout has no .venv (tests run from another env) use this interpreter."""
    if line.startswith(".venv/bin/trainfix") and not (ROOT / ".venv" / "bin" / "trainfix").exists():
        return line.replace(".venv/bin/trainfix", f"{PY} -m app.cli", 1)
    return line


