"""PNG plots of in-context learning curves."""

from __future__ import annotations

import os

import matplotlib

matplotlib.use("Agg")  # headless: CI and remote machines have no display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from icrl_jax.core.metrics import mean_and_stderr  # noqa: E402

COLOURS = {"model": "tab:blue", "source": "tab:green", "random": "tab:grey"}


def plot_curves(curves: dict[str, np.ndarray], path: str, *, xlabel: str, ylabel: str,
                title: str) -> str:
    """One line per policy with a standard-error band.

    Args:
      curves: name -> `(num_envs, num_points)` values (NaN = missing).
    """
    fig, ax = plt.subplots(figsize=(6, 4), dpi=120)
    for name, values in curves.items():
        mean, err = mean_and_stderr(values, axis=0)
        x = np.arange(1, mean.shape[0] + 1)
        colour = COLOURS.get(name.split(" ")[0])
        ax.plot(x, mean, label=name, color=colour)
        ax.fill_between(x, mean - err, mean + err, alpha=0.2, color=colour)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    return save_figure(fig, path)


def save_figure(fig, path: str, dpi: int | None = None) -> str:
    """Lay `fig` out, write it to `path` (making its folder), close it; returns `path`."""
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path
