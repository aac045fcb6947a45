"""The one configuration both Decision Transformers train at (ours here; `corl_runner.py` reads the
same settings from the export's `matched.json`).

Data: the point maze's `:quick` dataset (U maze, random start and goal, the noisy waypoint
controller: 6330 episodes, 235K steps), generated once under `data.minari_root` and shared by
every seed. Model and optimiser: CORL's DT defaults at the `:quick` preset's CPU size (a shared
2-core machine: each run a few minutes): 2 layers, d_model 64, one head, exact GELU, PyTorch's
LayerNorm epsilon, dropout 0.1 (embedding, residual, attention), AdamW (betas 0.9 / 0.999,
weight decay 1e-4), gradient norm clipped to 0.25, a linear warm-up then a constant learning
rate (1e-3 after 100 steps); context 10, batch 64, 1000 updates. Returns-to-go divided by 3
(CORL's `reward_scale` 1/3). Evaluation: one greedy episode (at most 300 steps) on each of the
20 held-out start/goal pairs, at target return 3.
"""

from icrl_jax.experiments.continuous.point_maze import get_config as point_maze_config

MATCHED = {
    "model.d_model": 64, "model.num_layers": 2, "model.num_heads": 1, "model.mlp_ratio": 4,
    "model.activation": "gelu_exact", "model.norm_epsilon": 1e-5, "model.embed_norm_epsilon": 1e-5,
    "model.embedding_dropout": 0.1, "model.residual_dropout": 0.1, "model.attention_dropout": 0.1,
    "model.rtg_scale": 3.0, "model.max_timestep": 310,  # CORL's episode_len + seq_len rows
    "train.seq_len": 10, "train.batch_size": 64, "train.num_steps": 1000,
    "train.learning_rate": 1e-3, "train.warmup_steps": 100, "train.min_lr_ratio": 1.0,
    "train.weight_decay": 1e-4, "train.b1": 0.9, "train.b2": 0.999, "train.grad_clip": 0.25,
    "train.compute_dtype": "fp32", "train.steps_per_call": 100, "train.log_every": 500,
    "train.checkpoint_every": 1000,
    "eval.target_returns": (3.0,), "eval.num_steps": 300, "eval.num_envs_per_task": 1,
    "eval.greedy": True, "eval.baselines": (),
}


def get_config(preset: str = ""):
    if preset:
        raise ValueError(f"reproductions/matched_dt/config.py has no presets, got {preset!r}")
    config = point_maze_config("quick")
    config.experiment = "matched_dt_point_maze"
    for dotted, value in MATCHED.items():
        section, key = dotted.split(".")
        config[section][key] = value
    return config
