"""Headless-AD on linear contextual bandits (Headless-AD 4.2, Figure 6).

LinUCB histories on bandits with 4-20 arms and 2-d arm features (reward noise sigma = 1), 300
steps. Evaluated on held-out 4-20-arm bandits and on 20, 25, 30, 40 and 50 arms, and (appendix D,
Figure 9) on Bernoulli bandits with as many arms, observed through one fixed random context per
bandit (`report`'s "Contextual -> Bandit" column).
`:quick` fits a 2-core CPU.
"""

from icrl_jax.methods.fields import ad_config
from icrl_jax.experiments.headless_ad.common import quick_preset
from icrl_jax.core.config import apply_preset
from icrl_jax.papers.headless_ad.fields import add_headless_fields
from icrl_jax.experiments.headless_ad.common import add_report_fields, contextual_variants

PRESETS = {
    "quick": quick_preset(120, **{
        "data.num_train_tasks": 2000,
        "data.num_test_tasks": 50,
        "model.action_embed_dim": 64,
        "model.tau": 0.5,
        # Sampled actions: the quick model's argmax (the paper's mode) repeats one arm forever, a
        # behaviour no LinUCB history contains.
        "eval.greedy": False,
    }),
}


def get_config(preset: str = ""):
    config = ad_config()
    config.experiment = "headless_ad_contextual"
    config.method = "headless_ad"
    config.env.name = "contextual_bandit"
    config.env.kwargs.arms = (4, 20)
    config.env.kwargs.context_dim = 2
    config.env.kwargs.noise_std = 1.0
    config.data.source = "linucb"
    config.data.num_train_tasks = 10_000
    config.data.num_test_tasks = 100
    config.data.num_steps = 300
    # Table 3, contextual bandit column.
    config.model.d_model = 1024
    config.model.num_layers = 8
    config.model.num_heads = 8
    config.model.position = "rotary"
    config.model.attention_dropout = 0.3
    config.model.residual_dropout = 0.25
    add_headless_fields(config, action_embed_dim=1024, tau=3.0)
    config.train.num_steps = 20_000
    config.train.batch_size = 128
    config.train.seq_len = 300
    config.train.learning_rate = 5.0e-5
    config.train.weight_decay = 5.0e-2
    config.train.b1 = 0.5
    config.train.warmup_steps = 1000
    config.train.steps_per_call = 100
    config.train.log_every = 100
    config.train.checkpoint_every = 1000
    config.eval.num_steps = 300
    config.eval.greedy = True  # Table 3: mode
    config.variants = contextual_variants(bernoulli_context_dim=config.env.kwargs.context_dim)
    add_report_fields(config, label="")
    return apply_preset(config, PRESETS, preset)
