"""AD on XLand-MiniGrid: XLand-100B's AD baseline (`dunnolab/xland-minigrid-datasets`,
`baselines/ad`), with the learning histories made on device or read from their HDF5 files.

Paper scale (default), their `configs/xland.yaml` and model: 8 layers, hidden 512, 8 heads,
ALiBi positions, observation embedding 64, 4,096-step context, learning rate 1e-3 (5% warm-up,
Adam betas 0.9 / 0.99, no weight decay, gradient clip 1), embedding dropout 0.1, batch 64.
The histories are our recurrent PPO's (`data.builder='xland_ppo'`) on trivial rulesets of
XLand-MiniGrid-R1-9x9: 256 training rulesets x 32 histories of 16,384 steps (XLand-Trivial-20B
has 10,000 x 32 of 60,928), and 64 held-out rulesets, on which AD acts in context for 16,384
steps beside the PPO source and a random policy.

Presets:
* `quick` (minutes on a 2-core CPU): a 6 x 6 room (the R1 layout at a size xminigrid builds but
  does not register) with 60-step episodes, so a small PPO agent learns within a history:
  8 training rulesets x 8 histories of 2,048 steps, 4 held-out rulesets x 8 rollouts of
  2,048 steps; a 2-layer, 64-wide AD over 256-step windows.
* `trivial_20b`: train on XLand-Trivial-20B, downloaded (`curl -L -o xland-trivial-20b.hdf5
  https://tinyurl.com/trivial-10k`): its first 1,000 rulesets x 4 histories, read into memory
  (about 12 GB); held-out rulesets come from its benchmark, trivial-1m, a file the user has
  (`--config.env.kwargs.benchmark=<path>`).

`icrl-jax report --config experiments/xland/ad.py:quick` trains 3 seeds on one set of histories
and writes AD's return per in-context episode, mean ± s.e.m. over seeds, beside the PPO source
and random (`report.kind="seeds"`: `<workdir>/report/seeds.md` and `seeds_curves.png`).
"""

from icrl_jax.core.config import apply_preset, cpu_preset
from icrl_jax.methods.fields import ad_config

ENV = "XLand-MiniGrid-R1-9x9"


def xland_config():
    config = ad_config()
    config.experiment = "ad_xland"
    config.env.name = ENV
    config.env.kwargs.benchmark = "trivial"
    config.env.kwargs.num_rulesets = 10_000
    config.env.kwargs.ruleset_seed = 0
    config.data.builder = "xland_ppo"
    config.data.source = "xland_ppo"
    config.data.source_kwargs.num_envs = 128
    config.data.source_kwargs.rollout_steps = 64
    config.data.source_kwargs.updates_per_call = 16
    config.data.num_train_tasks = 256
    config.data.num_test_tasks = 64
    config.data.histories_per_task = 32
    config.data.num_steps = 16_384
    config.model.update(dict(d_model=512, num_layers=8, num_heads=8, embedding_dropout=0.1,
                             residual_dropout=0.0, attention_dropout=0.0, label_smoothing=0.0,
                             observation_encoder="xland", encoder_dim=64, encoder_channels=(256,),
                             position="alibi", attention_window=4096))
    config.train.update(dict(num_steps=50_000, batch_size=64, seq_len=4096, learning_rate=1e-3,
                             warmup_steps=2500, b1=0.9, b2=0.99, weight_decay=0.0, grad_clip=1.0,
                             steps_per_call=100, log_every=100, checkpoint_every=2500))
    config.eval.num_steps = 16_384
    config.eval.num_envs_per_task = 8
    config.eval.greedy = True  # their evaluation takes the mode
    config.eval.baselines = ("source", "random")
    config.report.num_seeds = 3
    return config


QUICK = cpu_preset(train_steps=1000, batch_size=16, seq_len=256, learning_rate=1e-3, **{
    "env.kwargs": {"benchmark": "trivial", "num_rulesets": 200, "ruleset_seed": 0, "size": 6,
                   "max_steps": 60},
    "data.source_kwargs": {"num_envs": 32, "rollout_steps": 32, "epochs": 2, "rnn_hidden": 64,
                           "head_hidden": 64, "obs_features": 64, "updates_per_call": 16},
    "data.num_train_tasks": 8,
    "data.num_test_tasks": 4,
    "data.histories_per_task": 8,
    "data.num_steps": 2048,
    "model.encoder_dim": 32,
    "model.encoder_channels": (64,),
    "model.attention_window": 128,
    "model.position": "rotary",  # what its recorded results (experiments/xland/RESULTS.md) used
    "eval.num_steps": 2048,
    "eval.num_envs_per_task": 8,
    "eval.greedy": False,  # the small model's argmax loops; sampling follows the source's policy
})
TRIVIAL_20B = {
    "env.kwargs": {"benchmark": "trivial-1m"},
    "data.builder": "xland_hdf5",
    "data.source": "",
    "data.path": "xland-trivial-20b.hdf5",
    "data.num_train_tasks": 1000,
    "data.num_test_tasks": 128,
    "data.histories_per_task": 4,
    "data.num_steps": 60_928,
    "eval.baselines": ("random",),
}
PRESETS = {"quick": QUICK, "trivial_20b": TRIVIAL_20B}


def get_config(preset: str = ""):
    return apply_preset(xland_config(), PRESETS, preset)
