"""AD on Dark Key-to-Door 9x9 (n-gram paper, appendix B and F).

Paper scale (default): 100 training tasks, 750 learning histories sampled with repetition from
them (here: 8 per task), 200 Q-learning episodes of 50 steps each, 100 held-out tasks, hidden 512,
batch 1024, 10K updates, context 200 steps.
"""

from experiments.ad.grid_common import grid_config
from icrl_jax.config import apply_preset, cpu_preset

PRESETS = {
    # Like ad/darkroom.py:quick: a noisy oracle (key first, then door) whose epsilon decays over
    # the first 10 of 12 episodes, and (row, column) cell features.
    "quick": cpu_preset(train_steps=2000, batch_size=64, seq_len=100, **{
        "data.source": "noisy_oracle",
        "data.source_kwargs": {"decay_fraction": 0.8},
        "data.num_train_tasks": 400,
        "data.num_test_tasks": 40,
        "data.histories_per_task": 2,
        "data.num_steps": 600,
        "model.grid_observations": True,
        "eval.num_steps": 600,
        "eval.num_envs_per_task": 2,
    }),
}


def get_config(preset: str = ""):
    config = grid_config("ad_key_to_door", "key_to_door")
    config.data.num_train_tasks = 100
    config.data.num_test_tasks = 100
    config.data.histories_per_task = 8
    config.eval.num_envs_per_task = 2
    return apply_preset(config, PRESETS, preset)
