"""Output heads and their losses."""

from __future__ import annotations

import jax
import jax.numpy as jnp

# Large negative rather than -inf so that masked logits never produce NaN in softmax or its grad.
MASKED_LOGIT = -1e9


def mask_logits(logits: jax.Array, action_mask: jax.Array) -> jax.Array:
    """logits `(..., A)`, action_mask bool broadcastable to it -> masked logits."""
    return jnp.where(action_mask, logits, MASKED_LOGIT)


def smoothed_cross_entropy(logits: jax.Array, targets: jax.Array, action_mask: jax.Array,
                           label_smoothing: float) -> jax.Array:
    """Cross entropy against one-hot targets smoothed over the *available* actions only.

    Args:
      logits: `(..., A)` unmasked logits.
      targets: int `(...)`.
      action_mask: bool `(..., A)` (broadcastable).
    Returns:
      `(...)` per-position loss, float32 (also for bfloat16 logits: mixed precision).
    """
    logits = logits.astype(jnp.float32)
    action_mask = jnp.broadcast_to(action_mask, logits.shape)
    log_probs = jax.nn.log_softmax(mask_logits(logits, action_mask), axis=-1)
    one_hot = jax.nn.one_hot(targets, logits.shape[-1], dtype=log_probs.dtype)
    available = action_mask.astype(log_probs.dtype)
    uniform = available / jnp.maximum(available.sum(-1, keepdims=True), 1.0)
    target = (1.0 - label_smoothing) * one_hot + label_smoothing * uniform
    return -(target * jnp.where(action_mask, log_probs, 0.0)).sum(-1)


def checked_temperature(temperature) -> float:
    """The sampling temperature as a float, or a clear error when it is not > 0."""
    if not float(temperature) > 0.0:
        raise ValueError(f"sampling temperature must be > 0 (eval.greedy=True takes the argmax), "
                         f"got {temperature}")
    return float(temperature)


def select_actions(key: jax.Array, logits: jax.Array, action_mask: jax.Array,
                   greedy: bool | jax.Array, temperature: float = 1.0) -> jax.Array:
    """Sample from softmax(logits / temperature) (or take the argmax) of masked logits `(..., A)`
    -> int32 `(...)`. A temperature below 1 sharpens the trained distribution; the argmax is
    its limit at 0."""
    masked = mask_logits(logits, action_mask)
    sampled = jax.random.categorical(key, masked / temperature, axis=-1)
    return jnp.where(greedy, jnp.argmax(masked, axis=-1), sampled).astype(jnp.int32)
