"""Model, training loop, checkpoints and resume, multi-device equivalence, bad-input errors."""

import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from icrl_jax.data.windows import check_dataset, sample_windows, to_step_windows
from icrl_jax.data.history import History, HistoryFormatError
from icrl_jax.methods.in_context import empty_context, push_observation, record_outcome
from icrl_jax.methods.ad import AD
from icrl_jax.models.heads import smoothed_cross_entropy
from icrl_jax.methods.fields import ad_model_config
from icrl_jax.data.train_data import on_device
from icrl_jax.core.config import default_train_config
from icrl_jax.pipeline.train import (CheckpointMismatchError, Checkpointer, init_state,
                                     make_optimizer, make_train_steps, train, data_mesh)
from xla_flags import xla_flags

NUM_OBS, NUM_ACTIONS = 16, 4


def copy_task_history(n=32, t=64, seed=0) -> History:
    """Histories whose action is a fixed function of the observation: obs mod num_actions."""
    rng = np.random.default_rng(seed)
    obs = rng.integers(0, NUM_OBS, (n, t)).astype(np.int32)
    return History(observations=obs, actions=(obs % NUM_ACTIONS).astype(np.int32),
                   rewards=rng.random((n, t)).astype(np.float32), dones=np.zeros((n, t), bool),
                   task_ids=np.arange(n, dtype=np.int32), action_mask=np.ones((n, NUM_ACTIONS), bool))


def copy_task_data():
    return on_device(to_step_windows(copy_task_history()), sample_windows, 16)


def tiny_method(**overrides):
    config = ad_model_config()
    config.update(dict(d_model=32, num_layers=1, num_heads=2, max_len=32, label_smoothing=0.0))
    config.update(overrides)
    return AD(config, NUM_ACTIONS, NUM_OBS)


def tiny_train_config(**overrides):
    config = default_train_config()
    config.update(dict(num_steps=40, batch_size=8, seq_len=16, steps_per_call=10, log_every=10,
                       checkpoint_every=20, learning_rate=3e-3, warmup_steps=5))
    config.update(overrides)
    return config


def test_tiny_ad_learns_a_copy_task(tmp_path):
    data = copy_task_data()
    config = tiny_train_config(num_steps=300, steps_per_call=50, log_every=50, checkpoint_every=300)
    method = tiny_method()
    state = train(method, data, config, str(tmp_path), {"m": 1}, show_progress=False)
    batch = sample_windows(data.arrays, jax.random.PRNGKey(5), 16, 16)
    loss, metrics = method.loss(state.params, batch, jax.random.PRNGKey(0), deterministic=True)
    assert metrics["accuracy"] > 0.95
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 6 and '"phase": "train"' in lines[0]


def test_resumed_run_matches_uninterrupted(tmp_path):
    data = copy_task_data()
    config = tiny_train_config()
    full = train(tiny_method(), data, config, str(tmp_path / "full"), {"m": 1}, show_progress=False)
    partial = train(tiny_method(), data, config, str(tmp_path / "resumed"), {"m": 1},
                    show_progress=False, stop_at=20)
    assert int(partial.step) == 20
    resumed = train(tiny_method(), data, config, str(tmp_path / "resumed"), {"m": 1},
                    show_progress=False)
    assert int(resumed.step) == 40
    for a, b in zip(jax.tree.leaves(full.params), jax.tree.leaves(resumed.params)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_segments_sharing_programs_compile_the_step_once(tmp_path):
    """The calls of one run between evaluations (`stop_at`), given the same `programs` dict,
    trace the training step once, and end where an uninterrupted run ends."""
    data, config = copy_task_data(), tiny_train_config()
    full = train(tiny_method(), data, config, str(tmp_path / "full"), {"m": 1}, show_progress=False)
    method, traces, programs = tiny_method(), [], {}
    loss = method.loss
    method.loss = lambda *args, **kwargs: traces.append(1) or loss(*args, **kwargs)
    for stop_at in (10, 30, None):
        state = train(method, data, config, str(tmp_path / "segments"), {"m": 1},
                      show_progress=False, stop_at=stop_at, programs=programs)
    assert int(state.step) == 40 and len(traces) == 1
    for a, b in zip(jax.tree.leaves(full.params), jax.tree.leaves(state.params)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_replicas_sharing_programs_with_another_model_train_that_model(tmp_path):
    """A kept replica program is reused only for the same config: the same `programs` dict with
    a wider model trains the wider model."""
    from icrl_jax.pipeline.train import replica_hyperparameters, train_replicas
    import ml_collections
    programs = {}
    for width in (32, 48):
        model = ad_model_config()
        model.update(dict(d_model=width, num_layers=1, num_heads=2, max_len=32,
                          label_smoothing=0.0))
        config = ml_collections.ConfigDict(dict(
            model=model, train=tiny_train_config(num_steps=10, checkpoint_every=10)))
        state, _ = train_replicas(lambda m: AD(m, NUM_ACTIONS, NUM_OBS), config, copy_task_data(),
                                  str(tmp_path / str(width)), {"m": 1}, [0],
                                  replica_hyperparameters(config, [{}]),
                                  programs=programs)
        kernel = state.params["backbone"]["block_0"]["attention"]["qkv"]["kernel"]
        assert kernel.shape == (1, width, 3, 2, width // 2)
    assert len(programs) == 2


def test_checkpoint_round_trip_and_mismatch(tmp_path):
    data = copy_task_data()
    method = tiny_method()
    config = tiny_train_config()
    state = init_state(lambda _: (method, make_optimizer(config)), data, jax.random.PRNGKey(1))
    checkpointer = Checkpointer(str(tmp_path), {"model": "a"})
    checkpointer.save(state)
    restored = checkpointer.restore(state)
    for a, b in zip(jax.tree.leaves(state), jax.tree.leaves(restored)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    checkpointer.close()
    with pytest.raises(CheckpointMismatchError, match="model: 'a' \\(checkpoint\\) vs 'b'"):
        Checkpointer(str(tmp_path), {"model": "a"} | {"model": "b"}).restore(state)
    wider = init_state(lambda _: (tiny_method(d_model=48), make_optimizer(config)), data,
                       jax.random.PRNGKey(1))
    with pytest.raises(CheckpointMismatchError, match=r"parameter \['action_head'\]"):
        Checkpointer(str(tmp_path), {"model": "a"}).restore(wider)


def test_train_step_traces_once():
    """The jitted train step compiles once and is reused by every later call (no retrace)."""
    data = copy_task_data()
    method, config = tiny_method(), tiny_train_config()
    optimizer = make_optimizer(config)
    steps = make_train_steps(lambda _: (method, optimizer), data, config, data_mesh())  # as _fit
    mesh = data_mesh()
    state = jax.device_put(init_state(lambda _: (method, optimizer), data, jax.random.PRNGKey(0)),
                           jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec()))
    for _ in range(3):
        state, _ = steps(state, data.arrays, jax.random.key(0), None)
    assert steps._cache_size() == 1 and int(state.step) == 30


def test_eight_fake_devices_give_the_same_loss(tmp_path):
    """Data parallel over 8 CPU devices reproduces the single-device losses."""
    script = textwrap.dedent(f"""
        import json, sys
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        import jax
        from test_training import copy_task_history, tiny_method, tiny_train_config
        from test_training import copy_task_data
        from icrl_jax.pipeline.train import train
        workdir = sys.argv[1]
        train(tiny_method(), copy_task_data(), tiny_train_config(), workdir,
              {{"m": 1}}, show_progress=False)
        print(jax.device_count())
    """)
    losses = {}
    for devices in (1, 8):
        env = dict(os.environ, XLA_FLAGS=xla_flags(os.environ, devices),
                   JAX_PLATFORMS="cpu")
        workdir = tmp_path / str(devices)
        out = subprocess.run([sys.executable, "-c", script, str(workdir)], env=env,
                             capture_output=True, text=True, check=True)
        assert out.stdout.strip().splitlines()[-1] == str(devices)
        import json
        losses[devices] = [json.loads(l)["loss"] for l in (workdir / "metrics.jsonl").read_text().splitlines()]
    np.testing.assert_allclose(losses[1], losses[8], rtol=1e-4)


def test_label_smoothing_ignores_masked_actions():
    logits = jnp.array([[2.0, 0.0, 5.0, -1.0]])
    mask = jnp.array([[True, True, False, True]])
    loss_masked = smoothed_cross_entropy(logits, jnp.array([0]), mask, 0.3)
    # Equivalent to the same loss on the 3 available actions alone.
    loss_dense = smoothed_cross_entropy(logits[:, [0, 1, 3]], jnp.array([0]),
                                        jnp.ones((1, 3), bool), 0.3)
    np.testing.assert_allclose(loss_masked, loss_dense, rtol=1e-6)


def test_sliding_context_keeps_the_last_steps_in_order():
    context = empty_context(3, jnp.zeros((), jnp.int32), jnp.ones(NUM_ACTIONS, bool))
    for t in range(5):
        context, index = push_observation(context, jnp.int32(10 + t))
        assert int(index) == min(t, 2)
        if t == 0:  # the rollout's first observation starts an episode
            assert bool(context.window.episode_starts[0, 0])
        context = record_outcome(context, jnp.int32(t % NUM_ACTIONS), jnp.float32(t),
                                 jnp.bool_(t == 2))  # step 2 ends an episode
    window = context.window
    np.testing.assert_array_equal(window.observations[0], [12, 13, 14])
    np.testing.assert_array_equal(window.prev_actions[0], [1, 2, 3])  # actions of steps 1..3
    np.testing.assert_array_equal(window.prev_rewards[0], [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(window.episode_starts[0], [False, True, False])  # step 3
    # Rewards 0, 1 in the first episode, then 3 in the one that starts at step 3.
    np.testing.assert_array_equal(window.episode_returns[0], [1.0, 0.0, 3.0])


def start_marking_history(n=32, t=64, seed=0) -> History:
    """The action is 0 on an episode's first step and 1 after it. Episodes end at random (1 in
    4 steps) and the observation and reward never change, so only the episode-start flag tells
    a reset apart from the step after an action 1."""
    rng = np.random.default_rng(seed)
    dones = rng.random((n, t)) < 0.25
    starts = np.concatenate([np.ones((n, 1), bool), dones[:, :-1]], axis=1)
    return History(observations=np.zeros((n, t), np.int32),
                   actions=np.where(starts, 0, 1).astype(np.int32),
                   rewards=np.zeros((n, t), np.float32), dones=dones,
                   task_ids=np.arange(n, dtype=np.int32),
                   action_mask=np.ones((n, NUM_ACTIONS), bool))


def test_episode_starts_let_ad_tell_resets_it_cannot_see(tmp_path):
    data = on_device(to_step_windows(start_marking_history()), sample_windows, 16)
    config = tiny_train_config(num_steps=200, steps_per_call=50, log_every=50,
                               checkpoint_every=200)
    batch = sample_windows(data.arrays, jax.random.PRNGKey(5), 64, 16)
    accuracy = {}
    for marked in (False, True):
        method = tiny_method(episode_starts=marked)
        state = train(method, data, config, str(tmp_path / str(marked)), {"marked": marked},
                      show_progress=False)
        _, metrics = method.loss(state.params, batch, jax.random.PRNGKey(0), deterministic=True)
        accuracy[marked] = float(metrics["accuracy"])
    # Unmarked, a reset after an action 1 looks like any later step (about 1 step in 5).
    assert accuracy[True] > 0.98 and accuracy[False] < 0.9, accuracy
    with pytest.raises(ValueError, match="model.episode_starts: these windows do not record it"):
        method.loss(state.params, batch.replace(episode_starts=None), jax.random.PRNGKey(0))


def key_flag_history(n=32, t=96, episode=12, seed=0) -> History:
    """Key-to-Door's hidden flag, bare: in half of the 12-step episodes a reward of 1 comes at
    one of steps 0-6. The last step of each episode (observation 1, the others 0) asks whether
    it came: action 1 if so, else 0; every other step takes action 2. A 4-step window that ends
    on the question holds neither the reward nor any step that depends on it."""
    rng = np.random.default_rng(seed)
    steps = np.arange(t) % episode
    episodes = t // episode
    reward_at = np.where(rng.random((n, episodes)) < 0.5, rng.integers(0, 7, (n, episodes)),
                         episode).repeat(episode, axis=1)
    question = np.broadcast_to(steps == episode - 1, (n, t))
    return History(observations=question.astype(np.int32),
                   actions=np.where(question, (reward_at < episode).astype(np.int32), 2),
                   rewards=(steps[None] == reward_at).astype(np.float32),
                   dones=question.copy(), task_ids=np.arange(n, dtype=np.int32),
                   action_mask=np.ones((n, NUM_ACTIONS), bool))


def test_episode_returns_in_tokens_let_ad_see_a_flag_from_before_its_window(tmp_path):
    window, episode = 4, 12
    windows = to_step_windows(key_flag_history(episode=episode))
    data = on_device(windows, sample_windows, window)
    config = tiny_train_config(num_steps=300, batch_size=64, steps_per_call=50, log_every=50,
                               checkpoint_every=300, seq_len=window)
    # Every question's window: the episode's last 4 steps, as (episodes * histories, 4).
    ends = np.arange(episode, windows.actions.shape[1] + 1, episode)
    questions = jax.tree.map(
        lambda x: (jnp.concatenate([x[:, e - window:e] for e in ends]) if x.ndim == 2
                   and x.shape[1] == windows.actions.shape[1] else jnp.tile(x, (len(ends), 1))),
        windows.replace(lengths=None))
    accuracy = {}
    for marked in (False, True):
        method = tiny_method(episode_returns=marked)
        state = train(method, data, config, str(tmp_path / str(marked)), {"marked": marked},
                      show_progress=False)
        logits = method.context_logits(state.params, questions, None)[:, -1]
        accuracy[marked] = float((jnp.argmax(logits, -1) == questions.actions[:, -1]).mean())
    # Without the flag the answer is a coin flip (half the episodes have the reward).
    assert accuracy[True] > 0.98 and accuracy[False] < 0.7, accuracy
    with pytest.raises(ValueError, match="model.episode_returns: these windows do not record"):
        method.loss(state.params, questions.replace(episode_returns=None), jax.random.PRNGKey(0))


def test_first_token_has_no_previous_action():
    data = to_step_windows(copy_task_history(n=2, t=5))
    assert (np.asarray(data.prev_actions[:, 0]) == NUM_ACTIONS).all()
    np.testing.assert_array_equal(data.prev_actions[:, 1:], data.actions[:, :-1])


def test_dataset_with_wrong_shapes_is_refused():
    history = copy_task_history(n=4, t=20)
    bad = history.replace(rewards=history.rewards[:, :10])
    with pytest.raises(HistoryFormatError, match="rewards has shape"):
        bad.validate()
    with pytest.raises(HistoryFormatError, match="model expects 6"):
        check_dataset(history, num_actions=6, num_observations=NUM_OBS, observation_shape=(),
                      window=16)
    with pytest.raises(HistoryFormatError, match="shorter than the training window"):
        check_dataset(history, num_actions=NUM_ACTIONS, num_observations=NUM_OBS,
                      observation_shape=(), window=32)
