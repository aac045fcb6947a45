"""The Markov-head test of GPT-DTMA (Definition 1): which attention heads' W_q W_k^T is a Markov
matrix, i.e. attends mostly to the token itself (the most recent one, under a causal mask).

For head i of a layer, A_i = W_q^i (W_k^i)^T `(D, D)`. A_i is a Markov matrix when
* R.1: every diagonal element is positive, and
* R.2: mean |diagonal| / mean |off-diagonal| > r (the paper suggests r = 20).

Reads our transformer's parameters (`block_{l}/attention/qkv/kernel`, `(D, 3, H, D/H)`, or the
`q` and `kv` kernels of grouped-query attention), so it applies to GPT-2 loaded from Hugging
Face (`models/gpt2.py`), to Llama-family LMs (`models/llama.py`, e.g. SmolLM2), to a locally
pretrained LM and to any of our models, before and after fine-tuning. Beside the strict R.1
(every diagonal element positive) it reports `r1_fraction`, the fraction that is: a head of a
real LM can be Markov-like for all but a few of its D coordinates.

R.2 depends on the basis, not only on how strongly a head attends to its own token. A head
with W_q = W_k = W `(D, Dh)` in a random orthonormal basis (the most self-attending head a
rotation-invariant model can hold) has mean |diag| = E||w_d||^2 and mean |off-diag| =
E|<w_d, w_f>|, so R.2 ~= sqrt(pi Dh / 2) (`random_basis_ratio`): 7.1 for Dh = 32, 10.0 for
Dh = 64, below r = 20 whatever the training. Ratios above it need heads whose W_q, W_k rows
line up with the residual stream's coordinates (a privileged basis), as GPT-2 small's layer-0
heads do (paper Table 2: 23-30 at Dh = 64).
"""

from __future__ import annotations

from typing import Any

import numpy as np

R_DEFAULT = 20.0


def head_matrices(qkv_kernel: np.ndarray) -> np.ndarray:
    """`(D, 3, H, Dh)` fused kernel -> A_i = W_q^i (W_k^i)^T for every head, `(H, D, D)`."""
    kernel = np.asarray(qkv_kernel, np.float64)
    return np.einsum("dhe,fhe->hdf", kernel[:, 0], kernel[:, 1])


def attention_head_matrices(attention: dict[str, Any]) -> np.ndarray:
    """A block's attention params (fused `qkv`, or grouped-query `q` `(D, H, Dh)` and `kv`
    `(D, 2, KV, Dh)`, query head h reading key head h // (H / KV)) -> `(H, D, D)`."""
    if "qkv" in attention:
        return head_matrices(attention["qkv"]["kernel"])
    q = np.asarray(attention["q"]["kernel"], np.float64)
    k = np.asarray(attention["kv"]["kernel"], np.float64)[:, 0]
    k = np.repeat(k, q.shape[1] // k.shape[1], axis=1)
    return np.einsum("dhe,fhe->hdf", q, k)


def random_basis_ratio(head_dim: int) -> float:
    """R.2 of W W^T for a `(D, head_dim)` W with i.i.d. Gaussian entries: sqrt(pi Dh / 2)
    (diagonal Dh s^2 against E|N(0, Dh s^4)| = s^2 sqrt(2 Dh / pi) off it), for any D."""
    return float(np.sqrt(np.pi * head_dim / 2))


def markov_statistics(matrix: np.ndarray) -> tuple[bool, float]:
    """(R.1: all diagonal elements positive, R.2: mean |diag| / mean |off-diag|) of `(D, D)`."""
    d = matrix.shape[0]
    diag = np.diag(matrix)
    off = np.abs(matrix).sum() - np.abs(diag).sum()
    return bool((diag > 0).all()), float(np.abs(diag).mean() / (off / (d * d - d) + 1e-12))


def positive_diagonal_fraction(matrix: np.ndarray) -> float:
    """The fraction of `(D, D)`'s diagonal elements that are positive (R.1 holds at 1.0)."""
    return float((np.diag(matrix) > 0).mean())


def markov_heads(params: dict[str, Any], r: float = R_DEFAULT) -> list[dict[str, Any]]:
    """Per (layer, head) of a transformer's params (the `Transformer` module's tree, e.g.
    `GPT2LM` params["transformer"]): R.1, R.2 and whether it is a Markov head (R.1 and R.2 > r),
    layer-major."""
    out = []
    layer = 0
    while f"block_{layer}" in params:
        for head, matrix in enumerate(attention_head_matrices(params[f"block_{layer}"]["attention"])):
            r1, r2 = markov_statistics(matrix)
            out.append(dict(layer=layer, head=head, r1=r1, r2=round(r2, 3),
                            r1_fraction=round(positive_diagonal_fraction(matrix), 4),
                            markov=bool(r1 and r2 > r)))
        layer += 1
    if not out:
        raise ValueError("no block_0/attention in these parameters")
    return out


def markov_mask(params: dict[str, Any], r: float = R_DEFAULT) -> np.ndarray:
    """bool `(num_layers, H)`: which heads of a transformer's params are Markov heads."""
    heads = markov_heads(params, r)
    layers, per_layer = heads[-1]["layer"] + 1, heads[-1]["head"] + 1
    return np.array([h["markov"] for h in heads], bool).reshape(layers, per_layer)


def markov_summary(heads: list[dict[str, Any]], r: float = R_DEFAULT) -> dict[str, Any]:
    """A table row of `markov_heads`: heads, Markov heads at r, R.1 held strictly, the largest
    and median R.2 and R.1 fraction, and the share of heads with 99% of the diagonal positive."""
    r2 = np.array([h["r2"] for h in heads])
    frac = np.array([h["r1_fraction"] for h in heads])
    return dict(heads=len(heads), markov=int(sum(h["markov"] for h in heads)), r=r,
                r1_strict=int(sum(h["r1"] for h in heads)), r2_max=round(float(r2.max()), 2),
                r2_median=round(float(np.median(r2)), 2),
                r1_fraction_max=round(float(frac.max()), 4),
                r1_fraction_median=round(float(np.median(frac)), 4),
                heads_r1_fraction_99=int((frac >= 0.99).sum()))


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """`python -m icrl_jax.papers.gpt_dtma.markov_heads PATH`: the Markov-head table of a
    pretrained LM (anything `model.pretrained` takes: a Llama GGUF file, or a Hugging Face
    GPT-2, CLIP text or Llama directory, such as `icrl-jax pretrain-lm`'s) next to a random
    initialisation of the same blocks (seed 0), as JSON."""
    import argparse
    import json

    import jax
    import jax.numpy as jnp

    from icrl_jax.models.pretrained import load_pretrained
    from icrl_jax.models.transformer import Transformer

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("path")
    parser.add_argument("--r", type=float, default=R_DEFAULT)
    args = parser.parse_args(argv)
    stack, blocks = load_pretrained(args.path)
    init = Transformer(**dict(stack.fields)).init(jax.random.key(0),
                                                  jnp.zeros((1, 4, stack.d_model)))["params"]
    heads = dict(stack.fields)["num_heads"]
    table = {"family": stack.family,
             "pretrained": markov_summary(markov_heads(blocks, args.r), args.r),
             "random_init": markov_summary(markov_heads(jax.tree.map(np.asarray, init), args.r),
                                           args.r),
             "random_basis_r2": round(random_basis_ratio(stack.d_model // heads), 2)}
    print(json.dumps(table, indent=1))
    return table


if __name__ == "__main__":
    main()
