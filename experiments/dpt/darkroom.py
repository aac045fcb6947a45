"""DPT on Dark Room with held-out goals (Lee et al., 2023, section 5.2; the authors'
`run_darkroom.sh`).

Paper scale (default): a 10 x 10 room, 100-step episodes, 79 training goals and 20 held-out
ones (our room starts at the centre, which is never a goal: 99 goals; theirs starts in a corner
with 100); 1,250 histories per training goal of the grid explorer (`data/sources/grid_explorer.py`,
10% random actions; two episodes each: a search, then the walk to what it found), in-context
datasets of 100 transitions, learning rate 1e-3, 200 epochs of their 1,250 batches.
Evaluation online on the held-out goals for 40 episodes, the context being the last episode.
The authors' datasets are instead 100 transitions from uniformly random states and actions.

`quick`: 50 histories per goal, 2 layers, 3,000 updates, 10 in-context episodes (a few minutes
on 2 CPU cores).
"""

from icrl_jax.core.config import apply_preset, cpu_preset
from icrl_jax.experiments.dpt.common import authors_config

QUICK = cpu_preset(train_steps=3000, batch_size=64, seq_len=100, d_model=32, num_layers=2,
                   num_heads=1, **{
                       "data.histories_per_task": 50,
                       "eval.num_steps": 1000,
                       "eval.num_envs_per_task": 2,
                       "train.warmup_steps": 0,
                       "train.log_every": 500,
                       "train.checkpoint_every": 1500,
                       "report.num_seeds": 3,
                   })
PRESETS = {"quick": QUICK}


def get_config(preset: str = ""):
    config = authors_config("dpt_darkroom", "darkroom")
    config.env.kwargs.size = 10
    config.env.kwargs.episode_length = 100
    config.data.source = "grid_explorer"
    config.data.source_kwargs.eps = 0.1
    config.data.num_train_tasks = 79
    config.data.num_test_tasks = 20
    config.data.histories_per_task = 1250
    config.data.num_steps = 200
    config.train.update(dict(num_steps=250_000, seq_len=100, learning_rate=1e-3))
    config.eval.num_steps = 4000
    config.report.kind = "dpt_claims"
    config.dpt.compare_ad = True
    return apply_preset(config, PRESETS, preset)
