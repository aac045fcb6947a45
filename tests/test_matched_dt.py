"""reproductions/matched_dt/export.py: our Minari episodes in D4RL's flat layout, and CORL's
TrainConfig fields from the matched config."""

import numpy as np
import pytest

from helpers import load_script


def _export_module():
    return load_script("reproductions/matched_dt/export.py", "matched_dt_export")


def _episodes(lengths, ends):
    rng = np.random.default_rng(0)
    out = []
    for n, end in zip(lengths, ends):
        out.append(dict(observations=rng.normal(size=(n + 1, 6)).astype(np.float32),
                        actions=rng.uniform(-1, 1, (n, 2)).astype(np.float32),
                        rewards=rng.normal(size=n).astype(np.float32),
                        terminations=np.arange(n) == n - 1 if end == "goal" else np.zeros(n, bool),
                        truncations=np.arange(n) == n - 1 if end == "time" else np.zeros(n, bool)))
    return out


@pytest.fixture()
def written(tmp_path):
    from gymnasium import spaces
    from icrl_jax.data.minari_io import read_minari, write_minari
    episodes = _episodes([5, 1, 7, 3], ["goal", "time", "goal", "none"])
    write_minari(str(tmp_path), "point_maze/test-v0", episodes,
                 spaces.Box(-np.inf, np.inf, (6,), np.float32), spaces.Box(-1, 1, (2,), np.float32),
                 "point_maze", ref_min_score=0.5, ref_max_score=2.0)
    return episodes, read_minari("point_maze/test-v0", root=str(tmp_path))


def test_d4rl_export_round_trip(written):
    """Every episode comes back step for step from the flat arrays (D4RL's cut at
    terminals | timeouts), the last observation (after the final step) left out as D4RL does."""
    export = _export_module()
    episodes, read = written
    arrays = export.d4rl_arrays(read)
    assert arrays["observations"].shape == (16, 6) and arrays["actions"].shape == (16, 2)
    back = export.split_d4rl(arrays)
    assert len(back) == len(episodes)
    for got, want in zip(back, episodes):
        np.testing.assert_array_equal(got["observations"], want["observations"][:-1])
        np.testing.assert_array_equal(got["actions"], want["actions"])
        np.testing.assert_array_equal(got["rewards"], want["rewards"])


def test_d4rl_export_flags(written):
    """Termination stays a terminal, truncation a timeout; an episode with neither flag on its
    last step ends with a timeout there (else D4RL's reader would join it to the next)."""
    export = _export_module()
    arrays = export.d4rl_arrays(written[1])
    np.testing.assert_array_equal(np.flatnonzero(arrays["terminals"]), [4, 12])
    np.testing.assert_array_equal(np.flatnonzero(arrays["timeouts"]), [5, 15])


def test_matched_settings_map_our_fields_onto_corls(written):
    """CORL multiplies returns by reward_scale where we divide by rtg_scale; its positions cover
    the env's episode length; one target return, one evaluation episode per held-out task."""
    export = _export_module()
    from icrl_jax.pipeline.run import build_env
    config = export.matched_config("/nonexistent")
    env = build_env(config)
    settings = export.matched_settings(config, env, written[1], np.arange(200, 220))
    corl = settings["corl"]
    assert corl["reward_scale"] == pytest.approx(1.0 / config.model.rtg_scale)
    assert corl["episode_len"] == env.episode_length == 300
    assert corl["embedding_dim"] == config.model.d_model
    assert corl["betas"] == [config.train.b1, config.train.b2]
    assert corl["clip_grad"] == config.train.grad_clip
    assert corl["eval_episodes"] == 20 and corl["target_returns"] == [3.0]
    assert (settings["ref_min_score"], settings["ref_max_score"]) == (0.5, 2.0)
    assert settings["steps"] == 16
    config.eval.target_returns = (1.0, 2.0)
    with pytest.raises(ValueError, match="one target return"):
        export.matched_settings(config, env, written[1], np.arange(3))
