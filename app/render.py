"""Render a Diagnosis for each channel: Markdown (CLI, UI), Slack Block Kit, JSON; lint results as LSP diagnostics."""

from __future__ import annotations

import html
import re
from typing import Any

from app.messages import view as _view
from app.models import CauseOut, Diagnosis, Fact


def labels(lang: str) -> dict[str, Any]:
    return _view("render", "zh" if lang == "zh" else "en")


def _note_md(i: int, c: CauseOut, lang: str) -> str:
    L = labels(lang)
    out = [f"### {i}. {L['note_head']}: {c.title}", ""]
    out.append(f"{c.cause}  \n**{L['resolution']}:** {c.resolution}  \n*{L['evidence_level']}: {L['levels'].get(c.evidence_level, c.evidence_level)}* · `{c.case_id}`")
    if c.demoted:
        out += ["", f"> {c.demoted}"]
    if c.evidence:
        out += ["", f"**{L['why']}:**"] + [f"- {e}" for e in c.evidence]
    out += ["", f"{L['sources']}: " + " ".join(f"[[{x.n}]]({x.url})" for x in c.citations)]
    return "\n".join(out)


def _cause_md(i: int, c: CauseOut, lang: str) -> str:
    if c.kind == "note":
        return _note_md(i, c, lang)
    L = labels(lang)
    out = [f"### {i}. {c.title}", ""]
    out.append(f"{c.cause}  \n*{L['likelihood']}: {L['likely'].get(c.likelihood, c.likelihood)} · {L['evidence_level']}: {L['levels'].get(c.evidence_level, c.evidence_level)}* · `{c.case_id}`")
    if c.demoted:
        out += ["", f"> {c.demoted}"]
    why = list(c.evidence) + [f"{L['symptom']}: {s}" for s in c.matched_symptoms]
    if why:
        out += ["", f"**{L['why']}:**"] + [f"- {e}" for e in why]
    out += ["", f"**{L['fixes']}:**"] + [f"- {f}" for f in c.fixes]
    for d in c.diffs:
        out += ["", "```diff", d.rstrip(), "```"]
    cites = " ".join(f"[[{x.n}]]({x.url} \"{x.title}\")" for x in c.citations)
    out += ["", f"{L['sources']}: {cites}"]
    return "\n".join(out)


_WHERE = re.compile(r"\(`?([^()`\s]+:\d+)`?\)")


def _quoted(e: str, lines: dict[str, Fact]) -> str:
    """An evidence line that points at `file:line` of the user's file, led by that line itself (when not quoted yet)."""
    m = _WHERE.search(e)
    f = lines.get(m.group(1)) if m else None
    if f is None or not f.text.strip() or f.text.strip()[:30] in e:
        return e
    shown = f.text.strip()
    shown = (shown if len(shown) <= 120 else shown[:117] + "...").replace("`", "'")
    rest = (e[: m.start()] + e[m.end():]).strip().rstrip(":").strip()
    return f"`{shown}` ({m.group(1)}) — {rest}"


def _card(i: int, c: CauseOut, lang: str, lines: dict[str, Fact], open_: bool) -> str:
    """One cause as a collapsible card: the header carries title, likelihood and evidence level; the user's own file
    line leads "why it matched". Markdown inside the <details> is kept apart by blank lines so it still renders."""
    L = labels(lang)
    title = f"{L['note_head']}: {c.title}" if c.kind == "note" else c.title
    colon = "：" if lang == "zh" else ": "
    meta = [f"{L['likelihood'].capitalize()}{colon}{L['likely'].get(c.likelihood, c.likelihood)}"] if c.likelihood else []
    meta.append(f"{L['evidence_level']}{colon}{L['levels'].get(c.evidence_level, c.evidence_level)}")
    head = f"<summary><strong>{i}. {html.escape(title, quote=False)}</strong> · <em>{html.escape(' · '.join(meta), quote=False)}</em></summary>"
    out = [f"<details class=\"tf-card\"{' open' if open_ else ''}>", head, "", c.cause]
    if c.kind == "note" and c.resolution:
        out += ["", f"**{L['resolution']}:** {c.resolution}"]
    if c.demoted:
        out += ["", f"> {c.demoted}"]
    why = [_quoted(e, lines) for e in c.evidence] + [f"{L['symptom']}: {s}" for s in c.matched_symptoms]
    if why:
        out += ["", f"**{L['why']}:**", ""] + [f"- {e}" for e in why]
    if c.kind != "note":
        out += ["", f"**{L['fixes']}:**", ""] + [f"- {f}" for f in c.fixes]
        for d in c.diffs:
            out += ["", "```diff", d.rstrip(), "```"]
    cites = " ".join(f"[[{x.n}]]({x.url} \"{x.title}\")" for x in c.citations)
    out += ["", f"{L['sources']}: {cites} · `{c.case_id}`", "", "</details>"]
    return "\n".join(out)


def facts_md(d: Diagnosis) -> str:
    L = labels(d.language)
    lines = []
    for f in d.facts:
        val = f.value if not isinstance(f.value, float) or not f.value.is_integer() else int(f.value)
        lines.append(f"- `{f.key}` = `{val}` ({f.where()})")
    return "\n".join(lines) if lines else L["nothing_read"]


def source_list(d: Diagnosis) -> list[str]:
    """Every citation of the answer as a numbered line with its full URL (survives pipes and copy-paste)."""
    seen: dict[int, str] = {}
    for c in list(d.causes or d.related) + list(d.also_noticed):
        for x in c.citations:
            seen.setdefault(x.n, f"[{x.n}] {x.title} — {x.url}")
    return [seen[k] for k in sorted(seen)]


def to_markdown(d: Diagnosis, show_facts: bool = True, sources: bool = False, cards: bool = False, clarify: bool = True) -> str:
    """The answer as Markdown; `sources` appends the numbered source list with full URLs (CLI, pipes); `cards` shows
    each cause as a collapsible <details> card, only the first open (chat UI); `clarify=False` leaves the clarifying
    question to the caller (the UI puts it last, right above its quick-reply buttons)."""
    L = labels(d.language)
    out: list[str] = []
    if d.summary:
        out.append(f"**{d.summary}**")
    lines = {f.where(): f for f in d.facts if f.file and f.line and f.text}

    def render(items: list[CauseOut]) -> list[str]:
        if cards:
            return [_card(i, c, d.language, lines, i == 1) for i, c in enumerate(items, 1)]
        return [_cause_md(i, c, d.language) for i, c in enumerate(items, 1)]

    if d.confident:
        out.append(f"## {L['causes']}")
        out += render(d.causes)
    else:
        out.append(L["unsure"])
        out += render(d.related)
        if d.general_checks:
            out.append(f"## {L['checks']}")
            out += [f"- {c}" for c in d.general_checks]
    if d.also_noticed:
        out.append(f"## {L['also']}")
        for c in d.also_noticed:
            ev = f" — {c.evidence[0]}" if c.evidence else ""
            cites = " ".join(f"[{x.n}]" for x in c.citations)
            out.append(f"- **{c.title}**{ev} {cites}")
    if d.supporting:
        out.append(f"## {L['supporting']}")
        for a in d.supporting:
            link = f"[{a.title}]({a.source})" if a.source.startswith("http") else f"{a.title} ({a.source})"
            out.append(f"- {link}: {a.snippet}")
    if d.clarify and clarify:
        out.append(f"**{L['ask']}:** {d.clarify['question']} ({' / '.join(d.clarify['options'])})")
    if show_facts and (d.facts or d.files):
        out.append(f"## {L['read']}")
        out.append(facts_md(d))
    if d.notes:
        out.append(f"**{L['notes']}:**")
        out += [f"- {n}" for n in d.notes]
    if sources:
        lst = source_list(d)
        if lst:
            out.append(f"## {L['source_list']}")
            out.append("\n".join(f"{x}  " for x in lst))
    return "\n\n".join(out)


def to_json(d: Diagnosis) -> dict[str, Any]:
    return d.model_dump(mode="json")


def to_slack_blocks(d: Diagnosis, top: int = 3, thread_key: str = "") -> list[dict[str, Any]]:
    """Block Kit: one section per cause with fixes and citations, a 'more' button, feedback buttons."""
    L = labels(d.language)
    items = d.causes if d.confident else d.related
    blocks: list[dict[str, Any]] = []
    head = (f"*{d.summary}*\n" if d.summary else "") + (f"*{L['causes']}*" if d.confident else L["unsure"])
    blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": head[:2900]}})
    for i, c in enumerate(items[:top], 1):
        why = "\n".join(f"• {e}" for e in c.evidence[:3])
        fixes = "\n".join(f"• {f}" for f in c.fixes[:3])
        cites = " ".join(f"<{x.url}|[{x.n}]>" for x in c.citations)
        title = f"{L['note_head']}: {c.title}" if c.kind == "note" else c.title
        fix_label = L["resolution"] if c.kind == "note" else L["fixes"]
        text = f"*{i}. {title}*\n{c.cause}\n" + (f"_{L['why']}_\n{why}\n" if why else "") + f"_{fix_label}_\n{fixes}\n{L['sources']}: {cites}"
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": text[:2900]}})
        blocks.append(
            {
                "type": "actions",
                "block_id": f"fb-{c.case_id}"[:255],
                "elements": [
                    {"type": "button", "text": {"type": "plain_text", "text": "✅ " + ("this fixed it" if d.language == "en" else "解决了")}, "action_id": "fixed", "value": c.case_id},
                ],
            }
        )
    if d.clarify:
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": f"*{L['ask']}:* {d.clarify['question']}"}})
    blocks.append(
        {
            "type": "actions",
            "block_id": "answer-feedback",
            "elements": [
                {"type": "button", "text": {"type": "plain_text", "text": "👍"}, "action_id": "thumbs_up", "value": thread_key or "up"},
                {"type": "button", "text": {"type": "plain_text", "text": "👎"}, "action_id": "thumbs_down", "value": thread_key or "down"},
                {"type": "button", "text": {"type": "plain_text", "text": "More" if d.language == "en" else "更多"}, "action_id": "more", "value": thread_key or "more"},
            ],
        }
    )
    return blocks


def slack_text(d: Diagnosis) -> str:
    items = d.causes if d.confident else d.related
    return (items[0].title if items else labels(d.language)["unsure"])[:150]
