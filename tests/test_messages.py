"""The message catalog: every key has both languages, the same placeholders in each, and stages use only known keys."""

from __future__ import annotations

import re
import string
from pathlib import Path

from app.messages import CATALOG, t

ROOT = Path(__file__).resolve().parent.parent


def _fields(s: str) -> set[str]:
    return {f for _, f, _, _ in string.Formatter().parse(s) if f}


def test_every_message_has_both_languages_with_the_same_placeholders():
    for key, (en, zh) in CATALOG.items():
        assert en.strip() and zh.strip(), key
        assert _fields(en) == _fields(zh), key
        words = re.sub(r"\{[^}]*\}|[^A-Za-z\u4e00-\u9fff]", "", zh)
        assert re.search(r"[\u4e00-\u9fff]", zh) or words == re.sub(r"\{[^}]*\}|[^A-Za-z]", "", en), f"{key}: the Chinese text is untranslated"


def test_keys_used_in_code_exist():
    used = set()
    for p in (ROOT / "app").rglob("*.py"):
        used |= set(re.findall(r"""\bmsg\(\s*["']([a-z_0-9]+\.[a-z_.0-9]+)["']""", p.read_text(encoding="utf-8")))
        used |= set(re.findall(r"""\bcut\.add\(\s*["']([a-z_0-9]+\.[a-z_.0-9]+)["']""", p.read_text(encoding="utf-8")))
    assert used, "no message keys found in app/: the scan is broken"
    assert not used - set(CATALOG), sorted(used - set(CATALOG))


def test_formatting_in_both_languages():
    assert t("cut.question", "en", limit=100000).startswith("Your message was longer than 100,000")
    assert "100,000" in t("cut.question", "zh", limit=100000)
    assert t("signal.log.nan_loss", "zh") == "loss 变成 NaN"
    assert t("no.such.key", "en") == "no.such.key"
