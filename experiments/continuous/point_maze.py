"""Decision Transformer on the point maze (D4RL maze2d-style data, continuous actions).

Data (`data.builder="minari"`): the noisy waypoint controller (PD along a BFS path, Gaussian
action noise, as D4RL made maze2d) on random start and goal cells (`task="random_goal"`: dense
progress reward, the episode ends at the goal), written to a Minari dataset under the workdir
with random / expert reference returns. The DT has a tanh action head trained with MSE and is
conditioned on return-to-go; evaluation rolls it out on held-out start/goal pairs and reports
`model@<target>_goal_reached` (success), `_episode_length` (steps to the goal, the GPT-DTMA
paper's Table 4 metric) and `_d4rl_score` next to the random and expert baselines.

Paper scale (default) follows GPT-DTMA App. A: context 20, lr 1e-4 with 10K warmup steps, weight
decay 1e-4, batch 64, 100K updates, a GPT-2-sized DT (12 layers, 12 heads, d_model 768, dropout
0.1) trained from scratch (no GPT-2 weights), evaluated over 20 episodes per seed; medium maze.
`:quick`: U maze, a small model, a few CPU minutes.
"""

from icrl_jax.experiments.continuous import gpt_dtma_dt_config
from icrl_jax.core.config import apply_preset, cpu_preset

PRESETS = {
    "quick": cpu_preset(
        train_steps=3000, batch_size=64, seq_len=10, learning_rate=1e-3, d_model=64,
        num_layers=2, num_heads=4,
        **{"env.kwargs.layout": "umaze", "env.kwargs.episode_length": 300,
           "data.dataset_id": "point_maze/umaze-waypoint-v0",
           "data.num_train_tasks": 200, "data.num_steps": 1200,
           "model.max_timestep": 300, "model.rtg_scale": 3.0,
           "train.weight_decay": 0.0,
           "eval.num_envs_per_task": 1, "eval.num_steps": 300,
           "eval.target_returns": (3.0,)}),
}


def add_maze_data(config) -> None:
    """The environment and data sections shared by the point-maze experiments (DT here,
    Uni[MASK]'s in experiments/unimask/maze2d.py): the medium maze with random start and goal,
    noisy waypoint-controller episodes in a Minari dataset under the work directory."""
    config.env.name = "point_maze"
    config.env.kwargs.layout = "medium"
    config.env.kwargs.task = "random_goal"
    config.env.kwargs.episode_length = 600
    config.data.builder = "minari"
    config.data.dataset_id = "point_maze/medium-waypoint-v0"
    config.data.minari_root = ""  # default: <workdir>/minari
    config.data.source = "waypoint"
    config.data.source_kwargs.noise_scale = 0.5  # action noise std, before the clip to [-1, 1]
    config.data.num_train_tasks = 1000  # random (start, goal) pairs
    config.data.num_test_tasks = 20  # held-out pairs: 20 evaluation episodes per seed
    config.data.histories_per_task = 1
    config.data.num_steps = 1000  # 1000 x 1000 = 1M steps in all: D4RL's maze2d-medium size


def get_config(preset: str = ""):
    config = gpt_dtma_dt_config("dt_point_maze", rtg_scale=10.0, max_timestep=600)
    add_maze_data(config)
    config.eval.target_returns = (5.0,)
    config.eval.baselines = ("random", "expert")
    return apply_preset(config, PRESETS, preset)
