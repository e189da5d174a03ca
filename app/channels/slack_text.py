"""Text from Slack as plain text: mrkdwn links and mentions unwrapped, entities decoded, code fences fixed."""

from __future__ import annotations

import html
import re

_LINK = re.compile(r"<([^<>|]+)(?:\|([^<>]*))?>")


def clean_text(text: str, bot_user_id: str | None = None) -> str:
    """Slack mrkdwn -> plain text: our mention removed, links and mentions unwrapped, entities decoded, code fences fixed."""
    text = text or ""
    if bot_user_id:
        text = re.sub(rf"<@{re.escape(bot_user_id)}(?:\|[^>]*)?>\s*", "", text)

    def unwrap(m: re.Match) -> str:
        target, label = m.group(1), m.group(2)
        if target.startswith("@"):
            return "@" + (label or target[1:])
        if target.startswith("#"):
            return "#" + (label or target[1:])
        if target.startswith("!"):
            return "@" + (label or target[1:].split("^")[0])
        return label if label and not target.startswith(("http://", "https://", "mailto:")) else (target if not label or label in target else f"{label} ({target})")

    text = _LINK.sub(unwrap, text)
    text = html.unescape(text)
    return fix_fences(text).strip()


def fix_fences(text: str) -> str:
    """Slack sends ```{"a": 1}``` with the code on the fence's line; put it on its own line so it reads as a block."""
    parts = text.split("```")
    if len(parts) < 3:
        return text
    for i in range(1, len(parts) - 1, 2):
        code = parts[i]
        first = code.split("\n", 1)[0]
        if code.startswith("\n") or re.fullmatch(r"[\w.+-]{1,20}", first.strip()) and "\n" in code:
            continue
        parts[i] = "\n" + code
        if not code.endswith("\n"):
            parts[i] += "\n"
    return "```".join(parts)
