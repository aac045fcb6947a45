"""icrl_jax/cpu_devices.py: one CPU device per core unless told otherwise, and `data_mesh` takes
the devices a batch (or a replica count) divides over, so any batch trains on a multi-device
CPU host."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from icrl_jax.cpu_devices import ENV, cpu_device_count, usable_cores

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_one_device_per_usable_core_by_default():
    assert cpu_device_count({}) == usable_cores() >= 1


def test_an_explicit_count_wins():
    assert cpu_device_count({ENV: "3"}) == 3
    assert cpu_device_count({ENV: "1"}) == 1


@pytest.mark.parametrize("environ", [
    {"XLA_FLAGS": "--xla_cpu_enable_fast_math=false --xla_force_host_platform_device_count=4"},
    {"JAX_NUM_CPU_DEVICES": "4"},
    {"JAX_NUM_CPU_DEVICES": "4", ENV: "2"},
])
def test_a_count_given_to_jax_itself_is_left_alone(environ):
    assert cpu_device_count(environ) is None


@pytest.mark.parametrize("value", ["0", "-2", "two", ""])
def test_a_bad_count_is_refused_clearly(value):
    with pytest.raises(ValueError, match=f"{ENV} must be a positive number"):
        cpu_device_count({ENV: value})


def test_the_cli_refuses_a_bad_count_before_doing_anything(tmp_path):
    env = dict(os.environ, **{ENV: "none"})
    out = subprocess.run([sys.executable, "-m", "icrl_jax.cli", "train", "--config",
                          "experiments/ad/darkroom.py:quick",
                          f"--config.workdir={tmp_path / 'run'}"], cwd=ROOT, env=env,
                         capture_output=True, text=True)
    assert out.returncode == 2
    assert f"{ENV} must be a positive number of CPU devices, got 'none'" in out.stderr
    assert not (tmp_path / "run").exists()


_TRAIN = textwrap.dedent(f"""
    import json, sys
    sys.path.insert(0, {os.path.join(ROOT, "tests")!r})
    from icrl_jax.cpu_devices import use_one_device_per_core
    use_one_device_per_core()
    import jax
    from test_training import copy_task_data, tiny_method, tiny_train_config
    from icrl_jax.train import data_mesh, train
    sizes = {{n: data_mesh(n).devices.size for n in (None, 1, 3, 8, 30)}}
    workdir, batch = sys.argv[1], int(sys.argv[2])
    train(tiny_method(), copy_task_data(), tiny_train_config(batch_size=batch), workdir,
          {{"m": 1}}, show_progress=False)
    print(json.dumps(dict(devices=jax.device_count(), mesh_sizes=sizes)))
""")


def _train(workdir, devices: int, batch: int) -> tuple[dict, list[float]]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("XLA_FLAGS", "JAX_NUM_CPU_DEVICES")}
    env.update({ENV: str(devices), "JAX_PLATFORMS": "cpu"})
    out = subprocess.run([sys.executable, "-c", _TRAIN, str(workdir), str(batch)], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    losses = [json.loads(line)["loss"] for line in
              (workdir / "metrics.jsonl").read_text().splitlines()]
    return json.loads(out.stdout.strip().splitlines()[-1]), losses


def test_two_cpu_devices_train_any_batch_like_one(tmp_path):
    """Batch 8 splits over both devices; batch 3 (odd) trains on one of them instead of
    failing; both reproduce the one-device losses."""
    one, losses_one = _train(tmp_path / "one", 1, 8)
    two, losses_two = _train(tmp_path / "two", 2, 8)
    assert one["devices"] == 1 and two["devices"] == 2
    # None (every device), and the most devices each batch or replica count divides over.
    assert two["mesh_sizes"] == {"null": 2, "1": 1, "3": 1, "8": 2, "30": 2}
    np.testing.assert_allclose(losses_two, losses_one, rtol=1e-4)
    _, losses_odd_one = _train(tmp_path / "odd_one", 1, 3)
    _, losses_odd_two = _train(tmp_path / "odd_two", 2, 3)
    np.testing.assert_allclose(losses_odd_two, losses_odd_one, rtol=1e-5)
