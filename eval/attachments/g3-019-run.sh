#!/bin/bash
export WANDB_PROJECT=sft-fsdp
accelerate launch --num_processes 8 --mixed_precision no --use_fsdp \
  --fsdp_sharding_strategy FULL_SHARD --fsdp_auto_wrap_policy TRANSFORMER_BASED_WRAP \
  train_sft.py \
  --model_name_or_path meta-llama/Meta-Llama-3-8B \
  --torch_dtype bfloat16 \
  --fsdp "full_shard auto_wrap" \
  --fsdp_transformer_layer_cls_to_wrap LlamaDecoderLayer \
  --learning_rate 1e-5 --lr_scheduler_type cosine --warmup_ratio 0.03 \
  --per_device_train_batch_size 4 --gradient_accumulation_steps 4 \
  --num_train_epochs 3 --logging_steps 10 --output_dir out/llama3-fsdp
