NPROC_PER_NODE=8 \
swift rlhf \
    --rlhf_type grpo \
    --model Qwen/Qwen2.5-Math-7B \
    --dataset AI-MO/NuminaMath-TIR \
    --reward_funcs accuracy format \
    --loss_type dapo \
    --epsilon_high 0.28 \
    --num_generations 8 \
    --temperature 1.0 \
    --per_device_train_batch_size 4 \
    --gradient_accumulation_steps 8 \
    --learning_rate 1e-6 \
    --use_vllm true \
    --vllm_mode colocate \
    --deepspeed zero3 \
    --max_completion_length 2048 \
    --output_dir output/dapo-math
