"""The one message catalog: every sentence trainfix says to a user, in English and Chinese, by key.

Stages produce keys and parameters; the text is looked up here, so a wording (or a third language) changes in one
place. `t(key, lang, **params)` formats with str.format.
"""

from __future__ import annotations

from functools import cache
from typing import Any

CATALOG: dict[str, tuple[str, str]] = {
    # the first line of an answer
    "summary.none": ("Not confident: nothing in the knowledge base matches this well.", "把握不大：知识库里没有与此很好匹配的内容。"),
    "summary.lead": ("Most likely: {title} — fix: {fix}", "最可能的原因：{title} —— 修复：{fix}"),
    "summary.unsure": ("Not confident: the closest lead is “{title}”; check it against the general checks below.",
                       "把握不大：最接近的线索是「{title}」，请结合下面的通用检查核对。"),
    # why a cause is where it is (assess reasons)
    "reason.signal": ("Seen in your log: {signal} (`{where}`)", "日志中发现：{signal}（`{where}`）"),
    "reason.tried": ("Demoted: you said you already tried: “{statement}”", "已降低排名：你说已经尝试过：“{statement}”"),
    "reason.threads": ("{n} similar resolved thread(s) were traced to this cause: {ids}", "{n} 个相似的已解决讨论被归结为这个原因：{ids}"),
    "reason.prior": ("A common cause: {n} resolved thread(s) in the knowledge base were traced to it", "常见原因：知识库中有 {n} 个已解决讨论归结于此"),
    "reason.against": ("Against this cause: {text}", "与此原因矛盾：{text}"),
    "reason.version_in": ("Your {pkg} {have} (`{where}`) is in the affected range {rng}", "你的 {pkg} 版本 {have}（`{where}`）在受影响范围 {rng} 内"),
    "reason.version_out": ("Unlikely: your {pkg} {have} (`{where}`) is outside the affected range {rng}",
                           "可能性低：你的 {pkg} 版本 {have}（`{where}`）不在受影响范围 {rng} 内"),
    # notes about what was read or cut
    "note.redacted": ("{n} secret(s) (tokens/keys/passwords) were redacted from your files.", "已从你的文件中遮蔽 {n} 处密钥/令牌/密码。"),
    "cut.question": ("Your message was longer than {limit:,} characters; only the first {limit:,} were read.",
                     "你的消息超过 {limit:,} 个字符，只读取了前 {limit:,} 个。"),
    "cut.attachments": ("Only the first {limit} of {n} files were read.", "{n} 个文件中只读取了前 {limit} 个。"),
    "cut.history": ("Only the latest {n} earlier turn(s) of the conversation were read.", "只读取了对话中最近的 {n} 轮。"),
    # the editor (trainfix lsp, trainfix lint)
    "lsp.too_large": ("{size:,} characters is over the {limit:,}-character budget for checking while editing; not checked. "
                      "Run `trainfix lint {name}` to check it.",
                      "{size:,} 个字符超过编辑时检查的上限（{limit:,} 个字符），未检查。可运行 `trainfix lint {name}` 检查。"),
    "lsp.fix_title": ("trainfix: {fix}", "trainfix：{fix}"),
    "lsp.cause": ("Cause", "原因"),
    "lsp.no_file": ("trainfix.diagnose: no open document {uri}", "trainfix.diagnose：没有打开的文档 {uri}"),
    "lsp.no_question": ("trainfix.diagnose needs a document URI and/or a question", "trainfix.diagnose 需要文档 URI 和/或问题"),
    "lsp.index_error": ("trainfix.diagnose: the index could not be opened: {err}", "trainfix.diagnose：无法打开索引：{err}"),
    "lint.fix": ("Fix: {fix}", "修复：{fix}"),
    # answers (Markdown, Slack, UI)
    'render.causes': ('Likely causes', '可能的原因'),
    'render.unsure': ('I could not match this to a known case with confidence. These cases are the closest and may be related:', '没有找到可以确信匹配的已知案例。下面是最接近、可能相关的案例：'),
    'render.fixes': ('Fix', '解决办法'),
    'render.why': ('Why it matched', '匹配依据'),
    'render.sources': ('Sources', '来源'),
    'render.read': ('What I read from your files', '从你的文件中读到的信息'),
    'render.nothing_read': ('No settings or log symptoms were read from your files.', '没有从你的文件中读到配置项或日志症状。'),
    'render.checks': ('General first checks', '通用排查步骤'),
    'render.evidence_level': ('Evidence', '可信度'),
    'render.likely.high': ('high', '高'),
    'render.likely.medium': ('medium', '中'),
    'render.likely.low': ('low', '低'),
    'render.ask': ('To narrow it down', '为了进一步确认'),
    'render.notes': ('Notes', '提示'),
    'render.symptom': ('matches your description', '与描述相符'),
    'render.levels.maintainer-confirmed': ('maintainer-confirmed', '维护者确认'),
    'render.levels.reporter-confirmed': ('reporter-confirmed', '报告者确认'),
    'render.levels.community-advice': ('community advice', '社区建议'),
    'render.likelihood': ('likelihood', '可能性'),
    'render.supporting': ('Supporting articles', '相关文章'),
    'render.note_head': ('A similar report was resolved', '类似的报告已解决'),
    'render.resolution': ('Resolution', '解决方法'),
    'render.also': ('Also noticed in your files (explains a different symptom)', '在你的文件中还注意到（对应的是另一种症状）'),
    'render.source_list': ('Sources', '来源'),
    'render.chart': ('Your run', '你的训练曲线'),
    # the chat UI
    'ui.title': ('## trainfix — why did my training break?\nDescribe what you see and attach your configs, launch script, logs or `trainer_state.json`. Each answer lists likely causes, why they matched, fixes and sources; tell me what you tried and I re-rank.', '## trainfix — 训练为什么坏了？\n描述你看到的现象，并附上配置、启动脚本、日志或 `trainer_state.json`。每个回答会列出可能的原因、匹配依据、解决办法和来源；告诉我你已经试过什么，我会重新排序。'),
    'ui.placeholder': ("What goes wrong? e.g. 'loss goes to 0 after 10 steps' — then say what you already tried", '出了什么问题？例如“训练 10 步后 loss 变成 0”，也可以说说你已经试过什么'),
    'ui.send': ('Send', '发送'),
    'ui.new': ('New conversation', '新对话'),
    'ui.files': ('Attach configs, logs, trainer_state.json (several files allowed)', '上传配置、日志、trainer_state.json（可多选）'),
    'ui.examples': ('**Examples** (click to ask):', '**示例问题**（点击直接提问）：'),
    'ui.fixed_label': ('Which cause fixed it?', '哪个原因解决了问题？'),
    'ui.fixed': ('✓ This fixed it', '✓ 这个解决了'),
    'ui.feedback': ('**Feedback:** rate each answer with the thumbs-up / thumbs-down buttons under it, or tell us which cause fixed it.', '**反馈：** 在每个回答下方点赞或点踩，或者告诉我们是哪个原因解决了问题。'),
    'ui.reading': ('*Reading your files… thinking…*', '*正在读取你的文件…… 思考中……*'),
    'ui.thinking': ('*Thinking…*', '*思考中……*'),
    'ui.empty': ("The message is empty: describe what you see (e.g. 'loss goes to 0 after 10 steps') or attach a config or log.", '消息是空的：请描述你看到的现象（例如“训练 10 步后 loss 变成 0”），或者上传配置/日志。'),
    'ui.too_large': ('{name}: {size:.2f} MB is over the {limit:g} MB upload limit; it was skipped.', '{name}：{size:.2f} MB 超过了 {limit:g} MB 的上传上限，已跳过。'),
    'ui.binary': ('{name}: looks like a binary file, not a config or a log; it was skipped.', '{name}：看起来是二进制文件，不是配置或日志，已跳过。'),
    'ui.unreadable': ('{name}: could not read the upload ({err}); it was skipped.', '{name}：无法读取上传的文件（{err}），已跳过。'),
    'ui.problems': ('Some input could not be used', '部分输入无法使用'),
    'ui.files_read': ('Files', '文件'),
    'ui.not_ready': ('The knowledge base index is not ready ({status}): {err}. Please try again in a moment.', '知识库索引还没有准备好（{status}）：{err}。请稍后再试。'),
    'ui.error': ('Something went wrong while diagnosing ({err}). The conversation is still usable: try again or rephrase.', '诊断时出错（{err}）。对话仍可继续：请重试或换个说法。'),
    'ui.thanks': ('Thanks — your feedback was saved ({kind}).', '谢谢，反馈已保存（{kind}）。'),
    'ui.no_answer': ('There is no answer to rate yet.', '还没有可以评价的回答。'),
    'ui.pick': ('Pick the cause that fixed it first.', '请先选择解决了问题的原因。'),
    'ui.attached': ('Attached', '附件'),
    'ui.comment': ('Comment (optional, one line)', '备注（可选，一行）'),
    'ui.comment_ph': ("e.g. 'lowering lr to 1e-5 fixed it' (sent with the thumbs or 'this fixed it')", '例如“把学习率降到 1e-5 就好了”（随点赞/点踩或“这个解决了”一起提交）'),
    # log signals, as a user would say them (also added to the retrieval text)
    "signal.log.nan_loss": ('loss becomes NaN', 'loss 变成 NaN'),
    "signal.log.inf_loss": ('loss becomes inf', 'loss 变成 inf'),
    "signal.log.nan_grad_norm": ('grad norm is NaN', '梯度范数为 NaN'),
    "signal.log.loss_zero": ('loss drops to 0', 'loss 降到 0'),
    "signal.log.loss_spike": ('loss spikes', 'loss 突然尖峰'),
    "signal.log.loss_divergence": ('loss diverges and keeps rising', 'loss 发散并持续上升'),
    "signal.log.loss_flat": ('loss does not change at all', 'loss 完全不变'),
    "signal.log.loss_high": ('loss stays very high', 'loss 一直很高'),
    "signal.log.dpo_loss_stuck": ('preference loss stuck at 0.693', '偏好 loss 卡在 0.693'),
    "signal.log.grad_norm_explosion": ('grad norm explodes', '梯度范数爆炸'),
    "signal.log.grad_norm_zero": ('grad norm is 0', '梯度范数为 0'),
    "signal.log.lr_zero": ('learning rate is 0', '学习率为 0'),
    "signal.log.loss_scale_at_minimum": ('fp16 loss scale at minimum, overflow keeps repeating', 'fp16 loss scale 降到最小值，一直溢出'),
    "signal.log.overflow_count": ('fp16 gradient overflow, skipping steps', 'fp16 梯度溢出、跳过 step'),
    "signal.log.prob_tensor_error": ('probability tensor contains inf, nan or element < 0 when sampling', '采样时 probability tensor 出现 inf/nan/负数'),
    "signal.log.nccl_timeout": ('NCCL collective timeout', 'NCCL 通信超时'),
    "signal.log.oom": ('CUDA out of memory', 'CUDA 显存不足'),
    "signal.log.kl_explosion": ('KL divergence explodes', 'KL 爆炸'),
    "signal.log.entropy_collapse": ('policy entropy collapses', '策略熵坍塌'),
    "signal.log.reward_hacking": ('reward rises while responses degenerate', '奖励上升但回答退化'),
    "signal.log.rewards_accuracy_zero": ('reward accuracy stuck at 0', 'rewards/accuracies 一直为 0'),
    "signal.log.eval_loss_nan": ('eval loss is NaN', 'eval loss 为 NaN'),
}


def t(key: str, lang: str, **params: Any) -> str:
    """The message `key` in `lang` (zh or en), formatted with `params`; an unknown key is returned as is."""
    pair = CATALOG.get(key)
    if pair is None:
        return key
    text = pair[1] if lang == "zh" else pair[0]
    return text.format(**params) if params else text


def has(key: str) -> bool:
    return key in CATALOG


@cache
def view(prefix: str, lang: str) -> dict[str, Any]:
    """All messages under `prefix.` in one language, nested by their dotted keys (for modules that look labels up
    by name, e.g. `view("render", "zh")["likely"]["high"]`). Built once per (prefix, lang): read it, do not change it."""
    out: dict[str, Any] = {}
    for key, pair in CATALOG.items():
        if key.startswith(prefix + "."):
            *path, last = key[len(prefix) + 1 :].split(".")
            node = out
            for p in path:
                node = node.setdefault(p, {})
            node[last] = pair[1] if lang == "zh" else pair[0]
    return out
