"""AD baselines on the composite-action Dark Room (Headless-AD Figures 3, 7 and 8).

AD is trained on the 50 train actions and evaluated on the action sets of the same width
(train, permuted_train, sliced_test) x (train, test) goals; wider sets need a new output layer.
Preset `permuted` / `quick_permuted`: AD trained on randomly permuted action sets (appendix C).
Same data as `darkroom.py` (`quick_replay`: its episode-replay histories).
"""

from experiments.headless_ad.common import DARKROOM_REPLAY, darkroom_quick_preset
from icrl_jax.config import apply_preset, base_config
from experiments.headless_ad.common import add_report_fields, darkroom_variants

QUICK = darkroom_quick_preset()
PERMUTED = {"method": "ad_permuted", "report.label": "AD (permuted training)"}
PRESETS = {"quick": QUICK, "permuted": PERMUTED, "quick_permuted": dict(QUICK, **PERMUTED),
           "quick_replay": dict(QUICK, **DARKROOM_REPLAY)}


def get_config(preset: str = ""):
    config = base_config()
    config.experiment = "ad_darkroom_composite"
    config.method = "ad"
    config.env.name = "darkroom_composite"
    config.env.kwargs.max_actions = 50
    config.env.kwargs.actions = "train"
    config.env.kwargs.action_split_seed = 0
    config.data.source = "q_learning"
    config.data.source_kwargs.lr = 0.9933
    config.data.source_kwargs.discount = 0.6238
    config.data.num_train_tasks = 60
    config.data.num_test_tasks = 20
    config.data.histories_per_task = 10
    config.data.num_steps = 4000
    # Table 4, darkroom column.
    config.model.d_model = 512
    config.model.num_layers = 2
    config.model.num_heads = 8
    config.model.position = "rotary"
    config.model.label_smoothing = 0.05
    config.model.attention_dropout = 3.0e-2
    config.model.residual_dropout = 1.0e-2
    config.train.num_steps = 20_000
    config.train.batch_size = 128
    config.train.seq_len = 100
    config.train.learning_rate = 4.0e-4
    config.train.weight_decay = 8.0e-6
    config.train.b1 = 0.95
    config.train.warmup_steps = 1000
    config.train.steps_per_call = 100
    config.train.log_every = 100
    config.train.checkpoint_every = 1000
    config.eval.num_steps = 20_000
    config.eval.greedy = True  # Table 4: mode
    config.eval.chunk_size = 20
    config.variants = darkroom_variants(max_actions=50)
    add_report_fields(config, label="AD")
    return apply_preset(config, PRESETS, preset)
