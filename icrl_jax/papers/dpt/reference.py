"""The DPT authors' `Transformer` (`net.py` of jon--lee/decision-pretrained-transformer) as our
`DPTNet`: their state dict read into our parameters.

Their model is transformers' `GPT2Model` (one head; LayerNorm epsilon 1e-5, tanh GELU, learned
positions over `4 * (1 + horizon)` rows) fed by `embed_transition`, a linear map of
[s, a, s', r], and read by `pred_actions`, a linear head: exactly `DPTNet` over the shared
`Transformer` with `position="learned"`, `max_len=4 * (1 + horizon)`, `norm_epsilon=1e-5`.
GPT-2's Conv1D kernels are stored `(in, out)` as flax's, torch's Linear ones `(out, in)`.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from icrl_jax.core.errors import UserError
from icrl_jax.models.transformer import Transformer

#: Their block's parameter names (after `transformer.h.<i>.`) -> ours (under `block_<i>`).
_BLOCK_NAMES = {"ln_1.weight": ("norm1", "scale"), "ln_1.bias": ("norm1", "bias"),
                "ln_2.weight": ("norm2", "scale"), "ln_2.bias": ("norm2", "bias"),
                "attn.c_attn.weight": ("attention", "qkv", "kernel"),
                "attn.c_attn.bias": ("attention", "qkv", "bias"),
                "attn.c_proj.weight": ("attention", "out", "kernel"),
                "attn.c_proj.bias": ("attention", "out", "bias"),
                "mlp.c_fc.weight": ("Dense_0", "kernel"), "mlp.c_fc.bias": ("Dense_0", "bias"),
                "mlp.c_proj.weight": ("Dense_1", "kernel"), "mlp.c_proj.bias": ("Dense_1", "bias")}


def authors_backbone(num_layers: int, horizon: int, position: str = "learned") -> Transformer:
    """The shared transformer as their `GPT2Model` (one head)."""
    return Transformer(num_layers=num_layers, num_heads=1, position=position,
                       max_len=4 * (1 + horizon), norm_epsilon=1e-5)


def _attention(name: str, array: np.ndarray, width: int) -> np.ndarray:
    """Their fused qkv / output projection -> our per-head layout (one head)."""
    if name == "attn.c_attn.weight":
        return array.reshape(width, 3, 1, width)
    if name == "attn.c_attn.bias":
        return array.reshape(3, 1, width)
    if name == "attn.c_proj.weight":
        return array.reshape(1, width, width)
    return array


def authors_params(state: Mapping[str, np.ndarray], num_layers: int,
                   positions: bool = True) -> dict[str, Any]:
    """Their `Transformer.state_dict()` (numpy arrays, their key names) -> `DPTNet` params
    (float32); `positions=False` leaves out the position table (a model built with
    `position="none"`). Raises `UserError` naming a missing or unexpected key."""
    state = {k: np.asarray(v, np.float32) for k, v in state.items()
             if k != "transformer.wte.weight"}  # token embeddings: unused on input vectors
    width = state["embed_transition.weight"].shape[0] if "embed_transition.weight" in state else 0
    backbone: dict[str, Any] = {f"block_{i}": {} for i in range(num_layers)}
    params = {"embed_transition": {}, "action_head": {}, "backbone": backbone}
    used = set()

    def take(key):
        if key not in state:
            raise UserError(f"the authors' state dict has no {key!r}")
        used.add(key)
        return state[key]

    for ours, theirs in (("embed_transition", "embed_transition"), ("action_head", "pred_actions")):
        params[ours] = {"kernel": take(f"{theirs}.weight").T, "bias": take(f"{theirs}.bias")}
    for i in range(num_layers):
        for name, path in _BLOCK_NAMES.items():
            node = backbone[f"block_{i}"]
            for part in path[:-1]:
                node = node.setdefault(part, {})
            node[path[-1]] = _attention(name, take(f"transformer.h.{i}.{name}"), width)
    backbone["final_norm"] = {"scale": take("transformer.ln_f.weight"),
                              "bias": take("transformer.ln_f.bias")}
    if positions:
        backbone["position_embedding"] = take("transformer.wpe.weight")
    else:
        used.add("transformer.wpe.weight")
    extra = sorted(set(state) - used)
    if extra:
        raise UserError(f"the authors' state dict has parameters for more than {num_layers} "
                        f"layers or parts DPT does not have: {extra[:4]}")
    return params
