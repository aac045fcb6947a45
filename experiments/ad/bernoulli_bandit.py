"""AD on Bernoulli bandits (Headless-AD section 4.1, AD baseline; Table 4 hyperparameters).

Paper scale (default): 10,000 Thompson-sampling histories of 300 steps on 20-arm bandits from the
train distribution (95% of bandits: arms 1, 3, 5, ... (1-based) high), context 300, 4 layers,
d_model 512, 64 heads. Evaluation: 300 in-context steps on held-out bandits of the same
distribution, next to Thompson sampling and a random policy (normalised score: random 0, TS 1).
The paper gives no batch size or number of updates; ours are 128 and 30,000.
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
    config.experiment = "ad_bernoulli_bandit"
    config.env.name = "bernoulli_bandit"
    config.env.kwargs.arms = 20
    config.env.kwargs.distribution = "train"
    config.data.source = "thompson_sampling"
    config.data.num_train_tasks = 10_000
    config.data.num_test_tasks = 100
    config.data.num_steps = 300
    config.model.d_model = 512
    config.model.num_layers = 4
    config.model.num_heads = 64
    config.model.label_smoothing = 5e-3
    config.model.attention_dropout = 0.1
    config.model.residual_dropout = 0.1
    config.train.num_steps = 30_000
    config.train.batch_size = 128
    config.train.seq_len = 300
    config.train.learning_rate = 1.1e-5
    config.train.weight_decay = 1.5e-4
    config.train.b1 = 0.82
    config.train.steps_per_call = 100
    config.train.log_every = 500
    config.train.checkpoint_every = 5000
    config.eval.num_steps = 300
    config.eval.num_envs_per_task = 5
    return apply_preset(config, PRESETS, preset)
