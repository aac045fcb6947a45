"""AD on Dark Key-to-Door 9x9 (n-gram paper, appendix B and F).

Paper scale (default): 100 training tasks, 750 learning histories sampled with repetition from
them (here: 8 per task), 200 Q-learning episodes of 50 steps each, 100 held-out tasks, hidden 512,
batch 1024, 10K updates, context 200 steps. `:quick` fits a 2-core CPU in a few minutes.
"""

from icrl_jax.config import apply_preset, base_config

PRESETS = {
    "quick": {
        "data.num_train_tasks": 200,
        "data.num_test_tasks": 20,
        "data.histories_per_task": 2,
        "data.num_steps": 2000,
        "model.d_model": 64,
        "model.num_layers": 2,
        "model.num_heads": 4,
        "model.embedding_dropout": 0.0,
        "model.residual_dropout": 0.0,
        "train.num_steps": 1500,
        "train.batch_size": 32,
        "train.seq_len": 150,
        "train.learning_rate": 1e-3,
        "train.warmup_steps": 100,
        "train.log_every": 100,
        "train.checkpoint_every": 500,
        "eval.num_steps": 500,
        "eval.num_envs_per_task": 2,
    },
}


def get_config(preset: str = ""):
    config = base_config()
    config.experiment = "ad_key_to_door"
    config.env.name = "key_to_door"
    config.data.source = "q_learning"
    config.data.source_kwargs.lr = 0.3
    config.data.source_kwargs.discount = 0.9
    config.data.source_kwargs.decay_fraction = 0.5
    config.data.num_train_tasks = 100
    config.data.num_test_tasks = 100
    config.data.histories_per_task = 8
    config.data.num_steps = 10_000
    config.model.d_model = 512
    config.model.num_layers = 4
    config.model.num_heads = 8
    config.model.label_smoothing = 0.1
    config.model.embedding_dropout = 0.1
    config.model.residual_dropout = 0.1
    config.train.num_steps = 10_000
    config.train.batch_size = 1024
    config.train.seq_len = 200
    config.train.learning_rate = 3e-4
    config.train.warmup_steps = 500
    config.train.steps_per_call = 100
    config.train.log_every = 100
    config.train.checkpoint_every = 1000
    config.eval.num_steps = 2000
    config.eval.num_envs_per_task = 2
    return apply_preset(config, PRESETS, preset)
