"""AD on Dark Room 9x9 (n-gram paper, appendix B): 80 goals, 50-step episodes.

Paper scale (default): 60 training goals / 20 held-out, ~1K Q-learning histories, hidden 512,
batch 1024, 10K updates, context 200 steps (4 episodes).
`:quick` fits a 2-core CPU in a few minutes.
"""

from icrl_jax.config import apply_preset, base_config

PRESETS = {
    "quick": {
        "data.histories_per_task": 4,
        "data.num_steps": 2000,  # 40 episodes
        "data.source_kwargs.decay_fraction": 0.5,
        "model.d_model": 64,
        "model.num_layers": 2,
        "model.num_heads": 4,
        "train.num_steps": 1500,
        "train.batch_size": 32,
        "train.seq_len": 150,
        "train.learning_rate": 1e-3,
        "train.warmup_steps": 100,
        "train.log_every": 100,
        "train.steps_per_call": 50,
        "train.checkpoint_every": 500,
        "eval.num_steps": 500,  # 10 in-context episodes
        "eval.num_envs_per_task": 2,
    },
}


def get_config(preset: str = ""):
    config = base_config()
    config.experiment = "ad_darkroom"
    config.env.name = "darkroom"
    config.data.source = "q_learning"
    config.data.source_kwargs.lr = 0.3
    config.data.source_kwargs.discount = 0.9
    config.data.source_kwargs.decay_fraction = 0.5
    config.data.num_train_tasks = 60
    config.data.num_test_tasks = 20
    config.data.histories_per_task = 17  # ~1K learning histories
    config.data.num_steps = 10_000  # 200 episodes of 50 steps
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
    config.eval.num_steps = 2000  # 40 in-context episodes
    config.eval.num_envs_per_task = 5
    return apply_preset(config, PRESETS, preset)
