"""AD on Dark Room 9x9 (n-gram paper, appendix B): 80 goals, 50-step episodes.

Paper scale (default): 60 training goals / 20 held-out, ~1K Q-learning histories (17 per goal),
hidden 512, batch 1024, 10K updates, context 200 steps (4 episodes).
"""

from experiments.ad.grid_common import grid_config
from icrl_jax.config import apply_preset, cpu_preset

PRESETS = {
    # A 2-core CPU cannot afford the paper's data and updates, so `quick` distils a noisy oracle
    # whose epsilon decays from 1 to 0 over the first 10 of 12 episodes (noise distillation,
    # Zisman et al.): its learning histories improve within a few episodes, which a small model
    # learns to reproduce in context in ~2,000 updates. Cells also get (row, column) features.
    "quick": cpu_preset(train_steps=2000, batch_size=64, seq_len=100, **{  # context: 2 episodes
        "data.source": "noisy_oracle",
        "data.source_kwargs": {"decay_fraction": 0.8},
        "data.histories_per_task": 8,
        "data.num_steps": 600,  # 12 episodes
        "model.grid_observations": True,
        "model.embedding_dropout": 0.1,
        "model.residual_dropout": 0.1,
        "eval.num_steps": 600,  # 12 in-context episodes
        "eval.num_envs_per_task": 4,
    }),
}


def get_config(preset: str = ""):
    config = grid_config("ad_darkroom", "darkroom")
    config.data.num_train_tasks = 60
    config.data.num_test_tasks = 20
    config.data.histories_per_task = 17
    config.eval.num_envs_per_task = 5
    return apply_preset(config, PRESETS, preset)
