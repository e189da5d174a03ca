"""Lint: the same facts and triggers as a diagnosis, on files alone, as diagnostics an editor can underline.

The CLI (`trainfix lint`), the API (`/v1/lint`) and the language server (`trainfix lsp`) all call `lint()`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from app.facts import Attachment, read_attachments
from app.messages import t as msg
from app.models import Case, Fact
from app.triggers import fire

SEVERITY = {"error": 1, "warning": 2, "information": 3, "hint": 4}
_LIKELY = {"high": 2, "medium": 1, "low": 0}
_EVIDENCE = {"maintainer-confirmed": 1, "reporter-confirmed": 1, "community-advice": 0}


@dataclass
class LintResult:
    file: str
    line: int  # 1-based; 0 = whole file
    col_start: int
    col_end: int
    severity: str
    code: str
    message: str
    fix: str
    href: str
    citation: str
    kind: str = ""  # the file's kind as read (json, yaml, cmdline, python, log ...): the syntax a quick fix writes
    lang: str = "en"

    def lsp(self) -> dict[str, Any]:
        ln = max(self.line - 1, 0)
        return {
            "range": {"start": {"line": ln, "character": self.col_start}, "end": {"line": ln, "character": max(self.col_end, self.col_start)}},
            "severity": SEVERITY[self.severity],
            "code": self.code,
            "codeDescription": {"href": self.href} if self.href else None,
            "message": self.message + ("\n" + msg("lint.fix", self.lang, fix=self.fix) if self.fix else ""),
            "source": "trainfix",
            "data": {"file": self.file, "fix": self.fix, "citation": self.citation, "kind": self.kind},
        }


def severity(case: Case) -> str:
    """A warning when the cause is likely and confirmed, information when one of the two is weak, a hint otherwise."""
    likely = max((_LIKELY[c.likelihood] for c in case.causes), default=1)
    score = likely + _EVIDENCE.get(case.evidence, 0)
    return "warning" if score >= 2 else "information" if score == 1 else "hint"


def _span(f: Fact, line: str) -> tuple[int, int]:
    """The key or flag and its value on its line: no trailing comma, comment or line continuation."""
    start = f.col_start if f.col_end else 0
    seg = line[start:] if line else f.text
    if m := re.match(r"--[\w.\-]+(?:(?:=|[ \t]+)(?!-[A-Za-z-])[^\s\\]+)?", seg):
        return start, start + m.end()
    if not line:
        return start, start + len(seg)
    if seg.startswith('"') and (m := re.match(r'"(?:[^"\\]|\\.)*"\s*:\s*', seg)):
        try:
            _, end = json.JSONDecoder().raw_decode(seg, m.end())
            return start, start + end
        except ValueError:
            pass
    seg = re.sub(r"\s+#.*$", "", seg) if not seg.lstrip().startswith("#") else seg
    return start, start + len(seg.rstrip().rstrip(",\\").rstrip())


def lint(files: list[Attachment], cases: list[Case], lang: str = "en") -> list[LintResult]:
    fs = read_attachments(files)
    facts = fs.by_key()
    kinds = {n.file: n.kind for n in fs.files}
    out: list[LintResult] = []
    for note in fs.files:
        if not note.ok:
            m = re.search(r"line (\d+), column (\d+)", note.message)
            line, col = (int(m.group(1)), int(m.group(2)) - 1) if m else (0, 0)
            out.append(LintResult(note.file, line, max(col, 0), max(col, 0) + 1, "error" if note.kind in ("json", "yaml") else "information",
                                  f"trainfix.{note.kind}", note.text(lang), "", "", "", note.kind, lang))
    seen: set[tuple[str, int, str]] = set()
    for case in cases:
        for hit in fire(case, facts):
            at = [f for f in hit.facts if f.file and f.line] or hit.facts
            if not at:
                continue
            f = at[0]
            if (f.file, f.line, case.id) in seen:
                continue
            seen.add((f.file, f.line, case.id))
            lines = fs.redacted_texts.get(f.file, "").splitlines()
            cs, ce = _span(f, lines[f.line - 1] if 0 < f.line <= len(lines) else "")
            src = case.sources[0]
            out.append(
                LintResult(
                    file=f.file, line=f.line, col_start=cs, col_end=ce, severity=severity(case),
                    code=case.id, message=f"{case.title.get(lang)}: {hit.trigger.explain.get(lang)}", fix=case.fixes[0].get(lang),
                    href=src.url, citation=src.title, kind=kinds.get(f.file, ""), lang=lang,
                )
            )
    out.sort(key=lambda r: (r.file, r.line, r.code))
    return out
