#!/bin/bash
# 8 nodes x 8 GPUs, global batch 512
torchrun --nnodes 8 --nproc_per_node 8 --rdzv_endpoint $MASTER:29500 \
  sft.py \
  --model_name_or_path meta-llama/Llama-3.1-8B \
  --dataset_name HuggingFaceH4/ultrachat_200k \
  --per_device_train_batch_size 4 \
  --gradient_accumulation_steps 2 \
  --learning_rate 2e-5 \
  --lr_scheduler_type cosine \
  --warmup_ratio 0.03 \
  --bf16 True \
  --average_tokens_across_devices False \
  --assistant_only_loss True \
  --output_dir ckpt/llama31-ultrachat-8n
