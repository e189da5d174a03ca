"""Split a case into retrieval units: per language, the title with symptoms, each cause, the fixes, each body section."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from app.models import Case, Note

_SECTION = re.compile(r"^###\s+(.+)$", re.M)
MAX_CHARS = 1200


@dataclass(frozen=True)
class Unit:
    id: str
    text: str
    meta: dict

    @staticmethod
    def make(case_id: str, kind: str, lang: str, text: str, meta: dict) -> Unit:
        sha = hashlib.sha256(f"{kind}\0{lang}\0{text}".encode()).hexdigest()[:16]
        return Unit(id=f"{case_id}:{lang}:{kind}:{sha}", text=text, meta={**meta, "case_id": case_id, "lang": lang, "kind": kind})


def body_sections(body: str) -> list[tuple[str, str]]:
    found = list(_SECTION.finditer(body))
    out = []
    for i, m in enumerate(found):
        end = found[i + 1].start() if i + 1 < len(found) else len(body)
        text = body[m.end() : end].strip()
        if text:
            out.append((m.group(1).strip(), text))
    if not found and body.strip():
        out.append(("", body.strip()))
    return out


def case_units(case: Case) -> list[Unit]:
    meta = {"category": case.category, "source_lang": case.source_lang, "doc": "case"}
    units: list[Unit] = []
    for lang in ("en", "zh"):
        title = case.title.get(lang)
        sym = "; ".join(case.symptoms.get(lang))
        units.append(Unit.make(case.id, "summary", lang, f"{title}. {sym}", meta))
        for i, c in enumerate(case.causes):
            units.append(Unit.make(case.id, f"cause{i}", lang, f"{title}. {c.get(lang)}", meta))
        fixes = " ".join(f.get(lang) for f in case.fixes)
        units.append(Unit.make(case.id, "fixes", lang, f"{title}. {fixes}"[:MAX_CHARS], meta))
        for j, (head, text) in enumerate(body_sections(case.body.get(lang, ""))):
            units.append(Unit.make(case.id, f"body{j}", lang, f"{title}. {head}: {text}"[:MAX_CHARS], meta))
    return units


def note_units(note: Note) -> list[Unit]:
    """One unit per language: the thread's title, what the reporter saw and how it was resolved."""
    meta = {"category": note.category, "source_lang": note.lang, "doc": "note"}
    return [
        Unit.make(note.id, "note", lang, f"{note.title}. {note.symptom.get(lang)} {note.resolution.get(lang)}"[:MAX_CHARS], meta)
        for lang in ("en", "zh")
    ]


def unit_texts(ids: list[str], stored: list[str | None], cases, notes) -> list[str]:
    """Each unit's text: rebuilt from its case or note (the index stores no text for them, see Store.add), else the
    text the index holds (articles, units written by an older version)."""
    rebuilt = {u.id: u.text for c in cases for u in case_units(c)} | {u.id: u.text for n in notes for u in note_units(n)}
    return [rebuilt.get(i) or d or "" for i, d in zip(ids, stored, strict=True)]
