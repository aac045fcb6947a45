"""DPT on XLand-MiniGrid beside AD: XLand-100B's DPT baseline, trained on the expert-action
labels of the same learning histories AD distils (`experiments/xland/ad.py`: the same env,
rulesets, recurrent-PPO histories or HDF5 file, updates, batch and context length; each preset
of that file is one here), evaluated in context on the held-out rulesets.

DPT reads `train.seq_len` transitions of the history (each view one-hot coded per cell's tile
and colour, `papers/dpt/method.py`) with the query view first; its label is the final PPO
policy's action at the query (`papers/dpt/xland.py`). Online, episodes join its context when
they end and it acts on the last `train.seq_len` transitions. `icrl-jax report` trains 3 seeds
and AD (the AD file's model: its view encoder, rotary positions, attention window) on the same
file.
"""

from icrl_jax.experiments.dpt.common import authors_config
from icrl_jax.experiments.xland import ad as xland_ad

#: The presets: the AD file's, each applied there (its data, env and sizes) and copied here.
PRESETS = tuple(xland_ad.PRESETS)
#: The AD model fields the AD counterpart keeps from the AD experiment.
AD_MODEL = ("observation_encoder", "encoder_dim", "encoder_channels", "position",
            "attention_window", "embedding_dropout")


def get_config(preset: str = ""):
    ad = xland_ad.get_config(preset)
    config = authors_config("dpt_xland", ad.env.name)
    config.preset = ad.preset
    config.env.kwargs.update(ad.env.kwargs.to_dict())
    config.data.update(dict(ad.data.to_dict(), builder="dpt_" + ad.data.builder))
    config.model.update({k: ad.model[k] for k in ("d_model", "num_layers", "num_heads")})
    config.train.update({k: ad.train[k] for k in ("num_steps", "batch_size", "seq_len",
                                                  "learning_rate", "steps_per_call",
                                                  "log_every", "checkpoint_every")})
    config.eval.update({k: ad.eval[k] for k in ("num_steps", "num_envs_per_task", "greedy",
                                                "baselines")})
    config.report.update(dict(kind="dpt_claims", num_seeds=3))
    config.dpt.compare_ad = True
    config.dpt.ad_model.update({k: ad.model[k] for k in AD_MODEL})
    return config
