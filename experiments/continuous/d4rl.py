"""Decision Transformer on Minari's D4RL MuJoCo datasets, evaluated on the same tasks in MJX.

Data: a Minari dataset the user has downloaded, read as it is (`data.minari_id`; nothing is
generated or downloaded at run time):

    pip install 'icrl-jax[continuous]' && minari download mujoco/hopper/medium-v0
    icrl-jax train --config experiments/continuous/d4rl.py

(`MINARI_DATASETS_PATH` picks another datasets folder than `~/.minari/datasets`.) The hosted
datasets were recorded on gymnasium's `Hopper-v5` / `Walker2d-v5` / `HalfCheetah-v5`; evaluation
runs `eval.num_envs_per_task` x `data.num_test_tasks` episodes at once on the MJX versions of
those envs (envs/continuous/mjx_locomotion.py), and `eval.json` reports
`model@<target>_d4rl_score`: D4RL's normalised score, 100 (R - random) / (expert - random), from
the dataset's own `ref_min_score` / `ref_max_score`, of the first (1000-step) episode.

Default: CORL's DT recipe for hopper-medium (their `configs/offline/dt/hopper/medium_v2.yaml`):
3 layers, d 128, 1 head, dropout 0.1, context 20, batch 4096, lr 8e-4 with 10K linear warm-up
then constant, weight decay 1e-4, gradient norm 0.25, 100K updates, returns scaled by 1/1000,
100 evaluation episodes at targets 3600 and 1800. Other datasets:
`--config.data.minari_id=mujoco/walker2d/medium-v0 --config.env.name=walker2d_v5` (the env must be
the one the dataset was recorded on: another is refused in one line).
"""

from icrl_jax.core.config import apply_preset
from icrl_jax.experiments.continuous import gpt_dtma_dt_config

EPISODE_LEN, SEQ_LEN = 1000, 20
PRESETS = {}  # the file's one setting is CORL's recipe (its default)


def get_config(preset: str = ""):
    # The timestep table has episode_len + seq_len rows, as CORL's.
    config = gpt_dtma_dt_config("dt_d4rl_hopper_medium", rtg_scale=1000.0,
                                max_timestep=EPISODE_LEN + SEQ_LEN)
    config.env.name = "hopper_v5"
    config.data.builder = "minari"
    config.data.minari_id = "mujoco/hopper/medium-v0"
    config.data.num_train_tasks = 1
    config.data.num_test_tasks = 100  # evaluation episodes (one env each)
    config.model.update(dict(d_model=128, num_layers=3, num_heads=1,
                             embed_norm_epsilon=1e-5))  # PyTorch's LayerNorm, as CORL's
    config.train.update(dict(num_steps=100_000, batch_size=4096, seq_len=SEQ_LEN,
                             learning_rate=8e-4, warmup_steps=10_000, min_lr_ratio=1.0,
                             weight_decay=1e-4, b2=0.999, grad_clip=0.25))
    config.eval.update(dict(target_returns=(3600.0, 1800.0), num_steps=EPISODE_LEN))
    config.eval.baselines = ("random",)
    return apply_preset(config, PRESETS, preset)
