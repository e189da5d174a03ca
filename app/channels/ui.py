"""The Gradio chat UI: multi-turn diagnosis with attachments, quick replies, examples and feedback.

`build_ui(state)` returns the Blocks; app/channels/server.py mounts it with `gr.mount_gradio_app(app, ui, path="/")`.
Every turn calls `diagnose()` with the whole conversation so far (earlier messages and files), so a follow-up such as
"I already removed communication_data_type" re-ranks the causes. Channels only translate: the answer is
`app.render.to_markdown(cards=True)` (the verdict first, each cause a <details> card, only the first open) plus the
bad-input messages and a "what I read from your files" section. When the turn's files hold a run, its chart is drawn
by the shared chart path (`app.plots`) after the answer is on screen and then shown inside it. A
clarifying question ends the answer and carries its quick replies as the message's options, so Gradio shows them
under that question on the latest answer only. Feedback records the item (case or thread note) and a one-line comment.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any
from urllib.parse import quote

import gradio as gr

from app.diagnose import InputError, Turn, diagnose
from app.facts import Attachment, is_binary
from app.facts.redact import redact
from app.feedback import COMMENT_MAX_CHARS
from app.lang import detect_lang
from app.messages import view as _view
from app.models import Diagnosis
from app.render import facts_md, labels, to_markdown
from app.runtime import State
from app.store import StoreError

log = logging.getLogger("trainfix")

MAX_QUICK = 5  # quick replies under a clarifying question (kb/clarify.yaml has at most 5 options)

EXAMPLES = [
    "Loss drops to 0 after a few steps in my Qwen 7B full fine-tune with DeepSpeed, grad norm was huge first",
    "fp16 training: the loss scale keeps going down and every step overflows",
    "全量微调几步之后 loss 变成 0 了，梯度范数先变得很大，怎么回事？",
    "Qwen2-7B 全量微调学习率 3e-4，后面的 checkpoint 推理时报 probability tensor contains inf",
]



def ui_text(lang: str) -> dict[str, str]:
    return _view("ui", "zh" if lang == "zh" else "en")


def _new_session() -> dict[str, Any]:
    return {"turns": [], "lang": "en", "answers": {}, "last": None, "options": []}


# ---------------------------------------------------------------- reading uploads


def _uploads(paths: list[str] | None, max_mb: float, lang: str) -> tuple[list[Attachment], list[str]]:
    """Uploaded files -> attachments held in memory (they outlive Gradio's temp files), plus a message per refused file."""
    T = ui_text(lang)
    atts: list[Attachment] = []
    problems: list[str] = []
    for p in paths or []:
        path = Path(p if isinstance(p, str) else getattr(p, "name", str(p)))
        name = path.name
        try:
            size = path.stat().st_size
            if size > max_mb * 1024 * 1024:
                problems.append(T["too_large"].format(name=name, size=size / 1024 / 1024, limit=max_mb))
                continue
            data = path.read_bytes()
        except OSError as e:
            problems.append(T["unreadable"].format(name=name, err=e.strerror or e))
            continue
        if data and is_binary(data[:8192]):
            problems.append(T["binary"].format(name=name))
            continue
        atts.append(Attachment(name=name, content=data))
    return atts, problems


# ---------------------------------------------------------------- rendering


def render_answer(d: Diagnosis, problems: list[str], chart: str = "") -> str:
    """The chat message for one answer, in reading order: the verdict line, the user's run as a chart (when drawn),
    refused input, the cause cards (only the first open), what was read from the files, and last the clarifying
    question (its quick-reply buttons appear right under it, on the latest message only)."""
    L = labels(d.language)
    T = ui_text(d.language)
    file_problems = [f.text(d.language) for f in d.files if not f.ok and f.message]
    warn = list(problems) + file_problems
    rest = [n for n in d.notes if n not in file_problems]
    out: list[str] = []
    if d.summary:
        out.append(f"**{d.summary}**")
    if chart:
        out.append(chart)
    if warn:
        out.append(f"**⚠ {T['problems']}:**\n\n" + "\n".join(f"- {w}" for w in warn))
    out.append(to_markdown(d.model_copy(update={"notes": rest, "summary": ""}), show_facts=False, cards=True, clarify=False))
    if d.facts or any(f.ok for f in d.files):
        read = [f"### {L['read']}"]
        ok = [f.text(d.language) for f in d.files if f.ok and f.message]
        if ok:
            read.append(f"{T['files_read']}: " + "; ".join(ok))
        read.append(facts_md(d))
        out.append("\n\n".join(read))
    if d.clarify:
        out.append(f"**{L['ask']}:** {d.clarify['question']}")
    return "\n\n".join(out)


def chart_markdown(state: State, d: Diagnosis, atts: list[Attachment]) -> str:
    """The run in the attachments drawn by the shared chart path (same chart, same bounded plots folder), as a Markdown
    image served by Gradio from that folder (so the page's own sign-in covers it); "" when there is no run."""
    from app.plots import draw_now

    try:
        drawn, path = draw_now(state.settings.home, d, atts)
    except Exception:  # noqa: BLE001 - a chart that cannot be drawn never costs the answer
        log.exception("chart failed in the UI")
        return ""
    if path is None:
        return ""
    alt = drawn.plot_alt.replace("[", "(").replace("]", ")")
    return f"![{alt}](/gradio_api/file={quote(path.as_posix())} \"{labels(d.language)['chart']}\")"


def _problems_only(problems: list[str], lang: str, extra: str = "") -> str:
    T = ui_text(lang)
    out = []
    if problems:
        out.append(f"**⚠ {T['problems']}:**\n\n" + "\n".join(f"- {w}" for w in problems))
    if extra:
        out.append(extra)
    return "\n\n".join(out)


def _user_message(text: str, atts: list[Attachment], refused: list[str], lang: str) -> str:
    names = [a.name for a in atts] + [r.split(":")[0].split("：")[0] for r in refused]
    msg = text.strip()
    if names:
        msg = (msg + "\n\n" if msg else "") + f"{ui_text(lang)['attached']}: " + ", ".join(f"`{n}`" for n in names)
    return msg or "…"


# ---------------------------------------------------------------- building the Blocks


CSS = """
/* the chat uses the window's height; the input row stays in view under it */
#tf-chat { height: calc(100dvh - 300px) !important; min-height: 320px; }
/* the upload box is no taller than the question box */
#tf-files { max-height: 96px; min-height: 0; overflow: auto; }
#tf-files .wrap, #tf-files button { min-height: 0; }
#tf-files .or, #tf-files [data-testid="upload-icon"] { display: none; }
#tf-files [data-testid="upload-text"] { font-size: 0.85rem; line-height: 1.3; }
#tf-input textarea { min-height: 72px; }
/* cause cards: a header line that reads at a glance, the body when opened */
#tf-chat details.tf-card { border: 1px solid var(--border-color-primary); border-radius: 8px; padding: 4px 10px; margin: 6px 0; }
#tf-chat details.tf-card > summary { cursor: pointer; list-style-position: outside; margin-left: 1em; }
#tf-chat details.tf-card[open] > summary { margin-bottom: 6px; }
#tf-chat img[src*="/plots/"] { width: min(100%, 480px); max-width: 100%; max-height: none; height: auto; }
#tf-chat pre, #tf-chat pre code { white-space: pre-wrap !important; word-break: break-word; overflow-x: hidden; }
.tf-example { white-space: normal !important; text-align: left; }
body, .gradio-container { overflow-x: hidden; }
@media (max-width: 600px) {
  #tf-chat { height: calc(100dvh - 360px) !important; min-height: 300px; }
  .gradio-container, .gradio-container .main { padding-left: 6px !important; padding-right: 6px !important; }
  #tf-header h2 { font-size: 1.15rem; }
  #tf-chat .message-content .prose, #tf-chat .message-content .prose * { font-size: 15px; line-height: 1.45; }
}
"""


def _options(clarify: dict[str, Any] | None) -> list[dict[str, str]]:
    """The clarifying question's answers as the message's own quick replies (Gradio shows them on the latest answer only)."""
    return [{"value": o, "label": o} for o in list((clarify or {}).get("options") or [])[:MAX_QUICK]]


def _item_of(data_index: Any) -> int | None:
    return data_index if isinstance(data_index, int) else (data_index[0] if data_index else None)


def build_ui(state: State) -> gr.Blocks:
    """The chat page. `state` is the process-wide engine + feedback store shared with the API and Slack."""
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    from app.plots import plots_dir

    gr.set_static_paths([str(plots_dir(state.settings.home))])  # the charts drawn for answers, served by Gradio behind the page's sign-in
    T0 = ui_text("en")

    with gr.Blocks(title="trainfix", analytics_enabled=False, delete_cache=(3600, 3600)) as demo:  # uploads removed after an hour
        # the page's CSS travels inside the Blocks: gr.mount_gradio_app (server.py, tests) would replace Blocks(css=...)
        gr.HTML(f"<style>{CSS}</style>", padding=False, elem_id="tf-style")
        sess = gr.State(_new_session)
        header = gr.Markdown(T0["title"], elem_id="tf-header")
        chat = gr.Chatbot(
            elem_id="tf-chat",
            show_label=False,
            feedback_options=("Like", "Dislike"),
            buttons=["copy"],
            render_markdown=True,
        )
        with gr.Row(equal_height=True, elem_id="tf-input-row"):
            box = gr.Textbox(placeholder=T0["placeholder"], show_label=False, lines=3, max_lines=10, scale=4, min_width=260, elem_id="tf-input")
            files = gr.File(label=T0["files"], file_count="multiple", type="filepath", height=96, scale=3, min_width=220, elem_id="tf-files")
            with gr.Column(scale=1, min_width=120):
                send = gr.Button(T0["send"], variant="primary", elem_id="tf-send")
                new = gr.Button(T0["new"], elem_id="tf-new", size="sm")
        ex_label = gr.Markdown(T0["examples"])
        with gr.Row():
            ex_btns = [gr.Button(q, size="sm", min_width=160, elem_classes=["tf-example"]) for q in EXAMPLES]
        fb_label = gr.Markdown(T0["feedback"])
        with gr.Row():
            fixed_dd = gr.Dropdown(choices=[], value=None, label=T0["fixed_label"], interactive=True, scale=4, min_width=220, elem_id="tf-fixed-case")
            comment = gr.Textbox(label=T0["comment"], placeholder=T0["comment_ph"], lines=1, max_lines=1, max_length=COMMENT_MAX_CHARS,
                                 scale=4, min_width=220, elem_id="tf-comment")
            fixed_btn = gr.Button(T0["fixed"], scale=1, min_width=120, elem_id="tf-fixed")
        fb_status = gr.Markdown("", elem_id="tf-feedback-status")

        lang_outputs = [header, box, send, new, files, ex_label, fb_label, fixed_dd, fixed_btn, comment]

        def lang_updates(lang: str, reset_dd: dict | None = None) -> list[Any]:
            T = ui_text(lang)
            dd = gr.update(label=T["fixed_label"], **(reset_dd or {}))
            return [
                gr.update(value=T["title"]), gr.update(placeholder=T["placeholder"]), gr.update(value=T["send"]),
                gr.update(value=T["new"]), gr.update(label=T["files"]), gr.update(value=T["examples"]),
                gr.update(value=T["feedback"]), dd, gr.update(value=T["fixed"]),
                gr.update(label=T["comment"], placeholder=T["comment_ph"]),
            ]

        outputs = [chat, sess, box, files, fb_status, *lang_outputs]

        def respond(text: str | None, paths: list[str] | None, history: list[Any] | None, s: dict[str, Any]):
            text = (text or "").strip()
            history = list(history or [])
            # a quick reply ("fp16", "LoRA") keeps the conversation's language; other messages set it
            keep = bool(text) and text in s.get("options", []) and bool(s["turns"])
            lang = s.get("lang", "en") if keep or not text else detect_lang(text)
            T = ui_text(lang)
            max_mb = state.settings.max_upload_mb
            atts, refused = _uploads(paths, max_mb, lang)
            skip_lang = [gr.skip()] * len(lang_outputs)

            if not text and not atts:
                # nothing to answer: say so in the chat, keep the conversation as it was
                if refused or paths:
                    history.append({"role": "user", "content": _user_message("", [], refused, lang)})
                history.append({"role": "assistant", "content": _problems_only(refused, lang, T["empty"])})
                yield [history, s, "", None, "", *skip_lang]
                return

            history.append({"role": "user", "content": _user_message(text, atts, refused, lang)})
            history.append({"role": "assistant", "content": T["reading"] if atts else T["thinking"]})
            yield [history, s, "", None, "", *skip_lang]

            turns: list[Turn] = s["turns"]
            answer_json: dict[str, Any] = {}
            dd_update: dict[str, Any] = {}
            d: Diagnosis | None = None
            try:
                engine = state.engine()
                d = diagnose(engine, text, atts, turns, lang=lang if keep else None, top=3)
                lang = d.language
                T = ui_text(lang)
                body = render_answer(d, refused)
                answer_json = d.model_dump(mode="json")
                shown = d.causes or d.related
                dd_update = {
                    "choices": [(f"{i}. {c.title}", c.case_id) for i, c in enumerate(shown, 1)],
                    "value": shown[0].case_id if shown else None,
                }
                bad = {f.file for f in d.files if not f.ok}
                kept = [a for a in atts if a.name not in bad]  # files that gave nothing are not re-read every turn
                turns.append(Turn("user", text, kept))
                turns.append(Turn("assistant", body))
            except InputError as e:
                body = _problems_only(refused, lang, str(e))
            except StoreError as e:
                body = _problems_only(refused, lang, T["not_ready"].format(status=state.status, err=e))
            except Exception as e:  # noqa: BLE001 - a failed turn must leave the chat usable
                log.exception("diagnose failed in the UI")
                body = _problems_only(refused, lang, T["error"].format(err=type(e).__name__))
            msg: dict[str, Any] = {"role": "assistant", "content": body}
            if d is not None and d.clarify:
                msg["options"] = _options(d.clarify)
            history[-1] = msg
            idx = len(history) - 1
            all_atts = [a for t in turns if t.role == "user" for a in t.attachments]
            shown_ids = [c.case_id for c in (d.causes or d.related)] if d is not None else []
            s["answers"][idx] = {
                "question": text,
                "answer": answer_json or {"error": body},
                "attachments": {a.name: redact(a.text())[0] for a in all_atts},
                "conversation": [t.content for t in turns if t.role == "user"],
                "item": shown_ids[0] if shown_ids else None,
            }
            if answer_json:
                s["last"] = idx  # "this fixed it" refers to the latest real answer and its dropdown
                s["options"] = [o["value"] for o in _options(d.clarify if d is not None else None)]
            s["lang"] = lang
            yield [history, s, gr.skip(), gr.skip(), "", *lang_updates(lang, dd_update)]

            # the chart of the run, off the answer's critical path: the answer is on screen while it is drawn
            if d is not None and atts:
                chart = chart_markdown(state, d, [a for a in atts if a.name not in {f.file for f in d.files if not f.ok}])
                if chart:
                    history[-1] = {**msg, "content": render_answer(d, refused, chart)}
                    yield [history, s, gr.skip(), gr.skip(), gr.skip(), *skip_lang]

        def on_option(data: gr.SelectData, paths: list[str] | None, history: list[Any] | None, s: dict[str, Any]):
            yield from respond(str(data.value or ""), paths, history, s)

        def clear(s: dict[str, Any]):
            lang = s.get("lang", "en")
            fresh = _new_session()
            fresh["lang"] = lang
            return [[], fresh, "", None, "", *lang_updates(lang, {"choices": [], "value": None})]

        def on_like(data: gr.LikeData, note: str | None, s: dict[str, Any]):
            T = ui_text(s.get("lang", "en"))
            idx = _item_of(data.index)
            rec = s["answers"].get(idx)
            if rec is None or data.liked not in (True, False):
                return (T["no_answer"] if rec is None else ""), gr.skip()
            kind = "up" if data.liked else "down"
            state.feedback.add(kind, rec["question"], answer=rec["answer"], attachments=rec["attachments"], channel="ui",
                               extra={"conversation": rec["conversation"], "message_index": idx}, item=rec.get("item"), comment=note)
            return T["thanks"].format(kind=kind + (f": {rec['item']}" if rec.get("item") else "")), ""

        def on_fixed(case_id: str | None, note: str | None, s: dict[str, Any]):
            T = ui_text(s.get("lang", "en"))
            rec = s["answers"].get(s.get("last"))
            if rec is None:
                return T["no_answer"], gr.skip()
            if not case_id:
                return T["pick"], gr.skip()
            state.feedback.add("fixed", rec["question"], answer=rec["answer"], attachments=rec["attachments"],
                               case_id=case_id, channel="ui", extra={"conversation": rec["conversation"]}, item=case_id, comment=note)
            return T["thanks"].format(kind=f"fixed: {case_id}"), ""

        send.click(respond, [box, files, chat, sess], outputs)
        box.submit(respond, [box, files, chat, sess], outputs)
        for b in ex_btns:
            b.click(respond, [b, files, chat, sess], outputs)  # the button's text is sent as the message
        chat.option_select(on_option, [files, chat, sess], outputs)  # a quick reply under the clarifying question
        new.click(clear, [sess], outputs)
        chat.clear(clear, [sess], outputs)  # the chatbot's own trash button also starts over
        chat.like(on_like, [comment, sess], [fb_status, comment])
        fixed_btn.click(on_fixed, [fixed_dd, comment, sess], [fb_status, comment])
    return demo
