"""The one message catalog: every sentence trainfix says to a user, in English and Chinese, by key.

Stages produce keys and parameters; the text is looked up here, so a wording (or a third language) changes in one
place. `t(key, lang, **params)` formats with str.format.
"""

from __future__ import annotations

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
