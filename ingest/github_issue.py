"""GitHub issue (REST API JSON, with its comments) -> a draft case file for a person to review.

The draft is `status: draft`, so it is validated by `kb check` but never served until someone rewrites it in
their own words, translates it, adds triggers and flips the status. The thread's resolution and the facts read
from its code blocks are put beside it to make that review quick.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from app.facts import code_blocks, read_attachments
from app.kb import KB_DIR, load_taxonomy
from app.lang import detect_lang

MAINTAINER_ROLES = {"OWNER", "MEMBER", "COLLABORATOR"}
_RESOLVED = re.compile(r"\b(solved|fixed|resolved|works now|that worked|this worked|it works|problem solved)\b|解决了|已解决|搞定|好了|可以了|有效", re.I)
_TEMPLATE = re.compile(r"^\s*(- \[[ xX]\]|###?\s*(是否|Is there|Reminder|System Info|Environment|运行环境|Who can help|Information|Reproduction|复现)|<!--)", re.I)
_CATEGORY_HINTS = [
    ("loss_zero", r"loss\s*(is|=|becomes|goes to|drops to)?\s*0(\.0)?\b|loss归零|loss为0|loss 为 0|loss变为0|loss 变成 0"),
    ("nan_inf_loss", r"\bnan\b|\binf\b"),
    ("fp16_overflow", r"overflow|loss scale"),
    ("deepspeed_zero", r"deepspeed|zero[- ]?[23]"),
    ("fsdp_mixed_precision", r"\bfsdp\b"),
    ("distributed_comm", r"nccl|timeout|hang"),
    ("preference_optimization", r"\b(dpo|kto|orpo|simpo|ipo)\b"),
    ("rl_policy_optimization", r"\b(ppo|grpo|rloo|dapo)\b"),
    ("lora_qlora", r"\b(lora|qlora|peft)\b"),
    ("memory_oom", r"out of memory|\boom\b|显存"),
    ("lr_schedule", r"learning rate|\blr\b|学习率|warmup|scheduler"),
    ("packing_flash_attn", r"packing|padding[_ -]free|flash[_ -]?attn"),
]


class DraftError(Exception):
    pass


def _slug(text: str, n: int = 40) -> str:
    s = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return s[:n].strip("-") or "issue"


def _clean_body(body: str) -> list[str]:
    prose, _ = code_blocks(body or "")
    out = []
    for ln in prose.splitlines():
        s = ln.strip()
        if not s or _TEMPLATE.match(s) or s.startswith(("![", "<img", "|", ">")):
            continue
        s = re.sub(r"\s+", " ", s)
        if len(s) > 8:
            out.append(s)
    return out


def load_issue(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Read the issue JSON; comments come from a `comments` list, an {"issue", "comments"} wrapper, or a sibling file."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as e:
        raise DraftError(f"{path}: no such file") from e
    except json.JSONDecodeError as e:
        raise DraftError(f"{path}: invalid JSON at line {e.lineno}, column {e.colno}: {e.msg}") from e
    except (ValueError, RecursionError) as e:  # not UTF-8, a 4,300+-digit number, nesting past the recursion limit
        raise DraftError(f"{path}: not readable as JSON ({str(e).split(':')[0][:120]})") from e
    if isinstance(data, dict) and "issue" in data:
        issue, comments = data["issue"], data.get("comments") or []
    elif isinstance(data, dict):
        issue = data
        comments = data["comments"] if isinstance(data.get("comments"), list) else []
        for cand in (path.with_name(path.stem + ".comments.json"), path.with_name(path.stem + "_comments.json")):
            if not comments and cand.exists():
                try:
                    comments = json.loads(cand.read_text(encoding="utf-8"))
                except (ValueError, RecursionError) as e:
                    raise DraftError(f"{cand}: not readable as JSON ({str(e).split(':')[0][:120]})") from e
                comments = comments if isinstance(comments, list) else []
    else:
        raise DraftError(f"{path}: expected a GitHub issue object (the JSON of GET /repos/OWNER/REPO/issues/N)")
    if not isinstance(issue, dict):
        raise DraftError(f"{path}: expected a GitHub issue object under 'issue'")
    for key in ("html_url", "title"):
        if not isinstance(issue.get(key), str) or not issue.get(key):
            raise DraftError(f"{path}: not a GitHub issue: the field {key!r} is missing")
    comments = comments if isinstance(comments, list) else []
    return _shaped(issue), [_shaped(c) for c in comments if isinstance(c, dict)]


def _shaped(item: dict) -> dict:
    """The fields the draft reads, with the types GitHub gives them: a field of another type (an export edited by
    hand, a number where text belongs) counts as absent instead of failing deep inside the draft."""
    out = dict(item)
    for key in ("body", "state", "author_association"):
        if not isinstance(out.get(key), str):
            out[key] = None
    if not isinstance(out.get("user"), dict):
        out["user"] = None
    elif not isinstance(out["user"].get("login"), str):
        out["user"] = {**out["user"], "login": None}
    return out


def _resolution(issue: dict, comments: list[dict]) -> tuple[dict | None, str]:
    author = (issue.get("user") or {}).get("login")
    maint = [c for c in comments if c.get("author_association") in MAINTAINER_ROLES]
    reporter_ok = [c for c in comments if (c.get("user") or {}).get("login") == author and _RESOLVED.search(c.get("body") or "")]
    if reporter_ok:
        return reporter_ok[-1], "reporter-confirmed"
    if maint:
        return maint[-1], "maintainer-confirmed" if issue.get("state") == "closed" or _RESOLVED.search(maint[-1].get("body") or "") else "community-advice"
    others = [c for c in comments if _RESOLVED.search(c.get("body") or "")]
    if others:
        return others[-1], "community-advice"
    return (comments[-1] if comments else None), "community-advice"


def _guess_category(text: str) -> str:
    for cat, rx in _CATEGORY_HINTS:
        if re.search(rx, text, re.I):
            return cat
    return "data_quality"


def draft_case(issue: dict, comments: list[dict], category: str | None = None) -> tuple[str, str, str]:
    """Return (case id, category, file text) of the draft."""
    url = issue["html_url"]
    m = re.search(r"github\.com/([^/]+)/([^/]+)/(?:issues|pull)/(\d+)", url)
    repo, num = (f"{m.group(1)}/{m.group(2)}", m.group(3)) if m else ("", str(issue.get("number", "")))
    title = issue["title"].strip()
    body_lines = _clean_body(issue.get("body") or "")
    lang = detect_lang(title + " " + " ".join(body_lines[:5]))
    all_text = title + "\n" + (issue.get("body") or "") + "\n" + "\n".join(c.get("body") or "" for c in comments)
    cat = category or _guess_category(all_text)
    if cat not in load_taxonomy(KB_DIR).ids():
        raise DraftError(f"unknown category {cat!r}; see kb/taxonomy.yaml")
    cid = f"draft-{_slug(repo.replace('/', '-'), 30)}-{num}-{_slug(title, 30)}".strip("-")[:80]
    res, evidence = _resolution(issue, comments)
    symptoms = body_lines[:3] or [title]
    _, blocks = code_blocks(issue.get("body") or "")
    facts = read_attachments(blocks).shown() if blocks else []
    todo = "TODO (translate)" if lang == "en" else "TODO (translate to English)"
    fm = {
        "id": cid,
        "category": cat,
        "status": "draft",
        "title": {"en": title if lang == "en" else f"{todo}: {title}", "zh": title if lang == "zh" else f"TODO（翻译）: {title}"},
        "symptoms": {"en": symptoms if lang == "en" else [f"{todo}: {s}" for s in symptoms], "zh": symptoms if lang == "zh" else [f"TODO（翻译）: {s}" for s in symptoms]},
        "applies_to": {"frameworks": [repo.split("/")[-1].lower()] if repo else [], "models": [], "stages": []},
        "triggers": [],
        "causes": [{"en": "TODO: the cause, in your own words, from the resolution below", "zh": "TODO：用自己的话写出原因", "likelihood": "medium"}],
        "fixes": [{"en": "TODO: the fix, in your own words", "zh": "TODO：用自己的话写出解决办法"}],
        "evidence": evidence,
        "sources": [{"url": url, "title": f"{repo}#{num} {title}" if repo else title, "lang": lang}],
        "examples": {"match": [{"query": title}], "no_match": [{"query": "TODO: a near-miss question that must not match"}]},
    }
    head = yaml.safe_dump(fm, allow_unicode=True, sort_keys=False, width=200)
    notes = ["## English", "", "### Source notes (for the reviewer; rewrite before publishing, copy nothing)", ""]
    notes.append(f"- Thread: {url} ({issue.get('state', 'unknown')}, {len(comments)} comments)")
    if res is not None:
        who = (res.get("user") or {}).get("login", "?")
        excerpt = re.sub(r"\s+", " ", res.get("body") or "")[:600]
        notes.append(f"- Resolution candidate by {who} ({res.get('author_association', 'NONE')}), evidence guessed as {evidence}: {excerpt}")
    else:
        notes.append("- No resolution in the thread yet.")
    if facts:
        notes.append("- Facts read from the issue's code blocks (candidates for triggers):")
        notes += [f"  - `{f.key}` = `{f.value}`" for f in facts[:20]]
    notes += ["", "## 中文", "", "### 审阅说明", "", "草稿：请用自己的话改写原因与解决办法，补全中英文并添加触发条件后，再把 status 改为 published。", ""]
    return cid, cat, f"---\n{head}---\n\n" + "\n".join(notes)


def draft_from_file(path: Path, out: Path | None = None, category: str | None = None, entry: int | None = None) -> Path:
    """A draft case from a GitHub issue JSON, or from one entry (`entry`) of a `trainfix feedback export --review` file."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        data = None  # load_issue reports it
    from ingest.feedback_review import draft_from_review, is_review

    if is_review(data):
        return draft_from_review(data, path, entry, out, category)
    issue, comments = load_issue(path)
    cid, cat, text = draft_case(issue, comments, category)
    return write_draft(cid, cat, text, out)


def write_draft(cid: str, cat: str, text: str, out: Path | None) -> Path:
    """Write a draft case: to `out` (a .md file, or a folder), else to kb/cases/<category>/<id>.md."""
    target = out or KB_DIR / "cases" / cat / f"{cid}.md"
    if out is not None and (out.is_dir() or out.suffix != ".md"):
        target = out / f"{cid}.md"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text, encoding="utf-8")
    return target
