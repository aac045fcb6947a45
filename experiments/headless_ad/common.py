"""What the Headless-AD experiments share: the `quick` preset (a small model, 2,000 updates) and
the way the ablations (Tables 5-7) become presets."""

from icrl_jax.config import cpu_preset


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
