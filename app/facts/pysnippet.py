"""Python snippets from training scripts -> facts, read with `ast` and never executed.

Keyword arguments of TrainingArguments / SFTConfig / DPOConfig / GRPOConfig / LoraConfig / from_pretrained(...)
and assignments such as `tokenizer.pad_token = tokenizer.eos_token`.
"""

from __future__ import annotations

import ast
import re
import textwrap
from typing import Any

from app.facts.normalize import normalize
from app.models import Fact

_STAGE_BY_CLASS = {
    "sft": "sft", "dpo": "dpo", "kto": "kto", "orpo": "orpo", "grpo": "grpo", "ppo": "ppo", "rloo": "rloo",
    "reward": "rm", "cpo": "dpo", "online_dpo": "dpo",
}


_OPTIMIZERS = {"adamw", "adam", "sgd", "adafactor", "lion", "adamw8bit", "pagedadamw8bit", "pagedadamw", "adam8bit", "rmsprop"}
_OPT_KW = {"lr": "train.learning_rate", "eps": "train.adam_epsilon", "weight_decay": "train.weight_decay"}


def _value(node: ast.AST) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        pass
    if isinstance(node, ast.Attribute):  # torch.bfloat16 -> "bfloat16"; tokenizer.eos_token -> "tokenizer.eos_token"
        base = ast.unparse(node)
        return base.split(".")[-1] if base.startswith("torch.") else base
    if isinstance(node, ast.Name):
        return node.id
    return None


def _callee(node: ast.Call) -> str:
    f = node.func
    if isinstance(f, ast.Attribute):
        return f.attr
    if isinstance(f, ast.Name):
        return f.id
    return ""


def _fact(key: str, value: Any, file: str, line: int, lines: list[str]) -> Fact:
    return Fact(key=key, value=value, file=file, line=line, text=lines[line - 1].strip() if 0 < line <= len(lines) else "")


def parse_python(text: str, file: str) -> list[Fact]:
    """Facts from a Python snippet; raises SyntaxError when it cannot be read (its only error)."""
    src = textwrap.dedent(text)
    tree = None
    for candidate in (src, _balance(src)):
        try:
            tree = ast.parse(candidate)
            break
        except (SyntaxError, ValueError, MemoryError, RecursionError):  # NUL bytes; nesting past the parser's stack
            continue
    if tree is None:
        raise SyntaxError("could not read this Python snippet")
    lines = src.splitlines()
    facts: list[Fact] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = _callee(node)
            low = name.lower()
            m = re.match(r"^(.*?)(config|trainer)$", low)
            if m and m.group(1) in _STAGE_BY_CLASS:
                facts.append(_fact("train.stage", _STAGE_BY_CLASS[m.group(1)], file, node.lineno, lines))
            if low == "loraconfig":
                facts.append(_fact("train.finetuning_type", "lora", file, node.lineno, lines))
            if low in _OPTIMIZERS:  # a custom loop's optimizer: torch.optim.AdamW(model.parameters(), lr=..., eps=...)
                facts.append(_fact("train.optimizer", low, file, node.lineno, lines))
                for kw in node.keywords:
                    val = _value(kw.value)
                    if kw.arg == "betas" and isinstance(val, tuple | list) and len(val) == 2:
                        facts.append(_fact("train.adam_beta1", float(val[0]), file, kw.value.lineno, lines))
                        facts.append(_fact("train.adam_beta2", float(val[1]), file, kw.value.lineno, lines))
                    elif kw.arg in _OPT_KW and isinstance(val, int | float):
                        facts.append(_fact(_OPT_KW[kw.arg], float(val), file, kw.value.lineno, lines))
                continue
            if not re.search(r"(config|arguments|args|trainer|from_pretrained|get_peft_model)$", low):
                continue  # autocast(dtype=...), torch.ones(dtype=...) and the like describe no training setting
            for kw in node.keywords:
                if kw.arg is None:
                    continue
                val = _value(kw.value)
                if val is None:
                    continue
                raw = kw.arg
                if low == "loraconfig" and raw in ("r", "alpha"):
                    raw = "lora_rank" if raw == "r" else "lora_alpha"
                for f in normalize(raw, val, file, kw.value.lineno, lines[kw.value.lineno - 1] if kw.value.lineno <= len(lines) else ""):
                    facts.append(f)
            if low == "from_pretrained" and node.args:
                val = _value(node.args[0])
                if isinstance(val, str) and "/" in val or isinstance(val, str) and re.search(r"\d+b", val.lower()):
                    facts += normalize("model_name_or_path", val, file, node.lineno, lines[node.lineno - 1])
        elif isinstance(node, ast.Assign):
            for tgt in node.targets:
                if isinstance(tgt, ast.Attribute):
                    attr = tgt.attr
                    val = _value(node.value)
                    if attr == "pad_token" and isinstance(val, str) and val.endswith("eos_token"):
                        facts.append(_fact("tokenizer.pad_is_eos", True, file, node.lineno, lines))
                    elif attr == "pad_token_id" and isinstance(val, str) and val.endswith("eos_token_id"):
                        facts.append(_fact("tokenizer.pad_is_eos", True, file, node.lineno, lines))
                    else:
                        facts += normalize(attr, val, file, node.lineno, lines[node.lineno - 1]) if val is not None else []
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and _callee(node.value) == "resize_token_embeddings":
            facts.append(_fact("model.resize_vocab", True, file, node.lineno, lines))
    for f in facts:
        if f.text and not f.col_end:
            f.col_start = len(lines[f.line - 1]) - len(lines[f.line - 1].lstrip()) if 0 < f.line <= len(lines) else 0
            f.col_end = len(lines[f.line - 1].rstrip()) if 0 < f.line <= len(lines) else 0
    return facts


def _balance(src: str) -> str:
    """Close brackets a paste cut off, so `TrainingArguments(\\n lr=1e-5,` still parses."""
    opens = src.count("(") - src.count(")")
    return src.rstrip().rstrip(",") + ")" * max(opens, 0)


def looks_like_python(text: str) -> bool:
    return bool(re.search(r"\b(import |from \w+ import|def |\w+\s*=\s*\w+\(|\w+Config\(|TrainingArguments\(|from_pretrained\()", text))
