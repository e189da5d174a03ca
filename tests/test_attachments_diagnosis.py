"""A vague question with only a config or log attached ranks the right case first, and the evidence names file:line."""

from __future__ import annotations

import pytest

from app.diagnose import Turn, diagnose
from app.facts import Attachment

VAGUE = {"en": "training broke, please help", "zh": "训练出问题了"}

ATTACHED = {
    "deepspeed-comm-dtype-fp32-loss-zero": (
        "ds_config.json",
        '{\n  "bf16": {"enabled": "auto"},\n  "zero_optimization": {"stage": 2, "overlap_comm": true},\n  "communication_data_type": "fp32",\n  "gradient_clipping": "auto"\n}\n',
        "ds_config.json:4",
    ),
    "openrlhf-kto-vanilla-loss-nan": (
        "train_kto.sh",
        "deepspeed --num_gpus 8 openrlhf/cli/train_kto.py \\\n  --pretrain ./ckpt/qwen2-7b-sft \\\n  --zero_stage 3 \\\n  --bf16 \\\n  --learning_rate 5e-7 \\\n  --vanilla_loss \\\n  --flash_attn\n",
        "train_kto.sh:6",
    ),
    "trl-padding-free-without-flash-attention": (
        "sft.yaml",
        "model_name_or_path: Qwen/Qwen2.5-7B\nlearning_rate: 2.0e-5\nper_device_train_batch_size: 16\npadding_free: true\nbf16: true\n",
        "sft.yaml:4",
    ),
    "qwen2-full-sft-lr-3e-4-generation-nan": (
        "qwen2_full_sft.yaml",
        "model_name_or_path: Qwen/Qwen2-7B-Instruct\nstage: sft\nfinetuning_type: full\nlearning_rate: 3.0e-4\nnum_train_epochs: 10\nbf16: true\n",
        "qwen2_full_sft.yaml:4",
    ),
    "grpo-kl-disabled-pg-loss-divergence": (
        "run_grpo.sh",
        "python3 -m verl.trainer.main_ppo \\\n  algorithm.adv_estimator=grpo \\\n  actor_rollout_ref.model.path=Qwen/Qwen2.5-Math-7B \\\n  actor_rollout_ref.actor.use_kl_loss=False \\\n  actor_rollout_ref.rollout.n=5\n",
        "run_grpo.sh:4",
    ),
}


@pytest.mark.parametrize("case_id", list(ATTACHED))
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_vague_question_with_attachment(seed_engine, case_id, lang):
    name, text, where = ATTACHED[case_id]
    d = diagnose(seed_engine, VAGUE[lang], [Attachment(name=name, content=text)])
    assert d.confident and d.causes[0].case_id == case_id, [c.case_id for c in d.causes]
    assert any(where in e for e in d.causes[0].evidence), d.causes[0].evidence
    assert d.language == lang
    assert any(f.file == name for f in d.facts), "what was read from the files is shown back"


def test_log_only_attachment_finds_loss_collapse(seed_engine):
    log = "\n".join(
        ["{'loss': 1.93, 'grad_norm': 2.4, 'learning_rate': 1e-05, 'epoch': 0.01}", "{'loss': 1.71, 'grad_norm': 3150.2, 'learning_rate': 1e-05, 'epoch': 0.02}"]
        + ["{'loss': 0.0, 'grad_norm': 0.0, 'learning_rate': 1e-05, 'epoch': 0.03}"] * 5
    )
    d = diagnose(seed_engine, "full finetune of a 7b model, deepspeed zero2, see log", [Attachment("train.log", log)])
    top = (d.causes or d.related)[0]
    assert top.case_id == "deepspeed-comm-dtype-fp32-loss-zero"
    assert any("train.log:3" in e for e in top.evidence), top.evidence


def test_follow_up_that_rules_out_a_cause_demotes_it(seed_engine):
    name, text, _ = ATTACHED["deepspeed-comm-dtype-fp32-loss-zero"]
    first = diagnose(seed_engine, "loss drops to zero after a few steps", [Attachment(name, text)])
    assert first.causes[0].case_id == "deepspeed-comm-dtype-fp32-loss-zero"
    hist = [Turn("user", "loss drops to zero after a few steps", [Attachment(name, text)]), Turn("assistant", "...")]
    second = diagnose(seed_engine, "I already deleted communication_data_type from the deepspeed config, the loss is still zero", history=hist)
    ranked = second.causes or second.related
    demoted = next(c for c in ranked + second.related if c.case_id == "deepspeed-comm-dtype-fp32-loss-zero") if any(
        c.case_id == "deepspeed-comm-dtype-fp32-loss-zero" for c in ranked) else None
    assert ranked[0].case_id != "deepspeed-comm-dtype-fp32-loss-zero"
    assert demoted is None or demoted.demoted


def test_follow_up_lowering_lr_in_chinese_is_used(seed_engine):
    name, text, _ = ATTACHED["qwen2-full-sft-lr-3e-4-generation-nan"]
    hist = [Turn("user", "训练出问题了", [Attachment(name, text)]), Turn("assistant", "...")]
    d = diagnose(seed_engine, "我已经把学习率降到 1e-5 了，还是生成报 nan", history=hist)
    ranked = d.causes or d.related
    lr_case = [c for c in ranked if c.case_id == "qwen2-full-sft-lr-3e-4-generation-nan"]
    assert not lr_case or lr_case[0].demoted or ranked[0].case_id != "qwen2-full-sft-lr-3e-4-generation-nan"
    assert d.language == "zh"


def test_unreadable_attachment_still_answers_from_question(seed_engine):
    d = diagnose(seed_engine, "KTO on qwen2 gives nan loss from the first step", [Attachment("ds.json", '{"bf16": {"enabled": true},,}'), Attachment("w.bin", b"\x00\x00\x01")])
    assert (d.causes or d.related)[0].case_id == "openrlhf-kto-vanilla-loss-nan"
    assert any("ds.json" in n and "line 1" in n for n in d.notes)
    assert any("w.bin" in n and "binary" in n for n in d.notes)


def test_empty_question_is_an_input_error(seed_engine):
    from app.diagnose import InputError

    with pytest.raises(InputError, match="empty"):
        diagnose(seed_engine, "   ")


def test_secret_in_question_and_config_never_echoed(seed_engine):
    d = diagnose(seed_engine, "loss zero, my token hf_QQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQ", [Attachment("cfg.yaml", "hub_token: hf_WWWWWWWWWWWWWWWWWWWWWWWWWWWWWW\nlearning_rate: 1e-5\n")])
    dumped = d.model_dump_json()
    assert "hf_QQQQ" not in dumped and "hf_WWWW" not in dumped
    assert any("redacted" in n for n in d.notes)
    said = [s for s in d.notes_said if s.key == "note.redacted"]
    assert said and said[0].params["n"] >= 1  # the same note as a key, for a machine reader


def test_file_problems_are_reported_in_the_question_language(seed_engine):
    d = diagnose(seed_engine, "KTO 训练 loss 一开始就是 nan", [Attachment("ds.json", '{"bf16": {"enabled": true},,}'), Attachment("w.bin", b"\x00\x00\x01")])
    assert d.language == "zh"
    assert any("ds.json" in n and "第 1 行" in n for n in d.notes), d.notes
    assert any("w.bin" in n and "二进制" in n for n in d.notes), d.notes
