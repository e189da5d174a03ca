"""The diagnosis: one function every channel (CLI, UI, API, Slack) calls. Channels only translate its result.

This module runs gather and retrieve and calls assess; the answer in the user's language is `app.compose`."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any

from app.assess import SCORING, Assessment, Scoring, assess
from app.budgets import BUDGETS, Cut, cut_text
from app.compose import compose
from app.facts import Attachment, FactSet, code_blocks, read_attachments
from app.facts.redact import redact
from app.facts.text import text_facts
from app.lang import detect_lang
from app.messages import has as has_msg
from app.messages import t as msg
from app.models import Diagnosis, Fact
from app.retrieve import ADAPT, Candidates, Engine

# "I already did X" statements: an explicit action, not just "still" / "还是" (which describe the symptom).
# Sentences are split first and each is searched once (its clauses only up to the mark), so the cost is linear in the text.
_SENTENCE = re.compile(r"[^.。!！?？\n]+")
_CLAUSE_END = re.compile(r"[，,;；]\s*")
_TRIED_MARK = re.compile(
    r"already|i(?:'ve| have)? tried|tried (?:to |setting |using |removing |lowering )|did ?n[o']t help|does ?n[o']t help|no luck|"
    r"已经|试过|尝试过|也试了|改过|换过|去掉了|删掉了|删除了",
    re.I,
)


def tried_statements(text: str) -> list[str]:
    """What the user says they already did: from the clause that says so to the end of its sentence. The clauses before
    it describe the problem ("aux_loss is never added to the loss, and I have already trained half of it"), and a fix
    named there was not tried."""
    out = []
    for m in _SENTENCE.finditer(text):
        sent = m.group(0)
        mark = _TRIED_MARK.search(sent)
        if mark is None:
            continue
        start = max((c.end() for c in _CLAUSE_END.finditer(sent, 0, mark.start())), default=0)
        stmt = sent[start:].strip()
        if len(stmt) > 3:
            out.append(stmt[:500])
    return out


class InputError(ValueError):
    """Nothing could be answered: the message says why."""


@dataclass
class Turn:
    role: str
    content: str
    attachments: list[Attachment] = field(default_factory=list)





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
    text_lang: str = ""  # the language the user wrote in (`lang` is the answer's, which the user may choose)


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
    text_lang = detect_lang(prose or earlier or question, default="en")
    lang = lang or text_lang
    if lang not in ("en", "zh"):
        raise InputError(f"unknown language {lang!r}: use 'en' or 'zh'.")
    facts = fs.by_key()
    text = _retrieval_text(prose, earlier, facts, lang, error_lines(list(fs.redacted_texts.values())))
    if not text and not facts:
        notes = [n.message for n in fs.files]
        raise InputError("nothing to go on: the question is empty and no attached file could be read. " + " ".join(notes))
    cand = engine.candidates(text[: BUDGETS.retrieval_chars], mode=mode, adapt=ADAPT.get(text_lang, 0.0))
    return Question(prose, earlier, fs, facts, tried, lang, text, cand, cut, text_lang)


def assess_question(engine: Engine, q: Question, mode: str = "full", scoring: Scoring = SCORING) -> Assessment:
    """The assess stage on a prepared question (the same call for an answer and for the tuner's grid)."""
    t0 = time.perf_counter()
    a = assess(engine, q.cand, q.facts, q.prose + " " + q.earlier, q.tried, mode=mode, scoring=scoring, earlier_files=q.fs.earlier_files, text_lang=q.text_lang)
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

    gather (facts with their origin) -> retrieve (dense + BM25 candidates) -> assess (all scoring) -> render
    (`app.compose`: the only stage that knows the user's language).
    """
    q = prepare(engine, question, attachments, history, lang, mode, max_bytes)
    a = assess_question(engine, q, mode)
    if trace is not None:  # internals for the eval and the bench
        trace.update(top_cos=a.top_cos, top_lex=a.top_lex, timings=a.timings, trigger=bool(a.ranked and a.ranked[0].triggers), assessment=a)
    return compose(q, a, top)
