"""What the n-gram experiments' `quick` presets share: a small model, a 100-step context (two
episodes), a short random search whose assignments train as vmapped replicas."""


def quick_preset(**extra):
    """Dotted overrides for a CPU-sized search; `extra` adds or replaces keys."""
    return {
        "data.num_steps": 2000,  # 40 episodes per learning history
        "model.d_model": 32,
        "model.num_layers": 2,
        "model.num_heads": 2,
        "model.max_len": 100,
        "train.num_steps": 400,
        "train.batch_size": 16,
        "train.seq_len": 100,  # two episodes: cross-episode context
        "train.warmup_steps": 40,
        "train.steps_per_call": 100,
        "train.log_every": 100,
        "train.checkpoint_every": 400,
        "eval.num_steps": 250,
        "eval.num_envs_per_task": 1,
        "sweep.num_assignments": 12,
        "sweep.max_replicas": 4,
        **extra,
    }
