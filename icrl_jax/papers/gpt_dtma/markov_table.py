"""The Markov-head table of GPT-DTMA (Table 2 / Table 8's analogue) and Fig. 3's W_q W_k^T
figure, for any LM `model.pretrained` takes and the GPT-DT runs fine-tuned from it.

    python -m icrl_jax.papers.gpt_dtma.markov_table LM [--layers K] [--other NAME=PATH ...]
        [--finetuned NAME=RUN_DIR ...] [--figure PNG] [--out JSON]

Rows: the LM, a random initialisation of the same blocks (seed 0), both again for their first K
blocks with `--layers` (the blocks a GPT-DT(part) run takes), each `--other` LM (e.g. our quick
LM) and its random initialisation, and each
`--finetuned` run (its `heads.json`, written by GPT-DT's evaluation: the fine-tuned blocks' R.1
fraction and R.2). Each row gives the distribution over heads (min / quartiles / max of R.2 and
of the fraction of positive diagonal entries, R.1's), the heads that hold R.1 strictly, those
with >= 99% positive, and the Markov heads at r (default 20, the paper's; never tuned here).
`--figure`: A = W_q W_k^T `(D, D)` of the LM's head with the largest R.2 and of its head with
the smallest, on their first 64 coordinates (Fig. 3).
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

import numpy as np

from icrl_jax.core.plots import save_figure
from icrl_jax.papers.gpt_dtma.markov_heads import (R_DEFAULT, attention_head_matrices,
                                                   markov_heads, random_basis_ratio)


def distribution(r1_fraction, r2, r: float = R_DEFAULT) -> dict[str, Any]:
    """One table row from per-head R.1 fractions and R.2 values (any shape, same size): their
    quantiles (0, 25, 50, 75, 100 %), strict-R.1 heads (fraction 1.0), heads >= 99 % positive,
    and Markov heads (strict R.1 and R.2 > r)."""
    frac, ratio = np.ravel(np.asarray(r1_fraction, float)), np.ravel(np.asarray(r2, float))
    if frac.shape != ratio.shape or not frac.size:
        raise ValueError(f"r1_fraction and r2 need the same non-zero size, got {frac.size} and "
                         f"{ratio.size}")
    quantiles = (0, 25, 50, 75, 100)
    return dict(heads=int(frac.size),
                r2=[round(float(q), 2) for q in np.percentile(ratio, quantiles)],
                r1_fraction=[round(float(q), 3) for q in np.percentile(frac, quantiles)],
                r1_strict=int((frac == 1.0).sum()), r1_99=int((frac >= 0.99).sum()),
                markov=int(((frac == 1.0) & (ratio > r)).sum()))


def blocks_row(blocks: dict[str, Any], r: float = R_DEFAULT) -> dict[str, Any]:
    """`distribution` of a transformer's block params (`block_{i}/attention/...`)."""
    heads = markov_heads(blocks, r)
    return distribution([h["r1_fraction"] for h in heads], [h["r2"] for h in heads], r)


def finetuned_row(run_dir: str, r: float = R_DEFAULT) -> dict[str, Any]:
    """`distribution` of a GPT-DT run's fine-tuned blocks, from its `heads.json`."""
    path = os.path.join(run_dir, "heads.json")
    with open(path) as f:
        heads = json.load(f)
    if "finetuned_r2" not in heads:
        raise ValueError(f"{path} has no finetuned_r2 (written by GPT-DT's evaluation)")
    return distribution(heads["finetuned_r1_fraction"], heads["finetuned_r2"], r)


def random_blocks(stack, seed: int = 0) -> dict[str, Any]:
    """A fresh initialisation of the shared transformer in `stack`'s shape (numpy params)."""
    import jax
    import jax.numpy as jnp

    from icrl_jax.models.transformer import Transformer

    params = Transformer(**dict(stack.fields)).init(
        jax.random.key(seed), jnp.zeros((1, 4, stack.d_model)))["params"]
    return jax.tree.map(np.asarray, params)


def plot_head_matrices(blocks: dict[str, Any], path: str, title: str, size: int = 64) -> str:
    """Fig. 3: W_q W_k^T of the head with the largest R.2 and of the one with the smallest
    (their first `size` coordinates, each on its own symmetric colour scale). Returns the path."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    heads = markov_heads(blocks)
    per_layer = heads[-1]["head"] + 1
    r2 = np.array([h["r2"] for h in heads])
    fig, axes = plt.subplots(1, 2, figsize=(8, 4))
    for ax, index, which in ((axes[0], int(np.argmax(r2)), "largest"),
                             (axes[1], int(np.argmin(r2)), "smallest")):
        layer, head = divmod(index, per_layer)
        matrix = attention_head_matrices(blocks[f"block_{layer}"]["attention"])[head][:size, :size]
        scale = float(np.abs(matrix).max())
        ax.imshow(matrix, cmap="RdBu_r", vmin=-scale, vmax=scale)
        h = heads[index]
        ax.set_title(f"layer {layer} head {head} ({which} R.2 {h['r2']:.2f}, "
                     f"{100 * h['r1_fraction']:.1f}% diag > 0)", fontsize=8)
        ax.set_xticks([])
        ax.set_yticks([])
    fig.suptitle(title, fontsize=9)
    return save_figure(fig, path, dpi=110)


def _named(values: list[str], flag: str) -> list[tuple[str, str]]:
    out = []
    for value in values:
        name, sep, path = value.partition("=")
        if not sep or not name or not path:
            raise SystemExit(f"{flag} takes NAME=PATH, got {value!r}")
        out.append((name, path))
    return out


def markdown(table: dict[str, Any]) -> str:
    """The table's rows as Markdown (R.2 and R.1 fraction as min / median / max)."""
    lines = [f"| model | heads | R.2 min / q25 / median / q75 / max | positive diagonal fraction "
             f"min / median / max | R.1 strict | >= 99% positive | Markov at r = {table['r']:g} |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for name, row in table["rows"].items():
        q, f = row["r2"], row["r1_fraction"]
        lines.append(f"| {name} | {row['heads']} | {' / '.join(f'{x:.2f}' for x in q)} | "
                     f"{f[0]:.3f} / {f[2]:.3f} / {f[4]:.3f} | {row['r1_strict']} | "
                     f"{row['r1_99']} | {row['markov']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("lm", help="anything model.pretrained takes (a GGUF file or an HF dir)")
    parser.add_argument("--layers", type=int, default=0, help="also rows of its first K blocks")
    parser.add_argument("--name", default="", help="the LM's row name (default: its file name)")
    parser.add_argument("--other", action="append", default=[],
                        help="NAME=PATH, another LM's rows")
    parser.add_argument("--finetuned", action="append", default=[],
                        help="NAME=RUN_DIR, a GPT-DT run's fine-tuned blocks (its heads.json)")
    parser.add_argument("--r", type=float, default=R_DEFAULT)
    parser.add_argument("--figure", default="", help="write Fig. 3's W_q W_k^T figure here")
    parser.add_argument("--out", default="", help="write the table as JSON here")
    args = parser.parse_args(argv)
    from icrl_jax.models.pretrained import load_pretrained

    stack, blocks = load_pretrained(args.lm)
    name = args.name or os.path.basename(os.path.normpath(args.lm))
    heads = dict(stack.fields)["num_heads"]
    init = random_blocks(stack)
    rows = {name: blocks_row(blocks, args.r), f"random init, {name}'s shape": blocks_row(init, args.r)}
    if args.layers:
        def first(params):
            return {k: v for k, v in params.items()
                    if not k.startswith("block_") or int(k[len("block_"):]) < args.layers}
        rows[f"{name}, first {args.layers} blocks"] = blocks_row(first(blocks), args.r)
        rows[f"random init, first {args.layers} blocks"] = blocks_row(first(init), args.r)
    for other, path in _named(args.other, "--other"):
        other_stack, other_blocks = load_pretrained(path)
        rows[other] = blocks_row(other_blocks, args.r)
        rows[f"random init, {other}'s shape"] = blocks_row(random_blocks(other_stack), args.r)
    for other, run in _named(args.finetuned, "--finetuned"):
        rows[other] = finetuned_row(run, args.r)
    table = dict(r=args.r, random_basis_r2=round(random_basis_ratio(stack.d_model // heads), 2),
                 rows=rows)
    if args.figure:
        table["figure"] = plot_head_matrices(blocks, args.figure, f"{name}: W_q W_k^T")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(table, f, indent=1)
    print(json.dumps(table, indent=1))
    print(markdown(table))
    return table


if __name__ == "__main__":
    main()
