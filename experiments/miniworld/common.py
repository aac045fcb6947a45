"""What the Miniworld AD experiments share (n-gram paper, sec. 4 and appendices B-D, Table 2b).

Run by the one pipeline (`icrl-jax generate|train|evaluate`, `icrl_jax/run.py`):
noise-distillation learning histories of the privileged oracle (epsilon decaying over each
history) are recorded through the bridge into a uint8 `PixelStore`; AD with a CNN observation
encoder trains end to end on windows from the prefetching loader; the trained model is evaluated
in context on held-out tasks through the bridge, next to the oracle source and a random policy.
"""

from icrl_jax.config import base_config, cpu_preset

ENVS = ("miniworld_darkroom", "miniworld_key_to_door")


def miniworld_config(experiment: str, env_name: str, episode_length: int):
    """Paper-scale layout (Table 2b: batch 1024, hidden 512, 10K updates, seq len from
    {100, 150, 200}; context >= 2 episodes, appendix C). The paper does not give the Miniworld
    history counts; 4 histories of 40 episodes per training task is this repo's choice
    (60 dark-room goals -> 480K frames, the size the issue asks the store to handle)."""
    if env_name not in ENVS:
        raise ValueError(f"unknown Miniworld env {env_name!r}; available: {ENVS}")
    config = base_config()
    config.experiment = experiment
    config.env.name = env_name
    config.env.kwargs.episode_length = episode_length
    config.env.num_workers = 8  # simulator processes per pool
    config.data.source = "noisy_oracle"
    config.data.source_kwargs.eps_start = 1.0
    config.data.source_kwargs.eps_end = 0.0
    config.data.source_kwargs.decay_fraction = 0.8
    config.data.num_steps = 40 * episode_length
    config.data.histories_per_task = 4
    config.data.chunk_steps = 10_000
    config.model.update(dict(d_model=512, num_layers=4, num_heads=8, label_smoothing=0.1,
                             embedding_dropout=0.1, residual_dropout=0.1))
    config.model.observation_encoder = "cnn"
    config.model.encoder_channels = (32, 64, 64)
    config.model.encoder_dim = 512
    config.model.encoder_pool = 1
    # One loader item holds one jitted call's windows (steps_per_call x batch x seq_len frames):
    # at batch 1024 x 100 frames that is 1.26 GB, so paper scale runs one step per call.
    config.train.update(dict(num_steps=10_000, batch_size=1024, seq_len=2 * episode_length,
                             learning_rate=3e-4, warmup_steps=500, steps_per_call=1,
                             log_every=100, checkpoint_every=1000))
    config.train.prefetch = 2  # loader items read ahead
    config.eval.num_steps = 20 * episode_length
    return config


def quick_preset(episode_length: int, **extra):
    """`quick` (~10-15 min on a 2-core CPU): 24 training tasks x 1 history of 8 episodes, a
    small CNN on 4x average-pooled frames (16x16), 600 updates of 12 windows of 2 episodes,
    8 held-out tasks x 8 in-context episodes."""
    return cpu_preset(train_steps=600, batch_size=12, seq_len=2 * episode_length, **{
        "data.num_train_tasks": 24,
        "data.num_test_tasks": 8,
        "data.histories_per_task": 1,
        "data.num_steps": 8 * episode_length,
        "data.source_kwargs.decay_fraction": 0.75,
        "data.chunk_steps": 2_000,
        "model.encoder_channels": (16, 32),
        "model.encoder_dim": 64,
        "model.encoder_pool": 4,
        # 10 straight-line steps per call (the loader step never loops: XLA:CPU conv gradients
        # in a while loop are several times slower); compile time grows with this number.
        "train.steps_per_call": 10,
        "train.log_every": 50,
        "train.checkpoint_every": 300,
        "train.warmup_steps": 50,
        "eval.num_steps": 8 * episode_length,
        **extra,
    })
