"""The render stage: the Diagnosis in the user's language, from what the assess stage decided.

With `app/render.py` (channel formats) this is the only stage that knows a language. Every sentence of an answer
comes from the message catalog (`app/messages.py`) by key, or from the KB's own bilingual fields; each catalog
sentence is also carried as a `Said` (key + parameters), so a machine reader (an IDE plugin, the eval) can act on
what was said without parsing prose in either language.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import yaml

from app.assess import SCORING, Assessed, Assessment, Reason
from app.fixes import fixes_for_user
from app.kb import KB_DIR, iter_leaves
from app.lexical import tokenize
from app.messages import has as has_msg
from app.messages import t as msg
from app.models import CauseOut, Citation, Diagnosis, Fact, Said, Supporting

if TYPE_CHECKING:
    from app.diagnose import Question

SUPPORT_MIN = 0.6  # combined dense+lexical score (0..1) an article needs to be shown as supporting


def words(said: Said, lang: str) -> str:
    """A catalog sentence in the user's language."""
    return msg(said.key, lang, **said.params)


def _signal(key: str, lang: str) -> str:
    return msg(f"signal.{key}", lang) if has_msg(f"signal.{key}") else key


@lru_cache(maxsize=1)
def _clarify_data() -> dict[str, Any]:
    return yaml.safe_load((KB_DIR / "clarify.yaml").read_text(encoding="utf-8"))


def _snippet(article: dict) -> str:
    secs = article.get("sections") or []
    best = next((s for s in secs if s["part"] in ("causes", "fixes")), secs[0] if secs else {"text": ""})
    text = re.sub(r"\s+", " ", best["text"]).strip()
    return text[:220] + ("…" if len(text) > 220 else "")


@lru_cache(maxsize=8192)
def _words(text: str) -> frozenset[str]:
    """A symptom line's tokens: the same few hundred lines recur in every answer, and jieba is the cost (~1.3 ms/answer)."""
    return frozenset(tokenize(text))


def _symptoms(a: Assessed, q: set[str], lang: str) -> list[str]:
    """The case's symptoms that share two or more words with the question's tokens `q`."""
    if a.case is None:
        return []
    out = []
    for s in a.case.symptoms.get(lang):
        toks = _words(s)
        if toks and len(q & toks) >= 2:
            out.append(s)
    return out[:2]


def _said(r: Reason, item_id: str) -> Said | None:
    """What a reason says, as a key and parameters (the text of a trigger is the case's own bilingual `explain`)."""
    if r.key in ("trigger", "contradiction") and r.hit is not None:
        facts = [{"key": f.key, "where": f.where()} for f in r.facts]
        return Said(key=f"reason.{'against' if r.key == 'contradiction' else 'trigger'}", params={"case": item_id, "facts": facts})
    if r.key == "signal" and r.facts:
        f = r.facts[0]
        return Said(key="reason.signal", params={"signal": f.key, "where": f.where()})
    if r.key == "threads":
        return Said(key="reason.threads", params={"n": r.params["n"], "ids": list(r.params["ids"])})
    if r.key == "prior":
        return Said(key="reason.prior", params={"n": r.params["n"]})
    if r.key in ("version_in", "version_out") and r.facts:
        p = r.params
        return Said(key=f"reason.{r.key}", params={"pkg": p["pkg"], "have": p["have"], "rng": p["range"], "where": r.facts[0].where()})
    return None


def _reason_words(r: Reason, said: Said, lang: str) -> str:
    if said.key == "reason.trigger" and r.hit is not None:
        return r.hit.evidence(lang)
    if said.key == "reason.against" and r.hit is not None:
        return msg("reason.against", lang, text=r.hit.evidence(lang))
    if said.key == "reason.signal":
        return msg("reason.signal", lang, signal=_signal(said.params["signal"], lang), where=said.params["where"])
    if said.key == "reason.threads":
        return msg("reason.threads", lang, n=said.params["n"], ids=", ".join(f"`{i}`" for i in said.params["ids"]))
    return words(said, lang)


def _cause_out(a: Assessed, lang: str, q_tokens: set[str], cite_from: int, files: dict[str, str]) -> CauseOut:
    ev: list[str] = []
    said: list[Said] = []
    for r in sorted(a.reasons, key=lambda r: 0 if r.facts and r.facts[0].kind != "prose" and r.facts[0].line else 1):
        s = _said(r, a.item_id)
        if s is None:
            continue
        t = _reason_words(r, s, lang)
        if t not in ev and not (r.key == "signal" and any(f"{r.facts[0].file}:{r.facts[0].line}" in e for e in ev)):
            ev.append(t)
            said.append(s)
    tried = a.reason("tried")
    demoted_said = Said(key="reason.tried", params={"statement": tried.params["statement"]}) if tried else None
    demoted = words(demoted_said, lang) if demoted_said else ""
    if a.note is not None:
        n = a.note
        return CauseOut(
            kind="note", case_id=n.id, title=n.title, cause=n.symptom.get(lang), resolution=n.resolution.get(lang), url=n.url,
            category=n.category, score=round(a.score, 4), likelihood=a.likelihood, fixes=[n.resolution.get(lang)],
            evidence=ev, reasons=said, evidence_level=n.evidence, citations=[Citation(n=cite_from, url=n.url, title=n.title)],
            demoted=demoted, demoted_said=demoted_said,
        )
    c = a.case
    assert c is not None
    cites = [Citation(n=cite_from + i, url=s.url, title=s.title) for i, s in enumerate(c.sources)]
    causes = sorted(c.causes, key=lambda x: {"high": 0, "medium": 1, "low": 2}[x.likelihood])
    fixes, diffs = fixes_for_user(c, lang, files)
    return CauseOut(
        case_id=c.id, title=c.title.get(lang), cause=causes[0].get(lang), category=c.category, score=round(a.score, 4),
        likelihood=a.likelihood, fixes=fixes, diffs=diffs, evidence=ev, reasons=said, matched_symptoms=_symptoms(a, q_tokens, lang),
        evidence_level=c.evidence, citations=cites, demoted=demoted, demoted_said=demoted_said,
    )


def _clarify(ranked: list[Assessed], facts: dict[str, Fact], lang: str) -> dict[str, Any] | None:
    if len(ranked) < 2 or ranked[0].triggers or ranked[1].score < SCORING.close * ranked[0].score:
        return None
    data = _clarify_data()
    wanted: dict[str, int] = {}
    for a in ranked[:3]:
        for t in a.case.triggers if a.case else []:
            for leaf in iter_leaves(t):
                if leaf.fact not in facts:
                    wanted[leaf.fact] = wanted.get(leaf.fact, 0) + 1
    for q in data["questions"]:
        if q["key"] in wanted:
            return {"key": q["key"], "question": q["ask"][lang], "options": q["options"][lang]}
    return None


def _summary(causes: list[CauseOut], confident: bool) -> Said:
    """The answer's first line: the most likely cause and its fix, or an honest 'not confident'."""
    if not causes:
        return Said(key="summary.none")
    top = causes[0]
    fix = (top.fixes[0] if top.fixes else "").split("\n")[0]
    fix = fix if len(fix) <= 220 else fix[:217] + "…"
    if confident:
        return Said(key="summary.lead", params={"title": top.title, "fix": fix})
    return Said(key="summary.unsure", params={"title": top.title})


def compose(q: Question, a: Assessment, top: int = 3) -> Diagnosis:
    """The answer to a prepared question in its language: the top causes (or related leads when not confident),
    what else was noticed in the files, what was read or cut, and the sentences as keys for machines."""
    lang, fs = q.lang, q.fs
    files = dict(fs.redacted_texts)
    q_tokens = set(tokenize(q.text))  # once per question, not once per cause
    cite = 1
    causes: list[CauseOut] = []
    for item in a.ranked[:top]:
        co = _cause_out(item, lang, q_tokens, cite, files)
        cite += len(co.citations)
        causes.append(co)
    also = []
    for item in a.also_noticed:
        co = _cause_out(item, lang, q_tokens, cite, files)
        cite += len(co.citations)
        also.append(co)
    cut = [Said(key=k, params=p) for k, p in q.cut.notes]
    redacted = [Said(key="note.redacted", params={"n": fs.redactions})] if fs.redactions else []
    notes = [words(s, lang) for s in cut] + [n.text(lang) for n in fs.files if not n.ok] + [words(s, lang) for s in redacted]
    supporting = [
        Supporting(article_id=art["id"], title=art["title"], source=art["source"], score=round(sc, 4), snippet=_snippet(art))
        for art, sc in a.supporting
        if sc >= SUPPORT_MIN
    ]
    summary = _summary(causes, a.confident)
    return Diagnosis(
        supporting=supporting,
        language=lang,  # type: ignore[arg-type]
        confident=a.confident,
        question=q.prose,
        causes=causes if a.confident else [],
        related=[] if a.confident else causes,
        facts=fs.shown(),
        files=fs.files,
        clarify=_clarify(a.ranked, q.facts, lang),
        notes=notes,
        notes_said=cut + redacted,
        general_checks=[] if a.confident else _clarify_data()["general_checks"][lang],
        also_noticed=also,
        summary=words(summary, lang),
        summary_said=summary,
    )
