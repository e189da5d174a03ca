"""Language detection: any Han characters make a question Chinese (mixed zh+en is Chinese)."""

from __future__ import annotations

import re

_HAN = re.compile(r"[\u4e00-\u9fff\u3400-\u4dbf]")


def detect_lang(text: str, default: str = "en") -> str:
    """'zh' when the text holds Chinese characters beyond a stray one, else 'en'."""
    han = len(_HAN.findall(text or ""))
    if han >= 2 or (han == 1 and len((text or "").strip()) < 20):
        return "zh"
    return "en" if (text or "").strip() else default
