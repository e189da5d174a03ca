"""Version ranges of cases (`applies_to.versions`) checked against the library versions read from a user's logs.

A bug fixed in transformers 4.46 is not a cause on 4.50: when the user's version is known and outside the range,
the case is demoted and the answer says why; inside the range it is a (small) piece of evidence.
"""

from __future__ import annotations

import re

from app.models import Fact

PACKAGES = {
    "transformers": "env.transformers_version", "torch": "env.torch_version", "pytorch": "env.torch_version",
    "deepspeed": "env.deepspeed_version", "trl": "env.trl_version", "peft": "env.peft_version",
    "accelerate": "env.accelerate_version", "flash-attn": "env.flash_attn_version", "flash_attn": "env.flash_attn_version",
    "bitsandbytes": "env.bitsandbytes_version", "vllm": "env.vllm_version",
}
_V = r"v?\d+(?:\.\d+){0,2}"
_OP = r"(?:==|>=|<=|!=|<|>)"
_SPEC = re.compile(
    r"(?<![\w-])(" + "|".join(re.escape(p) for p in PACKAGES) + r")\s*(" + _OP + r"\s*" + _V + r"(?:\s*,\s*" + _OP + r"\s*" + _V + r")*)",
    re.I,
)


def _ver(v: str) -> tuple[int, ...]:
    parts = [int(p) for p in re.findall(r"\d+", v)[:3]]
    return tuple(parts + [0] * (3 - len(parts)))


def parse(spec: str | None) -> list[tuple[str, str, list[tuple[str, str]]]]:
    """[(package, fact key, [(op, version), ...]), ...] for the package specifiers in a free-text range."""
    out = []
    for m in _SPEC.finditer(spec or ""):
        pkg = m.group(1).lower()
        clauses = [(op, v.lstrip("v")) for op, v in re.findall(r"(" + _OP + r")\s*(" + _V + r")", m.group(2))]
        out.append((pkg, PACKAGES[pkg], clauses))
    return out


def _holds(have: str, op: str, want: str) -> bool:
    a, b = _ver(have), _ver(want)
    return {"==": a == b, ">=": a >= b, "<=": a <= b, "!=": a != b, "<": a < b, ">": a > b}[op]


Ranges = list[tuple[str, str, list[tuple[str, str]]]]


def check(spec: str | Ranges | None, facts: dict[str, Fact]) -> tuple[bool | None, str, Fact | None]:
    """(in range?, the range text, the version fact) — None when no known version bears on the range.

    `spec` is the free text of `applies_to.versions` or what `parse` made of it (the engine parses once per case).
    """
    ranges = parse(spec) if spec is None or isinstance(spec, str) else spec
    for pkg, key, clauses in ranges:
        f = facts.get(key)
        if f is None or not clauses:
            continue
        ok = all(_holds(str(f.value), op, v) for op, v in clauses)
        return ok, pkg + ",".join(op + v for op, v in clauses), f
    return None, "", None
