"""Facts stated in prose ("we use bf16", "学习率 3e-4", "zero3", "KTO on qwen2-7b"): weak, but they let triggers
fire on a plain question and let a follow-up ("already at 1e-5") update what is known."""

from __future__ import annotations

import re

from app.facts.normalize import model_facts
from app.models import Fact

_LR = re.compile(r"(?:\blr\b|learning[ _]rate|学习率)\D{0,12}?(\d+(?:\.\d+)?(?:e-?\d+)?)", re.I)
_PREC = re.compile(r"\b(bf16|bfloat16|fp16|float16|fp32)\b", re.I)
_ZERO = re.compile(r"\bzero[-_ ]?(?:stage[-_ ]?)?([0-3])\b|\bz([0-3])\b", re.I)
_STAGE = re.compile(r"\b(sft|dpo|kto|orpo|simpo|ppo|grpo|rloo|dapo|reward model|rm)\b", re.I)
_FT = re.compile(r"\b(qlora|lora|full[- ]?(?:parameter|param)?[- ]?fine[- ]?tun\w*|full ft|full finetune)\b|全量|全参", re.I)
_MODEL = re.compile(r"\b((?:qwen|llama|mistral|mixtral|gemma|phi|deepseek|chatglm|glm|baichuan|yi|internlm)[\w.\-]*(?:[ _]\d+(?:\.\d+)?[bB])?)(?![\w.])", re.I)
_ATTN = re.compile(r"\b(flash[_ -]?attention[_ -]?2|flash[_ -]?attn|fa2|sdpa|eager)\b", re.I)
_NEG = re.compile(r"\b(not|no|without|instead of|switched from|moved off)\s+(?:\w+\s+){0,2}$|不是|没有用|没用|不用|换掉了?$", re.I)


def _negated(text: str, start: int) -> bool:
    return bool(_NEG.search(text[max(0, start - 25) : start]))


def text_facts(text: str, file: str = "question") -> list[Fact]:
    out: list[Fact] = []
    if not text:
        return out

    def add(key: str, value, m: re.Match) -> None:
        if not _negated(text, m.start()):
            out.append(Fact(key=key, value=value, file=file, line=0, text=m.group(0).strip(), kind="prose"))

    for m in _LR.finditer(text):
        try:
            v = float(m.group(1))
        except ValueError:
            continue
        if 0 < v < 1:
            add("train.learning_rate", v, m)
    for m in _PREC.finditer(text):
        v = m.group(1).lower()
        add("precision", {"bfloat16": "bf16", "float16": "fp16"}.get(v, v), m)
    for m in _ZERO.finditer(text):
        add("deepspeed.zero_stage", float(m.group(1) or m.group(2)), m)
    for m in _STAGE.finditer(text):
        v = m.group(1).lower()
        add("train.stage", {"reward model": "rm", "dapo": "grpo"}.get(v, v), m)
    for m in _FT.finditer(text):
        v = m.group(0).lower()
        add("train.finetuning_type", "qlora" if v == "qlora" else ("lora" if v == "lora" else "full"), m)
    for m in _ATTN.finditer(text):
        v = m.group(1).lower().replace(" ", "_").replace("-", "_")
        add("model.attn_implementation", "sdpa" if v == "sdpa" else ("eager" if v == "eager" else "flash_attention_2"), m)
    for m in _MODEL.finditer(text):
        name = Fact(key="model.name", value=m.group(1).lower(), file=file, line=0, text=m.group(0))
        out.append(name)
        out += model_facts(name)
        break
    return out
