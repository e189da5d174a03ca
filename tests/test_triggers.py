"""The declarative trigger evaluator: every operator, all/any/not, versions and scoping, on real Fact objects."""

from __future__ import annotations

import pytest

from app.models import Case, Cond, Fact, Leaf, Trigger
from app.triggers import eval_cond, fire, in_scope, leaf_matches


def F(key, value, kind="", framework="", file="cfg", line=1):  # noqa: N802 - short factory for tables
    return Fact(key=key, value=value, kind=kind, framework=framework, file=file, line=line)


@pytest.mark.parametrize(
    ("leaf", "value", "want"),
    [
        ({"eq": "fp32"}, "FP32", True),
        ({"eq": "fp32"}, "bf16", False),
        ({"eq": 3}, 3.0, True),
        ({"eq": True}, True, True),
        ({"eq": True}, False, False),
        ({"ne": "bf16"}, "fp16", True),
        ({"ne": "bf16"}, "bf16", False),
        ({"in": ["fp16", "bf16"]}, "bf16", True),
        ({"in": ["fp16", "bf16"]}, "fp32", False),
        ({"gt": 1e-4}, 3e-4, True),
        ({"gt": 1e-4}, 1e-4, False),
        ({"gte": 1e-4}, 1e-4, True),
        ({"lt": 2}, 1, True),
        ({"lt": 2}, 2, False),
        ({"lte": 2}, 2, True),
        ({"lte": 2}, "not a number", False),
        ({"matches": "q_proj|v_proj"}, ["k_proj", "v_proj"], True),
        ({"matches": "^all$"}, "q_proj", False),
        ({"version_lt": "4.46.0"}, "4.45.2", True),
        ({"version_lt": "4.46.0"}, "4.46.0", False),
        ({"version_gte": "2.6.2"}, "2.10.0", True),  # numeric, not lexical, comparison
        ({"version_gte": "2.6.2"}, "2.6.1", False),
    ],
)
def test_each_operator(leaf, value, want):
    lf = Leaf(fact="k", **leaf)
    assert leaf_matches(lf, F("k", value)) is want


def test_exists_and_absent_facts():
    assert leaf_matches(Leaf(fact="k", exists=True), F("k", 1)) is True
    assert leaf_matches(Leaf(fact="k", exists=True), None) is False
    assert leaf_matches(Leaf(fact="k", exists=False), None) is True
    assert leaf_matches(Leaf(fact="k", eq=1), None) is False


def test_all_any_not_and_used_facts():
    facts = {"a": F("a", 1, line=3), "b": F("b", 2, line=4)}
    used: list[Fact] = []
    assert eval_cond(Cond(all=[Leaf(fact="a", eq=1), Leaf(fact="b", eq=2)]), facts, used)
    assert {f.line for f in used} == {3, 4}
    used = []
    assert not eval_cond(Cond(all=[Leaf(fact="a", eq=1), Leaf(fact="b", eq=9)]), facts, used)
    assert used == []  # a failed `all` reports no evidence
    used = []
    assert eval_cond(Cond(any=[Leaf(fact="a", eq=9), Leaf(fact="b", eq=2)]), facts, used)
    assert [f.key for f in used] == ["b"]
    assert eval_cond(Cond(**{"not": Leaf(fact="c", exists=True)}), facts, [])
    assert not eval_cond(Cond(**{"not": Leaf(fact="a", exists=True)}), facts, [])


def test_a_leaf_needs_exactly_one_comparator():
    with pytest.raises(ValueError, match="exactly one"):
        Leaf(fact="k", eq=1, gt=0)
    with pytest.raises(ValueError, match="bad regex"):
        Leaf(fact="k", matches="(")


def _case(triggers, frameworks=()):
    return Case.model_validate({
        "id": "scoped-case", "category": "deepspeed_zero", "title": {"en": "t", "zh": "t"},
        "symptoms": {"en": ["s"], "zh": ["s"]}, "applies_to": {"frameworks": list(frameworks)},
        "triggers": triggers, "causes": [{"en": "c", "zh": "c"}], "fixes": [{"en": "f", "zh": "f"}],
        "evidence": "community-advice", "sources": [{"url": "https://example.org/x", "title": "x", "lang": "en"}],
        "examples": {"match": [{"query": "q"}], "no_match": [{"query": "q"}]},
    })


def test_scope_by_file_kind():
    trig = {"all": [{"fact": "train.global_batch_size", "exists": True}], "scope": {"kinds": ["deepspeed_json"]},
            "explain": {"en": "e", "zh": "e"}}
    case = _case([trig], ["deepspeed"])
    from_json = {"train.global_batch_size": F("train.global_batch_size", 64, kind="deepspeed_json", framework="deepspeed")}
    from_cmd = {"train.global_batch_size": F("train.global_batch_size", 64, kind="cmdline", framework="openrlhf")}
    assert fire(case, from_json)
    assert not fire(case, from_cmd)


def test_self_built_frameworks_do_not_fire_other_frameworks_cases():
    trig = {"all": [{"fact": "deepspeed.zero_stage", "eq": 3}], "explain": {"en": "e", "zh": "e"}}
    case = _case([trig], ["deepspeed", "transformers"])
    openrlhf = F("deepspeed.zero_stage", 3, kind="cmdline", framework="openrlhf")
    llamafactory = F("deepspeed.zero_stage", 3, kind="llamafactory_yaml", framework="llamafactory")
    t = Trigger.model_validate(trig)
    assert not in_scope(openrlhf, t, case)
    assert in_scope(llamafactory, t, case)  # LLaMA-Factory drives the HF Trainer: a transformers case applies
    assert in_scope(F("deepspeed.zero_stage", 3), t, case)  # unknown origin: no reason to exclude
    assert not fire(case, {"deepspeed.zero_stage": openrlhf})
    assert fire(case, {"deepspeed.zero_stage": llamafactory})


def test_unknown_scope_kind_is_refused():
    with pytest.raises(ValueError, match="unknown file kind"):
        Trigger.model_validate({"all": [{"fact": "a", "eq": 1}], "scope": {"kinds": ["excel"]}, "explain": {"en": "e", "zh": "e"}})


def test_free_text_versions_are_refused():
    from app.models import AppliesTo

    assert AppliesTo(versions="transformers>=4.46,<4.48").versions == "transformers>=4.46,<4.48"
    assert AppliesTo(versions="torch==2.5.0; flash-attn<2.6.2").versions
    with pytest.raises(ValueError, match="versions must be a range"):
        AppliesTo(versions="releases before the fix merged in July")


def test_required_keys_gate_is_a_necessary_condition():
    """The assess stage skips a case when none of its required facts is present: that must never hide a firing
    trigger. Checked by brute force over every presence pattern of three facts."""
    from itertools import product

    from app.retrieve import _required

    a, b, c = (Leaf(fact=k, eq=1) for k in "abc")
    not_a = Cond(**{"not": Leaf(fact="a", exists=True)})
    trees = {
        "all(not a, b)": (Cond(all=[not_a, b]), frozenset({"b"})),
        "any(not a, b)": (Cond(any=[not_a, b]), None),
        "all(a, any(b, c))": (Cond(all=[a, Cond(any=[b, c])]), frozenset({"a"})),
        "any(a, all(b, c))": (Cond(any=[a, Cond(all=[b, c])]), frozenset({"a", "b"})),
        "absent a": (Leaf(fact="a", exists=False), None),
    }
    for name, (tree, want) in trees.items():
        req = _required(tree)
        assert req == want, name
        for present in product([False, True], repeat=3):
            facts = {k: F(k, 1) for k, p in zip("abc", present, strict=True) if p}
            if eval_cond(tree, facts, []):
                assert req is None or not req.isdisjoint(facts), (name, sorted(facts))
