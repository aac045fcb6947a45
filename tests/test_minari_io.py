"""Minari datasets: round trip through the `minari` package, spaces checks, clear errors."""

import numpy as np
import pytest

minari = pytest.importorskip("minari")

from icrl_jax.data import minari_io as mio  # noqa: E402
from icrl_jax.core.errors import UserError  # noqa: E402


class _Spec:  # the typed EnvSpec attributes spaces_of reads
    name = "toy"
    discrete_observations = False
    num_observations = None
    observation_shape = (6,)
    pixels = False
    continuous_actions = True
    action_dim = 2
    num_actions = 0


def _episodes(lengths, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for t in lengths:
        term = np.zeros(t, bool)
        term[-1] = t % 2 == 0
        out.append(dict(observations=rng.normal(size=(t + 1, 6)).astype(np.float32),
                        actions=rng.uniform(-1, 1, (t, 2)).astype(np.float32),
                        rewards=rng.normal(size=t).astype(np.float32),
                        terminations=term, truncations=~term & (np.arange(t) == t - 1)))
    return out


def test_round_trip_ragged_episodes_and_minari_reads_it(tmp_path):
    eps = _episodes([3, 5, 2])
    obs_space, act_space = mio.spaces_of(_Spec())
    path = mio.write_minari(tmp_path, "toy/maze-v0", eps, obs_space, act_space, "toy",
                            metadata={"layout": "umaze"}, ref_min_score=1.0, ref_max_score=3.0)
    data = mio.read_minari("toy/maze-v0", root=tmp_path, env=_Spec())
    np.testing.assert_array_equal(data.lengths, [3, 5, 2])
    for i, ep in enumerate(eps):
        t = len(ep["rewards"])
        np.testing.assert_array_equal(data.observations[i, :t], ep["observations"][:t])
        np.testing.assert_array_equal(data.final_observations[i], ep["observations"][t])
        np.testing.assert_array_equal(data.actions[i, :t], ep["actions"])
        np.testing.assert_array_equal(data.rewards[i, :t], ep["rewards"])
        np.testing.assert_array_equal(data.terminations[i, :t], ep["terminations"])
        np.testing.assert_array_equal(data.truncations[i, :t], ep["truncations"])
        assert not data.mask[i, t:].any() and data.mask[i, :t].all()
        assert data.rewards[i, t:].sum() == 0
    np.testing.assert_allclose(data.returns, [e["rewards"].sum() for e in eps], rtol=1e-6)
    assert (data.env_name, data.metadata) == ("toy", {"layout": "umaze"})
    assert (data.ref_min_score, data.ref_max_score) == (1.0, 3.0)
    # minari itself opens it, and its normalised score uses the same references.
    ds = minari.MinariDataset(path + "/data")
    assert ds.total_episodes == 3 and ds.total_steps == 10
    np.testing.assert_allclose(minari.get_normalized_score(ds, np.array([2.0])), [0.5])
    np.testing.assert_allclose(mio.normalized_score([2.0], 1.0, 3.0), [50.0])
    # Same read through the dataset path; trajectories carry returns-to-go of each episode.
    traj = mio.read_minari(path).to_trajectories()
    assert traj.actions.shape == (3, 5, 2)
    np.testing.assert_allclose(np.asarray(traj.returns_to_go)[1],
                               np.cumsum(eps[1]["rewards"][::-1])[::-1], rtol=1e-5)
    assert float(traj.returns_to_go[2, 2]) == 0.0  # padding


def test_episodes_from_batch_matches_per_episode_dicts():
    obs = np.arange(2 * 3 * 6, dtype=np.float32).reshape(2, 3, 6)
    final = -np.ones((2, 6), np.float32)
    eps = mio.episodes_from_batch(obs, np.zeros((2, 3, 2)), np.ones((2, 3)),
                                  np.zeros((2, 3)), np.eye(3)[[2, 2]], final)
    assert eps[1]["observations"].shape == (4, 6)
    np.testing.assert_array_equal(eps[1]["observations"][-1], final[1])
    np.testing.assert_array_equal(eps[0]["truncations"], [False, False, True])


def test_errors(tmp_path):
    obs_space, act_space = mio.spaces_of(_Spec())
    with pytest.raises(mio.DatasetNotFoundError, match="no Minari dataset"):
        mio.read_minari("nothing/here-v0", root=tmp_path)
    mio.write_minari(tmp_path, "toy/a-v0", _episodes([2]), obs_space, act_space, "toy")
    with pytest.raises(mio.DatasetExistsError):
        mio.write_minari(tmp_path, "toy/a-v0", _episodes([2]), obs_space, act_space, "toy")
    mio.write_minari(tmp_path, "toy/a-v0", _episodes([4]), obs_space, act_space, "toy",
                     overwrite=True)
    assert mio.read_minari("toy/a-v0", root=tmp_path).lengths.tolist() == [4]

    class ThreeD(_Spec):
        action_dim = 3

    with pytest.raises(mio.DatasetSpaceError, match=r"action space Box\(2,\) does not match"):
        mio.read_minari("toy/a-v0", root=tmp_path, env=ThreeD())

    class Discrete(_Spec):
        continuous_actions, num_actions = False, 4

    with pytest.raises(mio.DatasetSpaceError):
        mio.read_minari("toy/a-v0", root=tmp_path, env=Discrete())
    bad = _episodes([3])
    bad[0]["actions"] = bad[0]["actions"][:, :1]
    with pytest.raises(mio.DatasetSpaceError, match="actions of shape"):
        mio.write_minari(tmp_path, "toy/b-v0", bad, obs_space, act_space, "toy")
    bad = _episodes([3])
    bad[0]["observations"] = bad[0]["observations"][:3]
    with pytest.raises(UserError, match="4 observations"):
        mio.write_minari(tmp_path, "toy/c-v0", bad, obs_space, act_space, "toy")
