"""Feedback -> a review file -> a draft case.

`trainfix feedback export --review FILE` writes the feedback that can teach the KB something (a "this fixed it", a
thumbs-down, or any row with a comment) as one JSON file of review entries. `trainfix kb draft FILE --entry ID` starts
a draft case from one entry, in the same shape as a draft from a GitHub issue: `status: draft`, validated by
`kb check`, never served until a person rewrites it. Everything in the file was already redacted by the feedback
store; it is redacted again here, since the file leaves the machine for review.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import yaml

from app.facts import Attachment, read_attachments
from app.facts.redact import redact
from app.kb import KB_DIR, load_taxonomy
from app.lang import detect_lang
from ingest.github_issue import DraftError, _guess_category, _slug

FORMAT = "trainfix-feedback-review"
VERSION = 1
MAX_ENTRIES = 5_000  # a review file stays readable; older rows are left for the next export
MAX_ATTACHMENT_CHARS = 20_000


class ReviewError(DraftError):
    """A review file or entry that cannot start a draft (a DraftError, so `kb draft` reports it the same way)."""


def _items(answer: dict[str, Any]) -> list[dict[str, Any]]:
    """What the answer showed, in order: id, kind, title, category, likelihood and its first source."""
    out = []
    for c in list(answer.get("causes") or []) + list(answer.get("related") or []):
        if not isinstance(c, dict) or not c.get("case_id"):
            continue
        cites = [x for x in c.get("citations") or [] if isinstance(x, dict) and x.get("url")]
        out.append({"id": c["case_id"], "kind": c.get("kind", "case"), "title": c.get("title", ""), "category": c.get("category", ""),
                    "likelihood": c.get("likelihood", ""), "source": cites[0]["url"] if cites else ""})
    return out


def review_entry(row: dict[str, Any]) -> dict[str, Any]:
    """One feedback row (FeedbackStore.export) as a review entry: what was asked, what was shown, what the user said."""
    answer = row.get("answer") if isinstance(row.get("answer"), dict) else {}
    extra = row.get("extra") if isinstance(row.get("extra"), dict) else {}
    atts = row.get("attachments") if isinstance(row.get("attachments"), dict) else {}
    return {
        "id": row.get("id"),
        "time": row.get("time"),
        "channel": row.get("channel"),
        "kind": row.get("kind"),
        "item": extra.get("item") or row.get("case_id"),
        "comment": extra.get("comment", ""),
        "language": answer.get("language") or detect_lang(row.get("question") or ""),
        "question": row.get("question") or "",
        "conversation": [c for c in extra.get("conversation") or [] if isinstance(c, str)],
        "summary": answer.get("summary", ""),
        "confident": answer.get("confident"),
        "shown": _items(answer),
        "attachments": {k: redact(str(v)[:MAX_ATTACHMENT_CHARS])[0] for k, v in atts.items()},
    }


def wanted(row: dict[str, Any]) -> bool:
    """Rows worth a reviewer's time: a fix confirmed, an answer rejected, or anything the user commented on."""
    extra = row.get("extra") if isinstance(row.get("extra"), dict) else {}
    return row.get("kind") in ("fixed", "down") or bool(extra.get("comment"))


def write_review(rows: list[dict[str, Any]], path: Path) -> int:
    """Write the review file; returns the number of entries (the newest MAX_ENTRIES of the wanted rows)."""
    entries = [review_entry(r) for r in rows if wanted(r)][-MAX_ENTRIES:]
    doc = {"format": FORMAT, "version": VERSION, "exported": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "entries": entries}
    path.write_text(json.dumps(doc, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    return len(entries)


def is_review(data: Any) -> bool:
    return isinstance(data, dict) and data.get("format") == FORMAT


def pick(data: dict[str, Any], entry: int | None, path: Path) -> dict[str, Any]:
    entries = [e for e in data.get("entries") or [] if isinstance(e, dict)]
    if not entries:
        raise ReviewError(f"{path}: the review file has no entries")
    if entry is None:
        if len(entries) == 1:
            return entries[0]
        ids = ", ".join(str(e.get("id")) for e in entries[:20]) + (" ..." if len(entries) > 20 else "")
        raise ReviewError(f"{path}: {len(entries)} entries (ids {ids}); choose one with --entry ID")
    for e in entries:
        if e.get("id") == entry:
            return e
    raise ReviewError(f"{path}: no entry with id {entry}")


def draft_case_from_entry(e: dict[str, Any], category: str | None = None) -> tuple[str, str, str]:
    """(case id, category, file text) of a draft case started from one review entry."""
    question = " ".join(str(e.get("question") or "").split())[:2000]
    if not question:
        raise ReviewError(f"entry {e.get('id')}: no question to start a case from")
    lang = "zh" if e.get("language") == "zh" else "en"
    shown = [s for s in (e.get("shown") if isinstance(e.get("shown"), list) else []) if isinstance(s, dict)]
    item = next((s for s in shown if s.get("id") == e.get("item")), None)
    fixed = e.get("kind") == "fixed"
    cat = category or ((item or {}).get("category") if fixed else None) or _guess_category(question + " " + str(e.get("comment") or ""))
    if cat not in load_taxonomy(KB_DIR).ids():
        raise ReviewError(f"unknown category {cat!r}; see kb/taxonomy.yaml")
    cid = f"draft-feedback-{e.get('id')}-{_slug(question, 40)}".strip("-")[:80]
    title = question if len(question) <= 120 else question[:117] + "..."
    given = e.get("attachments") if isinstance(e.get("attachments"), dict) else {}
    atts = [Attachment(name=str(k), content=str(v)) for k, v in list(given.items())[:20]]
    facts = read_attachments(atts).shown() if atts else []
    src = (item or {}).get("source", "") if fixed else ""  # a confirmed fix points at its case's source; else a placeholder
    source = {"url": src, "title": f"TODO: replace with the report behind trainfix feedback #{e.get('id')} (related: {(item or {}).get('id') or 'the answer shown'})",
              "lang": lang} if src else {"url": f"https://feedback.invalid/trainfix/{e.get('id')}", "title": f"TODO: the report behind trainfix feedback #{e.get('id')}", "lang": lang}
    todo_en, todo_zh = ("TODO (translate)", "TODO（翻译）")
    fm = {
        "id": cid,
        "category": cat,
        "status": "draft",
        "title": {"en": title if lang == "en" else f"{todo_en}: {title}", "zh": title if lang == "zh" else f"{todo_zh}: {title}"},
        "symptoms": {"en": [title] if lang == "en" else [f"{todo_en}: {title}"], "zh": [title] if lang == "zh" else [f"{todo_zh}: {title}"]},
        "applies_to": {"frameworks": [], "models": [], "stages": []},
        "triggers": [],
        "causes": [{"en": "TODO: the cause, in your own words, from the feedback below", "zh": "TODO：用自己的话写出原因", "likelihood": "medium"}],
        "fixes": [{"en": "TODO: the fix, in your own words", "zh": "TODO：用自己的话写出解决办法"}],
        "evidence": "reporter-confirmed" if fixed else "community-advice",
        "sources": [source],
        "examples": {"match": [{"query": title}], "no_match": [{"query": "TODO: a near-miss question that must not match"}]},
    }
    head = yaml.safe_dump(fm, allow_unicode=True, sort_keys=False, width=200)
    what = {"fixed": "this fixed it", "down": "thumbs down", "up": "thumbs up"}.get(str(e.get("kind")), str(e.get("kind")))
    notes = ["## English", "", "### Source notes (for the reviewer; rewrite before publishing)", ""]
    notes.append(f"- Feedback #{e.get('id')} from {e.get('channel')} at {e.get('time')}: **{what}**" + (f" on `{e.get('item')}`" if e.get("item") else ""))
    if e.get("comment"):
        notes.append(f"- The user's comment: “{e['comment']}”")
    if e.get("summary"):
        notes.append(f"- The answer's first line: {e['summary']}")
    if shown:
        notes.append("- Shown, in order: " + "; ".join(f"`{s.get('id')}` ({s.get('likelihood') or '-'})" for s in shown[:6]))
    conv = [c for c in (e.get("conversation") if isinstance(e.get("conversation"), list) else []) if isinstance(c, str) and c and c != e.get("question")]
    if conv:
        notes.append("- Earlier in the conversation: " + " / ".join(" ".join(c.split())[:200] for c in conv[-3:]))
    if facts:
        notes.append("- Facts read from the user's files (candidates for triggers):")
        notes += [f"  - `{f.key}` = `{f.value}` ({f.where()})" for f in facts[:20]]
    notes += ["", "## 中文", "", "### 审阅说明", "", "草稿：来自用户反馈。请用自己的话写出原因与解决办法，补全中英文、替换来源并添加触发条件后，再把 status 改为 published。", ""]
    return cid, cat, f"---\n{head}---\n\n" + "\n".join(notes)


def draft_from_review(data: dict[str, Any], path: Path, entry: int | None, out: Path | None = None, category: str | None = None) -> Path:
    e = pick(data, entry, path)
    cid, cat, text = draft_case_from_entry(e, category)
    from ingest.github_issue import write_draft  # github_issue imports this module for review files

    return write_draft(cid, cat, text, out)
