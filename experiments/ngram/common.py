"""What the n-gram experiments share: the paper-scale grid-world layout (appendix B-D, Table 2)
and the `quick` preset (a small model, a 100-step context of two episodes, a short random search
whose assignments train as vmapped replicas)."""

from icrl_jax.experiments.ad.grid_common import q_learning_grid_config
from icrl_jax.tools.search_space import nested_space

#: The better part of Table 2's ranges, around the quick recipes' own hyperparameters (a CPU
#: budget of 2,000-3,000 updates leaves most of Table 2's full ranges far from the source).
NARROW_SPACE = nested_space({
    "train.learning_rate": dict(log_uniform=(1e-3, 1e-2)),
    "train.weight_decay": dict(log_uniform=(1e-7, 2e-2)),
    "model.embedding_dropout": dict(uniform=(0.0, 0.3)),
    "model.residual_dropout": dict(uniform=(0.0, 0.2)),
    "model.label_smoothing": dict(uniform=(0.0, 0.2)),
})


def grid_sweep_config(experiment: str, env_name: str, *, num_train_tasks: int,
                      num_test_tasks: int, histories_per_task: int, envs_per_task: int):
    """Q-learning histories of 200 episodes x 50 steps, hidden 512, batch 1024, 10K updates,
    context 200, 40 in-context evaluation episodes; the caller adds n-gram layers and the
    search space."""
    config = q_learning_grid_config(experiment, env_name)
    config.data.num_train_tasks = num_train_tasks
    config.data.num_test_tasks = num_test_tasks
    config.data.histories_per_task = histories_per_task
    config.model.update(dict(max_len=200, ngram_match="transition"))
    config.eval.num_envs_per_task = envs_per_task
    return config


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
