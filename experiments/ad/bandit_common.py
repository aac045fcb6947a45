"""What the AD bandit experiments share (Headless-AD sections 4.1-4.2, AD baselines)."""

from icrl_jax.methods.fields import ad_config
from icrl_jax.core.config import cpu_preset

QUICK = cpu_preset(train_steps=1000, batch_size=64, seq_len=100, **{
    "env.kwargs.arms": 5,
    "data.num_train_tasks": 2000,
    "data.num_test_tasks": 200,
    "data.num_steps": 100,
    "eval.num_steps": 100,
})


def bandit_config(experiment: str, env_name: str, source: str):
    """Paper-scale layout: 10,000 histories of 300 steps, context 300, 100 held-out bandits x 5.

    The paper gives no dataset size for the contextual bandit, nor batch sizes or numbers of
    updates for either; ours are 10,000 histories, batch 128 and 30,000 updates.
    """
    config = ad_config()
    config.experiment = experiment
    config.env.name = env_name
    config.data.source = source
    config.data.num_train_tasks = 10_000
    config.data.num_test_tasks = 100
    config.data.num_steps = 300
    config.train.num_steps = 30_000
    config.train.batch_size = 128
    config.train.seq_len = 300
    config.train.steps_per_call = 100
    config.train.log_every = 500
    config.train.checkpoint_every = 5000
    config.eval.num_steps = 300
    config.eval.num_envs_per_task = 5
    return config
