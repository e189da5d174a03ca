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


class FeedbackStore:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(path), check_same_thread=False)
        self._lock = threading.Lock()
        with self._lock:
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
    ) -> int:
        """Store one feedback row; question and attachments are redacted again here, whatever the caller did."""
        if kind not in KINDS:
            raise ValueError(f"feedback kind must be one of {', '.join(KINDS)}")
        atts = {name: redact(text)[0] for name, text in (attachments or {}).items()}
        with self._lock:
            cur = self._db.execute(
                "insert into feedback (ts, channel, kind, case_id, question, attachments, answer, extra) values (?,?,?,?,?,?,?,?)",
                (time.time(), channel, kind, case_id, redact(question or "")[0], json.dumps(atts, ensure_ascii=False),
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
