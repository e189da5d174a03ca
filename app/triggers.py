"""Evaluate the cases' declarative triggers (all / any / not over fact comparisons) against the facts read.

No eval(), no code from case files: each comparator is a small pure function here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from app.models import Case, Cond, Fact, Leaf, Trigger


def _num(v: Any) -> float | None:
    if isinstance(v, bool):
        return float(v)
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def _ver(v: Any) -> tuple[int, ...]:
    parts = re.findall(r"\d+", str(v))[:3]
    return tuple(int(p) for p in parts) + (0,) * (3 - len(parts))


def _norm(v: Any) -> Any:
    return v.lower() if isinstance(v, str) else v


def _eq(a: Any, b: Any) -> bool:
    if isinstance(a, list):
        return any(_eq(x, b) for x in a)
    if isinstance(a, bool) or isinstance(b, bool):
        return bool(a) == bool(b) if isinstance(a, bool) and isinstance(b, bool) else str(a).lower() == str(b).lower()
    na, nb = _num(a), _num(b)
    if na is not None and nb is not None:
        return abs(na - nb) <= 1e-12 * max(1.0, abs(nb))
    return _norm(a) == _norm(b)


def leaf_matches(leaf: Leaf, fact: Fact | None) -> bool:
    op, want = leaf.op
    if op == "exists":
        return (fact is not None) == bool(want)
    if fact is None:
        return False
    have = fact.value
    if op == "eq":
        return _eq(have, want)
    if op == "ne":
        return not _eq(have, want)
    if op == "in":
        return any(_eq(have, w) for w in want)
    if op == "matches":
        text = " ".join(map(str, have)) if isinstance(have, list) else str(have)
        return re.search(want, text.lower()) is not None
    if op in ("version_lt", "version_gte"):
        hv, wv = _ver(have), _ver(want)
        return hv < wv if op == "version_lt" else hv >= wv
    n = _num(have)
    if n is None:
        return False
    return {"gt": n > want, "gte": n >= want, "lt": n < want, "lte": n <= want}[op]


def eval_cond(node: Cond | Leaf, facts: dict[str, Fact], used: list[Fact]) -> bool:
    """True when the condition holds; the facts that made it hold are appended to `used`."""
    if isinstance(node, Leaf):
        f = facts.get(node.fact)
        ok = leaf_matches(node, f)
        if ok and f is not None:
            used.append(f)
        return ok
    if node.all is not None:
        trial: list[Fact] = []
        ok = all(eval_cond(c, facts, trial) for c in node.all)
        if ok:
            used.extend(trial)
        return ok
    if node.any is not None:
        hit = False
        for c in node.any:
            trial = []
            if eval_cond(c, facts, trial):
                used.extend(trial)
                hit = True
        return hit
    assert node.not_ is not None
    return not eval_cond(node.not_, facts, [])


@dataclass
class TriggerHit:
    case_id: str
    trigger: Trigger
    facts: list[Fact]

    def evidence(self, lang: str) -> str:
        where = "; ".join(_fact_where(f) for f in self.facts) or ("" if lang == "en" else "")
        expl = self.trigger.explain.get(lang)
        return f"{where} — {expl}" if where else expl


def _fact_where(f: Fact) -> str:
    shown = f.text.strip() if f.text else f"{f.key} = {f.value}"
    if len(shown) > 100:
        shown = shown[:97] + "..."
    return f"`{shown}` ({f.where()})"


# Frameworks that write their own DeepSpeed/FSDP settings from their own flags: their flags are not the literal
# values of a hand-written config, so a case about another framework's files never fires on them.
SELF_BUILT = frozenset({"openrlhf", "verl", "easyr1", "megatron"})
# Trainers with their own config files: a case written only for other trainers does not fire on their keys
# (an axolotl `sample_packing` rule is not a LLaMA-Factory `packing` rule), while a generic case (transformers,
# deepspeed, pytorch ...) still applies to all of them.
TRAINERS = SELF_BUILT | {"llamafactory", "axolotl", "ms-swift", "unsloth"}


def in_scope(fact: Fact, trigger: Trigger, case: Case) -> bool:
    """Can this fact fire this trigger? A fact read from another context (file kind, framework) cannot."""
    scope = trigger.scope
    if scope is not None and scope.kinds and fact.kind and fact.kind not in scope.kinds:
        return False
    allowed = (scope.frameworks if scope is not None and scope.frameworks else None) or case.applies_to.frameworks
    if fact.framework and allowed and fact.framework not in allowed:
        if scope is not None and scope.frameworks:
            return False
        if fact.framework in SELF_BUILT:
            return False
        return not (fact.framework in TRAINERS and all(f in TRAINERS for f in allowed))
    return True


def scoped_facts(case: Case, trigger: Trigger, facts: dict[str, Fact]) -> dict[str, Fact]:
    if all(in_scope(f, trigger, case) for f in facts.values()):
        return facts
    return {k: f for k, f in facts.items() if in_scope(f, trigger, case)}


def fire(case: Case, facts: dict[str, Fact], conds: list[Trigger] | None = None) -> list[TriggerHit]:
    """The triggers (or other conditions, e.g. contradictions) of a case that hold on the facts in their scope."""
    hits = []
    for t in case.triggers if conds is None else conds:
        used: list[Fact] = []
        if eval_cond(t, scoped_facts(case, t, facts), used):
            uniq = list({(f.key, f.file, f.line): f for f in used}.values())
            hits.append(TriggerHit(case.id, t, uniq))
    return hits
