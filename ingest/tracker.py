"""A team's own tracker export -> thread notes, with no model and no network (`trainfix ingest --issues FILE`).

Reads GitHub REST JSON (issues with their comments), the JSON of `gh issue list --json ...` (with comments), or a
simple JSONL (title, body, url, comments with author role). A thread becomes a note only when it has a resolution:
the comment the reporter said worked (or the reporter's own account of the fix), else a maintainer's answer, else
the pull request that closed it. Text is redacted first; notes live in the data directory, not in kb/.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from app.facts import code_blocks, read_attachments
from app.facts.redact import redact
from app.kb import canonical_url
from app.lang import detect_lang
from app.models import Note
from ingest.github_issue import _CATEGORY_HINTS, _RESOLVED, MAINTAINER_ROLES, _clean_body

MAX_FILE_BYTES = 200 * 1024 * 1024
_THANKS_ONLY = re.compile(r"^\W*(thanks?|thank you|ty|谢谢|感谢|多谢)[\w\s!！.。,，~]*$", re.I)


class TrackerError(Exception):
    pass


@dataclass
class Comment:
    author: str
    role: str
    body: str


@dataclass
class Thread:
    url: str
    title: str
    body: str
    author: str
    comments: list[Comment] = field(default_factory=list)
    closing_prs: list[str] = field(default_factory=list)


@dataclass
class Picked:
    text: str
    evidence: str
    how: str  # reporter-confirmed | reporter-own-fix | maintainer | closing-pr
    index: int  # the comment's index (-1 for a closing PR)


@dataclass
class TrackerReport:
    threads: int = 0
    added: int = 0
    unchanged: int = 0
    unresolved: int = 0
    duplicates: int = 0
    notes: list[Note] = field(default_factory=list)
    picks: dict[str, Picked] = field(default_factory=dict)


def _author(obj: dict) -> str:
    u = obj.get("user") or obj.get("author") or {}
    return (u.get("login") if isinstance(u, dict) else str(u)) or ""


def _role(obj: dict) -> str:
    return str(obj.get("author_association") or obj.get("authorAssociation") or obj.get("role") or "NONE").upper()


def _thread(obj: dict, where: str) -> Thread:
    url = obj.get("html_url") or obj.get("url") or ""
    if not url or not obj.get("title"):
        raise TrackerError(f"{where}: a thread needs a url (html_url) and a title")
    comments = obj.get("comments") if isinstance(obj.get("comments"), list) else obj.get("comments_data") or []
    prs = [p.get("url", "") for p in obj.get("closedByPullRequestsReferences") or [] if isinstance(p, dict)]
    if obj.get("closing_pr"):
        prs.append(str(obj["closing_pr"]))
    return Thread(
        url=url, title=str(obj["title"]), body=str(obj.get("body") or ""), author=_author(obj),
        comments=[Comment(_author(c), _role(c), str(c.get("body") or "")) for c in comments if isinstance(c, dict)],
        closing_prs=[p for p in prs if p],
    )


def load_export(path: Path) -> list[Thread]:
    """Threads from a REST JSON list, a `gh` JSON list, an {"issues": [...]} wrapper, or JSONL."""
    if not path.is_file():
        raise TrackerError(f"{path}: no such file")
    if path.stat().st_size > MAX_FILE_BYTES:
        raise TrackerError(f"{path}: {path.stat().st_size / 1e6:.0f} MB is over the {MAX_FILE_BYTES / 1e6:.0f} MB limit for an export")
    text = path.read_text(encoding="utf-8", errors="replace")
    items: list[tuple[dict, str]] = []
    try:
        data = json.loads(text)
        if isinstance(data, dict):
            data = data.get("issues") or data.get("items") or [data]
        if not isinstance(data, list):
            raise TrackerError(f"{path}: expected a list of issues")
        items = [(d, f"{path.name}[{i}]") for i, d in enumerate(data)]
    except json.JSONDecodeError:
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                items.append((json.loads(line), f"{path.name}:{n}"))
            except json.JSONDecodeError as e:
                raise TrackerError(f"{path.name}:{n}: not JSON ({e.msg}); give a JSON list or one JSON object per line") from e
            except (ValueError, RecursionError) as e:
                raise TrackerError(f"{path.name}:{n}: not readable as JSON ({str(e).split(':')[0][:120]})") from e
    except (ValueError, RecursionError) as e:  # a 4,300+-digit number, nesting past the recursion limit
        raise TrackerError(f"{path.name}: not readable as JSON ({str(e).split(':')[0][:120]})") from e
    out = []
    for d, where in items:
        if not isinstance(d, dict):
            raise TrackerError(f"{where}: expected an issue object")
        if d.get("pull_request"):  # the REST issues list includes PRs: they are not reports
            continue
        out.append(_thread(d, where))
    return out


def pick_resolution(t: Thread) -> Picked | None:
    """The comment that resolved the thread, by who said what; None when nothing did."""
    cs = t.comments
    for i in range(len(cs) - 1, -1, -1):
        c = cs[i]
        if c.author != t.author or not _RESOLVED.search(c.body):
            continue
        own = _clean_body(c.body)
        if len(" ".join(own)) >= 60:  # the reporter explains what fixed it
            return Picked(" ".join(own), "reporter-confirmed", "reporter-own-fix", i)
        for j in range(i - 1, -1, -1):  # "that worked": the advice just before, from someone else
            if cs[j].author != t.author and not _THANKS_ONLY.match(cs[j].body.strip()):
                ev = "maintainer-confirmed" if cs[j].role in MAINTAINER_ROLES else "reporter-confirmed"
                return Picked(" ".join(_clean_body(cs[j].body)) or cs[j].body.strip(), ev, "reporter-confirmed", j)
    for i in range(len(cs) - 1, -1, -1):
        c = cs[i]
        if c.role in MAINTAINER_ROLES and c.author != t.author and len(c.body.strip()) >= 20 and "?" not in c.body.strip()[-3:]:
            return Picked(" ".join(_clean_body(c.body)) or c.body.strip(), "maintainer-confirmed", "maintainer", i)
    if t.closing_prs:
        return Picked(f"Closed by {t.closing_prs[0]}", "maintainer-confirmed", "closing-pr", -1)
    return None


def _category(text: str) -> str:
    low = text.lower()
    for cat, rx in _CATEGORY_HINTS:
        if re.search(rx, low):
            return cat
    return "config_incompatibility"


def _note_id(url: str) -> str:
    m = re.search(r"github\.com/([^/]+)/([^/]+)/issues/(\d+)", url)
    if m:
        base = f"team-{m.group(2)}-{m.group(3)}".lower()
    else:
        base = "team-" + hashlib.sha256(canonical_url(url).encode()).hexdigest()[:10]
    return re.sub(r"[^a-z0-9-]+", "-", base)[:80].strip("-")


def to_note(t: Thread, p: Picked) -> Note:
    body, _ = redact(t.body)
    title, _ = redact(t.title)
    prose, blocks = code_blocks(body)
    symptom = " ".join(_clean_body(prose))[:600] or title
    resolution = redact(p.text)[0][:800]
    fs = read_attachments(blocks, prose)
    facts = fs.by_key()
    versions = "; ".join(
        f"{k.split('.')[1].replace('_version', '').replace('flash_attn', 'flash-attn')}=={f.value}"
        for k, f in facts.items() if k.startswith("env.") and k.endswith("_version") and re.fullmatch(r"\d+(\.\d+){0,2}", str(f.value))
    ) or None
    fws = sorted({f.framework for f in fs.facts if f.framework})
    lang = detect_lang(title + " " + symptom, default="en")
    return Note.model_validate({
        "id": _note_id(t.url), "url": t.url, "title": title[:200], "lang": lang,
        "category": _category(title + " " + symptom + " " + resolution), "frameworks": fws, "versions": versions,
        "evidence": p.evidence, "symptom": {"en": symptom, "zh": symptom}, "resolution": {"en": resolution, "zh": resolution},
        "origin": "team",
    })


def team_notes_file(home: Path) -> Path:
    return home / "team" / "notes" / "team.yaml"


def read_team_notes(home: Path) -> list[dict]:
    f = team_notes_file(home)
    return (yaml.safe_load(f.read_text(encoding="utf-8")) or []) if f.exists() else []


def import_export(path: Path, home: Path, dry_run: bool = False) -> TrackerReport:
    """Turn the resolved threads of an export into notes in `home`, once per URL."""
    threads = load_export(path)
    rep = TrackerReport(threads=len(threads))
    existing = read_team_notes(home)
    have = {canonical_url(n["url"]) for n in existing}
    seen: set[str] = set()
    new: list[dict] = []
    for t in threads:
        key = canonical_url(t.url)
        if key in seen:
            rep.duplicates += 1
            continue
        seen.add(key)
        p = pick_resolution(t)
        if p is None:
            rep.unresolved += 1
            continue
        rep.picks[t.url] = p
        if key in have:
            rep.unchanged += 1
            continue
        note = to_note(t, p)
        rep.notes.append(note)
        new.append(note.model_dump(exclude={"path", "origin"}))
    rep.added = len(new)
    if new and not dry_run:
        f = team_notes_file(home)
        f.parent.mkdir(parents=True, exist_ok=True)
        tmp = f.with_suffix(".tmp")
        tmp.write_text(yaml.safe_dump(existing + new, allow_unicode=True, sort_keys=False), encoding="utf-8")
        tmp.replace(f)
    return rep
