"""What the Headless-AD experiments share: the `quick` preset (a small model, 2,000 updates) and
the way the ablations (Tables 5-7) become presets."""

import ml_collections

from icrl_jax.methods.fields import ad_config
from icrl_jax.core.config import cpu_preset


def quick_preset(seq_len: int, **extra):
    """Dotted overrides for a CPU-sized run; `extra` adds the experiment's own keys."""
    return cpu_preset(train_steps=2000, batch_size=32, seq_len=seq_len,
                      **{"train.weight_decay": 1e-4, "train.b1": 0.9, **extra})


#: The ablations as bare switches (quick presets keep the quick hyperparameters).
ABLATION_SWITCHES = {"no_prompt": {"model.prompt": False},
                     "mse": {"model.loss": "mse", "eval.greedy": True},
                     "normal": {"model.embeddings": "normal"}}


def ablation_presets(quick, tuned):
    """`quick`, the paper-tuned ablations `tuned` (name -> overrides, Tables 5-7) and
    `quick_<ablation>` (the quick preset with the ablation switched on)."""
    presets = {"quick": quick, **tuned}
    presets.update({f"quick_{name}": dict(quick, **switch)
                    for name, switch in ABLATION_SWITCHES.items()})
    return presets


def darkroom_quick_preset(**extra):
    """`quick` for the composite Dark Room, shared by Headless-AD and its AD baselines.

    A 2-core CPU cannot learn an improvement operator from Q-learning histories (the paper's
    source), so, as `experiments/ad/darkroom.py:quick` does, it distils a noisy oracle whose
    epsilon decays from 1 to 0 over the first 80% of each 600-step history (noise distillation),
    and cells get (row, column) features. Scores average each rollout's last 3 episodes over
    2 rollouts per goal, which the 0/1 success of single episodes needs to be readable.
    """
    return quick_preset(100, **{
        "data.source": "noisy_oracle",
        "data.source_kwargs": {"decay_fraction": 0.8},
        "data.histories_per_task": 4,
        "data.num_steps": 600,
        "model.grid_observations": True,
        "eval.num_steps": 600,
        "eval.num_envs_per_task": 2,
        "eval.final_window": 3,
        "eval.chunk_size": 0,
        # Sampled actions for AD too: from an empty context, argmax repeats one action forever
        # (a behaviour no noisy-oracle history contains); the paper's AD uses the mode.
        "eval.greedy": False,
        **extra,
    })


#: `quick_replay`: the quick darkroom preset on episode-replay histories (data/sources/
#: episode_replay.py): random exploration until an episode pays, then its actions replayed with
#: decaying noise. An improvement that depends on where each action was taken, never on what it
#: means, hence one a learner can copy in context on action sets it never saw. Little noise
#: (eps 0.1 -> 0): with eps 0.5 the distilled model copied with p ~ 0.35 and its own sampled
#: replays of long random-walk paths failed.
#: The copy needs "which action was taken at this cell on the paying path": observation n-gram
#: layers (n = 1, 2, 3, before the first block) that read each step's most recent earlier visit
#: of the same 1-3 cells (`ngram_latest`; models/ngram.py). Without n-gram layers 2,000 updates
#: did not learn to copy; reading all visits uniformly drowns a single paying episode among the
#: exploration before it. Sampling at temperature 0.5 (of 1, 0.5, 0.3, on the train action set).
#: 8,000 updates: at 2,000 the model often took its own repeated path for a replay before any
#: success (n-gram matches without the reward that should gate them) and looped, so whole rollouts
#: never found the goal; by 8,000 that is rare.
DARKROOM_REPLAY = {"train.num_steps": 8000,
                   "data.source": "episode_replay",
                   "data.source_kwargs": {"eps_start": 0.1, "eps_end": 0.0, "decay_fraction": 0.8,
                                         "key_by": "cell"},
                   "model.ngram_positions": (0,), "model.ngram_max": 3,
                   "model.ngram_match": "observation", "model.ngram_latest": True,
                   "eval.temperature": 0.5}


# Variant sets of the Headless-AD paper (`config.variants`, evaluated by `icrl-jax report`).

#: Bandit arm counts of the paper's "more arms" evaluation (Figure 5, Table 1).
EVAL_ARMS = (20, 25, 30, 40, 50)
#: The darkroom action sets of Figure 1 / Figure 7, and their widths.
ACTION_SETS = {"train": 50, "permuted_train": 50, "sliced_test": 50, "test": 75, "all": 125}


def add_report_fields(config: ml_collections.ConfigDict, label: str) -> None:
    config.report.update(dict(kind="variants", label=label, num_seeds=1))


def bernoulli_variants(arms: tuple[int, ...] | None = EVAL_ARMS,
                       distributions: bool = True) -> ml_collections.ConfigDict:
    """Reward-distribution shifts on 4-20 arms (Figure 4) and fixed larger arm counts with
    uniform rewards (Figure 5), all on held-out bandits."""
    variants = {}
    if distributions:
        for dist in ("train", "inverse", "uniform"):
            variants[f"dist_{dist}"] = dict(env=dict(distribution=dist), tasks="test")
    for n in arms or ():
        variants[f"arms_{n}"] = dict(env=dict(arms=n, max_arms=n, distribution="uniform"),
                                     tasks="test")
    return ml_collections.ConfigDict(variants)


def contextual_variants(arms: tuple[int, ...] | None = EVAL_ARMS, held_out: bool = True,
                        bernoulli_context_dim: int = 0) -> ml_collections.ConfigDict:
    """Held-out contextual bandits (4-20 arms and fixed larger counts); with
    `bernoulli_context_dim` (the training contexts' size) also Figure 9's transfer: held-out
    Bernoulli bandits (uniform means) whose observation is one fixed random context per task."""
    variants = {}
    if held_out:
        variants["heldout_4_20"] = dict(env=dict(), tasks="test")
    for n in arms or ():
        variants[f"arms_{n}"] = dict(env=dict(arms=n, max_arms=n), tasks="test")
    if bernoulli_context_dim:
        bernoulli = dict(distribution="uniform", context_dim=bernoulli_context_dim)
        variants["bernoulli_4_20"] = dict(env_name="bernoulli_bandit",
                                          env=dict(bernoulli, arms=(4, 20)), tasks="test")
        for n in arms or ():
            variants[f"bernoulli_arms_{n}"] = dict(
                env_name="bernoulli_bandit", env=dict(bernoulli, arms=n, max_arms=n), tasks="test")
    return ml_collections.ConfigDict(variants)


def darkroom_variants(max_actions: int) -> ml_collections.ConfigDict:
    """The five action sets x {train, test} goals; sets wider than `max_actions` are left out
    (AD's output layer has a fixed width)."""
    variants = {}
    for name, width in ACTION_SETS.items():
        if width > max_actions:
            continue
        for tasks in ("train", "test"):
            variants[f"{name}__{tasks}_goals"] = dict(env=dict(max_actions=max_actions),
                                                      actions=name, tasks=tasks)
    return ml_collections.ConfigDict(variants)


def darkroom_config(experiment: str, method: str, max_eval_actions: int, label: str):
    """The composite Dark Room setup shared by Headless-AD and its AD baselines (paper scale):
    Q-learning histories on the 50 train actions (200 episodes of 20 steps), the schedule of
    Tables 3-4, 1,000 in-context evaluation episodes on the action sets up to
    `max_eval_actions` wide. The model fields are each experiment's own."""
    config = ad_config()
    config.experiment = experiment
    config.method = method
    config.env.name = "darkroom_composite"
    config.env.kwargs.max_actions = 50
    config.env.kwargs.actions = "train"
    config.env.kwargs.action_split_seed = 0
    config.env.kwargs.action_split = "random"  # or "distance" (appendix F, Figure 12)
    config.data.source = "q_learning"
    config.data.source_kwargs.lr = 0.9933
    config.data.source_kwargs.discount = 0.6238
    config.data.update(dict(num_train_tasks=60, num_test_tasks=20, histories_per_task=10,
                            num_steps=4000))
    config.model.update(dict(d_model=512, position="rotary"))
    config.train.update(dict(num_steps=20_000, batch_size=128, seq_len=100, warmup_steps=1000,
                             steps_per_call=100, log_every=100, checkpoint_every=1000))
    config.eval.num_steps = 20_000
    config.eval.chunk_size = 20
    config.variants = darkroom_variants(max_actions=max_eval_actions)
    add_report_fields(config, label=label)
    return config
