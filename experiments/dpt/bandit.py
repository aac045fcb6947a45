"""DPT on Gaussian bandits (Lee et al., 2023, section 5.1; the authors' `run_bandit.sh`).

Paper scale (default): 5 arms, means U(0, 1), reward noise 0.3; pretraining datasets of 500
pulls from the authors' Dirichlet-mixture behaviour (`papers/dpt/bandits.py`) on 80,000 bandits
(their 100,000 less the 20% they keep for a test loss), learning rate 1e-4, 400 epochs of
1,250 batches (their `--epoch 400`). Evaluation on 200 held-out bandits: online, 500 pulls
with the context growing by each pull, beside Thompson sampling, UCB and the empirical mean;
offline, one greedy choice from a dataset of 500 pulls of the pretraining behaviour, beside the
empirical mean, LCB and Thompson sampling reading the same dataset.

`quick`: 100-pull datasets on 4,000 bandits, 2 layers, 3,000 updates at learning rate 1e-3
(a few minutes on 2 CPU cores). `icrl-jax report` (`report.kind="dpt_claims"`) trains 3 seeds
and, with `dpt.compare_ad`, AD on the same histories.
"""

from icrl_jax.core.config import apply_preset
from icrl_jax.experiments.dpt.common import authors_config, quick_preset

PRESETS = {"quick": quick_preset(**{"data.num_train_tasks": 4000, "data.num_steps": 100,
                                    "eval.num_steps": 100})}


def get_config(preset: str = ""):
    config = authors_config("dpt_bandit", "gaussian_bandit")
    config.env.kwargs.update(dict(arms=5, noise=0.3))
    config.data.update(dict(source="dirichlet_mixture", num_train_tasks=80_000,
                            num_test_tasks=200, num_steps=500))
    config.train.update(dict(num_steps=500_000, seq_len=500, learning_rate=1e-4))
    config.eval.num_steps = 500
    config.dpt.offline = True
    config.dpt.comparisons.update({"gaussian_thompson": {}, "ucb": {}, "empirical_mean": {}})
    config.dpt.offline_comparisons.update({"empirical_mean": {"untried_first": False},
                                           "lcb": {}, "gaussian_thompson": {"draws": 100}})
    config.report.kind = "dpt_claims"
    config.dpt.compare_ad = True
    return apply_preset(config, PRESETS, preset)
