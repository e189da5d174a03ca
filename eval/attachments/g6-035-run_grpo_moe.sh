#!/usr/bin/env bash
set -x
python3 -m verl.trainer.main_ppo --config-path=config --config-name=ppo_megatron_trainer.yaml \
    algorithm.adv_estimator=grpo \
    data.train_files=$DATA/dapo-math-17k.parquet \
    data.max_prompt_length=2048 \
    data.max_response_length=8192 \
    data.train_batch_size=256 \
    actor_rollout_ref.model.path=/models/Qwen3-30B-A3B \
    actor_rollout_ref.actor.optim.lr=1e-6 \
    actor_rollout_ref.actor.megatron.expert_model_parallel_size=8 \
    actor_rollout_ref.actor.use_kl_loss=True \
    actor_rollout_ref.actor.kl_loss_coef=0.001 \
    actor_rollout_ref.actor.clip_ratio_low=0.2 \
    actor_rollout_ref.actor.clip_ratio_high=0.28 \
    actor_rollout_ref.rollout.name=vllm \
    actor_rollout_ref.rollout.n=16 \
    actor_rollout_ref.rollout.tensor_model_parallel_size=4 \
    trainer.n_gpus_per_node=8 \
    trainer.nnodes=4
