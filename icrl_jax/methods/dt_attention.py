"""Attention maps of a Decision Transformer rollout: per layer, per head, over labelled tokens.

`context_attention` reads the backbone's attention weights on one context (padding tokens dropped),
e.g. the last context of an evaluation rollout. The maps are
written as a self-contained interactive HTML page (hover a token to highlight what it attends to,
as the M-SAT paper's CircuitsVis figures; no network access needed) and as PNG heatmaps. Tokens
are labelled r{t}, s{t}, a{t} or a{i}_{t} (component i of step t), as in the paper's appendix 7.6.
"""

from __future__ import annotations

import html
import json
import os

import jax
import jax.numpy as jnp
import numpy as np

from icrl_jax.data.trajectories import Trajectories
from icrl_jax.core.plots import save_figure
from icrl_jax.models.trajectory_tokens import token_labels


def context_attention(method, params, context: Trajectories) -> tuple[np.ndarray, list[str]]:
    """Attention of ONE context (`(K, ...)` fields) -> float32 `(layers, H, T, T)` over its valid
    tokens (query rows, key columns) and their labels (length T)."""
    batch = jax.tree.map(lambda x: jnp.asarray(x)[None], context)
    _, attention = method.apply(params, batch, return_attention=True)
    maps = np.stack([np.asarray(a[0], np.float32) for a in attention])
    mask = np.asarray(context.mask, bool)
    per_step = method.tokens_per_step
    valid = np.repeat(mask, per_step)
    maps = maps[:, :, valid][:, :, :, valid]
    steps = np.asarray(context.timesteps)[mask].tolist()
    return maps, token_labels(steps, per_step - 2)


_PAGE = """<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: sans-serif; margin: 1em; }}
#tokens span {{ display: inline-block; padding: 2px 4px; margin: 2px; border: 1px solid #ccc;
  border-radius: 3px; font-family: monospace; cursor: default; }}
#tokens span.query {{ outline: 2px solid #1f4e9c; }}
.r {{ color: #8a5a00; }} .s {{ color: #1f6f2a; }} .a {{ color: #8a1f1f; }}
canvas {{ border: 1px solid #999; image-rendering: pixelated; }}
</style></head><body>
<h2>{title}</h2>
<p>Layer <select id="layer"></select> Head <select id="head"></select>
  Hover a token to highlight the tokens it attends to (darker = more attention).</p>
<div id="tokens"></div>
<p id="info">&nbsp;</p>
<canvas id="heat" width="400" height="400"></canvas>
<p>Heatmap: rows are queries, columns keys (token order above).</p>
<script>
const DATA = {data};
const layerSel = document.getElementById("layer"), headSel = document.getElementById("head");
DATA.maps.forEach((_, l) => layerSel.add(new Option(String(l), l)));
headSel.add(new Option("mean", -1));
DATA.maps[0].forEach((_, h) => headSel.add(new Option(String(h), h)));
const box = document.getElementById("tokens"), info = document.getElementById("info");
const spans = DATA.labels.map((label, i) => {{
  const s = document.createElement("span");
  s.textContent = label; s.className = label[0];
  s.onmouseenter = () => highlight(i); s.onmouseleave = () => highlight(-1);
  box.appendChild(s); return s;
}});
function current() {{
  const layer = DATA.maps[+layerSel.value], h = +headSel.value;
  if (h >= 0) return layer[h];
  return layer[0].map((row, i) => row.map((_, j) =>
    layer.reduce((sum, head) => sum + head[i][j], 0) / layer.length));
}}
function highlight(q) {{
  const m = current();
  spans.forEach((s, j) => {{
    s.classList.toggle("query", j === q);
    const w = q < 0 ? 0 : m[q][j];
    const top = q < 0 ? 1 : Math.max(...m[q]) || 1;
    s.style.background = q < 0 ? "" : `rgba(220, 40, 40, ${{(w / top).toFixed(3)}})`;
    s.title = q < 0 ? "" : `${{DATA.labels[q]}} -> ${{DATA.labels[j]}}: ${{w.toFixed(4)}}`;
  }});
  if (q >= 0) {{
    const order = m[q].map((w, j) => [w, j]).sort((a, b) => b[0] - a[0]).slice(0, 5);
    info.textContent = `${{DATA.labels[q]}} attends most to: ` +
      order.map(([w, j]) => `${{DATA.labels[j]}} (${{w.toFixed(3)}})`).join(", ");
  }} else info.innerHTML = "&nbsp;";
}}
function drawHeat() {{
  const m = current(), n = m.length, c = document.getElementById("heat");
  const ctx = c.getContext("2d"), cell = c.width / n;
  ctx.clearRect(0, 0, c.width, c.height);
  for (let i = 0; i < n; i++) for (let j = 0; j < n; j++) {{
    const v = Math.round(255 * (1 - Math.min(1, Math.sqrt(m[i][j]))));
    ctx.fillStyle = `rgb(255, ${{v}}, ${{v}})`;
    ctx.fillRect(j * cell, i * cell, Math.ceil(cell), Math.ceil(cell));
  }}
}}
layerSel.onchange = headSel.onchange = () => {{ highlight(-1); drawHeat(); }};
drawHeat();
</script></body></html>
"""


def write_attention_html(path: str, maps: np.ndarray, labels: list[str],
                         title: str = "attention") -> str:
    """Write the interactive page for `maps` `(layers, H, T, T)` and `labels` (T); returns path."""
    maps = np.asarray(maps, np.float32)
    if maps.ndim != 4 or maps.shape[2] != maps.shape[3] or maps.shape[2] != len(labels):
        raise ValueError(f"maps must be (layers, heads, T, T) with T = {len(labels)} labels, "
                         f"got {maps.shape}")
    data = dict(labels=labels, maps=np.round(maps, 4).tolist())
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        # "</" inside a script block would end it; labels and numbers never contain it.
        f.write(_PAGE.format(title=html.escape(title), data=json.dumps(data)))
    return path


def save_attention_pngs(directory: str, maps: np.ndarray, labels: list[str],
                        prefix: str = "attention") -> list[str]:
    """One PNG per layer with a heatmap per head; returns the paths."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(directory, exist_ok=True)
    num_layers, num_heads, n, _ = maps.shape
    cols = min(num_heads, 4)
    rows = -(-num_heads // cols)
    step = max(1, n // 24)  # at most ~24 tick labels per axis
    paths = []
    for layer in range(num_layers):
        fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 4 * rows), squeeze=False)
        for h, ax in enumerate(axes.flat):
            if h >= num_heads:
                ax.axis("off")
                continue
            ax.imshow(maps[layer, h], cmap="Reds", vmin=0.0, vmax=1.0)
            ax.set_title(f"layer {layer} head {h}", fontsize=9)
            ticks = np.arange(0, n, step)
            ax.set_xticks(ticks, [labels[i] for i in ticks], rotation=90, fontsize=6)
            ax.set_yticks(ticks, [labels[i] for i in ticks], fontsize=6)
        paths.append(save_figure(fig, os.path.join(directory, f"{prefix}_layer{layer}.png"), dpi=110))
    return paths


def write_attention(workdir: str, maps: np.ndarray, labels: list[str], title: str) -> dict:
    """The HTML page and the PNGs of a run's attention under `workdir/attention/`; returns
    their paths as eval results (`attention_html`, `attention_png`)."""
    directory = os.path.join(workdir, "attention")
    return {"attention_html": write_attention_html(os.path.join(directory, "attention.html"),
                                                   maps, labels, title),
            "attention_png": save_attention_pngs(directory, maps, labels)}
