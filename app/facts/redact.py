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
# The key starts where a word starts and its prefix is bounded, so a long run of letters costs linear time.
_SECRET_KEY = r"(?:(?<![A-Za-z0-9_\-])[A-Za-z0-9_\-]{0,40}?(?:api[_\-]?key|token|password|passwd|secret|access[_\-]?key|private[_\-]?key|auth))"
_KV = re.compile(
    r"""(?P<k>["']?""" + _SECRET_KEY + r"""["']?[ \t]{0,8}[:=][ \t]{0,8})(?P<q>["']?)(?P<v>[^\s"',}{]{4,512})(?P=q)""",
    re.I,
)
_FLAG_KEY = r"(?:[A-Za-z0-9_\-]{0,40}?(?:api[_\-]?key|token|password|passwd|secret|access[_\-]?key|private[_\-]?key|auth))"
_FLAG = re.compile(r"(?P<k>(?<![A-Za-z0-9_])--" + _FLAG_KEY + r"[= ][ \t]{0,8})(?P<q>[\"']?)(?P<v>[^\s\"']{4,512})(?P=q)", re.I)
_URL_CRED = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]{1,20}://[^\s:/@]{1,128}:)([^\s@/]{1,256})(@)")
_AUTH_HEADER = re.compile(r"(?i)(\bauthorization[\"']?[ \t]{0,4}[:=][ \t]{0,4}[\"']?(?:bearer|basic|token)[ \t]{1,4})([A-Za-z0-9._~+/=\-]{6,4096})")
_JWT = re.compile(r"\beyJ[A-Za-z0-9_\-]{5,2048}\.[A-Za-z0-9_\-]{5,2048}\.[A-Za-z0-9_\-]{5,2048}")
_PRIVATE_KEY = re.compile(r"-----BEGIN [A-Z ]{0,40}PRIVATE KEY-----[\s\S]{0,20000}?-----END [A-Z ]{0,40}PRIVATE KEY-----")
_NETRC = re.compile(r"(?i)(\bmachine[ \t]+\S{1,256}[ \t]+login[ \t]+\S{1,256}[ \t]+password[ \t]+)(\S{1,512})")
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
    text = sub(_PRIVATE_KEY, MASK, text)
    text = sub(_JWT, MASK, text)
    text = sub(_URL_CRED, lambda m: m.group(1) + MASK + m.group(3), text)
    text = sub(_AUTH_HEADER, lambda m: m.group(1) + MASK, text)
    text = sub(_NETRC, lambda m: m.group(1) + MASK, text)
    text = sub(_KV, _mask_kv, text)
    text = sub(_FLAG, lambda m: m.group("k") + m.group("q") + MASK + m.group("q"), text)
    text = sub(_WANDB, lambda m: m.group(1) + MASK, text)
    text = sub(_BARE_HEX40, lambda m: m.group(0).replace(m.group(1), MASK), text)
    return text, text.count(MASK) - before
