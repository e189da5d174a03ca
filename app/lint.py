"""Lint: the same facts and triggers as a diagnosis, on files alone, as diagnostics an editor can underline."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from app.facts import Attachment, read_attachments
from app.models import Case, Fact
from app.triggers import fire

SEVERITY = {"error": 1, "warning": 2, "information": 3, "hint": 4}


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

    def lsp(self) -> dict[str, Any]:
        ln = max(self.line - 1, 0)
        return {
            "range": {"start": {"line": ln, "character": self.col_start}, "end": {"line": ln, "character": max(self.col_end, self.col_start)}},
            "severity": SEVERITY[self.severity],
            "code": self.code,
            "codeDescription": {"href": self.href} if self.href else None,
            "message": self.message + (f"\nFix: {self.fix}" if self.fix else ""),
            "source": "trainfix",
            "data": {"file": self.file, "fix": self.fix, "citation": self.citation},
        }


def _span(f: Fact) -> tuple[int, int]:
    if f.col_end:
        return f.col_start, f.col_end
    return 0, len(f.text)


def lint(files: list[Attachment], cases: list[Case], lang: str = "en") -> list[LintResult]:
    fs = read_attachments(files)
    facts = fs.by_key()
    out: list[LintResult] = []
    for note in fs.files:
        if not note.ok:
            m = re.search(r"line (\d+), column (\d+)", note.message)
            line, col = (int(m.group(1)), int(m.group(2)) - 1) if m else (0, 0)
            out.append(LintResult(note.file, line, max(col, 0), max(col, 0) + 1, "error" if note.kind in ("json", "yaml") else "information", f"trainfix.{note.kind}", note.message, "", "", ""))
    for case in cases:
        for hit in fire(case, facts):
            at = [f for f in hit.facts if f.file and f.line] or hit.facts
            if not at:
                continue
            f = at[0]
            cs, ce = _span(f)
            likely = max((c.likelihood for c in case.causes), key=lambda x: {"high": 2, "medium": 1, "low": 0}[x])
            fix = case.fixes[0].get(lang)
            src = case.sources[0]
            out.append(
                LintResult(
                    file=f.file, line=f.line, col_start=cs, col_end=ce,
                    severity="warning" if likely in ("high", "medium") else "information",
                    code=case.id, message=f"{case.title.get(lang)}: {hit.trigger.explain.get(lang)}", fix=fix, href=src.url, citation=src.title,
                )
            )
    out.sort(key=lambda r: (r.file, r.line, r.code))
    return out
