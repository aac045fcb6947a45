"""AD with n-gram induction heads on Dark Key-to-Door with 100 training goals (n-gram paper,
Fig. 2 and appendix F): random HP search over Table 2(a), EMP on 100 held-out goals.

Paper scale (default): 100 training tasks, 750 learning histories drawn from them (here 8 per
task = 800), 200 Q-learning episodes of 50 steps each (~7.5M transitions, 27x less than AD's
2048 x 2000 episodes), hidden 512, batch 1024, 10K updates.
Presets: `ad` (baseline, same budget and space), `quick` / `quick_ad` (a 2-core CPU in minutes:
tiny model, 400 updates, shape-preserving hyperparameters only, one vmapped program per method).
"""

from icrl_jax.config import apply_preset, base_config
from experiments.ngram.common import quick_preset
from icrl_jax.sweep import add_sweep_fields, nested_space, table2_space, vmappable_space


QUICK = quick_preset(**{
    "data.num_test_tasks": 20,
    "data.histories_per_task": 1,
})

PRESETS = {
    "ad": {"model.ngram_positions": (), "sweep.space": nested_space(table2_space(ngram=False))},
    "quick": dict(QUICK, **{"sweep.space": vmappable_space(table2_space(True))}),
    "quick_ad": dict(QUICK, **{"model.ngram_positions": (),
                             "sweep.space": vmappable_space(table2_space(False))}),
}


def get_config(preset: str = ""):
    config = base_config()
    config.experiment = "ngram_key_to_door"
    config.env.name = "key_to_door"
    config.data.source = "q_learning"
    config.data.source_kwargs.lr = 0.3
    config.data.source_kwargs.discount = 0.9
    config.data.source_kwargs.decay_fraction = 0.5
    config.data.num_train_tasks = 100
    config.data.num_test_tasks = 100
    config.data.histories_per_task = 8
    config.data.num_steps = 10_000  # 200 episodes of 50 steps
    config.model.d_model = 512
    config.model.num_layers = 4
    config.model.num_heads = 8
    config.model.max_len = 200
    config.model.ngram_positions = (1,)
    config.model.ngram_max = 1
    config.model.ngram_match = "transition"
    config.train.num_steps = 10_000
    config.train.batch_size = 1024
    config.train.seq_len = 200
    config.train.warmup_steps = 500
    config.train.steps_per_call = 100
    config.train.log_every = 100
    config.train.checkpoint_every = 1000
    config.eval.num_steps = 2000
    config.eval.num_envs_per_task = 1
    add_sweep_fields(config, table2_space(ngram=True), num_assignments=100, max_replicas=8)
    return apply_preset(config, PRESETS, preset)
