"""Decision Transformer on hopper, D4RL-style medium / medium-replay / medium-expert data.

Data (`data.builder="locomotion"`, icrl_jax/data/locomotion_data.py `LocomotionData`): one on-device PPO
run (data/sources/ppo.py) trains to `data.expert_steps`; its last agent is our expert, and the
agent whose own return is nearest a third of the way from the random to the expert return
(normalised score ~33; `medium_snapshot` in locomotion_data.py) is "medium".
Three Minari datasets are written under the workdir, all storing the random and expert returns
(the D4RL-normalised score's 0 and 100): `medium` (the medium policy, `num_train_tasks` x
`num_steps` = 1M steps as D4RL), `medium-replay` (PPO's experience up to the medium agent) and
`medium-expert` (medium + as many expert steps).
`data.dataset_id` picks the one trained on, e.g. `--config.data.dataset_id=hopper/medium-replay-v0`.
The DT (tanh head, MSE, return-to-go conditioning) is evaluated on 1000-step episodes with `vmap`
over envs; `eval.json` has `model@<target>_d4rl_score` next to the random baseline's.

Paper scale (default): GPT-DTMA App. A's recipe (context 20, lr 1e-4, 10K warmup, weight decay
1e-4, batch 64, 100K updates, a GPT-2-sized DT from scratch). Our expert is PPO's, trained for
`data.expert_steps` on device, not D4RL's SAC: on brax the normalised score is relative to it (on
the MJX envs, to D4RL's references), and the return targets are set from it
(`eval.target_returns`). `:quick`: a short PPO run (its expert is far from D4RL's), a 50k-step
medium dataset and a small DT, minutes on a 2-core CPU.

Envs: the paper-scale default and `:quick_mjx` run gymnasium's `Hopper-v5` on MJX (`hopper_v5`,
envs/continuous/mjx_locomotion.py: D4RL's task, so the datasets store D4RL's own reference
scores and `model@<target>_d4rl_score` is comparable with published tables; the data are still
our PPO's, not D4RL's SAC). `:quick` runs brax's spring `hopper` (other dynamics, scored against
our own random and expert): on a CPU brax steps much faster than MJX
(benchmarks/RESULTS.md, "MJX locomotion envs"), which is why the quick preset keeps it.
`:quick_mjx` trains PPO for 1M steps (the brax preset: 300k) for an expert nearer D4RL's; the
data and DT are otherwise `:quick`'s, with the paper-scale target.
"""

from icrl_jax.experiments.continuous import gpt_dtma_dt_config
from icrl_jax.core.config import apply_preset, cpu_preset, set_dotted

#: Per env: paper-scale PPO steps for the expert, DT return targets and rtg scale (paper / quick).
ENVS = {
    "hopper": dict(expert_steps=3_000_000, targets=(1800.0,), quick_targets=(600.0,)),
    "walker2d": dict(expert_steps=5_000_000, targets=(2500.0,), quick_targets=(400.0,)),
    "halfcheetah": dict(expert_steps=5_000_000, targets=(3000.0,), quick_targets=(600.0,)),
}


def quick_preset(name: str) -> dict:
    return cpu_preset(
        train_steps=2000, batch_size=64, seq_len=20, learning_rate=1e-3, d_model=64,
        num_layers=2, num_heads=4,
        **{"data.expert_steps": 300_000, "data.num_train_tasks": 50,
           "train.weight_decay": 0.0,
           "eval.num_envs_per_task": 1, "data.num_test_tasks": 16,
           "eval.target_returns": ENVS[name]["quick_targets"]})


def quick_mjx_preset(name: str) -> dict:
    return {**quick_preset(name), **mjx_env(name), "data.expert_steps": 1_000_000,
            "eval.target_returns": ENVS[name]["targets"]}


def mjx_env(name: str) -> dict:
    """The env and dataset keys that put experiment `name` on gymnasium's `<Name>-v5` in MJX."""
    return {"env.name": f"{name}_v5", "data.dataset_id": f"{name}_v5/medium-v0"}


def add_locomotion_data(config, name: str) -> None:
    """Env and data sections of the locomotion experiments (brax `name`, PPO-made datasets)."""
    config.env.name = name
    config.data.builder = "locomotion"
    config.data.dataset_id = f"{name}/medium-v0"
    config.data.minari_root = ""  # default: <workdir>/minari
    config.data.source = "ppo"
    # PPOConfig fields (data/sources/ppo.py); CleanRL's MuJoCo settings with 32 envs per update.
    config.data.source_kwargs.num_envs = 32
    config.data.source_kwargs.rollout_steps = 64
    config.data.expert_steps = ENVS[name]["expert_steps"]
    # Agent snapshots (the medium candidates) every 5 updates (10k steps): with 25 (51k steps)
    # the first snapshot of a paper-scale hopper run already scored 359, not the 199 target
    # (the rule then: a third of the raw expert return).
    config.data.ppo_chunk_updates = 5
    # D4RL medium: about a third of the expert's performance, on the normalised scale (random +
    # (expert - random) / 3); a third of the raw return is below random on walker2d.
    config.data.medium_fraction = 1 / 3
    config.data.num_train_tasks = 1000  # streams of the medium / expert rollouts
    config.data.num_steps = 1000  # 1000 x 1000 = 1M steps, as D4RL's medium
    config.data.num_test_tasks = 20  # evaluation episodes per seed (one env each)


def locomotion_config(name: str, preset: str = ""):
    # rtg_scale 1000: D4RL DT's return scale for locomotion; 1000 steps: one episode per env.
    config = gpt_dtma_dt_config(f"dt_{name}", rtg_scale=1000.0, max_timestep=1000)
    add_locomotion_data(config, name)
    config.eval.target_returns = ENVS[name]["targets"]
    # No "source" baseline (it would retrain PPO) and no privileged expert; the dataset's
    # stored expert return is the score's 100.
    config.eval.baselines = ("random",)
    for key, value in mjx_env(name).items():  # paper scale: D4RL's task (module docstring)
        set_dotted(config, key, value)
    return apply_preset(config, locomotion_presets(name), preset)


def locomotion_presets(name: str) -> dict[str, dict]:
    """`quick` (brax `name`) and `quick_mjx` (gymnasium's v5 task on MJX) of experiment `name`."""
    return {"quick": {**quick_preset(name), "env.name": name, "data.dataset_id": f"{name}/medium-v0"},
            "quick_mjx": quick_mjx_preset(name)}


PRESETS = locomotion_presets("hopper")


def get_config(preset: str = ""):
    return locomotion_config("hopper", preset)
