"""Redact secrets from anything a user pastes, before it is parsed, echoed, logged or stored."""

from __future__ import annotations

import re

MASK = "<redacted>"

_PATTERNS = [
    re.compile(r"hf_[A-Za-z0-9]{20,}"),  # Hugging Face tokens
    re.compile(r"\bsk-(?:proj-)?[A-Za-z0-9_\-]{20,}"),  # OpenAI-style keys
    re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}"),  # GitHub tokens
    re.compile(r"\bxox[abprs]-[A-Za-z0-9\-]{10,}"),  # Slack tokens
    re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),  # AWS access key ids
    re.compile(r"(?i)(?<=wandb_api_key=)[A-Za-z0-9]{20,}"),
]
# key = value / "key": "value" / --key value, where the key names a secret
_SECRET_KEY = r"(?:[A-Za-z0-9_\-]*(?:api[_\-]?key|token|password|passwd|secret|access[_\-]?key|private[_\-]?key|auth))"
_KV = re.compile(
    r"""(?P<k>["']?""" + _SECRET_KEY + r"""["']?\s*[:=]\s*)(?P<q>["']?)(?P<v>[^\s"',}{]{4,})(?P=q)""",
    re.I,
)
_FLAG = re.compile(r"(?P<k>--" + _SECRET_KEY + r"[= ]\s*)(?P<q>[\"']?)(?P<v>[^\s\"']{4,})(?P=q)", re.I)
_WANDB = re.compile(r"(?i)(wandb\s+login\s+)([a-f0-9]{40})")
_BARE_HEX40 = re.compile(r"(?i)(?<=wandb)[^\n]{0,40}?\b([a-f0-9]{40})\b")


_NOT_SECRET = re.compile(r"(?i)(pad|eos|bos|unk|sep|cls|mask|special)_token|max_\w*token|token_?(len|num|count|ids?)\b")


def _mask_kv(m: re.Match) -> str:
    if _NOT_SECRET.search(m.group("k")) or MASK in m.group("v"):
        return m.group(0)
    return m.group("k") + m.group("q") + MASK + m.group("q")


def redact(text: str) -> tuple[str, int]:
    """Return the text with secrets masked and how many were masked."""
    before = text.count(MASK)

    def sub(pattern: re.Pattern, repl, s: str) -> str:
        return pattern.sub(repl, s)

    for p in _PATTERNS:
        text = sub(p, MASK, text)
    text = sub(_KV, _mask_kv, text)
    text = sub(_FLAG, lambda m: m.group("k") + m.group("q") + MASK + m.group("q"), text)
    text = sub(_WANDB, lambda m: m.group(1) + MASK, text)
    text = sub(_BARE_HEX40, lambda m: m.group(0).replace(m.group(1), MASK), text)
    return text, text.count(MASK) - before
