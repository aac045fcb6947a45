"""The Headless-AD authors' bandit models, token for token, on the shared Transformer.

The authors' code (github.com/corl-team/headless-ad, `src/bandit/common/transformer.py` for
Headless-AD and `src/bandit/common/ad_transformer.py` for AD, over TinyLlama's block in
`src/tiny_llama/`) lays a bandit history out differently from `method.HeadlessADModel`:

* Two tokens per step, the action's and then the reward's, after a learned start pair (a "pad"
  action vector and a "pad" reward vector): t steps are 2 (t + 1) tokens.
* Every token is one shared linear map (`proj`, with bias) of a `token_dim` vector: for
  Headless-AD an action's random embedding, for AD a row of a learned action table; a reward
  (0 or 1) is a row of a learned two-row table. There is no observation.
* Headless-AD's action-set prompt: the embeddings of all `A` actions of the map (rows of
  unavailable actions zeroed) go in front of the history through the same `proj`. They are
  ordinary causal tokens with their own rotary positions 0..A-1, not a set: the order of the
  prompt matters, and a prompt token sees only the prompt tokens before it.
* The outputs are read at the reward tokens (the start pair's included): t + 1 of them; the
  output at the start reward predicts a_0 and the output at r_i predicts a_{i+1}, so training
  drops the last one. Headless-AD maps the hidden state back to `token_dim` (`out_proj`, with
  bias); AD to logits over `num_actions` (`head`, no bias).
* The backbone is TinyLlama's block: pre-norm RMSNorm (epsilon 1e-5, scale only), causal
  attention over all tokens with rotary embeddings on the whole head (base 10^4; the cos / sin
  cache held in bfloat16), qkv and output projections with biases (their `bias=True`), a
  SwiGLU feed-forward of width 4d without biases, a final RMSNorm. `reference_backbone` is that
  configuration of our one Transformer.

`ReferenceBanditModel` computes what their `Model.forward` computes (in float32: their kernels
run under bfloat16 autocast), `infonce_loss` and `ad_loss` their training losses,
`action_probabilities` their Headless-AD policy, and `params_from_reference` maps their
PyTorch state dict onto our parameters (tests/test_reference_equivalence.py checks all of it
against outputs of their code, tests/fixtures/make_headless_ad_fixtures.py).

Behaviour of their code these functions reproduce on purpose (each differs from
`method.py`): the InfoNCE loss zeroes the similarities of unavailable actions instead of
removing them, so those actions stay in the softmax's denominator with logit 0; the policy
is a softmax over raw similarities (no temperature tau, which only the loss divides by),
restricted to available actions. Not reproduced: their dropout. TinyLlama's fused RMSNorm
applies `dropout` to the norm's input and flash attention applies `attention_dropout`, both
whether the model is in training mode or not (evaluation rollouts included); our backbone's
residual / attention dropout act in training only and the reference model is deterministic.
"""

from __future__ import annotations

from typing import Mapping

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from icrl_jax.models.transformer import Transformer

HEADS = ("headless", "ad")


def reference_backbone(num_layers: int, num_heads: int, mlp_hidden: int | None = None,
                       norm_epsilon: float = 1e-5, bias: bool = True,
                       rotary_table_dtype: str = "bfloat16", **overrides) -> Transformer:
    """The authors' TinyLlama backbone (their bandit configs: `_norm_class=FusedRMSNorm`,
    `_mlp_class=LLaMAMLP`, `parallel_residual=False`, `rotary_percentage=1.0`,
    `bias=layer_norm_bias=True`, intermediate size 4d) as our shared Transformer. `bias` is
    their config's `bias` (the attention projections'; the SwiGLU never has biases)."""
    kwargs = dict(num_layers=num_layers, num_heads=num_heads, mlp_ratio=4, pre_norm=True,
                  position="rotary", causal=True, norm="rmsnorm", norm_epsilon=norm_epsilon,
                  mlp_type="swiglu", mlp_hidden=mlp_hidden, mlp_bias=False,
                  attention_bias=bias, rotary_base=10000.0,
                  rotary_table_dtype=rotary_table_dtype)
    kwargs.update(overrides)
    return Transformer(**kwargs)


def available_mask(num_actions_per_env: jax.Array, num_total: int) -> jax.Array:
    """int `(B,)` arm counts -> float `(B, num_total)`, 1 for the first count entries."""
    return (jnp.arange(num_total)[None, :] < num_actions_per_env[:, None]).astype(jnp.float32)


def action_set_prompt(action_embeddings: jax.Array, num_actions_per_env: jax.Array) -> jax.Array:
    """The authors' action-set prompt: the `(A, E)` map tiled over the batch, with the rows of
    actions beyond each env's arm count zeroed -> `(B, A, E)`."""
    mask = available_mask(num_actions_per_env, action_embeddings.shape[0])
    return action_embeddings[None] * mask[..., None]


def interleave(actions: jax.Array, rewards: jax.Array) -> jax.Array:
    """`(B, n, E)` action tokens and `(B, n, E)` reward tokens -> `(B, 2n, E)`: a_0, r_0, ..."""
    batch, n, dim = actions.shape
    return jnp.stack([actions, rewards], axis=2).reshape(batch, 2 * n, dim)


def window_inputs(prev_actions: jax.Array, prev_rewards: jax.Array,
                  action_embeddings: jax.Array | None = None) -> tuple[jax.Array, jax.Array]:
    """The reference model's inputs for one of our windows of L steps (`StepWindows`: step t
    holds a_t as `actions` and a_{t-1}, r_{t-1} as `prev_actions`, `prev_rewards`).

    Steps 1..L-1's previous action and reward are the window's steps 0..L-2: the L - 1 step
    token pairs whose L outputs (start pair included) predict the window's L `actions`, as
    their training pairs outputs and targets (`pred[:, :-1]` against the window's actions).
    Step 0's previous action is not used: the start pair stands in its place, as in their
    windows (which start with it wherever they lie in a history). Returns (action ids
    `(B, L-1)`, or their embeddings `(B, L-1, E)` given the `(A, E)` map; int rewards
    `(B, L-1)`; bandit rewards are 0 or 1).
    """
    actions = prev_actions[:, 1:]
    rewards = prev_rewards[:, 1:].astype(jnp.int32)
    if action_embeddings is not None:
        actions = action_embeddings[actions]
    return actions, rewards


class ReferenceBanditModel(nn.Module):
    """The authors' bandit AD (`head="ad"`) or Headless-AD (`head="headless"`) model.

    Attributes:
      head: "headless" (predicts a `token_dim` action embedding) or "ad" (logits).
      d_model: the backbone's width (their `n_embd`).
      token_dim: the width of the input vectors before `proj` (their `n_token`,
        `token_embed_dim`); for Headless-AD also the action embeddings' width.
      backbone: the shared Transformer, as `reference_backbone` builds it.
      num_actions: AD only: rows of the action table and logits (their `train_max_arms`).
      prompt: Headless-AD only: put the action-set prompt in front (their
        `use_action_set_prompt`).
    """

    head: str
    d_model: int
    token_dim: int
    backbone: Transformer
    num_actions: int = 0
    prompt: bool = True

    @nn.compact
    def __call__(self, actions: jax.Array, rewards: jax.Array,
                 prompt: jax.Array | None = None, deterministic: bool = True) -> jax.Array:
        """Args:
          actions: Headless-AD: float `(B, t, token_dim)` embeddings of the actions taken;
            AD: int `(B, t)` action ids.
          rewards: int `(B, t)` rewards in {0, 1}.
          prompt: Headless-AD with `prompt`: float `(B, A, token_dim)` (`action_set_prompt`).
        Returns:
          the outputs at the t + 1 reward tokens: `(B, t + 1, token_dim)` predicted embeddings
          or `(B, t + 1, num_actions)` logits; output i predicts action a_i.
        """
        if self.head not in HEADS:
            raise ValueError(f"head must be one of {HEADS}, got {self.head!r}")
        batch = rewards.shape[0]
        reward_table = nn.Embed(2, self.token_dim, name="reward_emb")
        if self.head == "ad":
            if self.num_actions < 1:
                raise ValueError("the AD head needs num_actions >= 1")
            action_vectors = nn.Embed(self.num_actions, self.token_dim, name="action_emb")(actions)
        else:
            action_vectors = actions.astype(jnp.float32)
        normal = nn.initializers.normal(1.0)
        start_action = self.param("pad_action", normal, (self.token_dim,))
        start_reward = self.param("pad_reward", normal, (self.token_dim,))
        start = lambda v: jnp.broadcast_to(v, (batch, 1, self.token_dim))  # noqa: E731
        sequence = interleave(jnp.concatenate([start(start_action), action_vectors], axis=1),
                              jnp.concatenate([start(start_reward), reward_table(rewards)],
                                              axis=1))
        offset = 0
        if self.head == "headless" and self.prompt:
            if prompt is None:
                raise ValueError("a Headless-AD model with prompt=True needs the action-set "
                                 "prompt (action_set_prompt)")
            sequence = jnp.concatenate([prompt.astype(sequence.dtype), sequence], axis=1)
            offset = prompt.shape[1]
        hidden = self.backbone(nn.Dense(self.d_model, name="proj")(sequence),
                               deterministic=deterministic)
        hidden = hidden[:, offset + 1::2]
        if self.head == "ad":
            return nn.Dense(self.num_actions, use_bias=False, name="head")(hidden)
        return nn.Dense(self.token_dim, name="out_proj")(hidden)


def similarities(pred: jax.Array, action_embeddings: jax.Array, sim_measure: str = "dot"):
    """`(B, t, E)` predictions against the `(A, E)` map -> `(B, t, A)`: dot products, or
    cosines (their `sim_measure="cosine"`: the prediction normalised, the map as it is)."""
    if sim_measure == "cosine":
        pred = pred / jnp.linalg.norm(pred, axis=-1, keepdims=True)
    elif sim_measure != "dot":
        raise ValueError(f"sim_measure must be 'dot' or 'cosine', got {sim_measure!r}")
    return pred @ action_embeddings.T


def infonce_loss(pred: jax.Array, action_embeddings: jax.Array, actions: jax.Array,
                 num_actions_per_env: jax.Array, tau: float, sim_measure: str = "dot"):
    """Their Headless-AD loss (`loss_fn` of `src/bandit/algorithms/headless_ad.py`): pred
    `(B, t, E)` (the model's outputs without the last), the `(A, E)` map, target ids `(B, t)`,
    arm counts `(B,)` -> (mean loss, mean prediction norm).

    Similarities are divided by tau and those of unavailable actions multiplied by 0 (they stay
    in the denominator with logit 0); the loss is the cross entropy of the target's logit.
    """
    norm = jnp.linalg.norm(pred, axis=-1)
    sim = similarities(pred, action_embeddings, sim_measure) / tau
    sim = sim * available_mask(num_actions_per_env, action_embeddings.shape[0])[:, None]
    sim = sim - sim.max(-1, keepdims=True)
    target = jnp.take_along_axis(sim, actions[..., None], axis=-1)[..., 0]
    loss = -(target - jnp.log(jnp.exp(sim).sum(-1))).mean()
    return loss, norm.mean()


def action_probabilities(pred: jax.Array, action_embeddings: jax.Array,
                         num_actions_per_env: jax.Array, sim_measure: str = "dot") -> jax.Array:
    """Their Headless-AD policy (`ActionMapper.get_action`): softmax over the raw similarities
    (no tau), unavailable actions set to 0 and the rest renormalised -> `(B, t, A)`."""
    probs = jax.nn.softmax(similarities(pred, action_embeddings, sim_measure), axis=-1)
    probs = probs * available_mask(num_actions_per_env, action_embeddings.shape[0])[:, None]
    return probs / probs.sum(-1, keepdims=True)


def ad_loss(logits: jax.Array, actions: jax.Array, label_smoothing: float = 0.0) -> jax.Array:
    """Their AD loss: PyTorch's cross entropy with label smoothing over logits `(B, t, A)`
    (the model's outputs without the last) and target ids `(B, t)`, averaged."""
    logp = jax.nn.log_softmax(logits, axis=-1)
    nll = -jnp.take_along_axis(logp, actions[..., None], axis=-1)[..., 0]
    return ((1.0 - label_smoothing) * nll - label_smoothing * logp.mean(-1)).mean()


class ReferenceWeightsError(ValueError):
    """The authors' state dict does not fit the model: a missing, extra or misshapen tensor."""


def _layer_mapping(i: int, num_heads: int) -> dict:
    """Their block i's tensor names -> (our parameter path, conversion)."""
    ours = ("backbone", f"block_{i}")
    theirs = f"transformer.h.{i}."

    def qkv_kernel(w):  # ((H, 3, Dh) x D rows: q, k, v of head 0, then of head 1, ...) -> ours
        rows, width = w.shape
        return w.reshape(num_heads, 3, rows // (3 * num_heads), width).transpose(3, 1, 0, 2)

    def qkv_bias(b):
        return b.reshape(num_heads, 3, -1).transpose(1, 0, 2)

    def out_kernel(w):  # (D, H Dh) -> (H, Dh, D)
        return w.T.reshape(num_heads, -1, w.shape[0])

    return {
        theirs + "norm_1.weight": (ours + ("norm1", "scale"), None),
        theirs + "norm_2.weight": (ours + ("norm2", "scale"), None),
        theirs + "attn.attn.weight": (ours + ("attention", "qkv", "kernel"), qkv_kernel),
        theirs + "attn.attn.bias": (ours + ("attention", "qkv", "bias"), qkv_bias),
        theirs + "attn.proj.weight": (ours + ("attention", "out", "kernel"), out_kernel),
        theirs + "attn.proj.bias": (ours + ("attention", "out", "bias"), None),
        theirs + "mlp.swiglu.w1.weight": (ours + ("mlp", "gate", "kernel"), np.transpose),
        theirs + "mlp.swiglu.w2.weight": (ours + ("mlp", "up", "kernel"), np.transpose),
        theirs + "mlp.swiglu.w3.weight": (ours + ("mlp", "down", "kernel"), np.transpose),
        theirs + "mlp.swiglu.w1.bias": (ours + ("mlp", "gate", "bias"), None),
        theirs + "mlp.swiglu.w2.bias": (ours + ("mlp", "up", "bias"), None),
        theirs + "mlp.swiglu.w3.bias": (ours + ("mlp", "down", "bias"), None),
    }


def reference_mapping(model: ReferenceBanditModel) -> dict:
    """Their state-dict names -> (our parameter path, conversion of the tensor or None)."""
    squeeze = lambda v: v.reshape(-1)  # noqa: E731  (1, 1, E) -> (E,)
    mapping = {
        "pad_tensor_acts": (("pad_action",), squeeze),
        "pad_tensor_rews": (("pad_reward",), squeeze),
        "transformer.proj.weight": (("proj", "kernel"), np.transpose),
        "transformer.proj.bias": (("proj", "bias"), None),
        "transformer.reward_emb.weight": (("reward_emb", "embedding"), None),
        "transformer.ln_f.weight": (("backbone", "final_norm", "scale"), None),
    }
    if model.head == "ad":
        mapping["transformer.action_emb.weight"] = (("action_emb", "embedding"), None)
        mapping["transformer.head.weight"] = (("head", "kernel"), np.transpose)
    else:
        mapping["transformer.out_proj.weight"] = (("out_proj", "kernel"), np.transpose)
        mapping["transformer.out_proj.bias"] = (("out_proj", "bias"), None)
    for i in range(model.backbone.num_layers):
        mapping.update(_layer_mapping(i, model.backbone.num_heads))
    return mapping


def _reference_shape(their_name: str, our_shape: tuple, convert, num_heads: int) -> tuple:
    """The shape their tensor must have to convert to `our_shape`."""
    if their_name.startswith("pad_tensor_"):
        return (1, 1) + our_shape
    if their_name.endswith("attn.attn.weight"):  # ours (D, 3, H, Dh)
        return (int(np.prod(our_shape[1:])), our_shape[0])
    if their_name.endswith("attn.attn.bias"):  # ours (3, H, Dh)
        return (int(np.prod(our_shape)),)
    if their_name.endswith("attn.proj.weight"):  # ours (H, Dh, D)
        return (our_shape[2], our_shape[0] * our_shape[1])
    if convert is np.transpose:
        return tuple(reversed(our_shape))
    return our_shape


def params_from_reference(model: ReferenceBanditModel, state_dict: Mapping[str, np.ndarray],
                          example_inputs: tuple) -> dict:
    """Our parameters from their `Model.state_dict()` (tensors as numpy arrays, e.g. read
    from a safetensors file). `example_inputs`: arguments of `model.__call__` that fix the
    parameter shapes (any values). Raises `ReferenceWeightsError` naming the tensor and both
    shapes when a tensor does not fit, and every missing or unexpected tensor."""
    shapes = jax.eval_shape(lambda: model.init(jax.random.key(0), *example_inputs))["params"]
    mapping = {name: entry for name, entry in reference_mapping(model).items()
               if _exists(shapes, entry[0])}
    missing = sorted(set(mapping) - set(state_dict))
    extra = sorted(set(state_dict) - set(mapping))
    if missing or extra:
        raise ReferenceWeightsError(
            "the state dict does not fit the model: "
            + (f"missing {missing}" if missing else "")
            + ("; " if missing and extra else "")
            + (f"unexpected {extra}" if extra else ""))
    params: dict = {}
    for name, (path, convert) in mapping.items():
        want = tuple(_get(shapes, path).shape)
        value = np.asarray(state_dict[name], np.float32)
        need = _reference_shape(name, want, convert, model.backbone.num_heads)
        if value.shape != need:
            raise ReferenceWeightsError(
                f"reference parameter {name!r} has shape {value.shape}, but the model "
                f"needs {need} (our {'/'.join(path)} of shape {want})")
        value = value if convert is None else convert(value)
        _set(params, path, jnp.asarray(np.ascontiguousarray(value)))
    unset = ["/".join(getattr(k, "key", str(k)) for k in path)
             for path, _ in jax.tree_util.tree_flatten_with_path(shapes)[0]
             if not _exists(params, tuple(getattr(k, "key", k) for k in path))]
    if unset:
        raise ReferenceWeightsError(f"no reference tensor for our parameters {unset}")
    return params


def _exists(tree, path) -> bool:
    for key in path:
        if not isinstance(tree, Mapping) or key not in tree:
            return False
        tree = tree[key]
    return True


def _get(tree, path):
    for key in path:
        tree = tree[key]
    return tree


def _set(tree: dict, path, value) -> None:
    for key in path[:-1]:
        tree = tree.setdefault(key, {})
    tree[path[-1]] = value
