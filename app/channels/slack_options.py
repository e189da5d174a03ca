"""The Slack bot's per-channel options, kept in a small SQLite file in TRAINFIX_HOME (slack.sqlite), so that a
channel's choice (e.g. answer without a mention) survives restarts and is shared by every server process."""

from __future__ import annotations

import sqlite3
import threading
import time

from app.settings import Settings

OPTIONS: dict[str, bool] = {"mention_only": True, "confident_only": False, "quiet_when_unsure": False, "ephemeral": False}


class ChannelOptions:
    """Per-channel switches in TRAINFIX_HOME/slack.sqlite."""

    def __init__(self, settings: Settings) -> None:
        settings.home.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(settings.home / "slack.sqlite"), check_same_thread=False)
        self._lock = threading.Lock()
        with self._lock:
            self._db.execute("create table if not exists channel_options (channel text, key text, value integer, by_user text, ts real, primary key (channel, key))")
            self._db.commit()

    def get(self, channel: str) -> dict[str, bool]:
        """Every option of `channel`: its stored choices over the defaults."""
        with self._lock:
            rows = self._db.execute("select key, value from channel_options where channel = ?", (channel,)).fetchall()
        out = dict(OPTIONS)
        out.update({k: bool(v) for k, v in rows if k in OPTIONS})
        return out

    def set(self, channel: str, key: str, value: bool, user: str = "") -> None:
        """Store one option (and who set it); ValueError for an unknown option."""
        if key not in OPTIONS:
            raise ValueError(f"unknown option {key!r}: use one of {', '.join(OPTIONS)}")
        with self._lock:
            self._db.execute(
                "insert into channel_options (channel, key, value, by_user, ts) values (?,?,?,?,?) "
                "on conflict(channel, key) do update set value=excluded.value, by_user=excluded.by_user, ts=excluded.ts",
                (channel, key, int(value), user, time.time()),
            )
            self._db.commit()
