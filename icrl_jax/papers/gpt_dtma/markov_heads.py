"""The Markov-head test of GPT-DTMA (Definition 1): which attention heads' W_q W_k^T is a Markov
matrix, i.e. attends mostly to the token itself (the most recent one, under a causal mask).

For head i of a layer, A_i = W_q^i (W_k^i)^T `(D, D)`. A_i is a Markov matrix when
* R.1: every diagonal element is positive, and
* R.2: mean |diagonal| / mean |off-diagonal| > r (the paper suggests r = 20).

Reads our transformer's parameters (`block_{l}/attention/qkv/kernel`, `(D, 3, H, D/H)`), so it
applies to GPT-2 loaded from Hugging Face (`models/gpt2.py`), to a locally pretrained LM and to
any of our models, before and after fine-tuning.

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


def markov_heads(params: dict[str, Any], r: float = R_DEFAULT) -> list[dict[str, Any]]:
    """Per (layer, head) of a transformer's params (the `Transformer` module's tree, e.g.
    `GPT2LM` params["transformer"]): R.1, R.2 and whether it is a Markov head (R.1 and R.2 > r),
    layer-major."""
    out = []
    layer = 0
    while f"block_{layer}" in params:
        kernel = params[f"block_{layer}"]["attention"]["qkv"]["kernel"]
        for head, matrix in enumerate(head_matrices(kernel)):
            r1, r2 = markov_statistics(matrix)
            out.append(dict(layer=layer, head=head, r1=r1, r2=round(r2, 3),
                            markov=bool(r1 and r2 > r)))
        layer += 1
    if not out:
        raise ValueError("no block_0/attention/qkv/kernel in these parameters")
    return out


def markov_mask(params: dict[str, Any], r: float = R_DEFAULT) -> np.ndarray:
    """bool `(num_layers, H)`: which heads of a transformer's params are Markov heads."""
    heads = markov_heads(params, r)
    layers, per_layer = heads[-1]["layer"] + 1, heads[-1]["head"] + 1
    return np.array([h["markov"] for h in heads], bool).reshape(layers, per_layer)
