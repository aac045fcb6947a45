"""Decision Transformer family on Button Room (multi-discrete (move, press) actions).

`make_config(method, preset)` is shared by `dt_button_room.py`, `msat_button_room.py` and
`mat_button_room.py`. Paper scale (default) follows the M-SAT paper's Table 4 (My Way Home):
8 layers, 8 heads, d_model 128, dropouts 0.1 / 0.01 / 0.1, batch 128, lr 5e-3, warmup 10240,
context 30, ~500K training steps of data, 5 epochs (~20K updates). The data are noisy-expert
episodes (eps from 1 to 0 along each history) on a 9x9 room with 50-step episodes.
`:quick` (5x5 room, 20-step episodes, small model) trains in a few minutes on a 2-core CPU.
No-PE ablation: `--config.model.timestep_encoding=none`; token positions instead of timesteps:
`--config.model.timestep_encoding=position`.
"""

from icrl_jax.core.config import apply_preset, base_config
from icrl_jax.methods.fields import dt_model_config

PRESETS = {
    "quick": {
        "env.kwargs": {"size": 5, "episode_length": 20},
        "data.num_train_tasks": 24,  # every goal of the 5x5 room
        "data.num_test_tasks": 0,
        "data.histories_per_task": 4,
        "data.num_steps": 400,  # 20 episodes per history, eps 1 -> 0 over them
        "model.d_model": 64,
        "model.num_layers": 2,
        "model.num_heads": 4,
        "model.embedding_dropout": 0.0,
        "model.residual_dropout": 0.0,
        "model.attention_dropout": 0.0,
        "model.rtg_scale": 20.0,
        "model.max_timestep": 20,
        "train.num_steps": 1500,
        "train.batch_size": 64,
        "train.seq_len": 10,
        "train.learning_rate": 1e-3,
        "train.warmup_steps": 100,
        "train.log_every": 100,
        "train.steps_per_call": 50,
        "train.checkpoint_every": 500,
        "eval.num_steps": 40,  # 2 episodes per env
        "eval.num_envs_per_task": 4,
        "eval.target_returns": (5.0, 20.0),
    },
}


def make_config(method: str, preset: str = ""):
    config = base_config()
    config.experiment = f"{method}_button_room"
    config.method = method
    config.env.name = "button_room"
    config.env.kwargs.size = 9
    config.env.kwargs.episode_length = 50
    config.data.source = "noisy_expert"
    config.data.num_train_tasks = 80  # every goal; offline RL is evaluated on the same tasks
    config.data.num_test_tasks = 0
    config.data.histories_per_task = 6
    config.data.num_steps = 1000  # 20 episodes per history: 80 * 6 * 1000 = 480K steps
    config.model.update(dt_model_config())
    config.model.d_model = 128
    config.model.num_layers = 8
    config.model.num_heads = 8
    config.model.embedding_dropout = 0.1
    config.model.residual_dropout = 0.01
    config.model.attention_dropout = 0.1
    config.model.rtg_scale = 50.0
    config.model.max_timestep = 50
    config.train.num_steps = 20_000  # ~5 epochs: 5 x 480K window end steps / batch 128
    config.train.batch_size = 128
    config.train.seq_len = 30
    config.train.learning_rate = 5e-3
    config.train.warmup_steps = 10_240
    config.train.steps_per_call = 100
    config.train.log_every = 100
    config.train.checkpoint_every = 1000
    config.eval.tasks = "train"
    config.eval.greedy = False
    config.eval.num_steps = 100  # 2 episodes per env
    config.eval.num_envs_per_task = 5
    config.eval.target_returns = (10.0, 50.0)
    return apply_preset(config, PRESETS, preset)
