"""The Gradio chat UI: multi-turn diagnosis with attachments, quick replies, examples and feedback.

`build_ui(state)` returns the Blocks; app/channels/server.py mounts it with `gr.mount_gradio_app(app, ui, path="/")`.
Every turn calls `diagnose()` with the whole conversation so far (earlier messages and files), so a follow-up such as
"I already removed communication_data_type" re-ranks the causes. Channels only translate: the answer is
`app.render.to_markdown` plus the bad-input messages and a "what I read from your files" section.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import gradio as gr

from app.diagnose import InputError, Turn, diagnose
from app.facts import Attachment, is_binary
from app.facts.redact import redact
from app.lang import detect_lang
from app.models import Diagnosis
from app.render import facts_md, labels, to_markdown
from app.runtime import State
from app.store import StoreError

log = logging.getLogger("trainfix")

MAX_QUICK = 5  # quick-reply buttons kept ready for a clarifying question (kb/clarify.yaml has at most 5 options)

EXAMPLES = [
    "Loss drops to 0 after a few steps in my Qwen 7B full fine-tune with DeepSpeed, grad norm was huge first",
    "fp16 training: the loss scale keeps going down and every step overflows",
    "全量微调几步之后 loss 变成 0 了，梯度范数先变得很大，怎么回事？",
    "Qwen2-7B 全量微调学习率 3e-4，后面的 checkpoint 推理时报 probability tensor contains inf",
]

U: dict[str, dict[str, str]] = {
    "en": {
        "title": "## trainfix — why did my training break?\nDescribe what you see and attach your configs, launch script, logs or `trainer_state.json`. "
        "Each answer lists likely causes, why they matched, fixes and sources; tell me what you tried and I re-rank.",
        "placeholder": "What goes wrong? e.g. 'loss goes to 0 after 10 steps' — then say what you already tried",
        "send": "Send",
        "new": "New conversation",
        "files": "Attach configs, logs, trainer_state.json (several files allowed)",
        "examples": "**Examples** (click to ask):",
        "fixed_label": "Which cause fixed it?",
        "fixed": "✓ This fixed it",
        "feedback": "**Feedback:** rate each answer with the thumbs-up / thumbs-down buttons under it, or tell us which cause fixed it.",
        "reading": "*Reading your files… thinking…*",
        "thinking": "*Thinking…*",
        "empty": "The message is empty: describe what you see (e.g. 'loss goes to 0 after 10 steps') or attach a config or log.",
        "too_large": "{name}: {size:.2f} MB is over the {limit:g} MB upload limit; it was skipped.",
        "binary": "{name}: looks like a binary file, not a config or a log; it was skipped.",
        "unreadable": "{name}: could not read the upload ({err}); it was skipped.",
        "problems": "Some input could not be used",
        "files_read": "Files",
        "not_ready": "The knowledge base index is not ready ({status}): {err}. Please try again in a moment.",
        "error": "Something went wrong while diagnosing ({err}). The conversation is still usable: try again or rephrase.",
        "thanks": "Thanks — your feedback was saved ({kind}).",
        "no_answer": "There is no answer to rate yet.",
        "pick": "Pick the cause that fixed it first.",
        "attached": "Attached",
        "ask": "Quick reply:",
    },
    "zh": {
        "title": "## trainfix — 训练为什么坏了？\n描述你看到的现象，并附上配置、启动脚本、日志或 `trainer_state.json`。"
        "每个回答会列出可能的原因、匹配依据、解决办法和来源；告诉我你已经试过什么，我会重新排序。",
        "placeholder": "出了什么问题？例如“训练 10 步后 loss 变成 0”，也可以说说你已经试过什么",
        "send": "发送",
        "new": "新对话",
        "files": "上传配置、日志、trainer_state.json（可多选）",
        "examples": "**示例问题**（点击直接提问）：",
        "fixed_label": "哪个原因解决了问题？",
        "fixed": "✓ 这个解决了",
        "feedback": "**反馈：** 在每个回答下方点赞或点踩，或者告诉我们是哪个原因解决了问题。",
        "reading": "*正在读取你的文件…… 思考中……*",
        "thinking": "*思考中……*",
        "empty": "消息是空的：请描述你看到的现象（例如“训练 10 步后 loss 变成 0”），或者上传配置/日志。",
        "too_large": "{name}：{size:.2f} MB 超过了 {limit:g} MB 的上传上限，已跳过。",
        "binary": "{name}：看起来是二进制文件，不是配置或日志，已跳过。",
        "unreadable": "{name}：无法读取上传的文件（{err}），已跳过。",
        "problems": "部分输入无法使用",
        "files_read": "文件",
        "not_ready": "知识库索引还没有准备好（{status}）：{err}。请稍后再试。",
        "error": "诊断时出错（{err}）。对话仍可继续：请重试或换个说法。",
        "thanks": "谢谢，反馈已保存（{kind}）。",
        "no_answer": "还没有可以评价的回答。",
        "pick": "请先选择解决了问题的原因。",
        "attached": "附件",
        "ask": "快速回复：",
    },
}


def ui_text(lang: str) -> dict[str, str]:
    return U["zh" if lang == "zh" else "en"]


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


def render_answer(d: Diagnosis, problems: list[str]) -> str:
    """The chat message for one answer: refused input first, then ranked cause cards, then what was read from the files."""
    L = labels(d.language)
    T = ui_text(d.language)
    file_problems = [f.text(d.language) for f in d.files if not f.ok and f.message]
    warn = list(problems) + file_problems
    rest = [n for n in d.notes if n not in file_problems]
    out: list[str] = []
    if warn:
        out.append(f"**⚠ {T['problems']}:**\n\n" + "\n".join(f"- {w}" for w in warn))
    out.append(to_markdown(d.model_copy(update={"notes": rest}), show_facts=False))
    if d.facts or any(f.ok for f in d.files):
        read = [f"### {L['read']}"]
        ok = [f.text(d.language) for f in d.files if f.ok and f.message]
        if ok:
            read.append(f"{T['files_read']}: " + "; ".join(ok))
        read.append(facts_md(d))
        out.append("\n\n".join(read))
    return "\n\n".join(out)


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


def build_ui(state: State) -> gr.Blocks:
    """The chat page. `state` is the process-wide engine + feedback store shared with the API and Slack."""
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    T0 = ui_text("en")

    with gr.Blocks(title="trainfix", analytics_enabled=False, delete_cache=(3600, 3600)) as demo:  # uploads removed after an hour
        sess = gr.State(_new_session)
        header = gr.Markdown(T0["title"], elem_id="tf-header")
        chat = gr.Chatbot(
            elem_id="tf-chat",
            height=620,
            show_label=False,
            feedback_options=("Like", "Dislike"),
            buttons=["copy"],
            render_markdown=True,
        )
        with gr.Row(visible=False, elem_id="tf-quick") as quick_row:
            quick_label = gr.Markdown(T0["ask"])
            quick = [gr.Button("", size="sm", visible=False, elem_classes=["tf-quick-reply"]) for _ in range(MAX_QUICK)]
        with gr.Row(equal_height=True):
            box = gr.Textbox(placeholder=T0["placeholder"], show_label=False, lines=3, max_lines=10, scale=4, elem_id="tf-input")
            files = gr.File(label=T0["files"], file_count="multiple", type="filepath", height=110, scale=3, elem_id="tf-files")
            with gr.Column(scale=1, min_width=140):
                send = gr.Button(T0["send"], variant="primary", elem_id="tf-send")
                new = gr.Button(T0["new"], elem_id="tf-new", size="sm")
        ex_label = gr.Markdown(T0["examples"])
        with gr.Row():
            ex_btns = [gr.Button(q, size="sm", elem_classes=["tf-example"]) for q in EXAMPLES]
        fb_label = gr.Markdown(T0["feedback"])
        with gr.Row():
            fixed_dd = gr.Dropdown(choices=[], value=None, label=T0["fixed_label"], interactive=True, scale=4, elem_id="tf-fixed-case")
            fixed_btn = gr.Button(T0["fixed"], scale=1, elem_id="tf-fixed")
        fb_status = gr.Markdown("", elem_id="tf-feedback-status")

        lang_outputs = [header, box, send, new, files, ex_label, fb_label, fixed_dd, fixed_btn, quick_label]

        def lang_updates(lang: str, reset_dd: dict | None = None) -> list[Any]:
            T = ui_text(lang)
            dd = gr.update(label=T["fixed_label"], **(reset_dd or {}))
            return [
                gr.update(value=T["title"]), gr.update(placeholder=T["placeholder"]), gr.update(value=T["send"]),
                gr.update(value=T["new"]), gr.update(label=T["files"]), gr.update(value=T["examples"]),
                gr.update(value=T["feedback"]), dd, gr.update(value=T["fixed"]), gr.update(value=T["ask"]),
            ]

        def quick_updates(clarify: dict[str, Any] | None) -> list[Any]:
            opts = list((clarify or {}).get("options") or [])[:MAX_QUICK]
            ups: list[Any] = [gr.update(visible=bool(opts))]
            for i in range(MAX_QUICK):
                ups.append(gr.update(value=opts[i], visible=True) if i < len(opts) else gr.update(value="", visible=False))
            return ups

        outputs = [chat, sess, box, files, quick_row, *quick, fb_status, *lang_outputs]

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
            hide_quick = quick_updates(None)

            if not text and not atts:
                # nothing to answer: say so in the chat, keep the conversation as it was
                if refused or paths:
                    history.append({"role": "user", "content": _user_message("", [], refused, lang)})
                history.append({"role": "assistant", "content": _problems_only(refused, lang, T["empty"])})
                yield [history, s, "", None, *hide_quick, "", *skip_lang]
                return

            history.append({"role": "user", "content": _user_message(text, atts, refused, lang)})
            history.append({"role": "assistant", "content": T["reading"] if atts else T["thinking"]})
            yield [history, s, "", None, *hide_quick, "", *skip_lang]

            turns: list[Turn] = s["turns"]
            answer_json: dict[str, Any] = {}
            dd_update: dict[str, Any] = {}
            clarify = None
            try:
                engine = state.engine()
                d = diagnose(engine, text, atts, turns, lang=lang if keep else None, top=3)
                lang = d.language
                T = ui_text(lang)
                body = render_answer(d, refused)
                answer_json = d.model_dump(mode="json")
                clarify = d.clarify
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
            history[-1] = {"role": "assistant", "content": body}
            idx = len(history) - 1
            all_atts = [a for t in turns if t.role == "user" for a in t.attachments]
            s["answers"][idx] = {
                "question": text,
                "answer": answer_json or {"error": body},
                "attachments": {a.name: redact(a.text())[0] for a in all_atts},
                "conversation": [t.content for t in turns if t.role == "user"],
            }
            if answer_json:
                s["last"] = idx  # "this fixed it" refers to the latest real answer and its dropdown
                s["options"] = list((clarify or {}).get("options") or [])
            s["lang"] = lang
            yield [history, s, gr.skip(), gr.skip(), *quick_updates(clarify), "", *lang_updates(lang, dd_update)]

        def clear(s: dict[str, Any]):
            lang = s.get("lang", "en")
            fresh = _new_session()
            fresh["lang"] = lang
            return [[], fresh, "", None, *quick_updates(None), "", *lang_updates(lang, {"choices": [], "value": None})]

        def on_like(data: gr.LikeData, s: dict[str, Any]):
            T = ui_text(s.get("lang", "en"))
            idx = data.index if isinstance(data.index, int) else (data.index[0] if data.index else None)
            rec = s["answers"].get(idx)
            if rec is None or data.liked not in (True, False):
                return T["no_answer"] if rec is None else ""
            kind = "up" if data.liked else "down"
            state.feedback.add(kind, rec["question"], answer=rec["answer"], attachments=rec["attachments"],
                               channel="ui", extra={"conversation": rec["conversation"], "message_index": idx})
            return T["thanks"].format(kind=kind)

        def on_fixed(case_id: str | None, s: dict[str, Any]):
            T = ui_text(s.get("lang", "en"))
            rec = s["answers"].get(s.get("last"))
            if rec is None:
                return T["no_answer"]
            if not case_id:
                return T["pick"]
            state.feedback.add("fixed", rec["question"], answer=rec["answer"], attachments=rec["attachments"],
                               case_id=case_id, channel="ui", extra={"conversation": rec["conversation"]})
            return T["thanks"].format(kind=f"fixed: {case_id}")

        send.click(respond, [box, files, chat, sess], outputs)
        box.submit(respond, [box, files, chat, sess], outputs)
        for b in [*quick, *ex_btns]:
            b.click(respond, [b, files, chat, sess], outputs)  # the button's text is sent as the message
        new.click(clear, [sess], outputs)
        chat.clear(clear, [sess], outputs)  # the chatbot's own trash button also starts over
        chat.like(on_like, [sess], [fb_status])
        fixed_btn.click(on_fixed, [fixed_dd, sess], [fb_status])
    return demo
