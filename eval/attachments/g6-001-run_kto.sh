#!/bin/bash
set -x
deepspeed --num_gpus 8 train_kto.py \
     --save_path ./ckpt/qwen2-7b-kto \
     --save_steps 300 \
     --logging_steps 2 \
     --micro_train_batch_size 2 \
     --train_batch_size 128 \
     --pretrain /mnt/models/qwen2-7b-biz-sft \
     --max_epochs 3 \
     --max_len 8192 \
     --zero_stage 3 \
     --beta 0.1 \
     --learning_rate 5e-7 \
     --dataset /mnt/data/kto_unpaired.jsonl \
     --dataset_probs 1.0 \
     --bf16 \
     --flash_attn \
     --gradient_checkpointing \
     --vanilla_loss
