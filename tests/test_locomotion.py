"""brax locomotion envs (envs/continuous/locomotion.py) and the PPO source (data/sources/ppo.py).

brax compiles are slow on CPU (~20-30 s for a hopper rollout), so one jitted rollout serves the
shape, determinism, clipping, termination and brax-equivalence checks.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from icrl_jax import envs
from icrl_jax.envs.continuous.locomotion import EPISODE_LENGTH, Locomotion
from icrl_jax.envs.base import InvalidActionError
from icrl_jax.core.errors import UserError

T = 60  # steps of the shared rollout; random torques x 3 topple the hopper well before


@pytest.fixture(scope="module")
def hopper():
    return envs.make("hopper")


@pytest.fixture(scope="module")
def rollout(hopper):
    """Our env (via `step`, traced: actions clipped) on actions up to +-3, next to brax's own
    env stepped on the same actions clipped to [-1, 1] from the same reset."""
    brax_env, params = hopper.brax_env, hopper.default_params

    @jax.jit
    def run(key):
        k_reset, k_act, k_steps = jax.random.split(key, 3)
        obs0, state = hopper.reset(k_reset, params)
        actions = 3.0 * jax.random.uniform(k_act, (T, hopper.action_dim), minval=-1, maxval=1)

        def body(carry, xs):
            state, ref = carry
            k, a = xs
            obs, state, r, term, trunc, info = hopper.step(k, state, a, params)
            ref = brax_env.step(ref, jnp.clip(a, -1.0, 1.0))
            out = dict(obs=obs, final=info["final_observation"], reward=r, terminated=term,
                       truncated=trunc, time=state.time, ref_obs=ref.obs,
                       ref_reward=ref.reward, ref_done=ref.done)
            return (state, ref), out

        _, out = jax.lax.scan(body, (state, state.physics),
                              (jax.random.split(k_steps, T), actions))
        return obs0, out

    return run, jax.device_get(run(jax.random.PRNGKey(3)))


def test_registered_specs():
    for name, obs_dim, act_dim in (("hopper", 11, 3), ("walker2d", 17, 6),
                                   ("halfcheetah", 17, 6)):
        env = envs.make(name)
        assert env.continuous_actions and env.num_actions == 0
        assert env.action_dim == act_dim and env.observation_shape == (obs_dim,)
        assert env.episode_length == EPISODE_LENGTH == 1000
        assert env.backend == "spring" and env.name == name
        params = env.task_params(np.arange(5))
        assert params.max_steps_in_episode.shape == (5,)
        assert int(params.max_steps_in_episode[0]) == 1000
    with pytest.raises(ValueError, match="unknown brax backend"):
        Locomotion("hopper", backend="nope")
    with pytest.raises(UserError, match="bad env.kwargs"):
        envs.make("hopper", layout="umaze")


def test_bad_actions_raise(hopper):
    _, state = jax.device_get(hopper.reset(jax.random.PRNGKey(0)))
    key = jax.random.PRNGKey(1)
    with pytest.raises(InvalidActionError, match=r"shape \(3,\)"):
        hopper.step(key, state, np.zeros(6, np.float32))
    with pytest.raises(InvalidActionError, match="outside"):
        hopper.step(key, state, np.array([0.0, 1.5, 0.0], np.float32))
    with pytest.raises(InvalidActionError, match="outside"):
        hopper.step(key, state, np.array([0.0, np.nan, 0.0], np.float32))
    with pytest.raises(InvalidActionError, match="real numbers"):
        hopper.step(key, state, np.zeros(3, bool))
    with pytest.raises(TypeError, match="no action mask"):
        hopper.action_mask(hopper.default_params)


def test_shapes_and_determinism(hopper, rollout):
    run, (obs0, out) = rollout
    assert obs0.shape == (11,) and obs0.dtype == np.float32
    assert out["obs"].shape == (T, 11) and out["obs"].dtype == np.float32
    assert out["reward"].shape == (T,) and out["reward"].dtype == np.float32
    assert out["terminated"].dtype == bool
    # brax's hopper starts at z 1.25 with +-0.005 noise (obs[0] is the torso height).
    assert abs(obs0[0] - 1.25) <= 0.0051
    obs0_again, again = jax.device_get(run(jax.random.PRNGKey(3)))
    np.testing.assert_array_equal(obs0, obs0_again)
    np.testing.assert_array_equal(out["obs"], again["obs"])
    _, other = jax.device_get(run(jax.random.PRNGKey(4)))
    assert not np.allclose(out["obs"], other["obs"])


def test_equivalent_to_brax_until_termination(rollout):
    """Our wrapper adds nothing to the dynamics: until the first episode ends, every observation
    and reward equals brax's own step on the clipped actions (bit for bit: the same program)."""
    _, (_, out) = rollout
    ends = np.flatnonzero(out["terminated"])
    assert ends.size, "random torques x 3 should topple the hopper within T steps"
    end = ends[0]
    np.testing.assert_array_equal(out["obs"][:end], out["ref_obs"][:end])
    np.testing.assert_array_equal(out["final"][: end + 1], out["ref_obs"][: end + 1])
    np.testing.assert_array_equal(out["reward"][: end + 1], out["ref_reward"][: end + 1])
    np.testing.assert_array_equal(out["ref_done"][:end], 0.0)
    assert out["ref_done"][end] == 1.0


def test_hopper_terminates_when_unhealthy_and_resets(rollout):
    _, (_, out) = rollout
    end = np.flatnonzero(out["terminated"])[0]
    final = out["final"][end]
    # brax's healthy range: torso z in (0.7, inf), torso angle in (-0.2, 0.2).
    assert final[0] <= 0.7 or abs(final[1]) >= 0.2
    assert (out["final"][:end, 0] > 0.7).all() and (np.abs(out["final"][:end, 1]) < 0.2).all()
    assert not out["truncated"].any()
    # Auto-reset: the next observation is a fresh start near z 1.25, the clock back to 0.
    assert abs(out["obs"][end, 0] - 1.25) <= 0.0051 and out["time"][end] == 0
    np.testing.assert_array_equal(out["time"][:end], np.arange(1, end + 1))



def test_ppo_improves_hopper(hopper):
    """PPO on device, 40k steps (one compiled program: ~40 s of brax compile, ~1.5 s of training).

    Each update's rollout is 128 steps per env, longer than the initial policy's episodes (near-
    zero torques: the hopper falls within ~20-80 steps), so update 0's finished episodes are the
    initial policy's return (~50); after 40k steps the hopper hops for ~150+ steps (~300)."""
    from icrl_jax.data.sources import SOURCES
    from icrl_jax.data.sources.ppo import PPOConfig, agent_of, ppo_policy, train_ppo
    assert "ppo" in SOURCES
    config = PPOConfig(num_envs=16, rollout_steps=128, epochs=5, minibatches=8)
    ppo, state, log = train_ppo(hopper, jax.random.PRNGKey(0), 40_000, config,
                                chunk_updates=1000)
    assert log["mean_return"].shape == (20,) and log["steps"][-1] == 20 * 2048
    assert log["episodes"][0] >= 16  # every env ended an episode within update 0
    before, after = log["mean_return"][0], np.mean(log["mean_return"][-3:])
    assert after > 3.0 * before and after > 200, log["mean_return"]

    # The trained agent as a source: per-history actions in [-1, 1]; deterministic = clip(mean).
    agent = agent_of(state)
    obs = jnp.asarray(np.random.default_rng(0).normal(size=11), jnp.float32)
    act = ppo_policy(hopper, agent, config, deterministic=True)
    source = act.build(act.params)
    a, s = source.act(jax.random.PRNGKey(0), source.init(None, None), obs, None, None)
    mean, _, _ = ppo.net.apply(agent["net"], jnp.clip(
        (obs - agent["stats"]["mean"]) / jnp.sqrt(agent["stats"]["var"] + 1e-8), -10, 10))
    np.testing.assert_allclose(a, jnp.clip(mean, -1, 1), rtol=1e-6)
    sampled = ppo_policy(hopper, agent, config).build(agent)
    draws = np.stack([sampled.act(jax.random.PRNGKey(k), (), obs, None, None)[0]
                      for k in range(3)])
    assert draws.shape == (3, 3) and np.abs(draws).max() <= 1.0 and np.ptp(draws, 0).max() > 0


def test_ppo_bad_input(hopper):
    from icrl_jax.data.sources import build_source
    from icrl_jax.data.sources.ppo import PPO, PPOConfig
    with pytest.raises(UserError, match="continuous-action"):
        PPO(envs.make("darkroom"))
    with pytest.raises(UserError, match="minibatches"):
        PPO(hopper, PPOConfig(num_envs=3, rollout_steps=5, minibatches=4))
    with pytest.raises(UserError, match="unknown ppo source_kwargs"):
        build_source("ppo", hopper, 100, {"learning_rat": 1e-3})


def test_locomotion_builder_ids_and_replay_episodes():
    """The builder's dataset ids, and PPO's recorded experience `(U, T, num_envs, ...)` per chunk
    cut into per-env episodes (hand-worked: 2 chunks of 1 update x 3 steps, 2 envs)."""
    from icrl_jax.data.builders import BUILDERS
    from icrl_jax.data.locomotion_data import LocomotionData
    assert isinstance(BUILDERS.get("locomotion"), LocomotionData)
    assert LocomotionData.ids("walker2d/medium-expert-v1") == {
        "medium": "walker2d/medium-v1", "medium-replay": "walker2d/medium-replay-v1",
        "medium-expert": "walker2d/medium-expert-v1"}
    with pytest.raises(UserError, match="medium-v0"):
        LocomotionData.ids("hopper/expert-v0")
    steps, envs_ = 6, 2
    g = np.arange(steps)[:, None] * 10 + np.arange(envs_)[None]  # value = 10 * step + env
    term = np.zeros((steps, envs_), bool)
    trunc = np.zeros((steps, envs_), bool)
    term[2, 0], trunc[5, 0], term[3, 1] = True, True, True

    def chunk(sl):
        part = lambda x: x[sl][None]  # noqa: E731  (U=1, T=3, N)
        return dict(observations=part(g[..., None].astype(np.float32)),
                    actions=part(np.stack([g, -g], -1).astype(np.float32)),
                    rewards=part(g.astype(np.float32)), terminated=part(term),
                    truncated=part(trunc), final_observations=part(g[..., None] + 0.5))

    eps = LocomotionData._replay_episodes([chunk(slice(0, 3)), chunk(slice(3, 6))])
    assert len(eps) == 3  # env 0: steps 0-2, 3-5; env 1: steps 0-3 (4-5 unfinished, dropped)
    e0, e1, e2 = eps
    np.testing.assert_array_equal(e0["observations"][:, 0], [0, 10, 20, 20.5])
    np.testing.assert_array_equal(e0["rewards"], [0, 10, 20])
    np.testing.assert_array_equal(e0["terminations"], [0, 0, 1])
    np.testing.assert_array_equal(e0["truncations"], [0, 0, 0])
    np.testing.assert_array_equal(e1["observations"][:, 0], [30, 40, 50, 50.5])
    np.testing.assert_array_equal(e1["truncations"], [0, 0, 1])
    np.testing.assert_array_equal(e1["terminations"], [0, 0, 0])
    np.testing.assert_array_equal(e2["observations"][:, 0], [1, 11, 21, 31, 31.5])
    np.testing.assert_array_equal(e2["actions"][:, 1], [-1, -11, -21, -31])


def test_medium_snapshot_targets_a_third_of_the_normalised_score():
    """Medium is a third of the way from random to expert (D4RL's normalised scale), not a third
    of the expert's raw return: with walker2d-like returns (random 240, expert 540) a third of
    the raw return (180) is below random, and the old rule picked the worst snapshot."""
    from icrl_jax.data.locomotion_data import medium_snapshot
    chunk_returns = [-np.inf, 150.0, 230.0, 310.0, 345.0, 420.0, 500.0, 540.0]
    idx, target, scores = medium_snapshot(chunk_returns, 240.0, 540.0, 1 / 3)
    assert target == pytest.approx(340.0)
    assert idx == 4  # 345, the first to reach 340 and the closest
    assert scores == chunk_returns[:5]  # the candidates: up to the first to reach it
    # The closest among those up to the first that reaches the target: 338 (2 away) over 360
    # (20 away); 341 comes after the first to reach it, so is not a candidate.
    idx, _, _ = medium_snapshot([100.0, 338.0, 360.0, 341.0], 240.0, 540.0, 1 / 3)
    assert idx == 1
    # No snapshot reaches the target: the closest of all.
    assert medium_snapshot([100.0, 200.0, 300.0], 240.0, 540.0, 1 / 3)[0] == 2
    # Random 0: the old rule's third of the expert's return.
    assert medium_snapshot([10.0, 90.0, 300.0], 0.0, 300.0, 1 / 3)[:2] == (1, pytest.approx(100.0))


def test_medium_snapshot_scores_candidates_by_their_own_return():
    """Training episodes lag the agent (a halfcheetah episode spans several chunks, and a chunk
    may end none: -inf), so each candidate up to the first training crossing is scored by its own
    rollouts; a snapshot after that crossing is never evaluated."""
    from icrl_jax.data.locomotion_data import medium_snapshot
    chunk_returns = [-np.inf, -np.inf, 150.0, -np.inf, 260.0, 345.0, 420.0]
    own = {0: 20.0, 1: 180.0, 2: 335.0, 3: 390.0, 4: 430.0, 5: 470.0}
    asked = []

    def evaluate(i):
        asked.append(i)
        return own[i]

    idx, target, scores = medium_snapshot(chunk_returns, 240.0, 540.0, 1 / 3, evaluate)
    assert target == pytest.approx(340.0) and asked == [0, 1, 2, 3, 4, 5]
    assert idx == 2 and scores == [own[i] for i in range(6)]  # 335: 5 from the target
    # By training returns alone the lagging episodes would have picked snapshot 5.
    assert medium_snapshot(chunk_returns, 240.0, 540.0, 1 / 3)[0] == 5
