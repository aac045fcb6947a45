"""Uni[MASK] on the point maze with random start and goal (Carroll et al. 2022, App. H).

`icrl-jax report --config experiments/unimask/maze2d.py` trains behaviour-cloning,
reward-conditioned, goal-conditioned and random-mask models from every seed
(`icrl_jax/papers/unimask/rollouts.py`, `grid.evaluate="returns"`) and rolls them out on held-out start and
goal pairs: the random-mask model acting by behaviour cloning, by reward conditioning (return-to-go
1.1 x the return of the dataset episode with the nearest initial state) and by goal
conditioning, against the single-task models. Writes `returns.json` and `returns.png`.

Environment and data as `experiments/continuous/point_maze.py`: the JAX point maze with
`task="random_goal"` (random start and goal cells per episode, dense reward = distance covered
towards the goal, the episode ends at the goal) and D4RL-style noisy waypoint-controller episodes
in a Minari dataset. States (position, velocity, goal) and actions are continuous: L2 losses.

Paper scale (default): App. H's final hyperparameters for every condition (lr 1e-4, batch 100,
embedding 128, 4 layers, 16 heads, state loss weight 1), the medium maze. Deviations: early
stopping on the validation loss of held-out dataset episodes (the paper stops on evaluation
reward), a fixed step budget instead of 2000 epochs, snippets of k = 20 steps (the appendix does
not state k). `:quick`: the U maze, a small model, 3 seeds, minutes on 2 CPU cores.
"""


from icrl_jax.experiments.continuous.point_maze import add_maze_data
from icrl_jax.experiments.unimask import add_unimask_fields
from icrl_jax.core.config import apply_preset, base_config

PRESETS = {
    "quick": {
        "env.kwargs.layout": "umaze", "env.kwargs.episode_length": 300,
        "data.dataset_id": "point_maze/umaze-waypoint-v0", "data.num_train_tasks": 200,
        "data.num_steps": 1200, "data.num_test_tasks": 30,
        "model.d_model": 64, "model.num_layers": 2, "model.num_heads": 4, "model.mlp_ratio": 2,
        "model.max_timestep": 300.0, "model.rtg_scale": 3.0,
        "train.seq_len": 10, "train.batch_size": 100, "train.learning_rate": 1e-3,
        "train.warmup_steps": 50, "train.num_steps": 2000,
        "grid.num_seeds": 3, "grid.eval_every": 500, "grid.validation_episodes": 40,
    },
}


def get_config(preset: str = ""):
    config = base_config()
    config.experiment = "unimask_maze2d"
    add_maze_data(config)
    config.data.num_test_tasks = 50  # held-out (start, goal) pairs, one episode each
    add_unimask_fields(config, d_model=128, num_layers=4, num_heads=16, mlp_ratio=4, seq_len=20)
    config.model.rtg_scale = 10.0
    config.model.max_timestep = 600.0
    config.train.num_steps = 100_000
    config.train.log_every = 500
    config.report.kind = "grid"  # `icrl-jax report`: the regime grid and its heatmaps
    config.grid.update(dict(
        evaluate="returns",
        num_seeds=3,
        eval_every=5000,
        validation_episodes=100,  # the dataset's last episodes: early stopping
        rtg_factor=1.1,  # return-to-go = 1.1 x the nearest dataset episode's return
        overrides={},
    ))
    return apply_preset(config, PRESETS, preset)
