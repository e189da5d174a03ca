"""Attachments become facts: every parser, the aliases, log symptoms, and bad input (malformed, binary, huge, secrets)."""

from __future__ import annotations

import json

import pytest

from app.facts import Attachment, code_blocks, detect_kind, read_attachments, read_files
from app.facts.redact import MASK


def facts_of(name: str, text: str, question: str = "") -> dict:
    fs = read_attachments([Attachment(name=name, content=text)], question)
    return {k: f for k, f in fs.by_key().items()}


DS_CONFIG = """{
  "train_batch_size": "auto",
  "train_micro_batch_size_per_gpu": "auto",
  "gradient_accumulation_steps": "auto",
  "gradient_clipping": "auto",
  "zero_allow_untested_optimizer": true,
  "fp16": {
    "enabled": "auto",
    "loss_scale": 0,
    "initial_scale_power": 16,
    "min_loss_scale": 1
  },
  "bf16": {"enabled": true},
  "communication_data_type": "fp32",
  "zero_optimization": {
    "stage": 3,
    "offload_optimizer": {"device": "cpu", "pin_memory": true},
    "offload_param": {"device": "none"},
    "overlap_comm": true,
    "contiguous_gradients": true,
    "stage3_gather_16bit_weights_on_model_save": true
  }
}
"""


def test_deepspeed_json_with_auto_values():
    f = facts_of("ds_z3_config.json", DS_CONFIG)
    assert f["deepspeed.communication_data_type"].value == "fp32" and f["deepspeed.communication_data_type"].line == 14
    assert f["deepspeed.zero_stage"].value == 3 and f["deepspeed.offload_optimizer"].value == "cpu"
    assert f["deepspeed.offload_param"].value == "none"
    assert f["precision"].value == "bf16" and f["precision"].line == 13
    assert f["fp16.loss_scale"].value == 0 and f["fp16.initial_scale_power"].value == 16
    assert f["deepspeed.gather_16bit_weights_on_save"].value is True
    assert "train.max_grad_norm" not in f, '"auto" defers to the trainer and is not a fact'
    assert f["deepspeed.enabled"].value is True
    assert f["deepspeed.communication_data_type"].text == '"communication_data_type": "fp32",'


LLAMAFACTORY = """### model
model_name_or_path: Qwen/Qwen2-7B-Instruct

### method
stage: kto
do_train: true
finetuning_type: lora
lora_rank: 16
lora_alpha: 32
lora_target: q_proj,v_proj
pref_beta: 0.1
flash_attn: fa2

### dataset
template: qwen
cutoff_len: 2048
packing: false

### train
per_device_train_batch_size: 2
gradient_accumulation_steps: 8
learning_rate: 5.0e-6
lr_scheduler_type: cosine
warmup_ratio: 0.1
bf16: true
deepspeed: examples/deepspeed/ds_z3_config.json
quantization_bit: 4
"""


def test_llamafactory_yaml():
    f = facts_of("qwen2_kto.yaml", LLAMAFACTORY)
    assert f["train.stage"].value == "kto" and f["train.stage"].line == 5
    assert f["train.finetuning_type"].value == "qlora", "LoRA over a 4-bit base is QLoRA"
    assert f["lora.r"].value == 16 and f["lora.alpha"].value == 32
    assert f["lora.target_modules"].value == ["q_proj", "v_proj"]
    assert f["rl.beta"].value == 0.1
    assert f["model.attn_implementation"].value == "flash_attention_2"
    assert f["train.max_seq_length"].value == 2048 and f["train.packing"].value is False
    assert f["train.learning_rate"].value == 5e-6 and f["train.warmup_ratio"].value == 0.1
    assert f["precision"].value == "bf16" and f["deepspeed.enabled"].value is True
    assert f["model.family"].value == "qwen2" and f["model.size_b"].value == 7
    assert f["model.load_in_4bit"].value is True


AXOLOTL = """base_model: meta-llama/Meta-Llama-3-8B
load_in_8bit: false
load_in_4bit: true
adapter: qlora
lora_r: 32
lora_alpha: 16
lora_dropout: 0.05
lora_target_linear: true
sequence_len: 4096
sample_packing: true
pad_to_sequence_len: true
rl: dpo
micro_batch_size: 2
gradient_accumulation_steps: 4
optimizer: paged_adamw_8bit
lr_scheduler: cosine
learning_rate: 0.0002
bf16: auto
tf32: false
gradient_checkpointing: true
flash_attention: true
warmup_steps: 10
"""


def test_axolotl_yaml():
    f = facts_of("config.yml", AXOLOTL)
    assert f["train.finetuning_type"].value == "qlora" and f["lora.r"].value == 32
    assert f["lora.target_modules"].value == ["all-linear"]
    assert f["train.packing"].value is True and f["train.stage"].value == "dpo"
    assert f["train.optimizer"].value == "paged_adamw_8bit" and f["train.lr_scheduler"].value == "cosine"
    assert f["model.attn_implementation"].value == "flash_attention_2"
    assert f["train.max_seq_length"].value == 4096 and f["train.per_device_batch_size"].value == 2
    assert "precision" not in f, "bf16: auto decides nothing"
    assert f["model.family"].value == "llama" and f["model.size_b"].value == 8


TRL_YAML = """model_name_or_path: Qwen/Qwen2.5-1.5B
dataset_name: trl-lib/Capybara
learning_rate: 2.0e-5
num_train_epochs: 1
packing: false
padding_free: true
per_device_train_batch_size: 8
gradient_checkpointing: true
gradient_checkpointing_kwargs:
  use_reentrant: false
attn_implementation: sdpa
torch_dtype: bfloat16
max_grad_norm: 0.0
"""


def test_trl_yaml_and_nested_kwargs():
    f = facts_of("sft.yaml", TRL_YAML)
    assert f["train.padding_free"].value is True and f["model.attn_implementation"].value == "sdpa"
    assert f["train.use_reentrant"].value is False and f["train.gradient_checkpointing"].value is True
    assert f["model.torch_dtype"].value == "bfloat16" and f["train.max_grad_norm"].value == 0
    assert f["train.finetuning_type"].value == "full", "no adapter settings at all: every weight trains"


def test_training_arguments_json():
    args = {"output_dir": "out", "learning_rate": 3e-4, "fp16": True, "bf16": False, "warmup_steps": 0,
            "lr_scheduler_type": "constant", "max_grad_norm": 1.0, "adam_epsilon": 1e-8, "optim": "adamw_torch",
            "per_device_train_batch_size": 4, "gradient_accumulation_steps": 16, "weight_decay": 0.0}
    f = facts_of("training_args.json", json.dumps(args, indent=2))
    assert f["precision"].value == "fp16" and f["train.learning_rate"].value == 3e-4
    assert f["train.lr_scheduler"].value == "constant" and f["train.adam_epsilon"].value == 1e-8
    assert f["train.gradient_accumulation_steps"].value == 16


@pytest.mark.parametrize(
    "name,text",
    [
        ("a.yaml", "bf16: true\n"),
        ("run.sh", "python train.py --output_dir o --bf16\n"),
        ("b.yaml", "model_name_or_path: x\ntorch_dtype: bfloat16\n"),
        ("accelerate.yaml", "compute_environment: LOCAL_MACHINE\ndistributed_type: MULTI_GPU\nmixed_precision: bf16\nnum_processes: 8\n"),
        ("ds.json", '{"bf16": {"enabled": true}, "zero_optimization": {"stage": 2}}'),
        ("train.py", "args = TrainingArguments(output_dir='o', bf16=True)\n"),
    ],
)
def test_precision_aliases_agree(name, text):
    assert facts_of(name, text)["precision"].value == "bf16"


TORCHRUN = """CUDA_VISIBLE_DEVICES=0,1,2,3 torchrun --nproc_per_node 4 --nnodes=2 \\
    src/train.py \\
    --model_name_or_path /models/Qwen2-7B-Instruct \\
    --deepspeed ds_z2.json \\
    --bf16 \\
    --learning_rate=3e-4 \\
    --lr_scheduler_type cosine \\
    --warmup_ratio 0.0 \\
    --gradient_checkpointing True \\
    --per_device_train_batch_size 2 \\
    --report_to wandb
"""


def test_torchrun_command_line_with_continuations():
    f = facts_of("run.sh", TORCHRUN)
    assert f["train.learning_rate"].value == 3e-4 and f["train.learning_rate"].line == 6
    assert f["precision"].value == "bf16" and f["precision"].line == 5
    assert f["distributed.world_size"].value == 8
    assert f["deepspeed.enabled"].value is True and f["train.gradient_checkpointing"].value is True
    assert f["train.warmup_ratio"].value == 0 and f["model.family"].value == "qwen2"


def test_deepspeed_and_accelerate_launchers_and_verl_overrides():
    f = facts_of("run.sh", "deepspeed --num_gpus 8 train_kto.py --pretrain Qwen/Qwen2-7B --zero_stage 3 --bf16 --vanilla_loss --beta 0.1\n")
    assert f["train.stage"].value == "kto" if "train.stage" in f else True
    assert f["rl.vanilla_loss"].value is True and f["deepspeed.zero_stage"].value == 3 and f["distributed.world_size"].value == 8
    f = facts_of("launch.sh", "accelerate launch --num_processes 4 --mixed_precision fp16 train.py --lr 1e-4\n")
    assert f["precision"].value == "fp16" and f["distributed.world_size"].value == 4
    f = facts_of("grpo.sh", "python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo actor_rollout_ref.actor.use_kl_loss=False actor_rollout_ref.rollout.n=8 actor_rollout_ref.actor.optim.lr=1e-6\n")
    assert f["train.stage"].value == "grpo" and f["rl.use_kl_loss"].value is False
    assert f["rl.num_generations"].value == 8 and f["train.learning_rate"].value == 1e-6


PY = '''import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import GRPOConfig, GRPOTrainer
from peft import LoraConfig

model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-7B-Instruct", torch_dtype=torch.float16, attn_implementation="eager")
tokenizer = AutoTokenizer.from_pretrained("Qwen/Qwen2.5-7B-Instruct")
tokenizer.pad_token = tokenizer.eos_token
tokenizer.padding_side = "left"
peft_config = LoraConfig(r=64, lora_alpha=16, target_modules=["q_proj", "k_proj"], lora_dropout=0.05)
args = GRPOConfig(
    output_dir="out",
    learning_rate=1e-6,
    beta=0.0,
    num_generations=8,
    max_completion_length=512,
    use_vllm=True,
    fp16=True,
)
'''


def test_python_snippet_read_with_ast_never_executed(tmp_path):
    marker = tmp_path / "was_executed"
    f = facts_of("train.py", PY + f"\nopen({str(marker)!r}, 'w').write('x')\n")
    assert not marker.exists()
    assert f["train.stage"].value == "grpo" and f["rl.beta"].value == 0 and f["rl.num_generations"].value == 8
    assert f["model.torch_dtype"].value == "float16" and f["model.attn_implementation"].value == "eager"
    assert f["tokenizer.pad_is_eos"].value is True and f["tokenizer.pad_is_eos"].line == 8
    assert f["tokenizer.padding_side"].value == "left" and f["lora.r"].value == 64 and f["lora.alpha"].value == 16
    assert f["rl.use_vllm"].value is True and f["precision"].value == "fp16"


def test_python_snippet_cut_off_mid_call_still_reads():
    f = facts_of("snippet.py", "args = DPOConfig(\n    beta=0.5,\n    loss_type='ipo',\n    learning_rate=5e-6,\n")
    assert f["train.stage"].value == "dpo" and f["rl.loss_type"].value == "ipo" and f["rl.beta"].value == 0.5


def test_code_blocks_in_chat_message():
    msg = "my run broke:\n```json\n{\"communication_data_type\": \"fp32\", \"zero_optimization\": {\"stage\": 2}}\n```\nany idea?"
    prose, atts = code_blocks(msg)
    assert prose.startswith("my run broke") and "fp32" not in prose and len(atts) == 1
    f = read_attachments(atts).by_key()
    assert f["deepspeed.communication_data_type"].value == "fp32" and f["deepspeed.communication_data_type"].file == "message-block-1.json"


TRAINER_STATE = {
    "best_metric": None, "global_step": 40, "epoch": 0.4,
    "log_history": [{"epoch": 0.01 * i, "grad_norm": g, "learning_rate": 1e-5, "loss": loss, "step": i * 10}
                    for i, (loss, g) in enumerate([(1.9, 3.2), (1.7, 2.9), (1.6, 2100.0), (0.0, 0.0), (0.0, 0.0)], 1)],
}


def test_trainer_state_log_history():
    text = json.dumps(TRAINER_STATE, indent=2)
    assert detect_kind("trainer_state.json", text) == "trainer_state"
    f = facts_of("trainer_state.json", text)
    assert f["log.loss_zero"].value == 40 and f["log.grad_norm_explosion"].value == 30
    assert f["log.loss_zero"].file == "trainer_state.json" and f["log.loss_zero"].line > 0
    assert f["log.grad_norm_zero"].value == 40


HF_LOG = """[INFO|trainer.py:2048] ***** Running training *****
{'loss': 1.7328, 'grad_norm': 1.96, 'learning_rate': 9.9e-06, 'epoch': 0.02}
{'loss': 1.6021, 'grad_norm': 2.11, 'learning_rate': 9.7e-06, 'epoch': 0.04}
{'loss': 1.5502, 'grad_norm': 2.05, 'learning_rate': 9.5e-06, 'epoch': 0.06}
{'loss': nan, 'grad_norm': nan, 'learning_rate': 9.3e-06, 'epoch': 0.08}
{'loss': nan, 'grad_norm': nan, 'learning_rate': 9.1e-06, 'epoch': 0.10}
"""


def test_hf_dict_log_nan():
    f = facts_of("train.log", HF_LOG)
    assert f["log.nan_loss"].value == 4 and f["log.nan_loss"].line == 5
    assert "log.nan_grad_norm" in f


def test_step_style_log_spike_and_divergence():
    lines = [f"step {i} | loss {2.0 - 0.05 * i:.3f} | grad_norm 1.0" for i in range(20)]
    lines += [f"step {20 + i} | loss {1.1 + 0.4 * i:.3f} | grad_norm {5 + i}" for i in range(12)]
    f = facts_of("out.log", "\n".join(lines))
    assert "log.loss_divergence" in f and "log.loss_spike" in f
    assert f["log.loss_spike"].value >= 20


def test_dpo_loss_stuck_and_loss_scale_minimum_and_messages():
    dpo = "\n".join(f"{{'loss': 0.6931, 'rewards/accuracies': 0.0, 'epoch': {i / 100}}}" for i in range(8))
    f = facts_of("dpo.log", dpo)
    assert "log.dpo_loss_stuck" in f and f["log.rewards_accuracy_zero"].value is True
    ds = "\n".join(["[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 4, reducing to 2",
                    "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 2, reducing to 1",
                    "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 1, reducing to 1",
                    "Current loss scale already at minimum - cannot decrease scale anymore. Exiting run."])
    f = facts_of("ds.log", ds)
    assert f["log.overflow_count"].value == 3 and f["log.loss_scale_min"].value == 1 and f["log.loss_scale_at_minimum"].value is True
    err = "Traceback (most recent call last):\n  File \"gen.py\", line 3\nRuntimeError: probability tensor contains either `inf`, `nan` or element < 0\n"
    f = facts_of("gen.log", err)
    assert f["log.prob_tensor_error"].value is True and f["log.prob_tensor_error"].line == 3


def test_grpo_metrics_kl_and_entropy():
    lines = [f"step:{i} - actor/kl_loss:{0.001 * (1 + i) if i < 8 else 5.0 * i:.4f} - actor/entropy:{1.2 if i < 8 else 0.01:.3f} - actor/pg_loss:0.1" for i in range(12)]
    f = facts_of("verl.log", "\n".join(lines))
    assert f["log.kl_explosion"].value == 8 and f["log.entropy_collapse"].value == 8


def test_versions_from_env_dump():
    env = "- `transformers` version: 4.46.1\n- PyTorch version (GPU?): 2.4.0+cu121 (True)\n- deepspeed: 0.15.1\nWARNING loss nan\n"
    f = facts_of("env.txt", env)
    assert f["env.transformers_version"].value == "4.46.1" and f["env.torch_version"].value == "2.4.0"


# ---------------------------------------------------------------- bad input


def test_malformed_json_reports_line_and_column_and_keeps_other_files():
    bad = '{\n  "bf16": {"enabled": true},\n  "zero_optimization": {"stage": 2,}\n}'
    fs = read_attachments([Attachment("ds.json", bad), Attachment("train.yaml", "learning_rate: 3e-4\nfinetuning_type: full\n")])
    note = next(n for n in fs.files if n.file == "ds.json")
    assert not note.ok and "line 3" in note.message and "column" in note.message
    assert fs.by_key()["train.learning_rate"].value == 3e-4


def test_malformed_yaml_reports_line():
    fs = read_attachments([Attachment("x.yaml", "stage: sft\nlearning_rate: [1e-5\nbf16: true\n")])
    assert not fs.files[0].ok and "line" in fs.files[0].message


def test_binary_file_is_refused():
    fs = read_attachments([Attachment("model.safetensors", b"\x00\x01\x02binary\xff\xfe" * 100)])
    assert fs.files[0].kind == "binary" and not fs.files[0].ok and "binary" in fs.files[0].message


def test_unknown_format_is_said():
    fs = read_attachments([Attachment("notes.txt", "just some words about my weekend")])
    assert "unknown format" in fs.files[0].message


def test_oversized_upload_refused_but_big_log_on_disk_is_streamed(tmp_path):
    big = "x" * 2_000_000
    fs = read_attachments([Attachment("big.yaml", "a: " + big)], max_bytes=1_000_000)
    assert fs.files[0].kind == "too-large" and "limit" in fs.files[0].message
    log = tmp_path / "train.log"
    with log.open("w") as fh:
        for i in range(60_000):
            fh.write(f"{{'loss': {2.0 - i * 1e-5:.5f}, 'grad_norm': 1.0, 'learning_rate': 1e-05, 'epoch': {i / 1e4}}}\n")
        fh.write("{'loss': nan, 'grad_norm': nan, 'learning_rate': 1e-05, 'epoch': 6.0}\n")
    fs = read_files([log], max_bytes=1_000_000)
    assert fs.files[0].ok and "streamed" in fs.files[0].message
    assert fs.by_key()["log.nan_loss"].line == 60_001


def test_secrets_are_redacted_everywhere():
    cfg = ("model_name_or_path: meta-llama/Llama-2-7b-hf\nhub_token: hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345\n"
           "wandb_api_key: 0123456789abcdef0123456789abcdef01234567\npassword: hunter2hunter2\n"
           "aws_access_key_id: AKIAIOSFODNN7EXAMPLE\nlearning_rate: 1e-5\npad_token: <|endoftext|>\n")
    fs = read_attachments([Attachment("cfg.yaml", cfg)], "help, my token is hf_ZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZ")
    red = fs.redacted_texts["cfg.yaml"]
    for secret in ("hf_AbCdEf", "0123456789abcdef0123456789abcdef01234567", "hunter2hunter2", "AKIAIOSFODNN7EXAMPLE"):
        assert secret not in red
    assert red.count(MASK) == 4 and "<|endoftext|>" in red and fs.redactions == 4
    assert all("hf_" not in f.text for f in fs.facts)
    assert fs.by_key()["train.learning_rate"].value == 1e-5


def test_custom_loop_optimizer_is_read():
    src = ("model = AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float16)\n"
           "opt = torch.optim.AdamW(model.parameters(), lr=2e-5, eps=1e-8, betas=(0.9, 0.95), weight_decay=0.1)\n")
    f = facts_of("loop.py", src)
    assert f["train.optimizer"].value == "adamw" and f["train.learning_rate"].value == 2e-5
    assert f["train.adam_epsilon"].value == 1e-8 and f["train.adam_beta2"].value == 0.95 and f["train.weight_decay"].value == 0.1
    assert f["train.finetuning_type"].value == "full" and f["model.torch_dtype"].value == "float16"
    assert "precision" not in f, "a script's load dtype is not taken as the training precision"


def test_broken_or_odd_trainer_state_gives_a_note_not_an_exception():
    from app.facts import Attachment, read_attachments

    fs = read_attachments([Attachment("trainer_state.json", '{"log_history": [{"loss": 1.0}')])
    assert not fs.files[0].ok and "line 1" in fs.files[0].message
    for odd in ('["log_history"]', '{"log_history": 5}', '{"log_history": ["x", 3]}'):
        fs = read_attachments([Attachment("trainer_state.json", odd)])
        assert fs.files and fs.files[0].file == "trainer_state.json"


JSONL_LOG = """{"loss": 1.71, "grad_norm": 1.9, "learning_rate": 1e-05, "epoch": 0.02}
{"loss": 1.64, "grad_norm": 2.0, "learning_rate": 1e-05, "epoch": 0.04}
Traceback (most recent call last):
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB of which 1.02 GiB is free.
"""


@pytest.mark.parametrize("name", ["train.log", "metrics.jsonl", "stdout.txt"])
def test_log_named_file_starting_with_a_json_record_is_read_as_a_log(name):
    """A log whose first line is a JSON record (metrics, then a traceback) was read as broken JSON: the OOM was lost."""
    assert detect_kind(name, JSONL_LOG) == "log"
    assert "log.oom" in facts_of(name, JSONL_LOG)
    assert detect_kind("config.json", '{"fp16": {"enabled": true}}') == "json"
    assert detect_kind("run.log", '{"fp16": {"enabled": true}}') == "json"  # one whole JSON document stays JSON


@pytest.mark.parametrize("name", ["job.out", "slurm-1234.txt", "pasted"])
def test_a_tools_error_line_is_a_log_not_a_yaml_config(name):
    """`sbatch: error: ...` looks like `key: value` but is a scheduler's message: it must reach the log reader, where a
    case's `log.message` trigger can see it (a helper writing a case found it read as YAML)."""
    text = "sbatch: error: Batch job submission failed: Requested node configuration is not available\n"
    assert detect_kind(name, text) == "log"
    fs = read_attachments([Attachment(name, content=text)])
    msg = fs.by_key().get("log.message")
    assert msg is not None and "requested node configuration is not available" in msg.value
    assert detect_kind("train.yaml", "model: qwen\nnote: error: kept as text\n") == "yaml"  # a YAML file stays YAML
