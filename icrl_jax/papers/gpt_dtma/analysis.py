"""GPT-DTMA's head analyses: per-head importance (Figs. 2 and 6, Tables 5 and 6) and attention
before and after fine-tuning (Fig. 4: `self_attention`, `plot_attention_before_after`).

Two readouts, both `(num_layers, H)`:
* `ablation_importance`: ||o - o_{-i}||_2, the change of the model's output when head i's output
  is replaced by zeros and nothing else changes (Bau et al. 2020; GPT-DTMA Experiment A), averaged
  over inputs;
* `gate_importance`: the mean Mixture-of-Attention gate of each head over valid tokens (the
  importance scores that MoA learns; G_Markov sums them over the Markov heads).
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from icrl_jax.core.plots import save_figure


def gate_importance(gates: jax.Array, token_weight: jax.Array) -> jax.Array:
    """Gates `(L, B, T, H)` and token weights `(B, T)` (1 = a valid token) -> `(L, H)` mean
    gate per head over the weighted tokens."""
    weight = token_weight.astype(jnp.float32)
    total = jnp.einsum("lbth,bt->lh", gates.astype(jnp.float32), weight)
    return total / jnp.maximum(weight.sum(), 1.0)


def ablation_importance(predict: Callable[[jax.Array], jax.Array], num_layers: int,
                        num_heads: int) -> np.ndarray:
    """`predict(head_scale (L, H)) -> (N, d)` outputs on N inputs -> `(L, H)` mean over the N of
    ||predict(ones) - predict(ones with head (l, h) zeroed)||_2. One vmapped program runs every
    ablation."""
    ones = jnp.ones((num_layers, num_heads), jnp.float32)
    ablations = 1.0 - jnp.eye(num_layers * num_heads).reshape(-1, num_layers, num_heads)
    full = predict(ones)
    ablated = jax.jit(jax.vmap(predict))(ablations)  # (L*H, N, d)
    distance = jnp.linalg.norm((ablated - full[None]).reshape(ablated.shape[:2] + (-1,)), axis=-1)
    return np.asarray(distance.mean(1)).reshape(num_layers, num_heads)


def plot_head_importance(importance: np.ndarray, markov: np.ndarray, path: str,
                         title: str) -> str:
    """Bars of `(L, H)` importance, layer-major, Markov heads (bool `(L, H)`) in red (the
    paper's Fig. 2). Returns the path written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    layers, heads = importance.shape
    fig, ax = plt.subplots(figsize=(max(4.0, 0.35 * layers * heads), 3.0))
    colors = np.where(markov.reshape(-1), "tab:red", "tab:blue")
    ax.bar(np.arange(layers * heads), importance.reshape(-1), color=colors)
    ax.set_xticks(np.arange(layers * heads))
    ax.set_xticklabels([f"{l}.{h}" for l in range(layers) for h in range(heads)], rotation=90,
                       fontsize=7)
    ax.set_xlabel("layer.head (red: Markov head)")
    ax.set_ylabel("importance")
    ax.set_title(title, fontsize=9)
    return save_figure(fig, path, dpi=120)


def self_attention(attention, token_weight: jax.Array) -> np.ndarray:
    """Per-layer attention weights `[(B, H, T, T)]` and token weights `(B, T)` (1 = valid) ->
    float32 `(layers, H)`: the mean weight a valid query token puts on itself, the most recent
    token under a causal mask (what GPT-DTMA's Markov heads do, its Fig. 4)."""
    weight = jnp.asarray(token_weight, jnp.float32)
    per_layer = [jnp.einsum("bht,bt->h", jnp.diagonal(a.astype(jnp.float32), axis1=-2, axis2=-1),
                            weight) for a in attention]
    return np.asarray(jnp.stack(per_layer) / jnp.maximum(weight.sum(), 1.0))


def plot_attention_before_after(before: np.ndarray, after: np.ndarray,
                                heads: list[tuple[int, int, str]], labels: list[str], path: str,
                                title: str) -> str:
    """Attention maps `(layers, H, T, T)` of one context before and after fine-tuning, for the
    chosen `(layer, head, caption)`s: one row per head, columns before / after (GPT-DTMA's
    Fig. 4). Returns the path written."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(labels)
    step = max(1, n // 12)
    ticks = np.arange(0, n, step)
    fig, axes = plt.subplots(len(heads), 2, figsize=(7, 3.4 * len(heads)), squeeze=False)
    for row, (layer, head, caption) in enumerate(heads):
        for col, (maps, when) in enumerate(((before, "before"), (after, "after"))):
            ax = axes[row, col]
            ax.imshow(maps[layer, head], cmap="Reds", vmin=0.0, vmax=1.0)
            ax.set_title(f"layer {layer} head {head} ({caption}), {when} fine-tuning",
                         fontsize=8)
            ax.set_xticks(ticks, [labels[i] for i in ticks], rotation=90, fontsize=6)
            ax.set_yticks(ticks, [labels[i] for i in ticks], fontsize=6)
    fig.suptitle(title, fontsize=9)
    return save_figure(fig, path, dpi=110)
