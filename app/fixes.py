"""Fix diffs rendered against the user's own file: its keys, its syntax, its lines.

A case writes a diff once (`-"communication_data_type": "fp32"`). Shown to a user with a YAML file it becomes a
YAML line, with a command line a flag; a removal of a key their file does not have is dropped, a key that is
missing is shown as an addition, and a fix their file already has is not offered at all.
"""

from __future__ import annotations

import ast
import json
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass

import yaml

from app.models import Case

_LINE = re.compile(r"""^\s*(?:--)?["']?([A-Za-z_][\w.\-]*)["']?\s*(?:[:=]\s*|\s+)(.*?)\s*,?\s*$""")


@dataclass
class DiffLine:
    sign: str
    key: str
    value: str


def parse_diff(diff: str) -> list[DiffLine] | None:
    """The `+`/`-` lines of a case diff as (sign, key, value); None when a line is not a key/value change."""
    out = []
    for raw in diff.splitlines():
        if not raw.strip():
            continue
        if raw[0] not in "+-" or raw.startswith(("+++", "---")):
            return None
        m = _LINE.match(raw[1:])
        if not m:
            return None
        out.append(DiffLine(raw[0], m.group(1), m.group(2).strip().rstrip(",")))
    return out or None


def _syntax(name: str, text: str) -> str:
    s = text.lstrip()
    if s.startswith("{"):
        return "json"
    if name.endswith(".sh") or re.search(r"(^|\s)--[a-zA-Z]", text) and not re.search(r"^\s*[\w.\-]+\s*:\s", text, re.M):
        return "cmdline"
    if name.endswith(".py"):
        return "python"
    return "yaml"


def _norm(v: str) -> str:
    v = v.strip().strip(",").strip().strip("\"'").lower()
    return {"yes": "true", "no": "false", "on": "true", "off": "false"}.get(v, v)


def _find(text: str, key: str, syntax: str) -> tuple[int, str, str] | None:
    """(line number, the user's line, its value) where the file sets `key`."""
    leaf = key.split(".")[-1]
    pats = {
        "json": rf'"{re.escape(leaf)}"\s*:\s*([^,}}\n]+)',
        "yaml": rf"^\s*{re.escape(leaf)}\s*:\s*(.*?)\s*(?:#.*)?$",
        "cmdline": rf"--{re.escape(leaf)}(?:[= ]+([^\s\\]+))?",
        "python": rf"\b{re.escape(leaf)}\s*=\s*([^,)\n]+)",
    }
    rx = re.compile(pats[syntax], re.M)
    for n, line in enumerate(text.splitlines(), 1):
        m = rx.search(line)
        if m:
            return n, line.strip(), (m.group(1) or "true").strip()
    return None


def _render(key: str, value: str, syntax: str) -> str:
    leaf = key.split(".")[-1]
    bare = value.strip().strip(",")
    if syntax == "json":
        return f'"{leaf}": {bare}'
    if syntax == "cmdline":
        return f"--{leaf} {bare.strip(chr(34))}" if bare.lower() not in ("true",) else f"--{leaf}"
    if syntax == "python":
        return f"{leaf}={bare}"
    return f"{leaf}: {bare.strip(chr(34))}"


def adapt(diff: str, files: dict[str, str]) -> str | None:
    """The diff in the syntax of the user's file that it touches; None when the user's file already has the fix."""
    lines = parse_diff(diff)
    configs = {n: t for n, t in files.items() if t.strip() and not n.endswith((".log", ".txt", ".out"))}
    if lines is None or not configs:
        return diff
    keys = {d.key for d in lines}
    target = next((n for n, t in configs.items() if any(_find(t, k, _syntax(n, t)) for k in keys)), None)
    if target is None:
        if len(configs) != 1:
            return diff
        target = next(iter(configs))
    text = configs[target]
    syn = _syntax(target, text)
    out: list[str] = []
    adds = [d for d in lines if d.sign == "+"]
    already = bool(adds)
    for d in lines:
        found = _find(text, d.key, syn)
        if d.sign == "-":
            if found:
                out.append(f"-{found[1]}    # {target}:{found[0]}")
            continue
        if found and _norm(found[2]) == _norm(d.value):
            continue
        already = False
        if found and not any(o.startswith(f"-{found[1]}") for o in out):
            out.append(f"-{found[1]}    # {target}:{found[0]}")
        out.append(f"+{_render(d.key, d.value, syn)}")
    if already and adds:
        return None
    return "\n".join(out) if out else None


def fixes_for_user(case: Case, lang: str, files: dict[str, str]) -> tuple[list[str], list[str]]:
    """The case's fixes and diffs for this user: diffs in their file's syntax, fixes they already have left out."""
    texts: list[str] = []
    diffs: list[str] = []
    for f in case.fixes:
        if not f.diff:
            texts.append(f.get(lang))
            continue
        d = adapt(f.diff, files) if files else f.diff
        if d is None:
            continue
        texts.append(f.get(lang))
        diffs.append(d)
    if not texts:  # every fix is already in the user's files: say so rather than offer nothing
        texts = [case.fixes[0].get(lang)]
    return texts, diffs


# ---------------------------------------------------------------- a fix applied to the user's file (editor quick fixes)
#
# The same case diff, applied instead of shown: each `+`/`-` line is a key (a JSON or YAML key, a command-line flag,
# a Python keyword argument) and a value; a line whose value is an object stands for its keys (`"fp16": {"enabled":
# "auto"}` changes `fp16.enabled`). A key the diff removes and does not add back is removed, a key it adds is changed
# in place when the file has it and inserted when it does not. Context lines and code that is not key/value make
# the diff unusable here (it is still shown as text). The result must parse, or no edit is offered.


@dataclass
class Change:
    sign: str
    key: str  # dotted for nested keys
    value: object  # the parsed value (True for a bare flag)
    raw: str  # the value as the diff wrote it
    style: str  # the diff line's own syntax: json, yaml, cmdline, python


_FLAG = re.compile(r"^--([A-Za-z_][\w.\-]*)(?:[ =]+(\S+))?$")
_JSON_KV = re.compile(r'^"([^"]+)"\s*:\s*(.+?)$')
_YAML_KV = re.compile(r"^([A-Za-z_][\w.\-]*)\s*:\s+(\S.*)$")
_PY_KV = re.compile(r"^([A-Za-z_][\w]*)=(\S.*)$")


def _flatten(key: str, value: object) -> list[tuple[str, object]]:
    if isinstance(value, dict) and value:
        return [kv for k, v in value.items() for kv in _flatten(f"{key}.{k}", v)]
    return [(key, value)]


def _diff_line(s: str) -> list[tuple[str, object, str, str]] | None:
    """(key, value, raw, style) for one diff line's text; None when it is not a single key/value setting."""
    s = re.sub(r"\s+#\s.*$", "", s.strip()).rstrip("\\").strip().rstrip(",").strip()
    if m := _FLAG.match(s):
        raw = m.group(2) or "true"
        return [(m.group(1), True if m.group(2) is None else raw.strip("\"'"), raw, "cmdline")]
    if m := _JSON_KV.match(s):
        try:
            v = json.loads(m.group(2))
        except ValueError:
            return None
        return [(k, x, json.dumps(x, ensure_ascii=False), "json") for k, x in _flatten(m.group(1), v)]
    if (m := _YAML_KV.match(s)) and "(" not in m.group(2):
        try:
            v = yaml.safe_load(m.group(2))
        except yaml.YAMLError:
            return None
        if isinstance(v, dict):
            return [(k, x, _yaml_scalar(x), "yaml") for k, x in _flatten(m.group(1), v)]
        return [(m.group(1), v, m.group(2), "yaml")]
    if (m := _PY_KV.match(s)) and "(" not in m.group(2) and not m.group(2).startswith("="):
        return [(m.group(1), m.group(2), m.group(2), "python")]
    return None


def diff_changes(diff: str) -> list[Change] | None:
    """The key/value changes of a case diff (context lines ignored); None when any changed line is not a setting."""
    out: list[Change] = []
    for raw in diff.splitlines():
        if not raw.strip() or raw[0] not in "+-":
            continue  # context
        sign, body = raw[0], raw[1:]
        if body.lstrip().startswith("#"):
            continue
        parsed = _diff_line(body)
        if parsed is None:
            return None
        out += [Change(sign, k, v, r, st) for k, v, r, st in parsed]
    return out or None


def _yaml_scalar(v: object) -> str:
    s = yaml.safe_dump(v, default_flow_style=True, allow_unicode=True, width=10**9).strip()
    return s[: -len("...")].strip() if s.endswith("...") else s


def _mappings(node: yaml.Node) -> Iterator[tuple[yaml.ScalarNode, yaml.Node, yaml.MappingNode]]:
    """(key node, value node, parent mapping) in document order."""
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            if isinstance(k, yaml.ScalarNode):
                yield k, v, node
            yield from _mappings(v)
    elif isinstance(node, yaml.SequenceNode):
        for x in node.value:
            yield from _mappings(x)


def _locate_tree(root: yaml.Node, key: str) -> tuple[yaml.ScalarNode, yaml.Node, yaml.MappingNode] | None:
    """The first place a (dotted) key is set: its first part anywhere, the rest as direct children."""
    first, *rest = key.split(".")
    for k, v, parent in _mappings(root):
        if k.value != first:
            continue
        for part in rest:
            if not isinstance(v, yaml.MappingNode):
                break
            hit = next(((kk, vv) for kk, vv in v.value if isinstance(kk, yaml.ScalarNode) and kk.value == part), None)
            if hit is None:
                break
            parent, (k, v) = v, hit
        else:
            return k, v, parent
    return None


def _deepest(root: yaml.MappingNode, key: str) -> tuple[yaml.MappingNode, list[str]]:
    """The deepest existing mapping along a dotted key, and the parts still missing below it."""
    parts = key.split(".")
    for i in range(len(parts) - 1, 0, -1):
        hit = _locate_tree(root, ".".join(parts[:i]))
        if hit is not None and isinstance(hit[1], yaml.MappingNode):
            return hit[1], parts[i:]
    return root, parts


_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when present: same marks (in characters), 25x faster


def _compose(text: str) -> yaml.Node | None:
    try:
        return yaml.compose(text, Loader=_LOADER)
    except (yaml.YAMLError, RecursionError):
        return None


def _render_value(c: Change, syntax: str, current: str = "") -> str:
    v = c.value
    if syntax == "json":
        return json.dumps(v, ensure_ascii=False)
    if syntax == "yaml":
        return c.raw if c.style in ("yaml", "cmdline") and not isinstance(v, dict) else _yaml_scalar(v)
    if isinstance(v, bool):
        return str(v)
    s = str(v)
    if syntax == "python" and current[:1] in "\"'" and s[:1] not in "\"'":
        return json.dumps(s)
    if syntax == "cmdline" and re.search(r"\s", s):
        return shlex.quote(s)
    return s


def _line_span(text: str, start: int, end: int) -> tuple[int, int]:
    """Grow [start, end) to whole lines when nothing else is on them."""
    ls = text.rfind("\n", 0, start) + 1
    le = text.find("\n", end)
    le = len(text) if le < 0 else le + 1
    if text[ls:start].strip() == "" and text[end:le].strip() == "":
        return ls, le
    return start, end


def _remove_entry(text: str, start: int, end: int) -> str:
    """Remove `key: value` from a comma-separated list (JSON object, flow mapping, keyword arguments)."""
    j = end
    while j < len(text) and text[j] in " \t":
        j += 1
    if j < len(text) and text[j] == ",":
        s, e = _line_span(text, start, j + 1)
        if (s, e) == (start, j + 1):
            while e < len(text) and text[e] in " \t":
                e += 1
        return text[:s] + text[e:]
    i = start - 1
    while i >= 0 and text[i] in " \t\r\n":
        i -= 1
    if i >= 0 and text[i] == ",":
        return text[:i] + text[end:]
    s, e = _line_span(text, start, end)
    return text[:s] + text[e:]


def _apply_tree(text: str, c: Change, syntax: str, remove: bool, insert_ok: bool) -> str | None:
    """One change to a JSON or YAML text; the text unchanged when there is nothing to do, None when it cannot be done."""
    root = _compose(text)
    if not isinstance(root, yaml.MappingNode):
        return None
    hit = _locate_tree(root, c.key)
    if remove:
        if hit is None:
            return text
        k, v, parent = hit
        if parent.flow_style or syntax == "json":
            return _remove_entry(text, k.start_mark.index, v.end_mark.index)
        start = text.rfind("\n", 0, k.start_mark.index) + 1
        indent = k.start_mark.column
        lines = text[start:].split("\n")
        n = 1
        while n < len(lines) and (not lines[n].strip() or len(lines[n]) - len(lines[n].lstrip()) > indent) and not (
            n == len(lines) - 1 and not lines[n]):
            n += 1
        while n > 1 and not lines[n - 1].strip():
            n -= 1
        end = start + sum(len(x) + 1 for x in lines[:n])
        return text[:start] + text[min(end, len(text)):]
    if hit is not None:
        k, v, _ = hit
        if not isinstance(v, yaml.ScalarNode):
            return None if not isinstance(c.value, dict) else text
        if _norm(str(v.value)) == _norm(str(c.value)):
            return text
        return text[: v.start_mark.index] + _render_value(c, syntax, v.value) + text[v.end_mark.index :]
    if not insert_ok:
        return None
    parent, missing = _deepest(root, c.key)
    value: object = c.value
    for part in reversed(missing[1:]):
        value = {part: value}
    nc = Change(c.sign, missing[0], value, c.raw, c.style)
    if syntax == "json" or parent.flow_style:
        entry = (json.dumps(nc.key) if syntax == "json" else nc.key) + ": " + _render_value(nc, syntax)
        if not parent.value:
            at = parent.start_mark.index + 1
            return text[:at] + entry + text[at:]
        first = parent.value[0][0].start_mark.index
        sep = text[parent.start_mark.index + 1 : first] if parent.start_mark.index < first else " "
        return text[:first] + entry + "," + (sep if "\n" in sep else " ") + text[first:]
    body = yaml.safe_dump({nc.key: value}, allow_unicode=True, sort_keys=False, default_flow_style=False, width=10**9)
    if not isinstance(value, dict):
        body = f"{nc.key}: {_render_value(nc, syntax)}\n"
    if parent is root:
        return text + ("" if text.endswith("\n") or not text else "\n") + body
    first = parent.value[0][0]
    at = text.rfind("\n", 0, first.start_mark.index) + 1
    pad = " " * first.start_mark.column
    return text[:at] + "".join(pad + ln + "\n" for ln in body.splitlines()) + text[at:]


def _flag_rx(key: str) -> re.Pattern[str]:
    return re.compile(rf"(?<![\w-])--{re.escape(key.split('.')[-1])}(?![\w.\-])(?:(?:=|[ \t]+)(?!-[A-Za-z-])(?P<v>[^\s\\]+))?")


def _commands(text: str) -> list[tuple[int, int]]:
    """(first, last) physical line index of each command, joining `\\` continuations."""
    out, start = [], None
    for i, line in enumerate(text.split("\n")):
        start = i if start is None else start
        if not line.rstrip().endswith("\\"):
            out.append((start, i))
            start = None
    if start is not None:
        out.append((start, len(text.split("\n")) - 1))
    return out


def _apply_cmdline(text: str, c: Change, remove: bool, insert_ok: bool) -> str | None:
    m = next((m for m in _flag_rx(c.key).finditer(text) if not text[text.rfind("\n", 0, m.start()) + 1 : m.start()].lstrip().startswith("#")), None)
    if remove:
        if m is None:
            return text
        s = m.start()
        while s > 0 and text[s - 1] in " \t":
            s -= 1
        ls = text.rfind("\n", 0, s) + 1
        le = text.find("\n", m.end())
        le = len(text) if le < 0 else le
        rest = text[m.end() : le].strip()
        if text[ls:s].strip() == "" and rest in ("", "\\"):
            out = text[:ls] + text[le + 1 :]
            if rest == "" and ls > 0:  # the command's last line went: the line before no longer continues
                prev_end = ls - 1
                prev = text[:prev_end].rstrip()
                if prev.endswith("\\"):
                    out = prev[:-1].rstrip() + "\n" + text[le + 1 :]
            return out
        return text[:s] + text[m.end() :]
    if m is not None:
        if m.group("v") is None:
            if c.value is True or str(c.value).lower() == "true":
                return text
            return text[: m.end()] + " " + _render_value(c, "cmdline") + text[m.end() :]
        if _norm(m.group("v")) == _norm(str(c.value)):
            return text
        return text[: m.start("v")] + _render_value(c, "cmdline", m.group("v")) + text[m.end("v") :]
    if not insert_ok:
        return None
    lines = text.split("\n")
    flagged = [(sum(len(re.findall(r"(?<![\w-])--[A-Za-z]", lines[i])) for i in range(a, b + 1)), a, b) for a, b in _commands(text)]
    n, _, last = max(flagged, key=lambda x: x[0], default=(0, 0, 0))
    if n == 0:
        return None
    line = lines[last]
    code = re.split(r"\s#", line, maxsplit=1)[0].rstrip()
    indent = re.match(r"\s*", line).group(0) if last > 0 and lines[last - 1].rstrip().endswith("\\") else "    "
    flag = _render(c.key, "true" if c.value is True else _render_value(c, "cmdline"), "cmdline")
    lines[last] = code + " \\\n" + (indent or "    ") + flag + line[len(code) :]
    return "\n".join(lines)


def _apply_python(text: str, c: Change, remove: bool) -> str | None:
    m = re.search(rf"(?<![\w.]){re.escape(c.key.split('.')[-1])}\s*=(?!=)\s*", text)
    if m is None:
        return text if remove else None
    depth, j = 0, m.end()
    while j < len(text):
        ch = text[j]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            if depth == 0:
                break
            depth -= 1
        elif ch in ",\n" and depth == 0:
            break
        j += 1
    value = text[m.end() : j].rstrip()
    end = m.end() + len(value)
    if remove:
        return _remove_entry(text, m.start(), end)
    if _norm(value) == _norm(str(c.value)):
        return text
    return text[: m.end()] + _render_value(c, "python", value) + text[end:]


def _valid(text: str, syntax: str, before: str) -> bool:
    if syntax == "json":
        try:
            json.loads(text)
            return True
        except ValueError:
            return False
    if syntax == "yaml":
        return _compose(text) is not None
    if syntax == "python":
        try:
            ast.parse(text)
            return True
        except SyntaxError:
            return False
    try:
        for a, b in _commands(text):
            shlex.split("\n".join(text.split("\n")[a : b + 1]), comments=True)
    except ValueError:
        return False
    return len(_commands(text)) <= len(_commands(before))


def apply_fix(diff: str, name: str, text: str, syntax: str | None = None) -> str | None:
    """The user's file with a case's diff applied in its own syntax, or None when the diff cannot be applied as
    settings, changes nothing (the file already has the fix), or would leave the file unparsable.

    `syntax` is the file's kind as read (json, yaml, cmdline, python); by default it is guessed like `adapt` does.
    """
    changes = diff_changes(diff)
    syn = syntax or _syntax(name, text)
    if changes is None or syn not in ("json", "yaml", "cmdline", "python"):
        return None
    added = {c.key for c in changes if c.sign == "+"}
    found = any(_locate(text, c.key, syn) for c in changes)
    styles = {c.style for c in changes}
    # a key the file does not have is only added when the diff is about this kind of file
    insert_ok = found or styles == {syn} or (styles | {syn}) <= {"yaml", "cmdline"}
    out: str | None = text
    for c in changes:
        remove = c.sign == "-" and c.key not in added
        if c.sign == "-" and not remove:
            continue
        if syn in ("json", "yaml"):
            out = _apply_tree(out, c, syn, remove, insert_ok)
        elif syn == "cmdline":
            out = _apply_cmdline(out, c, remove, insert_ok)
        else:
            out = _apply_python(out, c, remove)
        if out is None:
            return None
    if out == text or not _valid(out, syn, text):
        return None
    return out


def _locate(text: str, key: str, syntax: str) -> bool:
    if syntax in ("json", "yaml"):
        root = _compose(text)
        return root is not None and _locate_tree(root, key) is not None
    if syntax == "cmdline":
        return _flag_rx(key).search(text) is not None
    return _find(text, key, syntax) is not None


def text_edit(old: str, new: str) -> tuple[int, int, int, int, str]:
    """The smallest single edit turning `old` into `new`: (start line, start col, end line, end col, text), 0-based
    lines and columns in characters (an editor converts them to its own units)."""
    p = 0
    n = min(len(old), len(new))
    while p < n and old[p] == new[p]:
        p += 1
    s = 0
    while s < n - p and old[len(old) - 1 - s] == new[len(new) - 1 - s]:
        s += 1

    def pos(i: int) -> tuple[int, int]:
        line = old.count("\n", 0, i)
        return line, i - (old.rfind("\n", 0, i) + 1)

    (l1, c1), (l2, c2) = pos(p), pos(len(old) - s)
    return l1, c1, l2, c2, new[p : len(new) - s]
