"""Language pretraining for GPT-DTMA (`icrl-jax pretrain-lm --config experiments/gpt_dtma/lm.py`).

A small GPT-2 (our `models/gpt2.py`) learns next-byte prediction on natural-language text
(`lm.corpus`, default CPython's pydoc topics, see `icrl_jax/papers/gpt_dtma/lm_pretrain.py`), and is written in
Hugging Face format to `<workdir>/hf/`, with its validation bits per byte and its Markov heads in
`lm.json`. GPT-2 small's own weights, where a user has them, load with `models/gpt2.load_hf_gpt2`.

Default: 6 layers, width 256, 4 heads of GPT-2's size (64), 256-byte context, 20k steps of
batch 64, lr 3e-4 with warmup and cosine decay. `:quick`: 4 x 128, 128-byte context, 1,500 steps
of batch 32, minutes on 2 cores.
"""

import ml_collections

from icrl_jax.core.config import apply_preset, base_config

PRESETS = {
    "quick": {"model.d_model": 128, "model.num_layers": 4, "model.num_heads": 4,
              "train.seq_len": 128, "train.num_steps": 1500, "train.batch_size": 32,
              "train.learning_rate": 1e-3, "train.warmup_steps": 200},
}


def get_config(preset: str = ""):
    config = base_config()
    config.experiment = "gpt2_lm"
    config.method = ""  # not an RL method: `pretrain-lm` trains the language model alone
    config.lm = ml_collections.ConfigDict(dict(corpus="pydoc_topics", validation_fraction=0.05))
    config.model.d_model = 256
    config.model.num_layers = 6
    # Heads of 64, as GPT-2's: an exactly self-attending head of Dh features in a random basis has
    # R.2 ~= sqrt(pi Dh / 2) (analysis/markov_heads.py), 7.1 at Dh = 32, 10.0 at 64.
    config.model.num_heads = 4
    config.train.seq_len = 256
    config.train.batch_size = 64
    config.train.num_steps = 20_000
    config.train.learning_rate = 3e-4
    config.train.warmup_steps = 1000
    config.train.weight_decay = 0.01
    config.train.steps_per_call = 50
    config.train.log_every = 500
    config.train.checkpoint_every = 1000
    return apply_preset(config, PRESETS, preset)
