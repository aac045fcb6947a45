"""Uni[MASK] experiments (Carroll et al. 2022): DoorKey heatmaps and the Maze2D returns table."""

from icrl_jax.papers.unimask.fields import grid_config, unimask_eval_config, unimask_model_config


def add_unimask_fields(config, *, d_model: int, num_layers: int, num_heads: int,
                       mlp_ratio: int, seq_len: int) -> None:
    """The model and trainer fields both Uni[MASK] experiments share: a bidirectional model,
    Adam at the paper's fixed rate 1e-4 (no decay, no weight decay), batch 100; and the `grid`
    section of their report with its defaults."""
    config.method = "unimask"
    config.model.update(unimask_model_config())
    config.eval.update(unimask_eval_config())
    config.grid = grid_config()
    config.model.causal = False
    config.model.d_model = d_model
    config.model.num_layers = num_layers
    config.model.num_heads = num_heads
    config.model.mlp_ratio = mlp_ratio
    config.train.seq_len = seq_len
    config.train.batch_size = 100
    config.train.learning_rate = 1e-4
    config.train.warmup_steps = 1
    config.train.min_lr_ratio = 1.0  # constant: Adam at a fixed rate, as the paper
    config.train.weight_decay = 0.0
    config.train.steps_per_call = 50
    config.eval.tasks = "test"
