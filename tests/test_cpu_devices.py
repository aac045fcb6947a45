"""icrl_jax/core/cpu_devices.py: one CPU device per core unless told otherwise, and `data_mesh` takes
the devices a batch (or a replica count) divides over, so any batch trains on a multi-device
CPU host."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from icrl_jax.core.cpu_devices import ENV, cpu_device_count, usable_cores
from xla_flags import xla_flags

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
    out = subprocess.run([sys.executable, "-m", "icrl_jax.pipeline.cli", "train", "--config",
                          "experiments/ad/darkroom.py:quick",
                          f"--config.workdir={tmp_path / 'run'}"], cwd=ROOT, env=env,
                         capture_output=True, text=True)
    assert out.returncode == 2
    assert f"{ENV} must be a positive number of CPU devices, got 'none'" in out.stderr
    assert not (tmp_path / "run").exists()


_TRAIN = textwrap.dedent(f"""
    import json, sys
    sys.path.insert(0, {os.path.join(ROOT, "tests")!r})
    from icrl_jax.core.cpu_devices import use_one_device_per_core
    use_one_device_per_core()
    import jax
    from test_training import copy_task_data, tiny_method, tiny_train_config
    from icrl_jax.pipeline.train import data_mesh, train
    sizes = {{n: data_mesh(n).devices.size for n in (None, 1, 3, 8, 30)}}
    workdir, batch = sys.argv[1], int(sys.argv[2])
    train(tiny_method(), copy_task_data(), tiny_train_config(batch_size=batch), workdir,
          {{"m": 1}}, show_progress=False)
    print(json.dumps(dict(devices=jax.device_count(), mesh_sizes=sizes)))
""")


def _train(workdir, devices: int, batch: int) -> tuple[dict, list[float]]:
    env = {k: v for k, v in os.environ.items() if k != "JAX_NUM_CPU_DEVICES"}
    env.update({ENV: str(devices), "JAX_PLATFORMS": "cpu", "XLA_FLAGS": xla_flags(os.environ)})
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


_SAMPLE = textwrap.dedent("""
    import json, re
    import jax
    jax.config.update("jax_num_cpu_devices", 2)
    import jax.numpy as jnp, numpy as np
    from jax.sharding import NamedSharding, PartitionSpec as P
    from icrl_jax.data.windows import StepWindows, sample_windows
    from icrl_jax.pipeline.train import data_mesh, place_data
    rows, length, batch, window = 4, 50, 6, 7
    steps = np.arange(rows)[:, None] * 1000 + np.arange(length)  # encodes (row, t)
    data = StepWindows(jnp.asarray(steps, jnp.int32), jnp.asarray(steps + 1, jnp.int32),
                       jnp.asarray(steps + 2, jnp.float32), jnp.asarray(steps + 3, jnp.int32),
                       jnp.asarray(np.arange(rows * 5).reshape(rows, 5) % 3 == 0))
    mesh = data_mesh(batch)
    placed = place_data(data, mesh)
    sample = jax.jit(lambda d, k: jax.lax.with_sharding_constraint(
        sample_windows(d, k, batch, window), NamedSharding(mesh, P("data"))))
    out = jax.tree.map(np.asarray, sample(placed, jax.random.key(3)))
    local = jax.tree.map(np.asarray, sample_windows(data, jax.random.key(3), batch, window))
    hlo = sample.lower(placed, jax.random.key(3)).compile().as_text()
    collectives = [line for line in hlo.splitlines() if re.search(r" all-(reduce|gather)\\(", line)]
    print(json.dumps(dict(
        devices=mesh.devices.size,
        row_split=len(placed.observations.sharding.device_set) == 2
        and placed.observations.addressable_shards[0].data.shape[0] == rows // 2,
        observations=out.observations.tolist(), prev_actions=out.prev_actions.tolist(),
        prev_rewards=out.prev_rewards.tolist(), actions=out.actions.tolist(),
        action_mask=out.action_mask.tolist(),
        same_as_one_device=all(bool((a == b).all()) for a, b in
                               zip(jax.tree.leaves(out), jax.tree.leaves(local))),
        collectives=collectives)))
""")


def test_windows_sampled_from_rows_split_over_devices_move_only_the_windows():
    """With the dataset's rows split over two devices (`place_data`), a sampled window is the
    right slice of one row, the same as on one device, and what the devices exchange is the
    `(batch, window)` windows, never the `(batch, length)` rows they come from."""
    env = {k: v for k, v in os.environ.items() if k != "JAX_NUM_CPU_DEVICES"}
    out = subprocess.run([sys.executable, "-c", _SAMPLE], cwd=ROOT, capture_output=True,
                         text=True, timeout=600,
                         env=dict(env, JAX_PLATFORMS="cpu", XLA_FLAGS=xla_flags(os.environ)))
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["devices"] == 2 and result["row_split"]
    assert result["same_as_one_device"]
    observations = np.array(result["observations"])
    row, start = observations[:, 0] // 1000, observations[:, 0] % 1000
    assert ((0 <= row) & (row < 4)).all() and ((0 <= start) & (start <= 50 - 7)).all()
    np.testing.assert_array_equal(observations, observations[:, :1] + np.arange(7))
    for offset, name in ((1, "prev_actions"), (2, "prev_rewards"), (3, "actions")):
        np.testing.assert_array_equal(result[name], observations + offset)
    np.testing.assert_array_equal(result["action_mask"],
                                  (row[:, None] * 5 + np.arange(5)) % 3 == 0)
    assert result["collectives"], "the rows live on two devices: windows must be exchanged"
    for line in result["collectives"]:
        shapes = re.findall(r"\[([\d,]+)\]", line.split(" all-")[0])
        assert all("50" not in shape.split(",") for shape in shapes), line
