"""Load and validate the knowledge base: case files (YAML front matter + bilingual body), taxonomy, fact keys.

Every problem is reported as `file:line: message`; one broken file never stops the others from loading.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from app.models import Case, Cond, FactSpec, Leaf, Note, Taxonomy

KB_DIR = Path(__file__).resolve().parent.parent / "kb"

_BODY_LANG = re.compile(r"^##\s+(English|中文)\s*$", re.M)


@dataclass
class Problem:
    file: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.message}"


@dataclass
class LoadResult:
    cases: list[Case] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    files: int = 0


class _LineLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # libyaml reads the KB's 230 files ~10x faster
    """A YAML loader that remembers the line of every mapping key, so errors can point at it."""


def _construct_mapping(loader: _LineLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    mapping = yaml.SafeLoader.construct_mapping(loader, node, deep=deep)
    lines = {}
    for key_node, _ in node.value:
        lines[key_node.value] = key_node.start_mark.line + 1
    mapping["__lines__"] = lines  # type: ignore[index]
    return mapping


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _strip_lines(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _strip_lines(v) for k, v in obj.items() if k != "__lines__"}
    if isinstance(obj, list):
        return [_strip_lines(v) for v in obj]
    return obj


def _line_of(obj: Any, loc: tuple, default: int) -> int:
    """Walk a pydantic error location through the line-annotated YAML to the nearest known line."""
    line = default
    cur = obj
    for part in loc:
        if isinstance(cur, dict):
            lines = cur.get("__lines__", {})
            key = part if part in cur else ("in" if part == "in_" else ("not" if part == "not_" else part))
            if key in lines:
                line = lines[key]
            cur = cur.get(key)
        elif isinstance(cur, list) and isinstance(part, int) and part < len(cur):
            cur = cur[part]
            if isinstance(cur, dict) and cur.get("__lines__"):
                line = min(cur["__lines__"].values())
        else:
            break
    return line


def split_front_matter(text: str) -> tuple[str, str, int]:
    """Return (yaml, body, line where the body starts). Raises ValueError when there is no front matter."""
    if not text.startswith("---"):
        raise ValueError("no YAML front matter (the file must start with a '---' line)")
    end = text.find("\n---", 3)
    if end < 0:
        raise ValueError("front matter is not closed by a '---' line")
    fm = text[3:end]
    body_start = text.find("\n", end + 1)
    body = text[body_start + 1 :] if body_start >= 0 else ""
    return fm, body, fm.count("\n") + 2


def parse_body(body: str) -> dict[str, str]:
    """Split the body into its `## English` and `## 中文` parts."""
    parts: dict[str, str] = {}
    matches = list(_BODY_LANG.finditer(body))
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(body)
        lang = "en" if m.group(1) == "English" else "zh"
        parts[lang] = body[m.end() : end].strip()
    return parts


@lru_cache(maxsize=4)
def load_taxonomy(kb_dir: Path = KB_DIR) -> Taxonomy:
    return Taxonomy.model_validate(yaml.safe_load((kb_dir / "taxonomy.yaml").read_text(encoding="utf-8")))


@lru_cache(maxsize=4)
def load_fact_specs(kb_dir: Path = KB_DIR) -> dict[str, FactSpec]:
    data = yaml.safe_load((kb_dir / "facts.yaml").read_text(encoding="utf-8"))
    return {f["key"]: FactSpec.model_validate(f) for f in data["facts"]}


def iter_leaves(node: Cond | Leaf):
    if isinstance(node, Leaf):
        yield node
        return
    for child in (node.all or []) + (node.any or []) + ([node.not_] if node.not_ else []):
        yield from iter_leaves(child)


def load_case_file(path: Path, root: Path | None = None) -> tuple[Case | None, list[Problem]]:
    """Parse and validate one case file; returns the case (or None) and the problems found."""
    rel = str(path.relative_to(root)) if root and path.is_relative_to(root) else str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        return None, [Problem(rel, 1, f"cannot read file: {e}")]
    try:
        fm, body, _ = split_front_matter(text)
    except ValueError as e:
        return None, [Problem(rel, 1, str(e))]
    try:
        raw = yaml.load(fm, Loader=_LineLoader)  # noqa: S506 - SafeLoader subclass
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = mark.line + 2 if mark else 1
        col = f", column {mark.column + 1}" if mark else ""
        return None, [Problem(rel, line, f"YAML error{col}: {getattr(e, 'problem', e)}")]
    if not isinstance(raw, dict):
        return None, [Problem(rel, 1, "front matter is not a mapping")]
    data = _strip_lines(raw)
    problems: list[Problem] = []
    body_parts = parse_body(body)
    for lang, name in (("en", "## English"), ("zh", "## 中文")):
        if not body_parts.get(lang):
            problems.append(Problem(rel, fm.count("\n") + 3, f"body: missing '{name}' section (both languages are required)"))
    try:
        case = Case.model_validate({**data, "body": body_parts, "path": rel})
    except ValidationError as e:
        for err in e.errors():
            loc = tuple(err["loc"])
            line = _line_of(raw, loc, 1) + 1  # +1: the opening '---' line
            where = ".".join(str(p) for p in loc)
            problems.append(Problem(rel, line, f"{where}: {err['msg']}"))
        return None, problems
    lines = raw.get("__lines__", {})
    tax = load_taxonomy(KB_DIR)
    if case.category not in tax.ids():
        problems.append(Problem(rel, lines.get("category", 1) + 1, f"category: unknown category {case.category!r}"))
    if root is not None and path.parent.name != case.category and path.parent.name in tax.ids():
        problems.append(Problem(rel, lines.get("category", 1) + 1, f"category: file is in {path.parent.name}/ but says {case.category}"))
    if path.stem != case.id:
        problems.append(Problem(rel, lines.get("id", 1) + 1, f"id: {case.id!r} does not match the file name {path.stem!r}"))
    specs = load_fact_specs(KB_DIR)
    for i, trig in enumerate(case.triggers):
        tline = _line_of(raw, ("triggers", i), lines.get("triggers", 1)) + 1
        for leaf in iter_leaves(trig):
            if leaf.fact not in specs:
                problems.append(Problem(rel, tline, f"triggers[{i}]: unknown fact {leaf.fact!r} (see kb/facts.yaml)"))
    for sig in case.log_signals:
        if sig not in specs:
            problems.append(Problem(rel, lines.get("log_signals", 1) + 1, f"log_signals: unknown fact {sig!r}"))
    return (case if not problems else None), problems


def load_cases(root: Path | None = None, include_drafts: bool = False) -> LoadResult:
    """Load every case under `root` (default kb/cases); bad files are reported, good ones kept."""
    root = root or KB_DIR / "cases"
    res = LoadResult()
    if not root.exists():
        res.problems.append(Problem(str(root), 0, "no such folder"))
        return res
    files = sorted(root.rglob("*.md")) if root.is_dir() else [root]
    seen: dict[str, str] = {}
    for p in files:
        if p.name.lower() == "readme.md":
            continue
        res.files += 1
        case, problems = load_case_file(p, root if root.is_dir() else root.parent)
        res.problems.extend(problems)
        if case is None:
            continue
        if case.id in seen:
            res.problems.append(Problem(case.path, 2, f"id: duplicate id {case.id!r}, also in {seen[case.id]}"))
            continue
        seen[case.id] = case.path
        if case.status == "draft" and not include_drafts:
            continue
        res.cases.append(case)
    ids = set(seen)
    for c in res.cases:
        for r in c.related:
            if r not in ids:
                res.problems.append(Problem(c.path, 2, f"related: unknown case id {r!r}"))
    return res


# ---------------------------------------------------------------- thread notes (kb/notes/*.yaml: a list of notes per file)

NOTES_DIR = KB_DIR / "notes"


@dataclass
class NotesResult:
    notes: list = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    files: int = 0


def load_notes(root: Path | None = None, case_ids: set[str] | None = None, origin: str = "kb") -> NotesResult:
    """Every note under `root` (default kb/notes). One broken note is reported with its line and skipped."""
    root = root or NOTES_DIR
    res = NotesResult()
    if not root.exists():
        return res
    files = sorted(root.rglob("*.yaml")) if root.is_dir() else [root]
    tax = load_taxonomy(KB_DIR).ids()
    seen_id: dict[str, str] = {}
    seen_url: dict[str, str] = {}
    for p in files:
        res.files += 1
        rel = str(p.relative_to(root.parent)) if root.is_dir() and p.is_relative_to(root.parent) else p.name
        try:
            raw = yaml.load(p.read_text(encoding="utf-8"), Loader=_LineLoader)  # noqa: S506 - SafeLoader subclass
        except (OSError, UnicodeDecodeError) as e:
            res.problems.append(Problem(rel, 1, f"cannot read file: {e}"))
            continue
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            res.problems.append(Problem(rel, mark.line + 1 if mark else 1, f"YAML error: {getattr(e, 'problem', e)}"))
            continue
        if raw is None:
            continue
        if not isinstance(raw, list):
            res.problems.append(Problem(rel, 1, "a notes file is a YAML list of notes"))
            continue
        for item in raw:
            line = min(item["__lines__"].values()) if isinstance(item, dict) and item.get("__lines__") else 1
            if not isinstance(item, dict):
                res.problems.append(Problem(rel, line, "a note must be a mapping"))
                continue
            try:
                note = Note.model_validate({**_strip_lines(item), "path": f"{rel}:{line}", "origin": origin})
            except ValidationError as e:
                for err in e.errors():
                    loc = tuple(err["loc"])
                    res.problems.append(Problem(rel, _line_of(item, loc, line), f"note {item.get('id', '?')}: {'.'.join(map(str, loc))}: {err['msg']}"))
                continue
            where = f"{rel}:{line}"
            if note.category not in tax:
                res.problems.append(Problem(rel, line, f"note {note.id}: unknown category {note.category!r}"))
                continue
            if case_ids is not None and note.case and note.case not in case_ids:
                res.problems.append(Problem(rel, line, f"note {note.id}: case {note.case!r} does not exist"))
                continue
            if note.id in seen_id:
                res.problems.append(Problem(rel, line, f"note {note.id}: duplicate id (also at {seen_id[note.id]})"))
                continue
            key = canonical_url(note.url)
            if key in seen_url:
                res.problems.append(Problem(rel, line, f"note {note.id}: the thread {note.url} already has a note (at {seen_url[key]})"))
                continue
            seen_id[note.id] = where
            seen_url[key] = where
            res.notes.append(note)
    return res


def canonical_url(url: str) -> str:
    """The same thread however it is written: scheme, www, case of the repo, trailing slash and #fragment ignored."""
    u = url.strip().split("#", 1)[0].rstrip("/").lower()
    u = re.sub(r"^https?://(www\.)?", "", u)
    return u
