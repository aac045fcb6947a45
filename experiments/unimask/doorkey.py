"""Uni[MASK] on the 4x4 DoorKey grid (Carroll et al. 2022, App. E-F; Figs. 9-14).

`icrl-jax report --config experiments/unimask/doorkey.py` trains every masking regime from every
seed (`icrl_jax/masking_grid.py`), plus "random mask + finetune" and the MLP baseline, and writes
`heatmap.png` (validation losses normalised by random mask + finetune), `heatmap_raw.png` and
`heatmap.json` to the work directory. `icrl-jax train` trains one model (`model.regime`).

Data: the noisy-rational expert (p(a) ~ exp(C(a)), beta = 1) from random layouts, fixed 10-step
trajectories that go on past the goal (the authors' protocol); one snippet of T = 10 per
trajectory. `data.num_train_tasks` is the dataset size: 500 (the paper's), 50 or 1000 for
Figs. 11-14 (`--config.data.num_train_tasks=50`); validation: 200 held-out trajectories.

Paper scale (default): Table 2's hyperparameters per regime, lr 1e-4, dropout 0.1, Adam, 6000
epochs with early stopping on the validation loss, 6 seeds; fine-tuning at lr 1e-5. Deviations,
forced by the shared trainer: AdamW without weight decay and with gradient clipping; future
inference's 32-wide feed-forward (under its 128-wide embedding) is 128 wide (our feed-forward
width is an integer multiple of the embedding); fine-tuned models keep the random-mask model's
shape and batch size (they start from its weights).
`:quick`: one shared small model for every regime, 3 seeds, minutes on 2 CPU cores.
"""

import ml_collections

from icrl_jax.experiments.unimask import add_unimask_fields
from icrl_jax.core.config import apply_preset, base_config

#: The regimes trained (methods/unimask_masks.py REGIMES; configs import no jax): the eight
#: evaluation tasks, ALL and random masking.
REGIMES = ("behaviour_cloning", "reward_conditioned", "goal_conditioned", "waypoint_conditioned",
           "past_inference", "future_inference", "forward_dynamics", "inverse_dynamics", "all",
           "random")


def _table2(batch, embed, width, layers, heads, state_weight):
    return {"train": {"batch_size": batch},
            "model": {"d_model": embed, "mlp_ratio": max(1, width // embed),
                      "num_layers": layers, "num_heads": heads, "state_weight": state_weight}}


#: Table 2 (section -> field -> value): batch, embedding, layer width, layers, heads, state loss
#: weight (action weight 1).
PAPER_OVERRIDES = {
    "behaviour_cloning": _table2(250, 32, 128, 2, 4, 0.1),
    "reward_conditioned": _table2(50, 32, 128, 3, 4, 1.0),
    "goal_conditioned": _table2(250, 128, 128, 3, 8, 1.0),
    "waypoint_conditioned": _table2(250, 128, 128, 3, 8, 1.0),
    "past_inference": _table2(250, 32, 128, 4, 4, 0.5),
    "future_inference": _table2(250, 128, 32, 2, 4, 0.5),
    "forward_dynamics": _table2(250, 128, 128, 3, 8, 1.0),
    "inverse_dynamics": _table2(50, 128, 128, 3, 8, 0.5),
    "all": _table2(250, 32, 128, 3, 4, 1.0),
    "random": _table2(100, 128, 128, 2, 8, 1.0),
}

PRESETS = {
    "quick": {
        "model.d_model": 64, "model.num_layers": 2, "model.num_heads": 4, "model.mlp_ratio": 2,
        "train.batch_size": 100, "train.learning_rate": 1e-3, "train.warmup_steps": 50,
        "train.num_steps": 2000, "grid.epochs": 0, "grid.num_seeds": 3, "grid.eval_every": 250,
        "grid.overrides": {}, "grid.finetune_steps": 500, "grid.finetune_eval_every": 250,
        "grid.finetune_learning_rate": 2e-4, "grid.mlp_overrides": {},
        "grid.dt_overrides": {"train": {"num_steps": 1000}},
        "data.num_test_tasks": 100,
    },
}


def get_config(preset: str = ""):
    config = base_config()
    config.experiment = "unimask_doorkey"
    config.env.name = "unimask_doorkey"
    config.env.kwargs.episode_length = 10
    config.env.kwargs.terminate_at_goal = False
    config.data.source = "noisy_rational"
    config.data.source_kwargs.beta = 1.0
    config.data.num_train_tasks = 500  # trajectories (each task id is a random layout)
    config.data.num_test_tasks = 200  # held-out validation trajectories
    config.data.histories_per_task = 1
    config.data.num_steps = 10
    add_unimask_fields(config, d_model=128, num_layers=2, num_heads=8, mlp_ratio=1, seq_len=10)
    for dropout in ("embedding_dropout", "residual_dropout", "attention_dropout"):
        config.model[dropout] = 0.1
    config.train.num_steps = 60_000  # replaced per group by grid.epochs
    config.train.log_every = 250
    config.eval.num_steps = 10
    config.eval.baselines = ("source", "random")
    config.report.kind = "grid"  # `icrl-jax report`: the regime grid and its heatmaps
    config.grid = ml_collections.ConfigDict(dict(
        regimes=REGIMES,
        num_seeds=6,
        epochs=6000,  # > 0: train.num_steps = epochs * trajectories / batch, per group
        eval_every=500,  # early stopping: validation losses every this many steps
        overrides=PAPER_OVERRIDES,
        finetune=True,
        finetune_learning_rate=1e-5,
        finetune_steps=6000,
        finetune_eval_every=500,
        # Decision Transformer baseline (methods/dt.py): BC without and RC with return-to-go;
        # Table 2's DT: batch 250, embedding 32, width 128, 3 layers, 8 heads.
        dt_regimes=("behaviour_cloning", "reward_conditioned"),
        dt_overrides={"train": {"batch_size": 250},
                      "model": {"d_model": 32, "mlp_ratio": 4, "num_layers": 3, "num_heads": 8}},
        mlp_regimes=("behaviour_cloning", "random"),
        # Table 2's MLPs (3 hidden layers of 128); the first batch size (100, BC) for both.
        mlp_overrides={"model": {"mlp_layers": 3, "mlp_width": 128, "d_model": 32,
                                 "state_weight": 0.5}},
    ))
    return apply_preset(config, PRESETS, preset)
