"""Map raw setting names from every dialect (HF TrainingArguments, DeepSpeed, LLaMA-Factory, axolotl, TRL, OpenRLHF,
verl, accelerate, launch flags) to the one fact vocabulary of kb/facts.yaml, and normalise their values."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from app.models import Fact

AUTO = object()  # a value that defers to another file ("auto"): recorded nowhere


def to_bool(v: Any) -> bool | None:
    if isinstance(v, bool):
        return v
    if isinstance(v, int | float):
        return bool(v)
    s = str(v).strip().strip("'\"").lower()
    if s in ("true", "yes", "on", "1", "y"):
        return True
    if s in ("false", "no", "off", "0", "n", "none", "null", ""):
        return False
    return None


def to_num(v: Any) -> float | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int | float):
        return float(v)
    try:
        return float(str(v).strip().strip("'\""))
    except ValueError:
        return None


_DTYPE = {
    "bf16": "bf16", "bfloat16": "bf16", "torch.bfloat16": "bf16",
    "fp16": "fp16", "float16": "fp16", "half": "fp16", "torch.float16": "fp16",
    "fp32": "fp32", "float32": "fp32", "float": "fp32", "torch.float32": "fp32", "no": "fp32",
}


def to_prec(v: Any) -> str | None:
    return _DTYPE.get(str(v).strip().strip("'\"").lower())


def to_torch_dtype(v: Any) -> str | None:
    s = str(v).strip().strip("'\"").lower().replace("torch.", "")
    return {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32", "half": "float16", "float": "float32"}.get(s, s) or None


def to_str(v: Any) -> str | None:
    s = str(v).strip().strip("'\"").lower()
    return s or None


def to_list(v: Any) -> list[str] | None:
    if isinstance(v, list | tuple):
        return [str(x).strip().lower() for x in v]
    s = str(v).strip().strip("[]'\"")
    parts = [p.strip().strip("'\"").lower() for p in re.split(r"[,\s]+", s) if p.strip()]
    return parts or None


def to_attn(v: Any) -> str | None:
    s = str(v).strip().strip("'\"").lower()
    return {
        "fa2": "flash_attention_2", "flash_attention_2": "flash_attention_2", "flash_attn": "flash_attention_2",
        "flash-attn": "flash_attention_2", "flash_attention_3": "flash_attention_3", "fa3": "flash_attention_3",
        "sdpa": "sdpa", "eager": "eager", "disabled": "eager", "flex_attention": "flex_attention",
    }.get(s)


def _bool_then(value_if_true: str) -> Callable[[Any], Any]:
    def f(v: Any) -> Any:
        b = to_bool(v)
        return value_if_true if b else None

    return f


def _stage(v: Any) -> str | None:
    s = str(v).strip().strip("'\"").lower()
    alias = {"sft": "sft", "pt": "pt", "rm": "rm", "reward": "rm", "ppo": "ppo", "dpo": "dpo", "kto": "kto", "orpo": "orpo",
             "simpo": "simpo", "grpo": "grpo", "rloo": "rloo", "ipo": "dpo", "kto_pair": "kto", "reinforce": "reinforce", "gspo": "grpo",
             "dapo": "grpo"}
    return alias.get(s)


def _ft(v: Any) -> str | None:
    s = str(v).strip().strip("'\"").lower()
    return {"full": "full", "lora": "lora", "qlora": "qlora", "freeze": "freeze", "oft": "lora"}.get(s)


def _offload(v: Any) -> str | None:
    s = str(v).strip().strip("'\"").lower()
    return s if s in ("cpu", "nvme", "none") else None


def _zero(v: Any) -> float | None:
    n = to_num(v)
    if n is not None:
        return n
    m = re.search(r"z(?:ero)?_?(\d)", str(v).lower())
    return float(m.group(1)) if m else None


def _fsdp(v: Any) -> Any:
    s = str(v).strip().lower()
    if not s or s in ("false", "none", "no", "[]"):
        return None
    return True


def _ds_file_stage(v: Any) -> float | None:
    """ZeRO stage from a DeepSpeed config file name such as ds_z3_config.json or zero2_offload.json."""
    m = re.search(r"(?:^|[/_\-])(?:ds_)?z(?:ero)?[_\-]?([0-3])(?:[_\-.]|$)", str(v).lower())
    return float(m.group(1)) if m else None


# Rules: raw key (last path component, lower-case) or a dotted suffix -> (fact key, converter).
# A dotted rule ("fp16.enabled") wins over a bare one ("enabled").
Rule = tuple[str, Callable[[Any], Any]]
RULES: dict[str, list[Rule]] = {
    # precision
    "bf16": [("precision", _bool_then("bf16"))],
    "fp16": [("precision", _bool_then("fp16"))],
    "bf16.enabled": [("precision", _bool_then("bf16"))],
    "fp16.enabled": [("precision", _bool_then("fp16"))],
    "mixed_precision": [("precision", to_prec)],
    "precision": [("precision", to_prec)],
    "torch_dtype": [("model.torch_dtype", to_torch_dtype)],
    "dtype": [("model.torch_dtype", to_torch_dtype)],
    "model_dtype": [("model.torch_dtype", to_torch_dtype)],
    "pure_bf16": [("pure_bf16", to_bool)],
    "tf32": [("tf32", to_bool)],
    "fp16.loss_scale": [("fp16.loss_scale", to_num)],
    "loss_scale": [("fp16.loss_scale", to_num)],
    "fp16.initial_scale_power": [("fp16.initial_scale_power", to_num)],
    "initial_scale_power": [("fp16.initial_scale_power", to_num)],
    "fp16.min_loss_scale": [("fp16.min_loss_scale", to_num)],
    "min_loss_scale": [("fp16.min_loss_scale", to_num)],
    "fp16_full_eval": [("fp16.full_eval", to_bool)],
    "bf16_full_eval": [("fp16.full_eval", to_bool)],
    # deepspeed
    "deepspeed": [
        ("deepspeed.enabled", lambda v: True if str(v).strip() and to_bool(v) is not False else None),
        ("deepspeed.zero_stage", lambda v: _ds_file_stage(v)),
    ],
    "zero_optimization.stage": [("deepspeed.zero_stage", _zero)],
    "zero_stage": [("deepspeed.zero_stage", _zero)],
    "offload_optimizer.device": [("deepspeed.offload_optimizer", _offload)],
    "offload_optimizer_device": [("deepspeed.offload_optimizer", _offload)],
    "offload_param.device": [("deepspeed.offload_param", _offload)],
    "offload_param_device": [("deepspeed.offload_param", _offload)],
    "communication_data_type": [("deepspeed.communication_data_type", to_prec)],
    "grad_accum_dtype": [("deepspeed.grad_accum_dtype", to_prec)],
    "overlap_comm": [("deepspeed.overlap_comm", to_bool)],
    "contiguous_gradients": [("deepspeed.contiguous_gradients", to_bool)],
    "stage3_gather_16bit_weights_on_model_save": [("deepspeed.gather_16bit_weights_on_save", to_bool)],
    "zero3_save_16bit_model": [("deepspeed.gather_16bit_weights_on_save", to_bool)],
    "reduce_bucket_size": [("deepspeed.reduce_bucket_size", to_num)],
    "immediate_grad_update": [("deepspeed.immediate_grad_update", to_bool)],
    "zero_stage3": [("deepspeed.zero_stage", lambda v: 3.0 if to_bool(v) else None)],
    # fsdp / distributed
    "fsdp": [("fsdp.enabled", _fsdp), ("fsdp.sharding_strategy", lambda v: (to_list(v) or [None])[0] if _fsdp(v) and isinstance(v, str) else None)],
    "fsdp_sharding_strategy": [("fsdp.sharding_strategy", to_str)],
    "sharding_strategy": [("fsdp.sharding_strategy", to_str)],
    "fsdp_use_orig_params": [("fsdp.use_orig_params", to_bool)],
    "use_orig_params": [("fsdp.use_orig_params", to_bool)],
    "fsdp_cpu_ram_efficient_loading": [("fsdp.cpu_ram_efficient_loading", to_bool)],
    "fsdp_offload_params": [("fsdp.offload_params", to_bool)],
    "fsdp_version": [("fsdp.version", to_num)],
    "fsdp_state_dict_type": [("fsdp.state_dict_type", to_str)],
    "param_dtype": [("fsdp.param_dtype", to_prec)],
    "reduce_dtype": [("fsdp.reduce_dtype", to_prec)],
    "distributed_type": [("distributed.type", to_str)],
    "num_processes": [("distributed.world_size", to_num)],
    "world_size": [("distributed.world_size", to_num)],
    "ddp_timeout": [("distributed.ddp_timeout", to_num)],
    "ddp_find_unused_parameters": [("distributed.ddp_find_unused_parameters", to_bool)],
    # optimisation
    "learning_rate": [("train.learning_rate", to_num)],
    "lr": [("train.learning_rate", to_num)],
    "actor_learning_rate": [("train.learning_rate", to_num)],
    "optim.lr": [("train.learning_rate", to_num)],
    "optimizer.params.lr": [("train.learning_rate", to_num)],
    "warmup_steps": [("train.warmup_steps", to_num)],
    "lr_warmup_steps": [("train.warmup_steps", to_num)],
    "warmup_num_steps": [("train.warmup_steps", to_num)],
    "warmup_ratio": [("train.warmup_ratio", to_num)],
    "lr_warmup_ratio": [("train.warmup_ratio", to_num)],
    "lr_warmup_steps_ratio": [("train.warmup_ratio", to_num)],
    "lr_scheduler_type": [("train.lr_scheduler", to_str)],
    "lr_scheduler": [("train.lr_scheduler", to_str)],
    "scheduler.type": [("train.lr_scheduler", to_str)],
    "max_grad_norm": [("train.max_grad_norm", to_num)],
    "gradient_clipping": [("train.max_grad_norm", to_num)],
    "grad_clip": [("train.max_grad_norm", to_num)],
    "clip_grad": [("train.max_grad_norm", to_num)],
    "optim": [("train.optimizer", to_str)],
    "optimizer": [("train.optimizer", lambda v: to_str(v) if not isinstance(v, dict) else None)],
    "optimizer.type": [("train.optimizer", to_str)],
    "adam_epsilon": [("train.adam_epsilon", to_num)],
    "adam_eps": [("train.adam_epsilon", to_num)],
    "optimizer.params.eps": [("train.adam_epsilon", to_num)],
    "adam_beta1": [("train.adam_beta1", to_num)],
    "adam_beta2": [("train.adam_beta2", to_num)],
    "weight_decay": [("train.weight_decay", to_num)],
    "per_device_train_batch_size": [("train.per_device_batch_size", to_num)],
    "micro_batch_size": [("train.per_device_batch_size", to_num)],
    "train_micro_batch_size_per_gpu": [("train.per_device_batch_size", to_num)],
    "micro_train_batch_size": [("train.per_device_batch_size", to_num)],
    "ppo_micro_batch_size_per_gpu": [("train.per_device_batch_size", to_num)],
    "gradient_accumulation_steps": [("train.gradient_accumulation_steps", to_num)],
    "train_batch_size": [("train.global_batch_size", to_num)],
    "num_train_epochs": [("train.num_epochs", to_num)],
    "num_epochs": [("train.num_epochs", to_num)],
    "max_epochs": [("train.num_epochs", to_num)],
    "total_epochs": [("train.num_epochs", to_num)],
    "max_steps": [("train.max_steps", to_num)],
    "max_seq_length": [("train.max_seq_length", to_num)],
    "max_seq_len": [("train.max_seq_length", to_num)],
    "cutoff_len": [("train.max_seq_length", to_num)],
    "sequence_len": [("train.max_seq_length", to_num)],
    "model_max_length": [("train.max_seq_length", to_num)],
    "max_length": [("train.max_seq_length", to_num)],
    "max_len": [("train.max_seq_length", to_num)],
    "gradient_checkpointing": [("train.gradient_checkpointing", lambda v: to_bool(v) if to_bool(v) is not None else (True if str(v).lower() in ("unsloth",) else None))],
    "use_reentrant": [("train.use_reentrant", to_bool)],
    "packing": [("train.packing", to_bool)],
    "sample_packing": [("train.packing", to_bool)],
    "packing_samples": [("train.packing", to_bool)],
    "padding_free": [("train.padding_free", to_bool)],
    "neat_packing": [("train.neat_packing", to_bool)],
    "group_by_length": [("train.group_by_length", to_bool)],
    "finetuning_type": [("train.finetuning_type", _ft)],
    "adapter": [("train.finetuning_type", _ft)],
    "train_type": [("train.finetuning_type", _ft)],
    "stage": [("train.stage", _stage)],
    "rl": [("train.stage", _stage)],
    "rlhf_type": [("train.stage", _stage)],
    "adv_estimator": [("train.stage", lambda v: {"gae": "ppo", "grpo": "grpo", "rloo": "rloo", "reinforce_plus_plus": "reinforce", "remax": "reinforce", "grpo_passk": "grpo"}.get(str(v).strip().lower()))],
    "seed": [("train.seed", to_num)],
    "resume_from_checkpoint": [("train.resume_from_checkpoint", lambda v: to_str(v) if to_bool(v) is not False else None)],
    "save_steps": [("train.save_steps", to_num)],
    "save_only_model": [("train.save_only_model", to_bool)],
    "eval_steps": [("train.eval_steps", to_num)],
    "neftune_noise_alpha": [("train.neftune_noise_alpha", to_num)],
    "neft_alpha": [("train.neftune_noise_alpha", to_num)],
    "train_on_inputs": [("train.train_on_inputs", to_bool)],
    "train_on_prompt": [("train.train_on_inputs", to_bool)],
    "completion_only_loss": [("train.completion_only_loss", to_bool)],
    "assistant_only_loss": [("train.completion_only_loss", to_bool)],
    "average_tokens_across_devices": [("train.average_tokens_across_devices", to_bool)],
    "torch_compile": [("train.torch_compile", to_bool)],
    "use_liger_kernel": [("train.liger_kernel", to_bool)],
    "enable_liger_kernel": [("train.liger_kernel", to_bool)],
    "dataloader_num_workers": [("train.dataloader_num_workers", to_num)],
    "template": [("train.template", to_str)],
    "chat_template": [("train.template", lambda v: to_str(v) if len(str(v)) < 60 else None)],
    # model
    "model_name_or_path": [("model.name", to_str)],
    "base_model": [("model.name", to_str)],
    "pretrain": [("model.name", to_str)],
    "model_id": [("model.name", to_str)],
    "_name_or_path": [("model.name", to_str)],
    "pretrained_model_name_or_path": [("model.name", to_str)],
    "model.path": [("model.name", to_str)],
    "attn_implementation": [("model.attn_implementation", to_attn)],
    "flash_attn": [("model.attn_implementation", lambda v: to_attn(v) or ("flash_attention_2" if to_bool(v) else ("eager" if to_bool(v) is False else None)))],
    "flash_attention": [("model.attn_implementation", lambda v: "flash_attention_2" if to_bool(v) else None)],
    "use_flash_attention_2": [("model.attn_implementation", lambda v: "flash_attention_2" if to_bool(v) else None)],
    "use_flash_attn": [("model.attn_implementation", lambda v: "flash_attention_2" if to_bool(v) else None)],
    "sdp_attention": [("model.attn_implementation", lambda v: "sdpa" if to_bool(v) else None)],
    "use_remove_padding": [("train.padding_free", to_bool)],
    "use_cache": [("model.use_cache", to_bool)],
    "rope_scaling": [("model.rope_scaling_type", lambda v: to_str(v) if not isinstance(v, dict) else None)],
    "rope_scaling.type": [("model.rope_scaling_type", to_str)],
    "rope_scaling.rope_type": [("model.rope_scaling_type", to_str)],
    "rope_scaling.factor": [("model.rope_scaling_factor", to_num)],
    "rope_factor": [("model.rope_scaling_factor", to_num)],
    "load_in_4bit": [("model.load_in_4bit", to_bool)],
    "load_in_8bit": [("model.load_in_8bit", to_bool)],
    "quantization_bit": [("model.load_in_4bit", lambda v: True if to_num(v) == 4 else None), ("model.load_in_8bit", lambda v: True if to_num(v) == 8 else None)],
    "trust_remote_code": [("model.trust_remote_code", to_bool)],
    "router_aux_loss_coef": [("moe.router_aux_loss_coef", to_num)],
    "moe_aux_loss_coeff": [("moe.router_aux_loss_coef", to_num)],
    "moe_aux_loss_coef": [("moe.router_aux_loss_coef", to_num)],
    "reward_model": [("train.stage", lambda v: "rm" if to_bool(v) else None)],
    "aux_loss_coef": [("moe.router_aux_loss_coef", to_num)],
    "output_router_logits": [("moe.output_router_logits", to_bool)],
    "resize_vocab": [("model.resize_vocab", to_bool)],
    # lora
    "lora_rank": [("lora.r", to_num)],
    "lora_r": [("lora.r", to_num)],
    "loraconfig.r": [("lora.r", to_num)],
    "lora_alpha": [("lora.alpha", to_num)],
    "lora_dropout": [("lora.dropout", to_num)],
    "lora_target": [("lora.target_modules", to_list)],
    "lora_target_modules": [("lora.target_modules", to_list)],
    "target_modules": [("lora.target_modules", to_list)],
    "lora_target_linear": [("lora.target_modules", lambda v: ["all-linear"] if to_bool(v) else None)],
    "modules_to_save": [("lora.modules_to_save", to_list)],
    "additional_target": [("lora.modules_to_save", to_list)],
    "lora_modules_to_save": [("lora.modules_to_save", to_list)],
    "use_dora": [("lora.use_dora", to_bool)],
    "use_rslora": [("lora.use_rslora", to_bool)],
    "peft_use_dora": [("lora.use_dora", to_bool)],
    # tokenizer
    "pad_token": [("tokenizer.pad_token", lambda v: str(v).strip().strip("'\""))],
    "padding_side": [("tokenizer.padding_side", to_str)],
    # rl / preference
    "beta": [("rl.beta", to_num)],
    "pref_beta": [("rl.beta", to_num)],
    "dpo_beta": [("rl.beta", to_num)],
    "orpo_alpha": [("rl.beta", to_num)],
    "loss_type": [("rl.loss_type", to_str)],
    "pref_loss": [("rl.loss_type", to_str)],
    "dpo_loss": [("rl.loss_type", to_str)],
    "vanilla_loss": [("rl.vanilla_loss", to_bool)],
    "label_smoothing": [("rl.label_smoothing", to_num)],
    "dpo_label_smoothing": [("rl.label_smoothing", to_num)],
    "reference_free": [("rl.reference_free", to_bool)],
    "init_kl_coef": [("rl.kl_coef", to_num)],
    "kl_coef": [("rl.kl_coef", to_num)],
    "kl_loss_coef": [("rl.kl_coef", to_num)],
    "kl_ctl.kl_coef": [("rl.kl_coef", to_num)],
    "use_kl_loss": [("rl.use_kl_loss", to_bool)],
    "kl_loss_type": [("rl.kl_estimator", to_str)],
    "kl_estimator": [("rl.kl_estimator", to_str)],
    "cliprange": [("rl.clip_range", to_num)],
    "clip_ratio": [("rl.clip_range", to_num)],
    "clip_ratio_low": [("rl.clip_range", to_num)],
    "eps_clip": [("rl.clip_range", to_num)],
    "epsilon": [("rl.clip_range", to_num)],
    "epsilon_high": [("rl.clip_range_high", to_num)],
    "clip_ratio_high": [("rl.clip_range_high", to_num)],
    "cliprange_value": [("rl.value_clip_range", to_num)],
    "value_clip": [("rl.value_clip_range", to_num)],
    "entropy_coeff": [("rl.entropy_coef", to_num)],
    "entropy_coef": [("rl.entropy_coef", to_num)],
    "num_generations": [("rl.num_generations", to_num)],
    "n_samples_per_prompt": [("rl.num_generations", to_num)],
    "rollout.n": [("rl.num_generations", to_num)],
    "temperature": [("rl.temperature", to_num)],
    "ppo_epochs": [("rl.ppo_epochs", to_num)],
    "num_iterations": [("rl.ppo_epochs", to_num)],
    "max_epochs_per_rollout": [("rl.ppo_epochs", to_num)],
    "scale_rewards": [("rl.scale_rewards", lambda v: to_bool(v) if to_bool(v) is not None else (False if str(v).lower() == "none" else True))],
    "use_vllm": [("rl.use_vllm", to_bool)],
    "vllm_num_engines": [("rl.use_vllm", lambda v: True if (to_num(v) or 0) > 0 else None)],
    "rollout.name": [("rl.use_vllm", lambda v: True if "vllm" in str(v).lower() else None)],
    "desirable_weight": [("rl.desirable_weight", to_num)],
    "kto_desirable_weight": [("rl.desirable_weight", to_num)],
    "undesirable_weight": [("rl.undesirable_weight", to_num)],
    "kto_undesirable_weight": [("rl.undesirable_weight", to_num)],
    "max_prompt_length": [("rl.max_prompt_length", to_num)],
    "prompt_max_len": [("rl.max_prompt_length", to_num)],
    "max_completion_length": [("rl.max_completion_length", to_num)],
    "generate_max_len": [("rl.max_completion_length", to_num)],
    "response_length": [("rl.max_completion_length", to_num)],
    "max_response_length": [("rl.max_completion_length", to_num)],
    "normalize_reward": [("rl.reward_normalization", to_bool)],
    "pref_ftx": [("rl.pref_ftx", to_num)],
    "rpo_alpha": [("rl.pref_ftx", to_num)],
    "ref_model": [("rl.ref_model", lambda v: True if str(v).strip() and to_bool(v) is not False else None)],
    "ref_model_name_or_path": [("rl.ref_model", lambda v: True if str(v).strip() else None)],
    "nproc_per_node": [("distributed.world_size", to_num)],
    "num_gpus": [("distributed.world_size", to_num)],
}

# Raw keys whose meaning depends on the surrounding config (verl `actor_rollout_ref.actor.optim.lr` etc.) are
# matched by their longest dotted suffix present in RULES.
_MAX_SUFFIX = max(k.count(".") for k in RULES) + 1


def lookup(path: str) -> list[Rule]:
    parts = path.lower().replace("-", "_").split(".")
    for n in range(min(_MAX_SUFFIX, len(parts)), 0, -1):
        key = ".".join(parts[-n:])
        if key in RULES:
            return RULES[key]
    return []


def normalize(path: str, value: Any, file: str, line: int, text: str) -> list[Fact]:
    """Facts for one raw setting; "auto" and unparseable values give none."""
    if isinstance(value, str) and value.strip().strip("'\"").lower() == "auto":
        return []
    out = []
    for key, conv in lookup(path):
        try:
            v = conv(value)
        except Exception:  # noqa: BLE001 - a value we cannot read is just not a fact
            v = None
        if v is None:
            continue
        out.append(Fact(key=key, value=v, file=file, line=line, text=text.strip()))
    return out


_FAMILY = [
    ("qwen3.5", r"qwen-?3\.5"), ("qwen3", r"qwen-?3"), ("qwen2.5", r"qwen-?2\.5"), ("qwen2", r"qwen-?2"), ("qwen", r"qwen"),
    ("llama", r"llama"), ("mixtral", r"mixtral"), ("mistral", r"mistral"), ("gemma3", r"gemma-?3"), ("gemma2", r"gemma-?2"),
    ("gemma", r"gemma"), ("phi", r"phi-?\d"), ("deepseek", r"deepseek"), ("chatglm", r"chatglm|glm-?4"), ("baichuan", r"baichuan"),
    ("yi", r"\byi-"), ("internlm", r"internlm"), ("falcon", r"falcon"), ("olmo", r"olmo"), ("gpt2", r"gpt-?2"),
]
_MOE = re.compile(r"mixtral|moe|-a\d+(\.\d+)?b|a3b|a22b|deepseek-?v[23]|deepseek-?r1|dbrx|olmoe|jamba|qwen3-(30|235)b")


def model_facts(name: Fact) -> list[Fact]:
    """Family, size and MoE-ness from a model name or path."""
    s = str(name.value).lower()
    out = []
    for fam, pat in _FAMILY:
        if re.search(pat, s):
            out.append(name.model_copy(update={"key": "model.family", "value": fam}))
            break
    m = re.search(r"(?<![\d.])(\d+(?:\.\d+)?)\s*[bB](?![a-z])", s)
    if m:
        out.append(name.model_copy(update={"key": "model.size_b", "value": float(m.group(1))}))
    if _MOE.search(s):
        out.append(name.model_copy(update={"key": "model.is_moe", "value": True}))
    return out
