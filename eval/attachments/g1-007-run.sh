#!/bin/bash
torchrun --nproc_per_node 4 train_lora.py \
    --model_name_or_path huggyllama/llama-13b \
    --data_path data/instruct_zh.json \
    --torch_dtype float16 \
    --fp16 True \
    --lora_r 16 \
    --lora_alpha 32 \
    --lora_target_modules q_proj,k_proj,v_proj,o_proj \
    --modules_to_save embed_tokens,lm_head \
    --per_device_train_batch_size 2 \
    --gradient_accumulation_steps 8 \
    --learning_rate 2e-4 \
    --num_train_epochs 3 \
    --output_dir out/llama13b-lora
