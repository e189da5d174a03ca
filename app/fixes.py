"""Fix diffs rendered against the user's own file: its keys, its syntax, its lines.

A case writes a diff once (`-"communication_data_type": "fp32"`). Shown to a user with a YAML file it becomes a
YAML line, with a command line a flag; a removal of a key their file does not have is dropped, a key that is
missing is shown as an addition, and a fix their file already has is not offered at all.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from app.models import Case

_LINE = re.compile(r"""^\s*(?:--)?["']?([A-Za-z_][\w.\-]*)["']?\s*(?:[:=]\s*|\s+)(.*?)\s*,?\s*$""")


@dataclass
class DiffLine:
    sign: str
    key: str
    value: str


def parse_diff(diff: str) -> list[DiffLine] | None:
    """The `+`/`-` lines of a case diff as (sign, key, value); None when a line is not a key/value change."""
    out = []
    for raw in diff.splitlines():
        if not raw.strip():
            continue
        if raw[0] not in "+-" or raw.startswith(("+++", "---")):
            return None
        m = _LINE.match(raw[1:])
        if not m:
            return None
        out.append(DiffLine(raw[0], m.group(1), m.group(2).strip().rstrip(",")))
    return out or None


def _syntax(name: str, text: str) -> str:
    s = text.lstrip()
    if s.startswith("{"):
        return "json"
    if name.endswith(".sh") or re.search(r"(^|\s)--[a-zA-Z]", text) and not re.search(r"^\s*[\w.\-]+\s*:\s", text, re.M):
        return "cmdline"
    if name.endswith(".py"):
        return "python"
    return "yaml"


def _norm(v: str) -> str:
    v = v.strip().strip(",").strip().strip("\"'").lower()
    return {"yes": "true", "no": "false", "on": "true", "off": "false"}.get(v, v)


def _find(text: str, key: str, syntax: str) -> tuple[int, str, str] | None:
    """(line number, the user's line, its value) where the file sets `key`."""
    leaf = key.split(".")[-1]
    pats = {
        "json": rf'"{re.escape(leaf)}"\s*:\s*([^,}}\n]+)',
        "yaml": rf"^\s*{re.escape(leaf)}\s*:\s*(.*?)\s*(?:#.*)?$",
        "cmdline": rf"--{re.escape(leaf)}(?:[= ]+([^\s\\]+))?",
        "python": rf"\b{re.escape(leaf)}\s*=\s*([^,)\n]+)",
    }
    rx = re.compile(pats[syntax], re.M)
    for n, line in enumerate(text.splitlines(), 1):
        m = rx.search(line)
        if m:
            return n, line.strip(), (m.group(1) or "true").strip()
    return None


def _render(key: str, value: str, syntax: str) -> str:
    leaf = key.split(".")[-1]
    bare = value.strip().strip(",")
    if syntax == "json":
        return f'"{leaf}": {bare}'
    if syntax == "cmdline":
        return f"--{leaf} {bare.strip(chr(34))}" if bare.lower() not in ("true",) else f"--{leaf}"
    if syntax == "python":
        return f"{leaf}={bare}"
    return f"{leaf}: {bare.strip(chr(34))}"


def adapt(diff: str, files: dict[str, str]) -> str | None:
    """The diff in the syntax of the user's file that it touches; None when the user's file already has the fix."""
    lines = parse_diff(diff)
    configs = {n: t for n, t in files.items() if t.strip() and not n.endswith((".log", ".txt", ".out"))}
    if lines is None or not configs:
        return diff
    keys = {d.key for d in lines}
    target = next((n for n, t in configs.items() if any(_find(t, k, _syntax(n, t)) for k in keys)), None)
    if target is None:
        if len(configs) != 1:
            return diff
        target = next(iter(configs))
    text = configs[target]
    syn = _syntax(target, text)
    out: list[str] = []
    adds = [d for d in lines if d.sign == "+"]
    already = bool(adds)
    for d in lines:
        found = _find(text, d.key, syn)
        if d.sign == "-":
            if found:
                out.append(f"-{found[1]}    # {target}:{found[0]}")
            continue
        if found and _norm(found[2]) == _norm(d.value):
            continue
        already = False
        if found and not any(o.startswith(f"-{found[1]}") for o in out):
            out.append(f"-{found[1]}    # {target}:{found[0]}")
        out.append(f"+{_render(d.key, d.value, syn)}")
    if already and adds:
        return None
    return "\n".join(out) if out else None


def fixes_for_user(case: Case, lang: str, files: dict[str, str]) -> tuple[list[str], list[str]]:
    """The case's fixes and diffs for this user: diffs in their file's syntax, fixes they already have left out."""
    texts: list[str] = []
    diffs: list[str] = []
    for f in case.fixes:
        if not f.diff:
            texts.append(f.get(lang))
            continue
        d = adapt(f.diff, files) if files else f.diff
        if d is None:
            continue
        texts.append(f.get(lang))
        diffs.append(d)
    if not texts:  # every fix is already in the user's files: say so rather than offer nothing
        texts = [case.fixes[0].get(lang)]
    return texts, diffs
