"""Feedback (thumbs, "this fixed it") from every channel, in one SQLite file in the data directory."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from app.facts.redact import redact

KINDS = ("up", "down", "fixed")
MAX_STORED_CHARS = 200_000  # a stored answer or attachment is cut past this (a row never holds megabytes)
COMMENT_MAX_CHARS = 500  # the optional one-line comment (the API refuses longer ones; the store cuts, whatever the caller)
ITEM_MAX_CHARS = 200  # a case or thread-note id


def one_line(text: Any, limit: int = COMMENT_MAX_CHARS) -> str:
    """A user's comment as one redacted line: whitespace runs (newlines too) become one space, cut to `limit`."""
    if not isinstance(text, str):
        return ""
    # redact first, on the text as written (a multi-line secret is still recognised), then fold and cut
    return " ".join(redact(text[:MAX_STORED_CHARS])[0].split())[:limit]


def _clean(text: str) -> str:
    return redact(text[:MAX_STORED_CHARS])[0]


def _clean_json(obj: Any, depth: int = 0) -> Any:
    """Every string inside a JSON value redacted (not the dumped text, where "\\n" would hide a token's start);
    an over-long value is kept as its cut, redacted text."""
    if depth == 0 and len(json.dumps(obj, ensure_ascii=False)) > MAX_STORED_CHARS:
        return {"truncated": _clean(json.dumps(obj, ensure_ascii=False))}
    if isinstance(obj, str):
        return redact(obj)[0]
    if depth > 20:
        return None
    if isinstance(obj, dict):
        return {redact(str(k))[0]: _clean_json(v, depth + 1) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_clean_json(v, depth + 1) for v in obj]
    return obj


class FeedbackStore:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(path), check_same_thread=False)
        self._lock = threading.Lock()
        with self._lock:
            # WAL: an acknowledged row survives a crash of the process; NORMAL sync is durable in WAL mode
            self._db.execute("pragma journal_mode=WAL")
            self._db.execute("pragma synchronous=NORMAL")
            self._db.execute(
                "create table if not exists feedback (id integer primary key, ts real, channel text, kind text, case_id text,"
                " question text, attachments text, answer text, extra text)"
            )
            self._db.commit()

    def add(
        self,
        kind: str,
        question: str,
        answer: dict[str, Any] | None = None,
        attachments: dict[str, str] | None = None,
        case_id: str | None = None,
        channel: str = "ui",
        extra: dict[str, Any] | None = None,
        item: str | None = None,
        comment: str | None = None,
    ) -> int:
        """Store one feedback row; everything stored is redacted here again (question, files, the answer, comments),
        whatever the caller did, and cut to a bounded size. `item` is the case or thread-note id the feedback is about
        (for "fixed" it is also the row's case_id); `comment` is the user's optional one-line remark."""
        if kind not in KINDS:
            raise ValueError(f"feedback kind must be one of {', '.join(KINDS)}")
        atts = {redact(name)[0][:255]: _clean(text) for name, text in list((attachments or {}).items())[:20]}
        answer = _clean_json(answer) if answer else {}
        extra = _clean_json(extra) if extra else {}
        item = redact((item or "").strip())[0][:ITEM_MAX_CHARS] or None  # redact first: a cut secret would no longer match
        case_id = redact(case_id)[0][:ITEM_MAX_CHARS] if case_id else case_id
        if item:
            extra["item"] = item
        if kind == "fixed" and not case_id:
            case_id = item
        note = one_line(comment if comment is not None else extra.get("comment"))
        if note:
            extra["comment"] = note
        else:
            extra.pop("comment", None)
        with self._lock:
            cur = self._db.execute(
                "insert into feedback (ts, channel, kind, case_id, question, attachments, answer, extra) values (?,?,?,?,?,?,?,?)",
                (time.time(), channel, kind, case_id, _clean(question or ""), json.dumps(atts, ensure_ascii=False),
                 json.dumps(answer or {}, ensure_ascii=False), json.dumps(extra or {}, ensure_ascii=False)),
            )
            self._db.commit()
            return int(cur.lastrowid)

    def export(self) -> list[dict[str, Any]]:
        with self._lock:
            rows = self._db.execute("select id, ts, channel, kind, case_id, question, attachments, answer, extra from feedback order by id").fetchall()
        out = []
        for r in rows:
            out.append({
                "id": r[0], "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(r[1])), "channel": r[2], "kind": r[3], "case_id": r[4],
                "question": r[5], "attachments": json.loads(r[6]), "answer": json.loads(r[7]), "extra": json.loads(r[8]),
            })
        return out
