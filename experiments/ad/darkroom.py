"""AD on Dark Room 9x9 (n-gram paper, appendix B): 80 goals, 50-step episodes.

Paper scale (default): 60 training goals / 20 held-out, ~1K Q-learning histories, hidden 512,
batch 1024, 10K updates, context 200 steps (4 episodes).
`:quick` fits a 2-core CPU in a few minutes.
"""

from icrl_jax.config import apply_preset, base_config

PRESETS = {
    # A 2-core CPU cannot afford the paper's data and updates, so `quick` distils a noisy oracle
    # whose epsilon decays from 1 to 0 over the first 10 of 12 episodes (noise distillation,
    # Zisman et al.): its learning histories improve within a few episodes, which a small model
    # learns to reproduce in context in ~2,000 updates. Cells also get (row, column) features.
    "quick": {
        "data.source": "noisy_oracle",
        "data.source_kwargs": {"decay_fraction": 0.8},
        "data.histories_per_task": 8,
        "data.num_steps": 600,  # 12 episodes
        "model.d_model": 64,
        "model.num_layers": 2,
        "model.num_heads": 4,
        "model.grid_observations": True,
        "train.num_steps": 2000,
        "train.batch_size": 64,
        "train.seq_len": 100,  # 2 episodes
        "train.learning_rate": 1e-3,
        "train.warmup_steps": 100,
        "train.log_every": 100,
        "train.steps_per_call": 50,
        "train.checkpoint_every": 500,
        "eval.num_steps": 600,  # 12 in-context episodes
        "eval.num_envs_per_task": 4,
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
