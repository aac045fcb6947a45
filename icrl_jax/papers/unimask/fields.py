"""Uni[MASK]'s config fields (pure ml_collections: experiment files import this)."""

from __future__ import annotations

import ml_collections

from icrl_jax.core import validation


def unimask_model_config() -> ml_collections.ConfigDict:
    """The Uni[MASK] fields of `config.model` (`papers/unimask/method.py`)."""
    return ml_collections.ConfigDict(dict(
        backbone="transformer",  # transformer (bidirectional) | mlp (the paper's baseline)
        regime="random",  # the masking scheme trained on (papers/unimask/masks.py REGIMES)
        action_weight=1.0,  # Table 2's "Action:State loss"
        state_weight=1.0,
        rtg_scale=10.0,  # the return-to-go enters divided by this
        max_timestep=10.0,  # ... and the snippet's first timestep divided by this
        mlp_layers=3,  # MLP baseline: hidden layers and their width
        mlp_width=128,
        # ALL's task: drawn per snippet, or per batch (the authors' trainer)
        all_per="snippet",
        # Inverse dynamics' index: "ours" (1..k-1) or the authors' (0..k-2; 0 wraps round)
        inverse_dynamics_index="ours",
        # Architecture: "learned" positions (ours) or the authors' fixed "sinusoidal" ones
        positions="learned",
        mask_flags=True,  # visibility flags in each token (ours); the authors' tokens have none
        # The return-to-go token: "scalar" (R / rtg_scale, t0 / max_timestep; ours) or the
        # authors' "onehot" over the integer returns rtg_low..rtg_high (DoorKey: -6..10), no t0
        rtg_encoding="scalar",
        # The input token's map to d_model: "linear" (ours) or the authors' "relu_scaled"
        # (relu(Dense(x)) * sqrt(d_model))
        input_embedding="linear",
        rtg_low=-6,
        rtg_high=10,
        # Fine-tuning: the row of the pretrained parameters a replica starts from (the grid
        # sets it per replica; unused without pretrained parameters)
        init_from=0,
    ))


def unimask_eval_config() -> dict:
    """Uni[MASK]'s fields of `config.eval` (`UniMask.policies`): the policies evaluated beside
    behaviour cloning."""
    return dict(
        goal_conditioned=False,  # also a goal-conditioned policy (envs whose observation shows a goal)
        target_returns=(),  # a reward-conditioned policy per return-to-go (`model@<R>`)
    )


def grid_config() -> ml_collections.ConfigDict:
    """The `grid` section of `report.kind="grid"` (`papers/unimask/grid.py`): the regimes, seeds,
    budgets, early stopping and baselines of a grid of trainings."""
    return ml_collections.ConfigDict(dict(
        # heatmap: every regime's validation losses on the eight tasks (DoorKey); returns: the
        # returns table of BC, RC and goal-conditioned control (Maze2D)
        evaluate="heatmap",
        regimes=(),  # the masking schemes trained (papers/unimask/masks.py REGIMES)
        num_seeds=3,
        # Budgets: > 0 epochs set train.num_steps (epochs of each group's own batch size); > 0
        # epoch_trajectories set the epochs to max(it // N, 1) (the authors' budgets follow the
        # data size N), per regime in regime_epoch_trajectories
        epochs=0,
        epoch_trajectories=0,
        regime_epoch_trajectories={},
        # Early stopping: validation every eval_every steps, or every eval_every_epochs epochs
        eval_every=500,
        eval_every_epochs=0,
        # The tasks ALL and random masking stop on: all eight, or the authors' six (not dynamics)
        stop_on="all",
        # >= 0: the held-out trajectories are data.num_test_tasks ids from here (the same set at
        # every data size); -1: the run's test tasks
        validation_first_task=-1,
        validation_episodes=100,  # returns: the dataset's last episodes, for early stopping
        rtg_factor=1.1,  # returns: return-to-go = this x the nearest dataset episode's return
        # regime -> {section: {field: value}}: a regime's own shapes and loss weights
        overrides={},
        # "random mask + finetune": from each seed's random-mask model ("own") or seed 0's
        # ("seed0"), finetune_seeds of them per task (0: num_seeds)
        finetune=False,
        finetune_from="own",
        finetune_seeds=0,
        finetune_learning_rate=1e-5,
        finetune_steps=1000,
        finetune_eval_every=500,
        # task -> the authors' per-task budget ({epoch_trajectories, learning_rate, batch_size,
        # state_weight}; each defaults to the fine-tuning's above and the random regime's)
        finetune_overrides={},
        # Baselines: the Decision Transformer (behaviour_cloning, reward_conditioned) and the
        # MLP backbone, with their {section: {field: value}} overrides
        dt_regimes=(),
        dt_overrides={},
        mlp_regimes=(),
        mlp_overrides={},
    ))


#: What the `grid` section takes (core/validation.py); regimes are checked against the
#: registered masking schemes where they are looked up.
GRID_CONSTRAINTS = validation.declare("unimask_grid", (
    validation.choice("grid.evaluate", ("heatmap", "returns")), validation.positive_int("grid.num_seeds", 3),
    validation.non_negative_int("grid.epochs", 0), validation.non_negative_int("grid.epoch_trajectories", 0),
    validation.positive_int("grid.eval_every", 500), validation.non_negative_int("grid.eval_every_epochs", 0),
    validation.choice("grid.stop_on", ("all", "authors")),
    validation.integer("grid.validation_first_task", -1, minimum=-1),
    validation.positive_int("grid.validation_episodes", 100), validation.positive("grid.rtg_factor", 1.1),
    validation.boolean("grid.finetune"), validation.choice("grid.finetune_from", ("own", "seed0")),
    validation.non_negative_int("grid.finetune_seeds", 0), validation.positive("grid.finetune_learning_rate", 1e-5),
    validation.positive_int("grid.finetune_steps", 1000), validation.positive_int("grid.finetune_eval_every", 500),
))


#: What the Uni[MASK] fields take (core/validation.py); `model.regime` is checked against the
#: registered masking schemes where it is looked up.
UNIMASK_CONSTRAINTS = validation.declare("unimask", (
    validation.choice("model.backbone", ("transformer", "mlp")), validation.string("model.regime", "random"),
    validation.non_negative("model.action_weight", 1.0), validation.non_negative("model.state_weight", 1.0),
    validation.positive("model.rtg_scale", 10.0), validation.positive("model.max_timestep", 10.0),
    validation.positive_int("model.mlp_layers", 3), validation.positive_int("model.mlp_width", 128),
    validation.choice("model.all_per", ("snippet", "batch")),
    validation.choice("model.inverse_dynamics_index", ("ours", "authors")),
    validation.choice("model.positions", ("learned", "sinusoidal")), validation.boolean("model.mask_flags"),
    validation.choice("model.rtg_encoding", ("scalar", "onehot")),
    validation.choice("model.input_embedding", ("linear", "relu_scaled")),
    validation.integer("model.rtg_low", -6), validation.integer("model.rtg_high", 10),
    validation.non_negative_int("model.init_from", 0), validation.boolean("eval.goal_conditioned"),
    validation.relation(("model.rtg_low", "model.rtg_high"),
               "model.rtg_low must be at most model.rtg_high (the one-hot return-to-go's range)",
               lambda low, high: low <= high, lambda low, high: f"model.rtg_high={low}"),
))
