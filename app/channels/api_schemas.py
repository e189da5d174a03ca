"""The API's request and response models (pydantic): what /v1 accepts and answers, with the examples shown in /docs."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.feedback import COMMENT_MAX_CHARS, ITEM_MAX_CHARS


class ErrorBody(BaseModel):
    code: str = Field(description="A stable, machine-readable code.", examples=["index_unavailable"])
    message: str = Field(description="What went wrong and what to do, for a person.")
    request_id: str | None = Field(default=None, description="The X-Request-ID of the request (quote it in bug reports).")
    fields: list[dict[str, str]] | None = Field(default=None, description="For validation errors: each bad field and why.")


class ErrorResponse(BaseModel):
    error: ErrorBody

_DS_EXAMPLE = '{\n  "bf16": {"enabled": true},\n  "communication_data_type": "fp32",\n  "zero_optimization": {"stage": 2}\n}\n'


class AttachmentIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=255, description="File name (a hint; the format is detected from the content).", examples=["ds_config.json"])
    content: str = Field(description="The file's text: a config (JSON/YAML), a launch command, a Python snippet, a log or trainer_state.json.", examples=[_DS_EXAMPLE])


class TurnIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    role: Literal["user", "assistant"]
    content: str


class DiagnoseRequest(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "question": "Full fine-tune of Qwen-7B: loss goes to 0 after ~10 steps, grad norm spiked first",
                    "attachments": [{"name": "ds_config.json", "content": _DS_EXAMPLE}],
                    "history": [],
                    "lang": "en",
                    "top": 3,
                },
                {"question": "KTO 训练 loss 变成 NaN", "lang": "zh"},
            ]
        },
    )
    question: str = Field(default="", max_length=100_000, description="What you see. Fenced code blocks in it are read as attachments.")
    attachments: list[AttachmentIn] = Field(default=[], max_length=20)
    history: list[TurnIn] = Field(default=[], max_length=50, description="Earlier turns of the conversation, oldest first.")
    lang: Literal["en", "zh"] | None = Field(default=None, description="Answer language; default: the question's.")
    top: int = Field(default=3, ge=1, le=20, description="How many causes to return.")


class LintRequest(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"name": "ds_config.json", "content": _DS_EXAMPLE, "lang": "en"}]},
    )
    name: str = Field(min_length=1, max_length=255, examples=["ds_config.json"])
    content: str = Field(examples=[_DS_EXAMPLE])
    lang: Literal["en", "zh"] = "en"


class LspPosition(BaseModel):
    line: int = Field(description="0-based")
    character: int


class LspRange(BaseModel):
    start: LspPosition
    end: LspPosition


class LspDiagnostic(BaseModel):
    range: LspRange
    severity: int = Field(description="1 error, 2 warning, 3 information, 4 hint")
    code: str = Field(description="The case id, or trainfix.<kind> for a file that could not be read.")
    codeDescription: dict[str, str] | None = None
    message: str
    source: str = "trainfix"
    data: dict[str, Any] = {}


class LintResponse(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "diagnostics": [
                        {
                            "range": {"start": {"line": 2, "character": 2}, "end": {"line": 2, "character": 36}},
                            "severity": 2,
                            "code": "deepspeed-comm-dtype-fp32-loss-zero",
                            "codeDescription": {"href": "https://github.com/QwenLM/Qwen/issues/967"},
                            "message": "Full fine-tune loss drops to 0 ...\nFix: Delete communication_data_type ...",
                            "source": "trainfix",
                            "data": {"file": "ds_config.json", "fix": "...", "citation": "..."},
                        }
                    ]
                }
            ]
        }
    )
    diagnostics: list[LspDiagnostic]


class CaseSummary(BaseModel):
    id: str
    category: str
    title: dict[str, str]
    evidence: str
    sources: list[str]
    score: float | None = Field(default=None, description="Relevance to q (when q is given).")


class CaseList(BaseModel):
    total: int
    cases: list[CaseSummary]


class FeedbackRequest(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [{"kind": "fixed", "question": "loss goes to 0 after 10 steps", "case_id": "deepspeed-comm-dtype-fp32-loss-zero"}]
        },
    )
    kind: Literal["up", "down", "fixed"]
    question: str = Field(default="", max_length=100_000)
    case_id: str | None = Field(default=None, max_length=200)
    answer: dict[str, Any] | None = Field(default=None, description="The Diagnosis JSON the feedback is about (optional).")
    item: str | None = Field(default=None, max_length=ITEM_MAX_CHARS, description="The case or thread-note id the feedback is about "
                             "(a thumb on one cause, or the one that fixed it; defaults to case_id).", examples=["deepspeed-comm-dtype-fp32-loss-zero"])
    comment: str | None = Field(default=None, max_length=COMMENT_MAX_CHARS, description="An optional one-line comment (stored redacted, "
                                "line breaks folded into spaces).")


class FeedbackResponse(BaseModel):
    id: int
    stored: bool = True


class Health(BaseModel):
    status: str


class Ready(BaseModel):
    status: str
    cases: int
    units: int
    store: str
    embedder: str
    index: str = Field(default="written", description="`written`; `writing` on a first start (answers come from the "
                       "knowledge base read into memory while the index is written behind them); `not written` if that "
                       "failed (answers go on; the next start writes it)")


ERRS: dict[int, dict[str, Any]] = {
    400: {"model": ErrorResponse, "description": "Bad input (code bad_input)"},
    401: {"model": ErrorResponse, "description": "Missing or wrong bearer token (code unauthorized)"},
    413: {"model": ErrorResponse, "description": "Body over TRAINFIX_MAX_UPLOAD_MB (code payload_too_large)"},
    422: {"model": ErrorResponse, "description": "Malformed JSON or a bad field (codes malformed_json, invalid_request)"},
    429: {"model": ErrorResponse, "description": "Too many requests from this client (code too_many_requests); see Retry-After"},
    503: {"model": ErrorResponse, "description": "Index not loaded, the Chroma server is down, or the diagnosis missed its deadline (codes not_ready, index_unavailable, busy)"},
}


def errs(*codes: int) -> dict[int | str, dict[str, Any]]:
    """The documented error answers of a route, for its `responses=`."""
    return {c: ERRS[c] for c in codes}

