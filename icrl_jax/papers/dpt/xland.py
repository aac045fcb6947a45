"""DPT on XLand-MiniGrid: XLand-100B's DPT baseline, trained on the expert-action labels of
learning histories in their HDF5 layout (`data/xland_hdf5.py`).

Builders (`data.builder`), the shared XLand builders' files opened as `LabelledHistory`:

* `dpt_xland_ppo`: the recurrent PPO source's histories (`xland_ppo`: made on device if
  missing; the same file, so AD trains on the same transitions);
* `dpt_xland_hdf5`: a file the user has (`xland_hdf5`, e.g. XLand-Trivial-20B).

A step's label is the file's `expert_actions` (the final PPO policy's action there, XLand-100B's
relabelling). The files keep no observation after an episode's last step, so an episode's last
transition takes the next episode's first view as its s' (and a history's last step its own
view): 1 transition in 60 at the quick preset's episode length.
"""

from __future__ import annotations

import numpy as np

from icrl_jax.data.builders import BUILDERS
from icrl_jax.data.xland_hdf5 import XLandHDF5, XLandPPO, read_xland_hdf5, to_history
from icrl_jax.papers.dpt.data import LabelledHistory


def labelled_xland(tasks, num_actions: int) -> LabelledHistory:
    """`TaskHistories` of a file -> a `LabelledHistory` (module docstring)."""
    history = to_history(tasks, num_actions)
    observations = np.asarray(history.observations)
    next_observations = np.concatenate([observations[:, 1:], observations[:, -1:]], axis=1)
    labels = np.concatenate([t.expert_actions for t in tasks]).astype(np.int32)
    return LabelledHistory(**{name: getattr(history, name) for name in
                              ("observations", "actions", "rewards", "dones", "task_ids",
                               "action_mask")},
                           next_observations=next_observations, optimal_actions=labels)


class _Labelled:
    """Opens the XLand builder's file with its expert labels."""

    def open(self, config, env, path: str) -> LabelledHistory:
        data = config.data
        tasks = read_xland_hdf5(path, int(data.num_train_tasks), int(data.histories_per_task),
                                int(data.num_steps))
        return labelled_xland(tasks, env.num_actions)


class LabelledXLandPPO(_Labelled, XLandPPO):
    #: The builder that reads the same file as plain histories (the AD counterpart's).
    plain_builder = "xland_ppo"


class LabelledXLandHDF5(_Labelled, XLandHDF5):
    plain_builder = "xland_hdf5"


BUILDERS.register("dpt_xland_ppo", LabelledXLandPPO(), needs=("h5py", "xminigrid"))
BUILDERS.register("dpt_xland_hdf5", LabelledXLandHDF5(), needs=("h5py",))
