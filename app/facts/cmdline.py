"""Launch command lines (torchrun, deepspeed, accelerate launch, python train.py, llamafactory-cli) -> facts.

Handles `--flag value`, `--flag=value`, bare boolean flags, `key=value` overrides (Hydra / verl) and `\\` line
continuations, keeping the original line of each flag.
"""

from __future__ import annotations

import re
import shlex

from app.facts.normalize import normalize
from app.models import Fact

_LAUNCHER_COUNT = {"nproc_per_node", "nproc-per-node", "num_gpus", "num-gpus", "num_processes", "num-processes", "nnodes"}


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """Join continuation lines; each logical line keeps the physical line number of every part."""
    out: list[tuple[int, str]] = []
    buf: list[str] = []
    start = 0
    for i, raw in enumerate(text.splitlines(), 1):
        line = raw.rstrip()
        if not buf:
            start = i
        if line.endswith("\\"):
            buf.append(line[:-1] + f" \x00{i + 1} ")
            continue
        buf.append(line)
        out.append((start, " ".join(buf)))
        buf = []
    if buf:
        out.append((start, " ".join(buf)))
    return out


def _is_mark(tok: str) -> bool:
    """The line-number mark _logical_lines puts after a continuation (a NUL in the user's own text is not one)."""
    return tok.startswith("\x00") and 1 < len(tok) < 12 and tok[1:].isascii() and tok[1:].isdigit()


MAX_SHLEX = 20_000  # shlex grows tokens by concatenation: past this a line is split on whitespace (linear)


def _tokens(logical: str) -> list[str]:
    if len(logical) > MAX_SHLEX:
        return logical.split()
    try:
        return shlex.split(logical, comments=True)
    except ValueError:
        return logical.split()


def parse_cmdline(text: str, file: str) -> list[Fact]:
    lines = text.splitlines()
    facts: list[Fact] = []
    nproc = nnodes = None
    for start, logical in _logical_lines(text):
        line_no = start
        toks = _tokens(logical)
        i = 0
        while i < len(toks):
            tok = toks[i]
            if _is_mark(tok):
                line_no = int(tok[1:])
                i += 1
                continue
            flag = value = None
            script = re.search(r"(?:^|/)train_(sft|dpo|kto|rm|ppo|grpo|orpo|simpo|prm)\.py$", tok)
            if script:
                text_line = lines[line_no - 1] if 0 < line_no <= len(lines) else logical
                facts += normalize("stage", {"prm": "rm"}.get(script.group(1), script.group(1)), file, line_no, text_line)
            if tok.startswith("--") and len(tok) > 2:
                if "=" in tok:
                    flag, value = tok[2:].split("=", 1)
                else:
                    flag = tok[2:]
                    j = i + 1
                    while j < len(toks) and _is_mark(toks[j]):
                        j += 1
                    if j < len(toks) and not toks[j].startswith("-"):
                        value, i = toks[j], j
                    else:
                        value = True
            elif re.match(r"^[A-Za-z_][\w.\-]*=.+", tok) and not re.match(r"^[A-Z_][A-Z0-9_]*=", tok):
                flag, value = tok.split("=", 1)  # verl / hydra style key=value
            i += 1
            if isinstance(value, str) and (m2 := re.search(r"(?:^|/)train_(sft|dpo|kto|rm|ppo|grpo|orpo|simpo|prm)\.py$", value)):
                text_line = lines[line_no - 1] if 0 < line_no <= len(lines) else logical
                facts += normalize("stage", {"prm": "rm"}.get(m2.group(1), m2.group(1)), file, line_no, text_line)
            if flag is None:
                continue
            text_line = lines[line_no - 1] if 0 < line_no <= len(lines) else logical
            norm = flag.replace("-", "_")
            if norm in ("nproc_per_node", "num_gpus", "num_processes"):
                nproc = (float(value) if str(value).replace(".", "", 1).isdigit() else None, line_no, text_line)
            if norm == "nnodes":
                nnodes = float(value) if str(value).isdigit() else None
            if norm in {f.replace("-", "_") for f in _LAUNCHER_COUNT}:
                continue
            if norm == "deepspeed" and value is True:
                value = "yes"
            for f in normalize(norm, value, file, line_no, text_line):
                col = text_line.find(flag)
                f.col_start = max(col - 2, 0) if col >= 0 else 0
                f.col_end = len(text_line.rstrip())
                facts.append(f)
    if nproc and nproc[0]:
        facts.append(Fact(key="distributed.world_size", value=nproc[0] * (nnodes or 1), file=file, line=nproc[1], text=nproc[2].strip()))
    return facts


def looks_like_cmdline(text: str) -> bool:
    flags = len(re.findall(r"(?:^|\s)--[a-zA-Z][\w\-]*", text))
    return flags >= 2 or bool(re.search(r"\b(torchrun|deepspeed|accelerate launch|python3? [\w/.\-]+\.py|llamafactory-cli|swift sft|swift rlhf)\b", text))
