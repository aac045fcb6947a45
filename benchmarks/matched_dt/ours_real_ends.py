"""Diagnostic: our DT with training windows that always end at a real step.

    python benchmarks/matched_dt/ours_real_ends.py train --config benchmarks/matched_dt/config.py \\
        --config.seed=0 --config.workdir=runs/matched_dt/ours_real_ends/seed_0 \\
        --config.data.minari_root=runs/matched_dt/minari --config.run.progress=False

`icrl-jax train` (same flags) with one change, made here by replacing the sampler in
`data/trajectories.py` before `methods/dt.py` imports it (and before JAX starts, which the CLI
configures first): `sample_trajectory_windows` draws the episode and the end step
uniformly over the longest episode's length, so on the point maze's ragged episodes (mean 37
steps, longest 126) two windows in three end in the right padding with no real step at all and
a window holds 2.7 real steps on average (CORL's sampler: 8.8 of 10). Here the end step is
uniform over all real steps of all episodes (each real step is a target about equally often, as
in both samplers), so a window holds 8.8 real steps on average, as CORL's do.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from icrl_jax.data import trajectories
from icrl_jax.data.train_data import window_at


def sample_real_end_windows(data, key, batch_size: int, window: int):
    """`batch_size` windows of `pad_for_windows` data whose last step is real, uniform over the
    real steps (the episode in proportion to its length, then the end step uniform in it):
    `(N, T + window - 1)` fields -> `(B, window, ...)`. (A categorical over all N x T steps
    would need their cumulative sum, which XLA's CPU backend computes very slowly.)"""
    key_episode, key_end = jax.random.split(key)
    lengths = data.mask.sum(1)
    rows = jax.random.categorical(key_episode, jnp.log(lengths.astype(jnp.float32)), shape=(batch_size,))
    ends = jnp.floor(jax.random.uniform(key_end, (batch_size,)) * lengths[rows]).astype(jnp.int32)
    # A window ending at real step t starts at padded position t (window - 1 steps of left padding).
    return jax.vmap(lambda r, s: jax.tree.map(lambda x: window_at(x, r, s, window), data))(
        rows, jnp.minimum(ends, lengths[rows] - 1))


if __name__ == "__main__":
    trajectories.sample_trajectory_windows = sample_real_end_windows
    from icrl_jax.core.cli import main
    main()
