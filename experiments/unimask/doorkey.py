"""Uni[MASK] on the 4x4 DoorKey grid (Carroll et al. 2022, App. E-F; Figs. 9-14).

`icrl-jax report --config experiments/unimask/doorkey.py` trains every masking regime from every
seed (`papers/unimask/grid.py`), plus "random mask + finetune" and the MLP and DT baselines, and
writes `heatmap.png` (validation losses normalised by random mask + finetune),
`heatmap_best.png` (each column over its best row: the paper's form), `heatmap_raw.png`,
`heatmap.json` and, at 50 / 500 / 1000 trajectories, `appendix_comparison.md` to the work
directory. `icrl-jax train` trains one model (`model.regime`).

Data: the noisy-rational expert (p(a) ~ exp(C(a)), beta = 1) from random layouts, fixed 10-step
trajectories that go on past the goal; one snippet of T = 10 per trajectory.
`data.num_train_tasks` is the dataset size: 500 (the paper's), 50 or 1000 for Figs. 11-14 (the
budgets follow it: epochs = epoch-trajectories / N).

Paper scale (default): the authors' code's settings (docs/papers/unimask.md lists each with its
file): their expert's wall rule, Table 2's shapes per regime, lr 1e-4, AdamW (weight decay
1e-4, clip 0.5), dropout 0.1, their per-regime budgets, validation every 10 epochs on 1,000
held-out trajectories (the same at every size), early stopping of ALL / random on the six
non-dynamics tasks, ALL's task per batch, fine-tuning from random-mask seed 0 with their
per-task rates and budgets, sinusoidal positions, no mask flags, the return-to-go one-hot.
Deliberately ours: each validation loss is the exact expectation over the task's index (theirs
samples one index per snippet). Deviation: the MLP group trains both its regimes for
random masking's budget.
`:paper_n50` / `:paper_n500` / `:paper_n1000`: the same at that size on a CPU (`_cpu_preset`).
`:quick`: one shared small model for every regime, our earlier choices, 3 seeds, minutes.
"""


from icrl_jax.experiments.unimask import add_unimask_fields
from icrl_jax.core.config import apply_preset, base_config

#: The regimes trained (papers/unimask/masks.py REGIMES; configs import no jax): the eight
#: evaluation tasks, ALL and random masking.
REGIMES = ("behaviour_cloning", "reward_conditioned", "goal_conditioned", "waypoint_conditioned",
           "past_inference", "future_inference", "forward_dynamics", "inverse_dynamics", "all",
           "random")


def _table2(batch, embed, width, layers, heads, state_weight):
    return {"train": {"batch_size": batch},
            "model": {"d_model": embed, "mlp_ratio": max(1, width // embed), "mlp_hidden": width,
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

#: The authors' training budgets (their `scripts/minigrid_repro.sh`, the same as Table 2's
#: note): epochs x trajectories is constant per regime, so epochs = EPOCH_TRAJECTORIES / N.
#: An epoch is max(N // batch, 1) batches (their trainer); validation every 10 epochs.
EPOCH_TRAJECTORIES = {
    "random": 5_000_000, "all": 5_000_000, "future_inference": 1_000_000,
    "past_inference": 1_000_000, "behaviour_cloning": 750_000, "reward_conditioned": 750_000,
    "forward_dynamics": 750_000, "inverse_dynamics": 750_000, "goal_conditioned": 1_500_000,
    "waypoint_conditioned": 1_500_000,
}
#: Their fine-tuning (`scripts/minigrid_ft_repro.sh`): every task from random-mask seed 0, state
#: loss weight 1, per task (epoch-trajectories, learning rate, batch size).
FINETUNE_BUDGET = {
    "future_inference": (250_000, 5e-6, 250), "past_inference": (250_000, 5e-6, 250),
    "behaviour_cloning": (5_000_000, 5e-6, 250), "reward_conditioned": (250_000, 5e-6, 50),
    "forward_dynamics": (5_000_000, 1e-5, 250), "inverse_dynamics": (750_000, 1e-5, 50),
    "goal_conditioned": (750_000, 1e-5, 250), "waypoint_conditioned": (750_000, 1e-5, 250),
}
#: Their baselines' budgets: the MLP (random masking, BC) and DT (BC, RC) runs.
MLP_EPOCH_TRAJECTORIES = {"random": 5_000_000, "behaviour_cloning": 1_500_000}
DT_EPOCH_TRAJECTORIES = 750_000


def authors_budget() -> dict:
    """The `grid` fields of the authors' budgets (epochs follow the data size N)."""
    return {
        "grid.regime_epoch_trajectories": dict(EPOCH_TRAJECTORIES),
        "grid.epoch_trajectories": EPOCH_TRAJECTORIES["random"],
        "grid.finetune_overrides": {
            t: {"epoch_trajectories": e, "learning_rate": lr, "batch_size": b,
                "state_weight": 1.0} for t, (e, lr, b) in FINETUNE_BUDGET.items()},
    }


def _cpu_preset(n: int) -> dict:
    """The authors' settings at N trajectories, cut to fit a shared 2-core CPU: 3 seeds
    (theirs: 6), validation on 200 of the 1,000 held-out trajectories every 200 epochs
    (theirs: all 1,000 every 10), no MLP / DT baselines. Budgets, learning rates,
    architectures, early stopping and fine-tuning are the authors'."""
    # Random masking first: the longest budget, and fine-tuning starts from it.
    return {"data.num_train_tasks": n, "grid.num_seeds": 3,
            "data.num_test_tasks": 200, "grid.eval_every_epochs": 200,
            "grid.regimes": ("random",) + REGIMES[:-1],
            "grid.mlp_regimes": (), "grid.dt_regimes": ()}


PRESETS = {
    # A smoke preset (ours, unchanged: our expert rule, architecture and selection), minutes.
    "quick": {
        "model.d_model": 64, "model.num_layers": 2, "model.num_heads": 4, "model.mlp_ratio": 2,
        "train.batch_size": 100, "train.learning_rate": 1e-3, "train.warmup_steps": 50,
        "train.num_steps": 2000, "grid.epochs": 0, "grid.epoch_trajectories": 0,
        "grid.regime_epoch_trajectories": {},
        "grid.num_seeds": 3, "grid.eval_every": 250, "grid.eval_every_epochs": 0,
        "grid.overrides": {}, "grid.finetune_steps": 500, "grid.finetune_eval_every": 250,
        "grid.finetune_learning_rate": 2e-4, "grid.finetune_overrides": {},
        "grid.finetune_from": "own", "grid.mlp_overrides": {},
        "grid.dt_overrides": {"train": {"num_steps": 1000}},
        "grid.stop_on": "all", "grid.validation_first_task": -1, "data.num_test_tasks": 100,
        "env.kwargs.expert_walls": "blocked_zero", "model.all_per": "snippet",
        "model.positions": "learned", "model.mask_flags": True, "model.rtg_encoding": "scalar",
        "model.input_embedding": "linear", "model.pre_norm": True, "model.norm_epsilon": 1e-6,
        "model.activation": "gelu_tanh", "train.weight_decay": 0.0, "train.grad_clip": 1.0,
    },
    "paper_n50": _cpu_preset(50),
    "paper_n500": _cpu_preset(500),
    "paper_n1000": _cpu_preset(1000),
}


def get_config(preset: str = ""):
    config = base_config()
    config.experiment = "unimask_doorkey"
    config.env.name = "unimask_doorkey"
    config.env.kwargs.episode_length = 10
    config.env.kwargs.terminate_at_goal = False
    # The authors' expert: moves into the left / top outer wall count as moving there, the door
    # is passable for its scoring (envs/doorkey.py; "blocked_zero" is the paper's text).
    config.env.kwargs.expert_walls = "authors"
    config.data.source = "noisy_rational"
    config.data.source_kwargs.beta = 1.0
    config.data.num_train_tasks = 500  # trajectories (each task id is a random layout)
    # Validation: the authors' 1,000 held-out trajectories (ids 1000..1999, the same for every
    # data size). Deliberately ours: each task's loss is its exact expectation over the task's
    # index on every held-out snippet (theirs: one sampled index per sampled snippet).
    config.data.num_test_tasks = 1000
    config.data.histories_per_task = 1
    config.data.num_steps = 10
    add_unimask_fields(config, d_model=128, num_layers=2, num_heads=8, mlp_ratio=1, seq_len=10)
    for dropout in ("embedding_dropout", "residual_dropout", "attention_dropout"):
        config.model[dropout] = 0.1
    # The authors' trainer: AdamW (weight decay 1e-4), gradients clipped at norm 0.5.
    config.train.weight_decay = 1e-4
    config.train.grad_clip = 0.5
    # The authors' architecture: sinusoidal positions, no visibility flags, the return-to-go
    # as a 17-class one-hot (-6..10) without the timestep; ALL switches the task per batch
    # (theirs cycle through the eight tasks batch by batch; ours draws one per batch).
    config.model.positions = "sinusoidal"
    config.model.mask_flags = False
    config.model.rtg_encoding = "onehot"
    config.model.all_per = "batch"
    # Their torch TransformerEncoderLayer: post-norm (no final norm), LayerNorm epsilon 1e-5,
    # a ReLU feed-forward; the input token's map relu(Linear(x)) * sqrt(d).
    config.model.pre_norm = False
    config.model.norm_epsilon = 1e-5
    config.model.activation = "relu"
    config.model.input_embedding = "relu_scaled"
    # Inverse dynamics as the paper defines it (ours, on purpose): their batch class wraps one
    # index in k - 1 round to predict s_{k-1} from s_0 and a_{k-1}; "authors" trains and
    # validates that way, for comparing with their inverse-dynamics numbers.
    config.model.inverse_dynamics_index = "ours"
    config.train.num_steps = 60_000  # replaced per group by grid.epochs
    config.train.log_every = 250
    config.eval.num_steps = 10
    config.eval.baselines = ("source", "random")
    config.report.kind = "grid"  # `icrl-jax report`: the regime grid and its heatmaps
    budget = authors_budget()
    config.grid.update(dict(
        regimes=REGIMES,
        num_seeds=6,
        epochs=0,  # > 0: train.num_steps = epochs * max(N // batch, 1)
        # The authors' budgets as epochs x N (epochs = this // N): MLP and DT groups too.
        epoch_trajectories=budget["grid.epoch_trajectories"],
        regime_epoch_trajectories=budget["grid.regime_epoch_trajectories"],
        eval_every=500,  # early stopping every this many steps, unless eval_every_epochs > 0
        eval_every_epochs=10,  # the authors' cadence (in epochs of each group)
        stop_on="authors",  # ALL / random: the six non-dynamics tasks (their trainer)
        validation_first_task=1000,  # held-out ids 1000.. (the same set at every data size)
        overrides=PAPER_OVERRIDES,
        finetune=True,
        finetune_from="seed0",  # every fine-tuned seed starts from random-mask seed 0 (theirs)
        finetune_seeds=0,  # fine-tuned seeds per task; 0: grid.num_seeds
        finetune_learning_rate=1e-5,  # used where finetune_overrides gives none
        finetune_steps=6000,
        finetune_eval_every=500,
        finetune_overrides=budget["grid.finetune_overrides"],
        # Decision Transformer baseline (methods/dt.py): BC without and RC with return-to-go;
        # Table 2's DT: batch 250, embedding 32, width 128, 3 layers, 8 heads.
        dt_regimes=("behaviour_cloning", "reward_conditioned"),
        dt_overrides={"train": {"batch_size": 250},
                      "model": {"d_model": 32, "mlp_ratio": 4, "num_layers": 3, "num_heads": 8},
                      "grid": {"epoch_trajectories": DT_EPOCH_TRAJECTORIES}},
        mlp_regimes=("behaviour_cloning", "random"),
        # Table 2's MLPs (3 hidden layers of 128); the first batch size (100, BC) for both.
        # Their MLP-BC trains 1.5M epoch-trajectories, MLP-random 5M: one group, the longer
        # (early stopping keeps each replica's best).
        mlp_overrides={"model": {"mlp_layers": 3, "mlp_width": 128, "d_model": 32,
                                 "state_weight": 0.5},
                       "grid": {"epoch_trajectories": MLP_EPOCH_TRAJECTORIES["random"]}},
    ))
    config = apply_preset(config, PRESETS, preset)
    if config.grid.validation_first_task >= 0:
        config.grid.validation_first_task = max(int(config.grid.validation_first_task),
                                                int(config.data.num_train_tasks))
    return config
