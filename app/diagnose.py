"""The diagnosis: one function every channel (CLI, UI, API, Slack) calls. Channels only translate its result."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import yaml

from app.assess import SCORING, Assessed, Assessment, Reason, Scoring, assess
from app.budgets import BUDGETS, Cut, cut_text
from app.facts import Attachment, FactSet, code_blocks, read_attachments
from app.facts.redact import redact
from app.facts.text import text_facts
from app.fixes import fixes_for_user
from app.kb import KB_DIR, iter_leaves
from app.lang import detect_lang
from app.lexical import tokenize
from app.messages import has as has_msg
from app.messages import t as msg
from app.models import CauseOut, Citation, Diagnosis, Fact, Supporting
from app.retrieve import Candidates, Engine

# "I already did X" statements: an explicit action, not just "still" / "还是" (which describe the symptom).
# Sentences are split first and each is searched once, so the cost is linear in the text's length.
_SENTENCE = re.compile(r"[^.。!！?？\n]+")
_TRIED_MARK = re.compile(
    r"already|i(?:'ve| have)? tried|tried (?:to |setting |using |removing |lowering )|did ?n[o']t help|does ?n[o']t help|no luck|"
    r"已经|试过|尝试过|也试了|改过|换过|去掉了|删掉了|删除了",
    re.I,
)


def tried_statements(text: str) -> list[str]:
    """The sentences in which the user says what they already did."""
    out = []
    for m in _SENTENCE.finditer(text):
        sent = m.group(0).strip()
        if len(sent) > 3 and _TRIED_MARK.search(sent):
            out.append(sent[:500])
    return out


SUPPORT_MIN = 0.6  # combined dense+lexical score (0..1) an article needs to be shown as supporting


def _snippet(article: dict, lang: str) -> str:
    secs = article.get("sections") or []
    best = next((s for s in secs if s["part"] in ("causes", "fixes")), secs[0] if secs else {"text": ""})
    text = re.sub(r"\s+", " ", best["text"]).strip()
    return text[:220] + ("…" if len(text) > 220 else "")


class InputError(ValueError):
    """Nothing could be answered: the message says why."""


@dataclass
class Turn:
    role: str
    content: str
    attachments: list[Attachment] = field(default_factory=list)





@lru_cache(maxsize=1)
def _clarify_data() -> dict[str, Any]:
    return yaml.safe_load((KB_DIR / "clarify.yaml").read_text(encoding="utf-8"))


def signal_text(key: str, lang: str) -> str:
    return msg(f"signal.{key}", lang) if has_msg(f"signal.{key}") else key


def gather(question: str, attachments: list[Attachment], history: list[Turn], max_bytes: int) -> tuple[str, str, FactSet, list[str]]:
    """Prose of the conversation, the redacted question, the facts of every file so far, and 'already tried' statements."""
    q, _ = redact(question or "")
    prose, blocks = code_blocks(q)
    atts = list(attachments) + blocks
    earlier_prose = []
    earlier_files: set[str] = set()
    for k, t in enumerate(history):
        if t.role != "user":
            continue
        p, b = code_blocks(redact(t.content or "")[0])
        for a in b:
            a.name = f"earlier-{k + 1}-{a.name}"
        earlier_prose.append(p)
        earlier_files |= {a.name for a in b} | {a.name for a in t.attachments}
        atts += b + list(t.attachments)
    fs = read_attachments(atts, prose, max_bytes)
    fs.earlier_files = earlier_files
    # files are more precise than prose, but in a follow-up the latest statement ("now at lr 1e-5") wins
    now = text_facts(prose)
    before = [f for p in earlier_prose for f in text_facts(p, "earlier message")]
    fs.facts = (now + fs.facts if earlier_prose else fs.facts + now) + before
    tried = [t for p in [prose, *earlier_prose] for t in tried_statements(p)]
    return prose, " ".join(earlier_prose), fs, tried


_ERROR_LINE = re.compile(r"(?i)(error|exception|traceback|warning|assert|failed|killed|nan\b|inf\b|报错|错误|失败|异常)")


def error_lines(texts: list[str], limit: int = 6) -> list[str]:
    """The error-like lines of pasted files (tracebacks, warnings): the most specific words a user gives."""
    out: list[str] = []
    for t in texts:
        for ln in t[:200_000].splitlines():
            ln = ln.strip()
            if 8 <= len(ln) and _ERROR_LINE.search(ln) and not ln.startswith(("File ", "at ", "^")) and ln[:200] not in out:
                out.append(ln[:200])
                if len(out) >= limit:
                    return out
    return out


def _retrieval_text(prose: str, earlier: str, facts: dict[str, Fact], lang: str, errors: list[str] | None = None) -> str:
    parts = [prose]
    if earlier:
        parts.append(earlier)
    if errors:
        parts.append(" ".join(errors))
    sig = [signal_text(k, lang) for k in facts if has_msg(f"signal.{k}")]
    if sig:
        parts.append("; ".join(sig))
    return " ".join(p for p in parts if p).strip()


def _symptoms(a: Assessed, q: set[str], lang: str) -> list[str]:
    """The case's symptoms that share two or more words with the question's tokens `q`."""
    if a.case is None:
        return []
    out = []
    for s in a.case.symptoms.get(lang):
        toks = set(tokenize(s))
        if toks and len(q & toks) >= 2:
            out.append(s)
    return out[:2]


def _reason_text(r: Reason, lang: str) -> str | None:
    if r.key in ("trigger", "contradiction") and r.hit is not None:
        txt = r.hit.evidence(lang)
        return msg("reason.against", lang, text=txt) if r.key == "contradiction" else txt
    if r.key == "signal" and r.facts:
        f = r.facts[0]
        return msg("reason.signal", lang, signal=signal_text(f.key, lang), where=f.where())
    if r.key == "threads":
        return msg("reason.threads", lang, n=r.params["n"], ids=", ".join(f"`{i}`" for i in r.params["ids"]))
    if r.key in ("version_in", "version_out") and r.facts:
        return msg(f"reason.{r.key}", lang, pkg=r.params["pkg"], have=r.params["have"], rng=r.params["range"], where=r.facts[0].where())
    return None


def _cause_out(a: Assessed, lang: str, q_tokens: set[str], cite_from: int, files: dict[str, str]) -> CauseOut:
    ev: list[str] = []
    for r in sorted(a.reasons, key=lambda r: 0 if r.facts and r.facts[0].kind != "prose" and r.facts[0].line else 1):
        t = _reason_text(r, lang)
        if t and t not in ev and not (r.key == "signal" and any(f"{r.facts[0].file}:{r.facts[0].line}" in e for e in ev)):
            ev.append(t)
    tried = a.reason("tried")
    demoted = msg("reason.tried", lang, statement=tried.params["statement"]) if tried else ""
    if a.note is not None:
        n = a.note
        return CauseOut(
            kind="note", case_id=n.id, title=n.title, cause=n.symptom.get(lang), resolution=n.resolution.get(lang), url=n.url,
            category=n.category, score=round(a.score, 4), likelihood=a.likelihood, fixes=[n.resolution.get(lang)],
            evidence=ev, evidence_level=n.evidence, citations=[Citation(n=cite_from, url=n.url, title=n.title)], demoted=demoted,
        )
    c = a.case
    assert c is not None
    cites = [Citation(n=cite_from + i, url=s.url, title=s.title) for i, s in enumerate(c.sources)]
    causes = sorted(c.causes, key=lambda x: {"high": 0, "medium": 1, "low": 2}[x.likelihood])
    fixes, diffs = fixes_for_user(c, lang, files)
    return CauseOut(
        case_id=c.id,
        title=c.title.get(lang),
        cause=causes[0].get(lang),
        category=c.category,
        score=round(a.score, 4),
        likelihood=a.likelihood,
        fixes=fixes,
        diffs=diffs,
        evidence=ev,
        matched_symptoms=_symptoms(a, q_tokens, lang),
        evidence_level=c.evidence,
        citations=cites,
        demoted=demoted,
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


def _summary(d_causes: list[CauseOut], confident: bool, lang: str) -> str:
    """The answer's first line: the most likely cause and its fix, or an honest 'not confident'."""
    if not d_causes:
        return msg("summary.none", lang)
    top = d_causes[0]
    fix = (top.fixes[0] if top.fixes else "").split("\n")[0]
    fix = fix if len(fix) <= 220 else fix[:217] + "…"
    if confident:
        return msg("summary.lead", lang, title=top.title, fix=fix)
    return msg("summary.unsure", lang, title=top.title)


def _apply_budgets(question: str, attachments: list[Attachment]) -> tuple[str, Cut]:
    cut = Cut()
    question, over = cut_text(question, BUDGETS.question_chars)
    if over:
        cut.add("cut.question", limit=BUDGETS.question_chars)
    if len(attachments) > BUDGETS.attachments:
        cut.add("cut.attachments", limit=BUDGETS.attachments, n=len(attachments))
    return question, cut


def _budget_history(history: list[Turn], cut: Cut) -> list[Turn]:
    """The latest turns within the turn and size budgets (older ones are dropped with a note)."""
    kept: list[Turn] = []
    size = 0
    for t in reversed(history):
        n = len(t.content or "")
        if len(kept) >= BUDGETS.history_turns or size + n > BUDGETS.history_chars:
            cut.add("cut.history", n=len(kept))
            break
        kept.append(t)
        size += n
    return list(reversed(kept))


@dataclass
class Question:
    """A question made ready for assessment: what was read (gather) and what retrieval found (retrieve)."""

    prose: str
    earlier: str
    fs: FactSet
    facts: dict[str, Fact]
    tried: list[str]
    lang: str
    text: str
    cand: Candidates
    cut: Cut


def prepare(
    engine: Engine,
    question: str,
    attachments: list[Attachment] | None = None,
    history: list[Turn] | None = None,
    lang: str | None = None,
    mode: str = "full",
    max_bytes: int | None = None,
) -> Question:
    """gather and retrieve, within the budgets: everything `assess` needs (the eval's tuner re-assesses it cheaply)."""
    attachments = attachments or []
    question, cut = _apply_budgets(question or "", attachments)
    attachments = attachments[: BUDGETS.attachments]
    history = _budget_history(history or [], cut)
    if not (question or "").strip(" \t\r\n\x00") and not attachments and not any(t.content.strip() for t in history if t.role == "user"):
        raise InputError("the question is empty: describe what you see (e.g. 'loss goes to 0 after 10 steps') or attach a config or log.")
    max_bytes = max_bytes or int(engine.settings.max_upload_mb * 1024 * 1024)
    prose, earlier, fs, tried = gather(question, attachments, history, max_bytes)
    lang = lang or detect_lang(prose or earlier or question, default="en")
    if lang not in ("en", "zh"):
        raise InputError(f"unknown language {lang!r}: use 'en' or 'zh'.")
    facts = fs.by_key()
    text = _retrieval_text(prose, earlier, facts, lang, error_lines(list(fs.redacted_texts.values())))
    if not text and not facts:
        notes = [n.message for n in fs.files]
        raise InputError("nothing to go on: the question is empty and no attached file could be read. " + " ".join(notes))
    cand = engine.candidates(text[: BUDGETS.retrieval_chars], mode=mode)
    return Question(prose, earlier, fs, facts, tried, lang, text, cand, cut)


def assess_question(engine: Engine, q: Question, mode: str = "full", scoring: Scoring = SCORING) -> Assessment:
    """The assess stage on a prepared question (the same call for an answer and for the tuner's grid)."""
    t0 = time.perf_counter()
    a = assess(engine, q.cand, q.facts, q.prose + " " + q.earlier, q.tried, mode=mode, scoring=scoring, earlier_files=q.fs.earlier_files)
    a.timings["assess"] = time.perf_counter() - t0
    return a


def diagnose(
    engine: Engine,
    question: str,
    attachments: list[Attachment] | None = None,
    history: list[Turn] | None = None,
    lang: str | None = None,
    top: int = 3,
    mode: str = "full",
    max_bytes: int | None = None,
    trace: dict[str, Any] | None = None,
) -> Diagnosis:
    """Ranked causes with fixes, evidence and citations for a question, its attachments and the conversation so far.

    gather (facts with their origin) -> retrieve (dense + BM25 candidates) -> assess (all scoring) -> the answer.
    """
    q = prepare(engine, question, attachments, history, lang, mode, max_bytes)
    prose, fs, facts, lang, text, cut = q.prose, q.fs, q.facts, q.lang, q.text, q.cut
    a = assess_question(engine, q, mode)
    if trace is not None:  # internals for the eval and the bench
        trace.update(top_cos=a.top_cos, top_lex=a.top_lex, timings=a.timings, trigger=bool(a.ranked and a.ranked[0].triggers), assessment=a)
    files = dict(fs.redacted_texts)
    q_tokens = set(tokenize(text))  # once per question, not once per cause
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
    notes = cut.get(lang) + [n.text(lang) for n in fs.files if not n.ok]
    if fs.redactions:
        notes.append(msg("note.redacted", lang, n=fs.redactions))
    data = _clarify_data()
    supporting = [
        Supporting(article_id=art["id"], title=art["title"], source=art["source"], score=round(sc, 4), snippet=_snippet(art, lang))
        for art, sc in a.supporting
        if sc >= SUPPORT_MIN
    ]
    return Diagnosis(
        supporting=supporting,
        language=lang,  # type: ignore[arg-type]
        confident=a.confident,
        question=prose,
        causes=causes if a.confident else [],
        related=[] if a.confident else causes,
        facts=fs.shown(),
        files=fs.files,
        clarify=_clarify(a.ranked, facts, lang),
        notes=notes,
        general_checks=[] if a.confident else data["general_checks"][lang],
        also_noticed=also,
        summary=_summary(causes, a.confident, lang),
    )
