"""Pydantic models shared by every part of trainfix: cases (the KB), facts, and the Diagnosis.

Cases are data, validated here, so a broken case file fails with a field path instead of a crash later.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

Lang = Literal["en", "zh"]
Evidence = Literal["maintainer-confirmed", "reporter-confirmed", "community-advice"]
Likelihood = Literal["high", "medium", "low"]

_URL = re.compile(r"^https?://[^\s/$.?#].[^\s]*$")
_ID = re.compile(r"^[a-z0-9][a-z0-9-]{2,80}$")


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Bi(Strict):
    """A text in both languages; both are required and non-empty."""

    en: str = Field(min_length=1)
    zh: str = Field(min_length=1)

    def get(self, lang: str) -> str:
        return self.zh if lang == "zh" else self.en


class BiList(Strict):
    en: list[str] = Field(min_length=1)
    zh: list[str] = Field(min_length=1)

    def get(self, lang: str) -> list[str]:
        return self.zh if lang == "zh" else self.en


class Cause(Bi):
    likelihood: Likelihood = "medium"


class Fix(Bi):
    diff: str | None = None


_VERSION_SPEC = re.compile(
    r"^\s*[A-Za-z][\w.-]*\s*(?:==|>=|<=|!=|<|>)\s*v?\d+(?:\.\d+){0,2}(?:\s*,\s*(?:==|>=|<=|!=|<|>)\s*v?\d+(?:\.\d+){0,2})*"
    r"(?:\s*;\s*[A-Za-z][\w.-]*\s*(?:==|>=|<=|!=|<|>)\s*v?\d+(?:\.\d+){0,2}(?:\s*,\s*(?:==|>=|<=|!=|<|>)\s*v?\d+(?:\.\d+){0,2})*)*\s*$"
)


def check_version_spec(v: str | None) -> str | None:
    """Version ranges are machine-readable: `pkg OP ver[, OP ver][; pkg2 ...]`, nothing else (the matcher reads them)."""
    if v is None or not v.strip():
        return None
    if not _VERSION_SPEC.match(v):
        raise ValueError(
            f"versions must be a range like 'transformers>=4.46,<4.48' (several packages separated by ';'), got {v!r}; "
            "put prose about versions in the body or the fix"
        )
    return v.strip()


def _canonical_frameworks(v: list[str]) -> list[str]:
    return list(dict.fromkeys(_FRAMEWORK_ALIASES.get(x.strip().lower(), x.strip().lower()) for x in v))


def _check_id(v: str) -> str:
    if not _ID.match(v):
        raise ValueError("id must be lowercase letters, digits and dashes (3-81 chars)")
    return v


def _check_url(v: str) -> str:
    if not _URL.match(v):
        raise ValueError(f"not a URL: {v!r}")
    return v


Frameworks = Annotated[list[str], AfterValidator(_canonical_frameworks)]
VersionSpec = Annotated[str | None, AfterValidator(check_version_spec)]
ItemId = Annotated[str, AfterValidator(_check_id)]
Url = Annotated[str, AfterValidator(_check_url)]


class Source(Strict):
    url: Url
    title: str = Field(min_length=1)
    lang: Lang


COMPARATORS = ("eq", "ne", "in", "gt", "gte", "lt", "lte", "exists", "matches", "version_lt", "version_gte")


class Leaf(Strict):
    """One comparison of one fact. Exactly one comparator is set."""

    fact: str
    eq: Any = None
    ne: Any = None
    in_: list[Any] | None = Field(default=None, alias="in")
    gt: float | None = None
    gte: float | None = None
    lt: float | None = None
    lte: float | None = None
    exists: bool | None = None
    matches: str | None = None
    version_lt: str | None = None
    version_gte: str | None = None

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    @model_validator(mode="after")
    def _one_comparator(self) -> Leaf:
        set_ = [c for c in COMPARATORS if getattr(self, "in_" if c == "in" else c) is not None]
        if len(set_) != 1:
            raise ValueError(f"fact {self.fact!r}: give exactly one of {', '.join(COMPARATORS)} (got {set_ or 'none'})")
        if self.matches is not None:
            try:
                re.compile(self.matches)
            except re.error as e:
                raise ValueError(f"bad regex {self.matches!r}: {e}") from e
        return self

    @property
    def op(self) -> tuple[str, Any]:
        for c in COMPARATORS:
            v = getattr(self, "in_" if c == "in" else c)
            if v is not None:
                return c, v
        raise AssertionError("unreachable")


class Cond(Strict):
    """A boolean node: all / any / not over leaves or other nodes."""

    all: list[Leaf | Cond] | None = None
    any: list[Leaf | Cond] | None = None
    not_: Leaf | Cond | None = Field(default=None, alias="not")

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    @model_validator(mode="after")
    def _one_kind(self) -> Cond:
        n = sum(x is not None for x in (self.all, self.any, self.not_))
        if n != 1:
            raise ValueError("a condition needs exactly one of all / any / not")
        return self


FILE_KINDS = (
    "deepspeed_json", "hf_args_json", "trainer_state", "json", "llamafactory_yaml", "axolotl_yaml", "verl_yaml",
    "accelerate_yaml", "yaml", "cmdline", "python", "log", "env", "prose",
)


class Scope(Strict):
    """Where a trigger's facts may come from: file kinds and/or frameworks (empty = anywhere)."""

    kinds: list[str] = []
    frameworks: list[str] = []

    @field_validator("kinds")
    @classmethod
    def _kinds(cls, v: list[str]) -> list[str]:
        bad = [k for k in v if k not in FILE_KINDS]
        if bad:
            raise ValueError(f"unknown file kind(s) {bad}; use {', '.join(FILE_KINDS)}")
        return v


class Trigger(Cond):
    """A condition plus the sentence that explains, in both languages, why a hit matters."""

    explain: Bi
    weight: float = Field(default=1.0, gt=0, le=3)
    scope: Scope | None = None


class Example(Strict):
    query: str = ""
    config: str | None = None
    config_name: str | None = None

    @model_validator(mode="after")
    def _something(self) -> Example:
        if not self.query.strip() and not (self.config or "").strip():
            raise ValueError("an example needs a query or a config")
        return self


class Examples(Strict):
    match: list[Example] = Field(min_length=1)
    no_match: list[Example] = Field(min_length=1)


_FRAMEWORK_ALIASES = {"llama-factory": "llamafactory", "llama_factory": "llamafactory", "pytorch-fsdp": "fsdp", "pytorch-amp": "pytorch",
                      "pytorch-lightning": "lightning", "torch": "pytorch", "hf-transformers": "transformers", "swift": "ms-swift"}


class AppliesTo(Strict):
    frameworks: Frameworks = []
    models: list[str] = []
    stages: list[str] = []
    versions: VersionSpec = None


class Case(Strict):
    id: ItemId
    category: str
    status: Literal["published", "draft"] = "published"
    title: Bi
    symptoms: BiList
    applies_to: AppliesTo = AppliesTo()
    triggers: list[Trigger] = []
    log_signals: list[str] = []
    contradictions: list[Trigger] = []  # evidence in the user's files that rules this cause out
    causes: list[Cause] = Field(min_length=1)
    fixes: list[Fix] = Field(min_length=1)
    evidence: Evidence
    sources: list[Source] = Field(min_length=1)
    related: list[str] = []
    examples: Examples
    # filled by the loader, not written in the file
    body: dict[str, str] = {}
    path: str = ""

    @property
    def source_lang(self) -> str:
        return self.sources[0].lang


class Note(Strict):
    """A thread note: one real resolved thread in a few lines, both languages. No triggers: it is evidence, not a rule."""

    id: ItemId
    url: Url
    title: str = Field(min_length=1)
    lang: Lang
    category: str
    frameworks: Frameworks = []
    versions: VersionSpec = None
    evidence: Evidence
    symptom: Bi
    resolution: Bi
    case: str | None = None
    # filled by the loader
    path: str = ""
    origin: Literal["kb", "team"] = "kb"


class Category(Strict):
    id: str
    name: Bi
    scope: Bi


class Taxonomy(Strict):
    categories: list[Category] = Field(min_length=1)

    def ids(self) -> set[str]:
        return {c.id for c in self.categories}


class FactSpec(Strict):
    key: str
    type: Literal["bool", "number", "string", "list", "version"]
    doc: str
    values: list[str] | None = None


# ---------------------------------------------------------------- facts read from attachments


class Fact(BaseModel):
    """One normalised setting or log symptom, with where it was read."""

    key: str
    value: Any
    file: str = ""
    line: int = 0
    text: str = ""
    col_start: int = 0
    col_end: int = 0
    kind: str = ""  # origin: the file kind it was read from (FILE_KINDS), "prose" for the question
    framework: str = ""  # origin: the framework the file belongs to, when known (openrlhf, llamafactory, ...)

    def where(self) -> str:
        return f"{self.file}:{self.line}" if self.file and self.line else (self.file or "question")


class FileNote(BaseModel):
    """What happened to one attachment: its detected kind, or the problem that stopped it."""

    file: str
    kind: str
    ok: bool = True
    message: str = ""
    message_zh: str = ""

    def text(self, lang: str) -> str:
        return self.message_zh if lang == "zh" and self.message_zh else self.message


# ---------------------------------------------------------------- the answer


class Said(BaseModel):
    """One sentence of an answer as a message key of `app/messages.py` and its parameters: what was said, for machine
    readers; the prose next to it is the same sentence in the answer's language."""

    key: str
    params: dict[str, Any] = {}


class Citation(BaseModel):
    n: int = 0
    url: str
    title: str


class CauseOut(BaseModel):
    kind: Literal["case", "note"] = "case"
    url: str = ""  # for a note: the thread
    resolution: str = ""  # for a note: how the thread was resolved
    case_id: str
    title: str
    cause: str
    category: str = ""
    score: float
    likelihood: str = ""
    fixes: list[str]
    diffs: list[str] = []
    evidence: list[str]
    reasons: list[Said] = []  # `evidence` as keys, same order
    matched_symptoms: list[str] = []
    evidence_level: str = ""
    citations: list[Citation]
    demoted: str = ""
    demoted_said: Said | None = None


class Supporting(BaseModel):
    """An ingested article that backs the answer up (cited like a case, not presented as a cause)."""

    article_id: str
    title: str
    source: str
    snippet: str
    score: float


class Diagnosis(BaseModel):
    language: Lang
    confident: bool
    question: str
    causes: list[CauseOut]
    related: list[CauseOut] = []
    supporting: list[Supporting] = []
    facts: list[Fact] = []
    files: list[FileNote] = []
    clarify: dict[str, Any] | None = None
    notes: list[str] = []
    notes_said: list[Said] = []  # what was cut or redacted, as keys (file problems are in `files`)
    general_checks: list[str] = []
    also_noticed: list[CauseOut] = []  # config risks in the user's files that explain a different symptom
    summary: str = ""  # the first line: most likely cause and its fix, or "not confident"
    summary_said: Said | None = None
    plot_url: str = ""  # a chart of the user's run (API: /v1/plots/{id}.png), when an attachment has a series
    plot_alt: str = ""  # what the chart shows, in words (the anomalies and their steps)
