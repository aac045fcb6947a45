"""`icrl-jax report --runs ...` on training runs (`eval.json`): seeds grouped by method label,
mean ± s.e.m. worked by hand, curves cut to what every run reached, clear errors on bad runs."""

import json

import numpy as np
import pytest

from icrl_jax.core.errors import UserError
from icrl_jax.methods.ad import AD
from icrl_jax.methods.fields import ad_config
from icrl_jax.pipeline.run import aggregate_runs
from icrl_jax.core.metrics import mean_and_stderr
from icrl_jax.reports.seeds import summarise_seeds, load_seed_runs


def _run(tmp_path, name, *, ngram, seed, last, curve, env="key_to_door"):
    """A finished training run's two files, as `icrl-jax train` writes them."""
    run = tmp_path / name
    run.mkdir()
    config = ad_config()
    config.seed, config.env.name = seed, env
    config.model.ngram_positions = (1,) if ngram else ()
    (run / "config.json").write_text(config.to_json())
    results = dict(model_first_episode_return=curve[0], model_last_episode_return=last,
                   source_first_episode_return=0.25, source_last_episode_return=0.5 + seed / 10,
                   random_first_episode_return=0.2, random_last_episode_return=0.3,
                   normalised_score=(last - 0.3) / (0.2 + seed / 10),
                   curves=dict(model=curve, source=[0.25] * 4, random=[0.2, 0.3, 0.2, 0.3]))
    (run / "eval.json").write_text(json.dumps(results))
    return str(run)


def test_ad_label_names_its_ngram_layers():
    assert AD.label(ad_config()) == "AD"
    with_ngram = ad_config()
    with_ngram.model.ngram_positions = (1,)
    assert AD.label(with_ngram) == "AD + n-gram"
    labelled = ad_config()
    labelled.report.label = "mine"
    assert AD.label(labelled) == "mine"


def test_mean_and_sem_use_the_sample_deviation():
    mean, sem = mean_and_stderr([1.0, 1.2, 1.4], ddof=1)
    assert mean == pytest.approx(1.2)
    assert sem == pytest.approx(0.2 / np.sqrt(3))  # std with n - 1 is 0.2
    assert mean_and_stderr([0.7], ddof=1) == (0.7, 0.0)


def test_seeds_are_grouped_by_label_and_curves_cut_to_the_shortest(tmp_path):
    paths = [_run(tmp_path, "ng0", ngram=True, seed=0, last=1.0, curve=[0.2, 0.6, 1.0, 1.4, 9.0]),
             _run(tmp_path, "ng1", ngram=True, seed=1, last=1.2, curve=[0.4, 0.8, 1.2, 1.2]),
             _run(tmp_path, "ng2", ngram=True, seed=2, last=1.4, curve=[0.3, 0.7, 1.1, 1.6]),
             _run(tmp_path, "ad0", ngram=False, seed=0, last=0.8, curve=[0.2, 0.5, 0.7, 0.8])]
    summary = summarise_seeds(load_seed_runs(paths))
    assert summary["episodes"] == 4  # seed 0's fifth point is only its fastest rollouts
    ngram = summary["groups"]["key_to_door: AD + n-gram"]
    assert ngram["seeds"] == [0, 1, 2]
    last = ngram["scores"]["model_last_episode_return"]
    assert last["mean"] == pytest.approx(1.2)
    assert last["sem"] == pytest.approx(0.2 / np.sqrt(3))
    assert last["per_seed"] == [1.0, 1.2, 1.4]
    np.testing.assert_allclose(ngram["curve"]["mean"], [0.3, 0.7, 1.1, 1.4])
    np.testing.assert_allclose(ngram["curve"]["sem"][0], 0.1 / np.sqrt(3))
    ad = summary["groups"]["key_to_door: AD"]
    assert ad["scores"]["model_last_episode_return"]["sem"] == 0.0
    # Baselines belong to the environment: averaged over all four runs, once.
    source = summary["baselines"]["key_to_door"]["source"]
    assert source["model_last_episode_return"] == pytest.approx(np.mean([0.5, 0.6, 0.7, 0.5]))
    assert source["curve"] == [0.25] * 4

    written = aggregate_runs(paths, str(tmp_path / "out"))
    table = open(written["table"]).read()
    assert "| key_to_door: AD + n-gram | 0, 1, 2 | **0.300 ± 0.058** (0.200 / 0.400 / 0.300) | " \
           "**1.200 ± 0.115** (1.000 / 1.200 / 1.400) |" in table
    assert "| key_to_door: random | - | 0.200 | 0.300 | - |" in table
    assert open(written["curves"], "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    assert json.load(open(written["json"]))["groups"].keys() == summary["groups"].keys()


def test_bad_runs_are_user_errors(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(UserError, match="no config.json there"):
        aggregate_runs([str(empty)], str(tmp_path / "out"))
    run = _run(tmp_path, "r", ngram=False, seed=0, last=0.5, curve=[0.1, 0.5])
    (empty / "config.json").write_text(json.dumps({"report": {"kind": "variants"}}))
    with pytest.raises(UserError, match="different report kinds"):  # a table of one kind only
        aggregate_runs([run, str(empty)], str(tmp_path / "out"))
    (tmp_path / "r" / "config.json").unlink()
    with pytest.raises(UserError, match="no config.json"):
        load_seed_runs([run])
