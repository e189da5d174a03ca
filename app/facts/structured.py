"""JSON and YAML configs (DeepSpeed, TrainingArguments JSON, LLaMA-Factory, axolotl, TRL, accelerate, verl) -> facts.

Both are walked as YAML node trees so every setting keeps its line; JSON is first checked with `json` for an
exact error position.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from functools import lru_cache
from typing import Any

import yaml

from app.facts.normalize import normalize
from app.models import Fact


class ParseError(Exception):
    def __init__(self, message: str, line: int = 0, col: int = 0) -> None:
        super().__init__(message)
        self.line, self.col = line, col


_local = threading.local()


@lru_cache(maxsize=8192)
def _plain_value(value: str) -> Any:
    """A plain scalar as YAML 1.1 reads it (int, float, bool, null, date or text), by SafeLoader's own resolver.

    Resolving one scalar with a per-thread loader is ~50x cheaper than a `yaml.safe_load` per value, and configs
    repeat their values, so results are cached (all are immutable)."""
    loader = getattr(_local, "loader", None)
    if loader is None:
        loader = _local.loader = yaml.SafeLoader("")
    tag = loader.resolve(yaml.ScalarNode, value, (True, False))
    construct = loader.yaml_constructors.get(tag)
    if tag == "tag:yaml.org,2002:str" or construct is None:
        return value
    try:  # the tag's constructor itself: construct_object would remember every node in the long-lived loader
        return construct(loader, yaml.ScalarNode(tag, value))
    except (yaml.YAMLError, ValueError, OverflowError):  # ValueError: an integer past Python's 4,300-digit limit stays text
        return value


def _scalar(node: yaml.ScalarNode) -> Any:
    return _plain_value(node.value) if not node.style else node.value  # plain style: None from PyYAML, "" from libyaml


MAX_NODES = 100_000  # a config has hundreds of settings; past this the rest is not read (alias bombs, huge dumps)
MAX_DEPTH = 64


class _Loader(yaml.SafeLoader):
    """SafeLoader that reads any tag (`!!python/tuple`, custom `!tags` in dumped configs) as plain data."""

    def fetch_flow_collection_start(self, TokenClass) -> None:  # noqa: N803 - PyYAML's name
        # the scanner re-checks every open flow level on each token: `[[[[…` costs the square of its depth, so stop early
        if self.flow_level >= MAX_DEPTH:
            raise yaml.scanner.ScannerError(None, None, f"nested deeper than {MAX_DEPTH} levels, which this reader does not follow", self.get_mark())
        super().fetch_flow_collection_start(TokenClass)


def _plain(loader: yaml.SafeLoader, suffix_or_node, node=None):
    node = node if node is not None else suffix_or_node
    if isinstance(node, yaml.MappingNode):
        return loader.construct_mapping(node)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node)
    return loader.construct_scalar(node)


_Loader.add_multi_constructor("!", _plain)
_Loader.add_multi_constructor("tag:yaml.org,2002:python/", _plain)

_FAST = getattr(yaml, "CSafeLoader", None)  # libyaml: composing a 300-line config takes ~1 ms instead of ~30


def _nesting_bound(text: str) -> int:
    """An upper bound on how deep the document can nest: every level needs a `[`, `{`, `-`, `?` or `:` of its own.

    libyaml's composer recurses in C without Python's recursion limit (100,000 levels crash the process), so only a
    document that cannot nest past a safe bound goes to it."""
    return sum(text.count(c) for c in "[{-?:")


def _compose(text: str) -> yaml.Node | None:
    if _FAST is not None and _nesting_bound(text) < 5_000:
        try:
            return yaml.compose(text, Loader=_FAST)
        except yaml.YAMLError:
            pass  # the pure-Python reader gives the error message and position users see
    return yaml.compose(text, Loader=_Loader)


def walk(node: yaml.Node, path: str = "", _seen: set[int] | None = None, _depth: int = 0) -> Iterator[tuple[str, Any, int, int]]:
    """Yield (dotted path, python value, line, column) for every scalar and scalar list.

    An aliased node is walked once (a billion-laughs file costs no more than its text), depth and node count are bounded.
    """
    seen = _seen if _seen is not None else set()
    if id(node) in seen or len(seen) > MAX_NODES or _depth > MAX_DEPTH:
        return
    seen.add(id(node))
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            if len(seen) > MAX_NODES:
                return
            key = str(k.value)
            p = f"{path}.{key}" if path else key
            if isinstance(v, yaml.ScalarNode):
                yield p, _scalar(v), k.start_mark.line + 1, k.start_mark.column
            elif isinstance(v, yaml.SequenceNode) and all(isinstance(x, yaml.ScalarNode) for x in v.value):
                yield p, [_scalar(x) for x in v.value], k.start_mark.line + 1, k.start_mark.column
            else:
                if isinstance(v, yaml.MappingNode):
                    yield p, {"__mapping__": True}, k.start_mark.line + 1, k.start_mark.column
                yield from walk(v, p, seen, _depth + 1)
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            yield from walk(item, path, seen, _depth + 1)


def _top(root: yaml.Node) -> Any:
    """The top level as a shallow dict of scalars (what callers look at), without constructing the whole document."""
    if not isinstance(root, yaml.MappingNode):
        return [] if isinstance(root, yaml.SequenceNode) else getattr(root, "value", None)
    return {str(k.value): (_scalar(v) if isinstance(v, yaml.ScalarNode) else {}) for k, v in root.value}


def parse_structured(text: str, file: str, kind: str) -> tuple[list[Fact], Any]:
    """Facts from a JSON or YAML config; raises ParseError with line and column."""
    if kind == "json":
        try:
            json.loads(text)
        except json.JSONDecodeError as e:
            raise ParseError(f"invalid JSON at line {e.lineno}, column {e.colno}: {e.msg}", e.lineno, e.colno) from e
        except RecursionError as e:
            raise ParseError(f"the JSON is nested deeper than this reader follows (over {MAX_DEPTH} levels are not read)", 1, 1) from e
        except ValueError as e:  # json's other refusal: an integer past Python's 4,300-digit limit
            raise ParseError(f"the JSON holds a number too long to read ({str(e).split(':')[0]})", 1, 1) from e
    try:
        root = _compose(text.replace("\t", "    "))
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line, col = (mark.line + 1, mark.column + 1) if mark else (0, 0)
        raise ParseError(f"invalid YAML at line {line}, column {col}: {getattr(e, 'problem', None) or e}", line, col) from e
    except RecursionError as e:
        raise ParseError(f"the file is nested deeper than this reader follows (over {MAX_DEPTH} levels are not read)", 1, 1) from e
    data = _top(root) if root is not None else None
    if root is None:
        return [], data
    lines = text.splitlines()
    facts: list[Fact] = []
    is_ds = isinstance(data, dict) and any(
        k in data for k in ("zero_optimization", "train_micro_batch_size_per_gpu", "zero_allow_untested_optimizer", "communication_data_type")
    )
    for path, value, line, col in walk(root):
        if isinstance(value, dict):
            continue
        text_line = lines[line - 1] if 0 < line <= len(lines) else ""
        for f in normalize(path, value, file, line, text_line):
            f.col_start = col
            f.col_end = len(text_line.rstrip())
            facts.append(f)
    if is_ds:
        first = next((i for i, ln in enumerate(lines) if ln.strip()), 0)
        facts.append(Fact(key="deepspeed.enabled", value=True, file=file, line=first + 1, text=lines[first].strip() if lines else ""))
    if isinstance(data, dict) and str(data.get("distributed_type", "")).upper() == "DEEPSPEED":
        facts.append(Fact(key="deepspeed.enabled", value=True, file=file, line=1, text="distributed_type: DEEPSPEED"))
    if isinstance(data, dict) and str(data.get("distributed_type", "")).upper() == "FSDP":
        facts.append(Fact(key="fsdp.enabled", value=True, file=file, line=1, text="distributed_type: FSDP"))
    return facts, data
