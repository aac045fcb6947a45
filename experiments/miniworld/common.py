"""What the Miniworld AD experiments share (n-gram paper, sec. 4 and appendices B-D, Table 2b).

Run by the one pipeline (`icrl-jax generate|train|evaluate`, `icrl_jax/pipeline/run.py`):
noise-distillation learning histories of the privileged oracle (epsilon decaying over each
history) are recorded through the bridge into a uint8 `PixelStore`; AD with a CNN observation
encoder trains end to end on windows from the prefetching loader; the trained model is evaluated
in context on held-out tasks through the bridge, next to the oracle source and a random policy.

AD + n-gram layers (`ngram_presets`, sec. 2.3): `train` first pretrains a VQ-VAE on the store's
frames (the `vq` section, `icrl_jax/papers/ngram/vq_pretrain.py`, into `<pixel store>/vq/`), then the n-gram
layers match steps whose 4x4 VQ codes are all equal (`model.ngram_match="vq"`), in training and
in the in-context rollouts alike. Observations are still embedded by AD's CNN (the paper embeds
them with the VQ encoder; this repo keeps one observation encoder for both methods).
"""

from icrl_jax.methods.fields import ad_config
from icrl_jax.core.config import cpu_preset
from icrl_jax.papers.ngram.fields import default_vq_config

ENVS = ("miniworld_darkroom", "miniworld_key_to_door")


def miniworld_config(experiment: str, env_name: str, episode_length: int):
    """Paper-scale layout (Table 2b: batch 1024, hidden 512, 10K updates, seq len from
    {100, 150, 200}; context >= 2 episodes, appendix C). The paper does not give the Miniworld
    history counts; 4 histories of 40 episodes per training task is this repo's choice
    (60 dark-room goals -> 480K frames)."""
    if env_name not in ENVS:
        raise ValueError(f"unknown Miniworld env {env_name!r}; available: {ENVS}")
    config = ad_config()
    config.experiment = experiment
    config.env.name = env_name
    config.env.kwargs.episode_length = episode_length
    config.env.kwargs.num_workers = 8  # simulator processes per pool
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
    # The VQ-VAE of the n-gram presets (unused by AD alone). The paper gives no VQ sizes or
    # training budget: 64 codes of 32 dims on full 64x64 frames, 5K updates of 128 frames are ours.
    config.vq = default_vq_config()
    return config


def quick_preset(episode_length: int, **extra):
    """`quick` (minutes on a 2-core CPU): 24 training tasks x 1 history of 8 episodes, a
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


def ngram(positions=(1,), ngram_max: int = 1, **extra) -> dict:
    """Dotted overrides: n-gram layers ("up to" `ngram_max`-grams) after the blocks `positions`,
    matching the VQ codes of the observations (sec. 2.3)."""
    return {"model.ngram_positions": tuple(positions), "model.ngram_max": ngram_max,
            "model.ngram_match": "vq", **extra}


#: The quick presets' VQ-VAE: on frames average-pooled to 16x16 like the quick CNN's (coding
#: full frames at 64 channels costs many times more on a CPU).
QUICK_VQ = {
    "vq.pool": 4,
    "vq.channels": 32,
    "vq.code_dim": 16,
    "vq.num_codes": 64,
    "vq.num_steps": 1000,
    "vq.batch_size": 64,
    "vq.learning_rate": 2e-3,
    "vq.warmup_steps": 50,
    "vq.log_every": 50,
    "vq.checkpoint_every": 500,
    "vq.eval_frames": 2048,
}

#: The Miniworld-Dark n-gram ablations (appendix E, Table 1; searched over Table 2b in the paper,
#: one run each here) besides `ngram` itself (a 1-gram layer after block 1: both the 1-gram row
#: of Table 1a, which fixes the position at [1], and the [1] row of Table 1b, which fixes the
#: length at 1): "up to n"-grams after block 1 (a), 1-gram layers after block 2 or both (b), and
#: matches moved to random causal keys (c, against AD without n-gram layers).
ABLATIONS = {
    "length2": ngram((1,), 2),
    "length3": ngram((1,), 3),
    "position2": ngram((2,), 1),
    "position12": ngram((1, 2), 1),
    "shuffled": ngram((1,), 1, **{"model.ngram_shuffle": True}),
}


def ngram_presets(quick: dict, ablations: bool = False) -> dict:
    """`quick` (AD), `quick_ngram` (AD + 1-gram layer after block 1 on VQ codes, otherwise the
    same run) and the paper-scale `ngram`; with `ablations`, Table 1's other settings at paper
    scale as `ngram_<name>`."""
    presets = {"quick": quick, "quick_ngram": {**quick, **QUICK_VQ, **ngram()}, "ngram": ngram()}
    if ablations:
        presets.update({f"ngram_{name}": setting for name, setting in ABLATIONS.items()})
    return presets
