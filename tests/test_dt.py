"""Decision Transformer, M-SAT and MAT: token layout, masks, prediction rule, return
conditioning, rollouts and attention pages (tiny models, CPU-fast)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from icrl_jax import envs
from icrl_jax.methods.dt_attention import (context_attention, save_attention_pngs,
                                              write_attention_html)
from icrl_jax.data.history_generation import generate_histories
from icrl_jax.data.sources import noisy_expert
from icrl_jax.data.trajectories import (Trajectories, episodes_from_history,
                                        pad_for_windows, returns_to_go, sample_trajectory_windows)
from icrl_jax.methods.dt import DecisionTransformer, dt_model_config
from icrl_jax.data.rollout import run_policies
from icrl_jax.methods.dt_rollout import _push, empty_context, return_conditioned_source
from icrl_jax.papers.msat.method import MAT, MSAT
from icrl_jax.models.trajectory_tokens import (MultiActionTokens, interleave_step_tokens,
                                       step_attention_mask, token_labels)
from icrl_jax.core.config import default_transformer_config

DIMS = (5, 2)
K = 4


def model_config(**overrides):
    config = default_transformer_config()
    config.update(dt_model_config())
    config.update(dict(d_model=16, num_layers=1, num_heads=2, max_timestep=20), **overrides)
    return config


def random_batch(key, batch=2, length=K, obs_dim=6, mask=None):
    k1, k2, k3 = jax.random.split(key, 3)
    actions = jnp.stack([jax.random.randint(k1, (batch, length), 0, DIMS[0]),
                         jax.random.randint(k2, (batch, length), 0, DIMS[1])], -1)
    return Trajectories(
        observations=jax.random.normal(k3, (batch, length, obs_dim)), actions=actions,
        rewards=jnp.zeros((batch, length)), returns_to_go=jnp.ones((batch, length)),
        timesteps=jnp.broadcast_to(jnp.arange(length), (batch, length)).astype(jnp.int32),
        mask=jnp.ones((batch, length), bool) if mask is None else mask)


def test_token_layout_and_labels():
    b, length, d = 2, 3, 8
    r, s = jnp.full((b, length, d), 1.0), jnp.full((b, length, d), 2.0)
    a = jnp.stack([jnp.full((b, length, d), 3.0), jnp.full((b, length, d), 4.0)], axis=2)
    seq = interleave_step_tokens(r, s, a)
    assert seq.shape == (b, length * 4, d)
    np.testing.assert_array_equal(seq[0, :, 0], [1, 2, 3, 4] * length)
    assert token_labels([7, 8], 2) == ["r7", "s7", "a1_7", "a2_7", "r8", "s8", "a1_8", "a2_8"]
    assert token_labels([0], 1) == ["r0", "s0", "a0"]
    assert MSAT(model_config(), DIMS, K).tokens_per_step == 4
    assert DecisionTransformer(model_config(), DIMS, K).tokens_per_step == 3


def test_padding_masked_from_attention_and_loss():
    mask = jnp.array([[False, True, True]])
    allowed = step_attention_mask(mask, 3)[0, 0]
    assert allowed.shape == (9, 9)
    assert not allowed[3:, :3].any()  # valid tokens never see padding
    assert allowed[3:, 3:].sum() == 21  # causal over the 6 valid tokens
    assert np.all(np.asarray(allowed).sum(-1) >= 1)  # no empty softmax row
    # Changing padded steps changes neither the valid outputs nor the loss.
    method = MSAT(model_config(), DIMS, K)
    pad = jnp.array([[False, False, True, True]] * 2)
    batch = random_batch(jax.random.key(0), mask=pad)
    other = random_batch(jax.random.key(1), mask=pad)
    spliced = jax.tree.map(lambda a, b: a.at[:, :2].set(b[:, :2]) if a.ndim > 1 else a,
                           batch, other)
    params = method.init(jax.random.key(2), batch)
    out1, out2 = method.apply(params, batch), method.apply(params, spliced)
    np.testing.assert_allclose(out1[:, 2:], out2[:, 2:], atol=1e-5)
    loss1, _ = method.loss(params, batch, jax.random.key(0), deterministic=True)
    loss2, _ = method.loss(params, spliced, jax.random.key(0), deterministic=True)
    np.testing.assert_allclose(loss1, loss2, rtol=1e-5)


@pytest.mark.parametrize("cls", [DecisionTransformer, MSAT])
def test_state_rule_all_components_from_state_token(cls):
    """Default rule: step t's action outputs do not depend on step t's own action tokens."""
    method = cls(model_config(), DIMS, K)
    batch = random_batch(jax.random.key(0))
    params = method.init(jax.random.key(1), batch)
    changed = batch.replace(actions=batch.actions.at[:, -1].set((batch.actions[:, -1] + 1) % 2))
    out1, out2 = method.apply(params, batch), method.apply(params, changed)
    np.testing.assert_allclose(out1[:, -1], out2[:, -1], atol=1e-5)
    assert out1.shape == (2, K, sum(DIMS))


def test_autoregressive_rule_component_from_previous_token():
    """a^1_t is read from s_t, a^2_t from a^1_t: changing a^1_t changes only component 2."""
    method = MSAT(model_config(action_prediction="autoregressive"), DIMS, K)
    batch = random_batch(jax.random.key(0))
    params = method.init(jax.random.key(1), batch)
    changed = batch.replace(actions=batch.actions.at[:, -1, 0].add(1) % DIMS[0])
    out1, out2 = method.apply(params, batch), method.apply(params, changed)
    np.testing.assert_allclose(out1[:, -1, :5], out2[:, -1, :5], atol=1e-5)  # component 1
    assert np.abs(out1[:, -1, 5:] - out2[:, -1, 5:]).max() > 1e-4  # component 2
    with pytest.raises(ValueError, match="autoregressive"):
        DecisionTransformer(model_config(action_prediction="autoregressive"), DIMS, K)


def test_msat_token_depends_on_state_mat_does_not():
    actions = jnp.array([[[1, 0]]])
    s1, s2 = jnp.ones((1, 1, 8)), -jnp.ones((1, 1, 8))
    for with_state in (True, False):
        tokens = MultiActionTokens(8, DIMS, with_state)
        params = tokens.init(jax.random.key(0), actions, s1)
        t1, t2 = tokens.apply(params, actions, s1), tokens.apply(params, actions, s2)
        assert t1.shape == (1, 1, 2, 8)
        assert (np.abs(t1 - t2).max() > 1e-4) == with_state
    # MAT: same value in different components still gives different tokens (disjoint slots).
    tokens = MultiActionTokens(8, DIMS, False)
    params = tokens.init(jax.random.key(0), actions, s1)
    t = tokens.apply(params, jnp.array([[[1, 1]]]), s1)
    assert np.abs(t[0, 0, 0] - t[0, 0, 1]).max() > 1e-4
    assert MAT(model_config(), DIMS, K).model.state_in_action_tokens is False


def test_continuous_head_tanh_mse():
    method = DecisionTransformer(model_config(), (), K, continuous_dim=3)
    batch = random_batch(jax.random.key(0)).replace(actions=jnp.full((2, K, 3), 0.5))
    params = method.init(jax.random.key(1), batch)
    out = method.apply(params, batch)
    assert out.shape == (2, K, 3) and np.all(np.abs(out) <= 1.0)
    loss, _ = method.loss(params, batch, jax.random.key(0), deterministic=True)
    np.testing.assert_allclose(loss, ((out - 0.5) ** 2).mean(), rtol=1e-5)


def test_windows_are_left_padded_and_end_at_real_steps():
    rewards = jnp.array([[0.0, 1.0, 0.0, 2.0]])
    np.testing.assert_allclose(returns_to_go(rewards), [[3.0, 3.0, 2.0, 2.0]])
    traj = Trajectories(observations=jnp.zeros((1, 4, 2)), actions=jnp.zeros((1, 4, 2), jnp.int32),
                        rewards=rewards, returns_to_go=returns_to_go(rewards),
                        timesteps=jnp.arange(4)[None], mask=jnp.ones((1, 4), bool))
    data = pad_for_windows(traj, 3)
    windows = sample_trajectory_windows(data, jax.random.key(0), 64, 3)
    assert windows.mask.shape == (64, 3) and windows.mask[:, -1].all()
    # Padding only on the left; timesteps of the valid steps are consecutive.
    for mask, steps in zip(np.asarray(windows.mask), np.asarray(windows.timesteps)):
        first = np.argmax(mask)
        assert mask[first:].all() and not mask[:first].any()
        assert np.all(np.diff(steps[first:]) == 1)


def test_windows_end_uniformly_over_the_real_steps_of_ragged_episodes():
    """Episodes of 1, 3 and 6 real steps, right-padded to 6 then left-padded for K = 4: every
    window ends at a real step (none in the right padding), each of the 10 real steps is the end
    equally often (so episodes are drawn 1 : 3 : 6), and a window holds min(t + 1, K) real steps."""
    lengths, k = np.array([1, 3, 6]), 4
    mask = np.arange(6)[None] < lengths[:, None]
    rewards = jnp.asarray(mask, jnp.float32)
    traj = Trajectories(observations=jnp.asarray(np.arange(3)[:, None, None] * np.ones((3, 6, 1)), jnp.float32),
                        actions=jnp.zeros((3, 6, 1), jnp.int32), rewards=rewards,
                        returns_to_go=returns_to_go(rewards),
                        timesteps=jnp.broadcast_to(jnp.arange(6, dtype=jnp.int32), (3, 6)), mask=jnp.asarray(mask))
    windows = jax.jit(sample_trajectory_windows, static_argnums=(2, 3))(pad_for_windows(traj, k),
                                                                        jax.random.key(0), 10_000, k)
    assert np.asarray(windows.mask[:, -1]).all()
    episode = np.asarray(windows.observations[:, -1, 0]).astype(int)
    end = np.asarray(windows.timesteps[:, -1])
    assert np.all(end < lengths[episode])
    counts = np.zeros((3, 6))
    np.add.at(counts, (episode, end), 1)
    np.testing.assert_allclose(counts[mask] / 10_000, 0.1, atol=0.015)
    np.testing.assert_array_equal(np.asarray(windows.mask).sum(1), np.minimum(end + 1, k))


def test_unpadded_windows_are_whole_and_skip_too_short_episodes():
    """Without padding a window ends at a real step at position >= K - 1: whole real steps, and
    an episode shorter than K is never drawn."""
    mask = np.arange(5)[None] < np.array([[2], [5]])
    rewards = jnp.asarray(mask, jnp.float32)
    traj = Trajectories(observations=jnp.asarray([[[0.0]] * 5, [[1.0]] * 5]), actions=jnp.zeros((2, 5, 1), jnp.int32),
                        rewards=rewards, returns_to_go=returns_to_go(rewards),
                        timesteps=jnp.broadcast_to(jnp.arange(5, dtype=jnp.int32), (2, 5)), mask=jnp.asarray(mask))
    windows = sample_trajectory_windows(traj, jax.random.key(1), 600, 3)
    assert np.asarray(windows.mask).all() and np.all(np.asarray(windows.observations) == 1.0)
    np.testing.assert_array_equal(np.unique(np.asarray(windows.timesteps[:, 0])), [0, 1, 2])


def test_button_room_dataset_and_rollout_shapes():
    env = envs.make("button_room", size=3, episode_length=6)
    params = env.task_params(jnp.arange(4))
    history = generate_histories(env, noisy_expert(env, 24), params, 24, jax.random.key(0))
    episodes = episodes_from_history(history, 6, env.split_action)
    assert episodes.actions.shape == (16, 6, 2) and episodes.observations.shape == (16, 6, 18)
    np.testing.assert_allclose(episodes.returns_to_go[:, 0], episodes.rewards.sum(-1), rtol=1e-5)
    assert episodes.rewards.dtype == jnp.float32
    method = MSAT(model_config(), env.action_dims, K)
    p = method.init(jax.random.key(0), sample_trajectory_windows(pad_for_windows(episodes, K),
                                                                 jax.random.key(1), 1, K))
    policy = return_conditioned_source(method, p, env, K, 5.0, greedy=False)
    out = run_policies(env, {"model": policy}, params, 12, jax.random.key(2))["model"]
    assert out["rewards"].shape == (4, 12) and out["actions"].shape == (4, 12)
    assert out["dones"][:, 5].all() and out["dones"].sum() == 8
    # The context holds the current episode's steps: after 12 steps of 6-step episodes it was
    # just cleared, and the last context is the second episode's last K steps.
    state = out["policy_state"]
    assert not np.asarray(state.context.mask).any()
    np.testing.assert_array_equal(np.asarray(state.last_context.timesteps[0]), np.arange(2, 6))
    np.testing.assert_allclose(np.asarray(state.return_to_go), 5.0)


def test_return_conditioning_changes_actions():
    """On a one-state task where low-return episodes pressed and high-return ones did not,
    a trained DT's action distribution follows the target return."""
    n, length = 64, 4
    high = jnp.arange(n) % 2 == 0
    press = jnp.where(high, 0, 1)[:, None] * jnp.ones((n, length), jnp.int32)
    actions = jnp.stack([jnp.zeros((n, length), jnp.int32), press], -1)
    rewards = jnp.where(high[:, None], 1.0, 0.0) * jnp.ones((n, length))
    traj = Trajectories(observations=jnp.zeros((n, length, 2)), actions=actions, rewards=rewards,
                        returns_to_go=returns_to_go(rewards),
                        timesteps=jnp.broadcast_to(jnp.arange(length), (n, length)),
                        mask=jnp.ones((n, length), bool))
    method = DecisionTransformer(model_config(rtg_scale=4.0), DIMS, 2)
    data = pad_for_windows(traj, 2)
    params = method.init(jax.random.key(0), sample_trajectory_windows(data, jax.random.key(0), 1, 2))
    opt = optax.adam(3e-3)

    @jax.jit
    def step(carry, key):
        params, opt_state = carry
        batch = sample_trajectory_windows(data, key, 32, 2)
        grads = jax.grad(lambda p: method.loss(p, batch, key, True)[0])(params)
        updates, opt_state = opt.update(grads, opt_state)
        return (optax.apply_updates(params, updates), opt_state), None

    (params, _), _ = jax.lax.scan(step, (params, opt.init(params)),
                                  jax.random.split(jax.random.key(1), 150))

    def press_probability(target):
        context = traj.replace(returns_to_go=jnp.full((n, length), target))
        context = jax.tree.map(lambda x: x[:1, :1], context)
        logits = method.apply(params, context)[0, -1, 5:]
        return float(jax.nn.softmax(logits)[1])

    assert press_probability(4.0) < 0.2 < 0.8 < press_probability(0.0)


def test_attention_page_names_tokens(tmp_path):
    env = envs.make("button_room", size=3, episode_length=6)
    method = MSAT(model_config(), env.action_dims, K)
    params = method.init(jax.random.key(0), random_batch(jax.random.key(0), obs_dim=18))
    policy = return_conditioned_source(method, params, env, K, 5.0, greedy=True)
    out = run_policies(env, {"model": policy}, env.task_params(jnp.arange(1)), K,
                       jax.random.key(1))["model"]
    context = jax.tree.map(lambda x: x[0], out["policy_state"].last_context)
    maps, labels = context_attention(method, params, context)
    assert maps.shape == (1, 2, 4 * K, 4 * K)  # 4 steps x (r, s, a1, a2)
    np.testing.assert_allclose(maps.sum(-1), 1.0, atol=1e-4)  # no padding left in the rows
    assert labels[:4] == ["r0", "s0", "a1_0", "a2_0"] and labels[-1] == "a2_3"
    page = write_attention_html(str(tmp_path / "attention.html"), maps, labels, "msat")
    text = open(page).read()
    assert "a1_3" in text and "s2" in text and "onmouseenter" in text and "http" not in text
    pngs = save_attention_pngs(str(tmp_path), maps, labels)
    assert len(pngs) == 1 and open(pngs[0], "rb").read(4) == b"\x89PNG"


def _episode(key, length, continuous=False, obs_dim=6):
    """One episode `(E, ...)` of random steps (returns-to-go random too: any values decode)."""
    k1, k2, k3, k4 = jax.random.split(key, 4)
    actions = (jax.random.uniform(k1, (length, 2), minval=-1, maxval=1) if continuous else
               jnp.stack([jax.random.randint(k1, (length,), 0, DIMS[0]),
                          jax.random.randint(k2, (length,), 0, DIMS[1])], -1))
    return Trajectories(observations=jax.random.normal(k3, (length, obs_dim)), actions=actions,
                        rewards=jnp.zeros(length), returns_to_go=jax.random.normal(k4, (length,)),
                        timesteps=jnp.arange(length, dtype=jnp.int32),
                        mask=jnp.ones(length, bool))


def _gpt_dt(**overrides):
    from icrl_jax.papers.gpt_dtma.fields import gpt_dt_model_config
    from icrl_jax.papers.gpt_dtma.method import GPTDecisionTransformer
    config = model_config(**overrides)
    config.update({k: v for k, v in gpt_dt_model_config().items() if k not in config})
    config.mixture_of_attention = True  # GPT-DTMA's gates, per token
    return GPTDecisionTransformer(config, DIMS, K)


DECODERS = {  # name -> (method from a model config, continuous actions)
    "dt": (lambda **c: DecisionTransformer(model_config(**c), DIMS, K), False),
    "dt_continuous": (lambda **c: DecisionTransformer(model_config(**c), (), K, continuous_dim=2),
                      True),
    "msat": (lambda **c: MSAT(model_config(**c), DIMS, K), False),
    "mat": (lambda **c: MAT(model_config(**c), DIMS, K), False),
    "gpt_dtma": (lambda **c: _gpt_dt(**c), False),
}


@pytest.mark.parametrize("name", sorted(DECODERS))
@pytest.mark.parametrize("encoding", [("timestep", "learned"), ("none", "learned"),
                                      ("position", "rotary")])
def test_cached_decoding_beyond_the_context_equals_the_windowed_full_pass(name, encoding):
    """A DT trained with a sliding window of W tokens decodes an episode 3x its context one
    step's tokens at a time from a ring of W + P - 1 slots, as the policy does (its `_push`ed
    context, its step counter): each step's outputs equal the full windowed pass over the whole
    episode, and the training pass over the K-step window ending there (the model's reach,
    2 (W - 1) + 1 tokens, fits in K steps)."""
    build, continuous = DECODERS[name]
    timestep_encoding, position = encoding
    method = build(num_layers=2, attention_window=5, timestep_encoding=timestep_encoding,
                   position=position)
    per_step = method.tokens_per_step
    assert 2 * (5 - 1) + 1 <= K * per_step
    steps = 3 * K
    episode = _episode(jax.random.key(0), steps, continuous)
    params = method.init(jax.random.key(1), jax.tree.map(lambda x: x[None, :K], episode))
    full = method.apply(params, jax.tree.map(lambda x: x[None], episode))[0]
    slots = method.cache_slots(None)  # a window: any episode length
    assert slots == 5 + per_step - 1
    cache = method.decode_init(params, None, slots)
    context = empty_context(method, episode.observations[0], K)
    decode = jax.jit(method.decode_outputs)
    for t in range(steps):
        context = _push(context, observations=episode.observations[t],
                        returns_to_go=episode.returns_to_go[t], timesteps=t, mask=True)
        out, cache = decode(params, cache, context, t)
        context = context.replace(actions=context.actions.at[-1].set(episode.actions[t]))
        np.testing.assert_allclose(out, full[t], atol=1e-5, err_msg=f"step {t}")
        window = jax.tree.map(lambda x: x[None, max(0, t - K + 1):t + 1], episode)
        np.testing.assert_allclose(out, method.apply(params, window)[0, -1], atol=1e-5)


def test_cache_only_where_it_is_the_models_computation():
    """No window: a cache while episodes fit the context (one slot per token), recomputation
    once they outgrow it; learned token positions and autoregressive components never."""
    dt = DecisionTransformer(model_config(), DIMS, K)
    assert dt.cache_slots(K) == K * 3 and dt.cache_slots(K - 1) == (K - 1) * 3
    assert dt.cache_slots(K + 1) is None and dt.cache_slots(None) is None
    assert MSAT(model_config(), DIMS, K).cache_slots(K) == K * 4
    learned = DecisionTransformer(model_config(timestep_encoding="position", position="learned",
                                               attention_window=6), DIMS, K)
    assert learned.cache_slots(K) is None
    autoregressive = MSAT(model_config(action_prediction="autoregressive", attention_window=6),
                          DIMS, K)
    assert autoregressive.cache_slots(K) is None


def _button_room_dt(episode_length, **model):
    env = envs.make("button_room", size=3, episode_length=episode_length)
    method = MSAT(model_config(num_layers=2, **model), env.action_dims, K)
    example = jax.tree.map(lambda x: x[None], empty_context(
        method, jnp.zeros(env.observation_shape, jnp.float32), K))
    return env, method, method.init(jax.random.key(3), example)


def test_cached_rollout_equals_recomputed_when_episodes_fit_the_context():
    """Episodes of K steps: the cached policy (the default there) samples the same actions as
    the one recomputing the left-padded context, over several episodes of 8 envs."""
    env, method, params = _button_room_dt(K)
    tasks = env.task_params(jnp.arange(8))
    cached = return_conditioned_source(method, params, env, K, 5.0, greedy=False)
    recomputed = return_conditioned_source(method, params, env, K, 5.0, greedy=False,
                                           cache=False)
    assert cached.build.cached and not recomputed.build.cached
    out = run_policies(env, {"cached": cached, "recomputed": recomputed}, tasks, 3 * K + 1,
                       jax.random.key(4))
    np.testing.assert_array_equal(out["cached"]["actions"], out["recomputed"]["actions"])
    np.testing.assert_array_equal(out["cached"]["rewards"], out["recomputed"]["rewards"])
    # The analysis still reads the last context: the same in both.
    np.testing.assert_array_equal(out["cached"]["policy_state"].last_context.actions,
                                  out["recomputed"]["policy_state"].last_context.actions)


def test_alibi_positions_decode_from_a_cache():
    """ALiBi token positions are relative, like rotary ones: a cache where episodes fit the
    context, and the cached rollout samples the recomputed one's actions."""
    env, method, params = _button_room_dt(K, timestep_encoding="position", position="alibi")
    assert method.cache_slots(K) == K * method.tokens_per_step
    tasks = env.task_params(jnp.arange(4))
    policies = {"cached": return_conditioned_source(method, params, env, K, 5.0, greedy=False),
                "recomputed": return_conditioned_source(method, params, env, K, 5.0,
                                                        greedy=False, cache=False)}
    assert policies["cached"].build.cached
    out = run_policies(env, policies, tasks, 2 * K + 1, jax.random.key(4))
    np.testing.assert_array_equal(out["cached"]["actions"], out["recomputed"]["actions"])


def test_chunked_dt_evaluation_equals_unchunked():
    """A DT's rollouts in chunks of envs equal one call over all of them, exactly: the ring
    cache (episodes 3x the context, a window) and the recomputed context."""
    env, method, params = _button_room_dt(3 * K, attention_window=6)
    tasks = env.task_params(jnp.arange(6))
    for cache in (True, False):
        policy = return_conditioned_source(method, params, env, K, 5.0, greedy=False,
                                           cache=cache)
        assert policy.build.cached == cache
        whole = run_policies(env, {"m": policy}, tasks, 4 * K, jax.random.key(5),
                             keep_state=False)["m"]
        chunked = run_policies(env, {"m": policy}, tasks, 4 * K, jax.random.key(5),
                               chunk_size=4, keep_state=False)["m"]
        for field in ("actions", "rewards", "dones"):
            np.testing.assert_array_equal(whole[field], chunked[field])
