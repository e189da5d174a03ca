"""Every input has a budget, set here once for every channel (API, UI, Slack, CLI).

Text past a budget is cut with a note, not refused, when the rest can still be answered: the start of a question
holds the symptom, the end of a log holds the failure, the latest turns of a conversation matter most.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from app.messages import t


class Budgets(BaseModel):
    question_chars: int = 20_000  # prose + pasted blocks; a page of text is ~3k
    history_turns: int = 12  # the latest user turns that are read
    history_chars: int = 40_000  # all earlier turns together
    attachments: int = 10
    retrieval_chars: int = 4_000  # what dense and lexical retrieval see (e5 reads 512 tokens, ~2k chars)
    embed_chars: int = 2_000  # the embedder's own input (its token limit), cut before the model
    editor_chars: int = 200_000  # a document linted while it is edited (a config is a few KB; ~4 s of parsing at the limit)


BUDGETS = Budgets()


@dataclass
class Cut:
    """What a budget cut, for the answer's notes."""

    notes: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # (message key, parameters)

    def add(self, key: str, **params: Any) -> None:
        self.notes.append((key, params))

    def get(self, lang: str) -> list[str]:
        return [t(k, lang, **p) for k, p in self.notes]


def cut_text(text: str, limit: int) -> tuple[str, bool]:
    if len(text) <= limit:
        return text, False
    return text[:limit], True
