"""The diagnosis: one function every channel (CLI, UI, API, Slack) calls. Channels only translate its result."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import yaml

from app.facts import Attachment, FactSet, code_blocks, read_attachments
from app.facts.redact import redact
from app.facts.text import text_facts
from app.kb import KB_DIR, iter_leaves
from app.lang import detect_lang
from app.lexical import tokenize
from app.models import CauseOut, Citation, Diagnosis, Fact, Supporting
from app.retrieve import Engine, Retrieval, Scored

# Confidence calibration (see eval/report.md, "confidence"): a case is presented as the cause when a trigger fired
# on the user's files, or when the dense similarity of the best case clears TAU_COS and the lexical channel agrees.
TAU_COS = 0.895
TAU_LEX = 4.0
CLOSE = 0.9  # top-2 score ratio above which the answer asks a separating question
DEMOTE = 0.3

# "I already did X" statements: an explicit action, not just "still" / "还是" (which describe the symptom)
_TRIED = re.compile(
    r"[^.。!！?？\n]*(?:already|i(?:'ve| have)? tried|tried (?:to |setting |using |removing |lowering )|did ?n[o']t help|does ?n[o']t help|no luck|"
    r"已经|试过|尝试过|也试了|改过|换过)[^.。!！?？\n]*",
    re.I,
)


SUPPORT_MIN = 0.6  # combined dense+lexical score (0..1) an article needs to be shown as supporting


def _snippet(article: dict, lang: str) -> str:
    secs = article.get("sections") or []
    best = next((s for s in secs if s["part"] in ("causes", "fixes")), secs[0] if secs else {"text": ""})
    text = re.sub(r"\s+", " ", best["text"]).strip()
    return text[:220] + ("…" if len(text) > 220 else "")


class InputError(ValueError):
    """Nothing could be answered: the message says why."""


@dataclass
class Turn:
    role: str
    content: str
    attachments: list[Attachment] = field(default_factory=list)


_SIGNAL_TEXT = {
    "log.nan_loss": ("loss becomes NaN", "loss 变成 NaN"),
    "log.inf_loss": ("loss becomes inf", "loss 变成 inf"),
    "log.nan_grad_norm": ("grad norm is NaN", "梯度范数为 NaN"),
    "log.loss_zero": ("loss drops to 0", "loss 降到 0"),
    "log.loss_spike": ("loss spikes", "loss 突然尖峰"),
    "log.loss_divergence": ("loss diverges and keeps rising", "loss 发散并持续上升"),
    "log.loss_flat": ("loss does not change at all", "loss 完全不变"),
    "log.loss_high": ("loss stays very high", "loss 一直很高"),
    "log.dpo_loss_stuck": ("preference loss stuck at 0.693", "偏好 loss 卡在 0.693"),
    "log.grad_norm_explosion": ("grad norm explodes", "梯度范数爆炸"),
    "log.grad_norm_zero": ("grad norm is 0", "梯度范数为 0"),
    "log.lr_zero": ("learning rate is 0", "学习率为 0"),
    "log.loss_scale_at_minimum": ("fp16 loss scale at minimum, overflow keeps repeating", "fp16 loss scale 降到最小值，一直溢出"),
    "log.overflow_count": ("fp16 gradient overflow, skipping steps", "fp16 梯度溢出、跳过 step"),
    "log.prob_tensor_error": ("probability tensor contains inf, nan or element < 0 when sampling", "采样时 probability tensor 出现 inf/nan/负数"),
    "log.nccl_timeout": ("NCCL collective timeout", "NCCL 通信超时"),
    "log.oom": ("CUDA out of memory", "CUDA 显存不足"),
    "log.kl_explosion": ("KL divergence explodes", "KL 爆炸"),
    "log.entropy_collapse": ("policy entropy collapses", "策略熵坍塌"),
    "log.reward_hacking": ("reward rises while responses degenerate", "奖励上升但回答退化"),
    "log.rewards_accuracy_zero": ("reward accuracy stuck at 0", "rewards/accuracies 一直为 0"),
    "log.eval_loss_nan": ("eval loss is NaN", "eval loss 为 NaN"),
}

_L = {
    "en": {"signal": "Seen in your log", "tried": "Demoted: you said you already tried",
           "ver_in": "Your {pkg} {have} (`{where}`) is in the affected range {rng}",
           "ver_out": "Unlikely: your {pkg} {have} (`{where}`) is outside the affected range {rng}"},
    "zh": {"signal": "日志中发现", "tried": "已降低排名：你说已经尝试过",
           "ver_in": "你的 {pkg} 版本 {have}（`{where}`）在受影响范围 {rng} 内",
           "ver_out": "可能性低：你的 {pkg} 版本 {have}（`{where}`）不在受影响范围 {rng} 内"},
}


@lru_cache(maxsize=1)
def _clarify_data() -> dict[str, Any]:
    return yaml.safe_load((KB_DIR / "clarify.yaml").read_text(encoding="utf-8"))


def signal_text(key: str, lang: str) -> str:
    en, zh = _SIGNAL_TEXT.get(key, (key, key))
    return zh if lang == "zh" else en


def gather(question: str, attachments: list[Attachment], history: list[Turn], max_bytes: int) -> tuple[str, str, FactSet, list[str]]:
    """Prose of the conversation, the redacted question, the facts of every file so far, and 'already tried' statements."""
    q, _ = redact(question or "")
    prose, blocks = code_blocks(q)
    atts = list(attachments) + blocks
    earlier_prose = []
    for t in history:
        if t.role != "user":
            continue
        p, b = code_blocks(redact(t.content or "")[0])
        earlier_prose.append(p)
        atts += b + list(t.attachments)
    fs = read_attachments(atts, prose, max_bytes)
    # files are more precise than prose, but in a follow-up the latest statement ("now at lr 1e-5") wins
    now = text_facts(prose)
    before = [f for p in earlier_prose for f in text_facts(p, "earlier message")]
    fs.facts = (now + fs.facts if earlier_prose else fs.facts + now) + before
    tried = [m.group(0).strip() for p in [prose, *earlier_prose] for m in _TRIED.finditer(p) if len(m.group(0).strip()) > 3]
    return prose, " ".join(earlier_prose), fs, tried


def _retrieval_text(prose: str, earlier: str, facts: dict[str, Fact], lang: str) -> str:
    parts = [prose]
    if earlier:
        parts.append(earlier)
    sig = [signal_text(k, lang) for k in facts if k in _SIGNAL_TEXT]
    if sig:
        parts.append("; ".join(sig))
    return " ".join(p for p in parts if p).strip()


def _demote(ranked: list[Scored], tried: list[str]) -> dict[str, str]:
    """Causes whose fixes the user says they already applied go down, with the statement as the reason."""
    notes: dict[str, str] = {}
    if not tried:
        return notes
    for sc in ranked[:10]:
        fix_toks = set(tokenize(" ".join(f.en + " " + f.zh + " " + (f.diff or "") for f in sc.case.fixes)))
        for stmt in tried:
            st = {t for t in tokenize(stmt) if len(t) > 1 and not t.replace(".", "").replace("e-", "").isdigit()}
            st -= {"already", "tried", "still", "已经", "试过", "还是", "loss", "nan", "training", "训练"}
            common = st & fix_toks
            if len(common) >= 2 and len(common) / len(st) >= 0.4 or len(st) == 1 and common:
                # the user changed what the earlier file showed: its trigger evidence no longer holds
                sc.score = (sc.score - sc.bonus) * DEMOTE
                sc.triggers = []
                notes[sc.case.id] = stmt
                break
    ranked.sort(key=lambda s: -s.score)
    return notes


def _confident(r: Retrieval, mode: str) -> bool:
    if not r.ranked:
        return False
    top = r.ranked[0]
    if top.triggers:
        return True
    if mode == "bm25":
        return r.top_lex >= TAU_LEX
    return r.top_cos >= TAU_COS and (mode == "dense" or top.lex >= 0.35)


def _symptoms(sc: Scored, text: str, lang: str) -> list[str]:
    q = set(tokenize(text))
    out = []
    for s in sc.case.symptoms.get(lang):
        toks = set(tokenize(s))
        if toks and len(q & toks) >= 2:
            out.append(s)
    return out[:2]


def _cause_out(sc: Scored, lang: str, text: str, cite_from: int, demoted: str | None) -> CauseOut:
    c = sc.case
    ev = [h.evidence(lang) for h in sc.triggers]
    lab = _L[lang]
    for f in sc.signals:
        if not any(f"{f.file}:{f.line}" in e for e in ev):
            ev.append(f"{lab['signal']}: {signal_text(f.key, lang)} (`{f.where()}`)")
    if sc.version is not None:
        ok, rng, vf = sc.version
        key = "ver_in" if ok else "ver_out"
        ev.append(lab[key].format(pkg=vf.key.split(".")[1].replace("_version", ""), have=vf.value, rng=rng, where=vf.where()))
    cites = [Citation(n=cite_from + i, url=s.url, title=s.title) for i, s in enumerate(c.sources)]
    causes = sorted(c.causes, key=lambda x: {"high": 0, "medium": 1, "low": 2}[x.likelihood])
    return CauseOut(
        case_id=c.id,
        title=c.title.get(lang),
        cause=causes[0].get(lang),
        category=c.category,
        score=round(sc.score, 4),
        likelihood=causes[0].likelihood,
        fixes=[f.get(lang) for f in c.fixes],
        diffs=[f.diff for f in c.fixes if f.diff],
        evidence=ev,
        matched_symptoms=_symptoms(sc, text, lang),
        evidence_level=c.evidence,
        citations=cites,
        demoted=(f"{lab['tried']}: “{demoted}”" if demoted else ""),
    )


def _clarify(ranked: list[Scored], facts: dict[str, Fact], lang: str) -> dict[str, Any] | None:
    if len(ranked) < 2 or ranked[0].triggers or ranked[1].score < CLOSE * ranked[0].score:
        return None
    data = _clarify_data()
    wanted: dict[str, int] = {}
    for sc in ranked[:3]:
        for t in sc.case.triggers:
            for leaf in iter_leaves(t):
                if leaf.fact not in facts:
                    wanted[leaf.fact] = wanted.get(leaf.fact, 0) + 1
    for q in data["questions"]:
        if q["key"] in wanted:
            return {"key": q["key"], "question": q["ask"][lang], "options": q["options"][lang]}
    return None


def diagnose(
    engine: Engine,
    question: str,
    attachments: list[Attachment] | None = None,
    history: list[Turn] | None = None,
    lang: str | None = None,
    top: int = 3,
    mode: str = "full",
    max_bytes: int | None = None,
    trace: dict[str, Any] | None = None,
) -> Diagnosis:
    """Ranked causes with fixes, evidence and citations for a question, its attachments and the conversation so far."""
    attachments = attachments or []
    history = history or []
    if not (question or "").strip() and not attachments and not any(t.content.strip() for t in history if t.role == "user"):
        raise InputError("the question is empty: describe what you see (e.g. 'loss goes to 0 after 10 steps') or attach a config or log.")
    max_bytes = max_bytes or int(engine.settings.max_upload_mb * 1024 * 1024)
    prose, earlier, fs, tried = gather(question, attachments, history, max_bytes)
    lang = lang or detect_lang(prose or earlier or question, default="en")
    if lang not in ("en", "zh"):
        raise InputError(f"unknown language {lang!r}: use 'en' or 'zh'.")
    facts = fs.by_key()
    text = _retrieval_text(prose, earlier, facts, lang)
    if not text and not facts:
        notes = [n.message for n in fs.files]
        raise InputError("nothing to go on: the question is empty and no attached file could be read. " + " ".join(notes))
    r = engine.retrieve(text, facts, mode=mode)
    demoted = _demote(r.ranked, tried)
    confident = _confident(r, mode)
    if trace is not None:  # internals for the eval and the bench
        trace.update(top_cos=r.top_cos, top_lex=r.top_lex, timings=r.timings, trigger=bool(r.ranked and r.ranked[0].triggers))
    cite = 1
    causes: list[CauseOut] = []
    for sc in r.ranked[:top]:
        co = _cause_out(sc, lang, text, cite, demoted.get(sc.case.id))
        cite += len(co.citations)
        causes.append(co)
    notes = [n.text(lang) for n in fs.files if not n.ok]
    if fs.redactions:
        notes.append(
            f"{fs.redactions} secret(s) (tokens/keys/passwords) were redacted from your files." if lang == "en" else f"已从你的文件中遮蔽 {fs.redactions} 处密钥/令牌/密码。"
        )
    data = _clarify_data()
    supporting = [
        Supporting(article_id=a["id"], title=a["title"], source=a["source"], score=round(sc, 4), snippet=_snippet(a, lang))
        for a, sc in r.supporting
        if sc >= SUPPORT_MIN
    ]
    diag = Diagnosis(
        supporting=supporting,
        language=lang,  # type: ignore[arg-type]
        confident=confident,
        question=prose,
        causes=causes if confident else [],
        related=[] if confident else causes,
        facts=fs.shown(),
        files=fs.files,
        clarify=_clarify(r.ranked, facts, lang),
        notes=notes,
        general_checks=[] if confident else data["general_checks"][lang],
    )
    return diag
