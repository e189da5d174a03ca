"""Scraped articles (HTML or text) as supporting documents. (Filled in by the article loader.)"""

from __future__ import annotations

from pathlib import Path


def load_article_files(path: Path):
    return [], []


def article_units(article):
    return []
