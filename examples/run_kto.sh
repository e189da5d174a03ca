#!/usr/bin/env bash
# KTO with OpenRLHF on 8 GPUs
deepspeed --module openrlhf.cli.train_kto \
   --save_path ./checkpoint/llama3-8b-kto \
   --pretrain meta-llama/Meta-Llama-3-8B-Instruct \
   --dataset Dylan2048/ultrafeedback-unpaired-preferences \
   --input_key instruction --output_key response --label_key score \
   --zero_stage 3 --bf16 --flash_attn --gradient_checkpointing \
   --train_batch_size 64 --micro_train_batch_size 1 \
   --max_epochs 1 --max_len 1024 \
   --learning_rate 5e-7 --beta 0.1 \
   --vanilla_loss
