"""AD on contextual bandits (Headless-AD section 4.2, AD baseline; Table 4 hyperparameters).

2-d arm features and contexts ~ N(0, I)/sqrt(2), reward ~ N(<context, arm>, 1). Paper scale
(default): LinUCB histories of 300 steps on 10-arm bandits, 8 layers, d_model 1024, 8 heads.
The paper gives no dataset size, batch size or number of updates; ours are 10,000 histories,
128 and 30,000.
"""

from icrl_jax.config import apply_preset, base_config

PRESETS = {
    "quick": {
        "env.kwargs.arms": 5,
        "data.num_train_tasks": 2000,
        "data.num_steps": 100,
        "model.d_model": 64,
        "model.num_layers": 2,
        "model.num_heads": 4,
        "model.attention_dropout": 0.0,
        "model.residual_dropout": 0.0,
        "train.num_steps": 1000,
        "train.batch_size": 64,
        "train.seq_len": 100,
        "train.learning_rate": 1e-3,
        "train.warmup_steps": 100,
        "train.log_every": 100,
        "train.checkpoint_every": 500,
        "eval.num_steps": 100,
        "data.num_test_tasks": 200,
    },
}


def get_config(preset: str = ""):
    config = base_config()
    config.experiment = "ad_contextual_bandit"
    config.env.name = "contextual_bandit"
    config.env.kwargs.arms = 10
    config.data.source = "linucb"
    config.data.source_kwargs.alpha = 1.0
    config.data.num_train_tasks = 10_000
    config.data.num_test_tasks = 100
    config.data.num_steps = 300
    config.model.d_model = 1024
    config.model.num_layers = 8
    config.model.num_heads = 8
    config.model.label_smoothing = 0.2
    config.model.attention_dropout = 0.28
    config.model.residual_dropout = 0.45
    config.train.num_steps = 30_000
    config.train.batch_size = 128
    config.train.seq_len = 300
    config.train.learning_rate = 1.3e-5
    config.train.weight_decay = 0.25
    config.train.b1 = 0.58
    config.train.steps_per_call = 100
    config.train.log_every = 500
    config.train.checkpoint_every = 5000
    config.eval.num_steps = 300
    config.eval.num_envs_per_task = 5
    config.eval.greedy = True  # Table 4: action selection "mode"
    return apply_preset(config, PRESETS, preset)
