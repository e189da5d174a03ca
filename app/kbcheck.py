"""`trainfix kb check` and `kb stats`: validate every case and run its examples (the Semgrep habit: rules carry tests)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from app.facts import Attachment
from app.kb import KB_DIR, LoadResult, Problem, load_cases, load_taxonomy
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
            ranked = [c.case_id for c in (d.causes or d.related)]
            if kind == "match" and case.id not in ranked[:3]:
                out.append(Problem(case.path, 2, f"examples.match[{i}]: not in the top 3 (got {ranked[:3]})"))
            if kind == "no_match" and ranked[:1] == [case.id] and not ex.config:
                out.append(Problem(case.path, 2, f"examples.no_match[{i}]: ranked first"))
    return out


@dataclass
class CheckReport:
    load: LoadResult
    problems: list[Problem]


def check(path: Path | None = None, engine=None) -> CheckReport:
    res = load_cases(path or KB_DIR / "cases", include_drafts=True)
    problems = list(res.problems)
    for case in res.cases:
        problems += check_trigger_examples(case)
        if engine is not None and case.status == "published":
            problems += check_retrieval_examples(case, engine)
    return CheckReport(res, problems)


def stats(path: Path | None = None) -> dict:
    res = load_cases(path or KB_DIR / "cases", include_drafts=True)
    cases = res.cases
    tax = load_taxonomy()
    by_cat = Counter(c.category for c in cases)
    failing = {p.file for p in res.problems}
    for c in cases:
        if check_trigger_examples(c):
            failing.add(c.path)
    return {
        "cases": len(cases),
        "published": sum(c.status == "published" for c in cases),
        "drafts": sum(c.status == "draft" for c in cases),
        "by_category": {cat.id: by_cat.get(cat.id, 0) for cat in tax.categories},
        "by_source_lang": dict(Counter(c.source_lang for c in cases)),
        "by_evidence": dict(Counter(c.evidence for c in cases)),
        "by_framework": dict(Counter(f for c in cases for f in c.applies_to.frameworks).most_common()),
        "with_triggers": sum(bool(c.triggers) for c in cases),
        "without_triggers": sorted(c.id for c in cases if not c.triggers),
        "failing_files": sorted(failing),
        "problems": len(res.problems),
    }
