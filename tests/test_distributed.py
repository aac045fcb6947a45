"""More than one device or process: two processes on localhost train like one, sharded
evaluation and sweeps equal one device, bf16 trains close to fp32, attention falls back to XLA,
and bad layouts or coordinators get clear errors.

Multi-device cases run in subprocesses with `--xla_force_host_platform_device_count` (the device
count is fixed when JAX starts); each subprocess has its own timeout, so a hang fails the test
instead of stalling the suite.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from icrl_jax.core import distributed
from icrl_jax.core.errors import UserError
from xla_flags import xla_flags

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: A tiny AD run on Bernoulli bandits (`experiments/ad/bernoulli_bandit.py:quick`, shrunk), on
#: histories of a source that draws each history from its own key alone (Thompson sampling's
#: exact Beta sampler pools its rare rejection retries over the batch, so a process's share of
#: its histories would be other, equally distributed draws than the same rows of the whole).
TINY = ["--config", "experiments/ad/bernoulli_bandit.py:quick", "--config.data.source=uniform_random",
        "--config.data.num_train_tasks=64", "--config.data.num_test_tasks=8",
        "--config.data.num_steps=40", "--config.model.d_model=16", "--config.model.num_heads=2",
        "--config.model.num_layers=1", "--config.train.num_steps=20",
        "--config.train.steps_per_call=10", "--config.train.log_every=10",
        "--config.train.checkpoint_every=20", "--config.train.batch_size=8",
        "--config.train.seq_len=20", "--config.run.evaluate=False", "--config.run.progress=False"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(devices: int = 1) -> dict[str, str]:
    env = dict(os.environ, JAX_PLATFORMS="cpu",
               PYTHONPATH=os.pathsep.join([ROOT, os.path.join(ROOT, "tests")]))
    env["XLA_FLAGS"] = xla_flags(os.environ, devices)
    for var in ("JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID"):
        env.pop(var, None)
    return env


def _cli(args, devices: int = 1):
    return subprocess.Popen([sys.executable, "-m", "icrl_jax.pipeline.cli", "train", *args], cwd=ROOT,
                            env=_env(devices), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)


def _params(workdir: str) -> dict[str, np.ndarray]:
    """The newest checkpoint's parameters, restored the way `icrl-jax evaluate` does, in this
    one-device process (so a multi-process checkpoint must restore into another layout)."""
    from icrl_jax.experiments.ad.bernoulli_bandit import get_config
    from icrl_jax.pipeline import run as run_pipeline
    from icrl_jax.core.config import set_dotted
    from icrl_jax.methods import build_method

    config = get_config("quick")
    for arg in TINY[2:]:
        dotted, value = arg[len("--config."):].split("=")
        set_dotted(config, dotted, type(eval_default(config, dotted))(value)
                   if value not in ("False", "True") else value == "True")
    config.workdir = workdir
    config = run_pipeline.resolve_config(config)
    env = run_pipeline.build_env(config)
    params = run_pipeline.load_params(config, env, build_method(config, env))
    return {jax.tree_util.keystr(p): np.asarray(x)
            for p, x in jax.tree_util.tree_leaves_with_path(params)}


def eval_default(config, dotted: str):
    node = config
    for part in dotted.split("."):
        node = node[part]
    return node


def _finish(proc, timeout: int = 600) -> str:
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        pytest.fail(f"process timed out:\n{out[-3000:]}")
    assert proc.returncode == 0, out[-3000:]
    return out


def test_two_processes_train_like_one(tmp_path):
    """Data-parallel over two processes (gloo collectives) = one process over the same global
    batch (the batch is sampled from the same key; only the reduction order differs)."""
    port = _free_port()
    dist = [f"--config.dist.coordinator=127.0.0.1:{port}", "--config.dist.num_processes=2",
            "--config.dist.timeout_s=120"]
    two = str(tmp_path / "two")
    procs = [_cli([*TINY, f"--config.workdir={two}", *dist, f"--config.dist.process_id={i}"])
             for i in range(2)]
    one = _cli([*TINY, f"--config.workdir={tmp_path / 'one'}"])
    outputs = [_finish(p) for p in (*procs, one)]
    del outputs
    a, b = _params(two), _params(str(tmp_path / "one"))
    assert a.keys() == b.keys()
    # Float tolerance: the gradient all-reduce sums in another order, and Adam's normalised
    # update turns a last-bit difference of a near-zero gradient into a visible one (seen here:
    # at most 2e-4 of parameters ~1e-2 after 20 steps). A different batch would move every
    # parameter by ~lr per step.
    for k in a:
        np.testing.assert_allclose(a[k], b[k], rtol=0, atol=1e-3, err_msg=k)
    flat = lambda p: np.concatenate([p[k].ravel() for k in sorted(p)])  # noqa: E731
    assert np.linalg.norm(flat(a) - flat(b)) <= 1e-3 * np.linalg.norm(flat(b))
    # Each process made only its own half of the 64 x 1 histories (the rows its device
    # trains on), and the halves are the one-process dataset's rows: same tasks, same keys.
    from icrl_jax.data.history import load_history
    whole, _ = load_history(str(tmp_path / "one" / "histories.npz"))
    for i, rows in enumerate(("0-32-of-64", "32-64-of-64")):
        part, meta = load_history(os.path.join(two, f"histories.rows-{rows}.npz"))
        assert meta["rows"] == list(range(32 * i, 32 * (i + 1)))
        np.testing.assert_array_equal(part.actions, whole.actions[32 * i:32 * (i + 1)])
        np.testing.assert_array_equal(part.task_ids, whole.task_ids[32 * i:32 * (i + 1)])
    # Process 0 alone wrote the metrics: one line per logged step, not two.
    with open(os.path.join(two, "metrics.jsonl")) as f:
        steps = [json.loads(line)["step"] for line in f]
    assert steps == [10, 20]


SHARDED = textwrap.dedent("""
    import json, sys
    import jax, jax.numpy as jnp, numpy as np
    from icrl_jax import envs
    from icrl_jax.data.rollout import run_policies
    from icrl_jax.data.sources import build_source
    from icrl_jax.data.train_data import on_device
    from icrl_jax.pipeline import train as trainer
    from test_training import copy_task_data, tiny_method, tiny_train_config

    from icrl_jax.methods.ad import AD
    from icrl_jax.methods.in_context import in_context_source
    from icrl_jax.methods.fields import ad_model_config

    out = {"devices": len(jax.devices())}
    # Evaluation: 24 bandits x 30 steps, batch sharded over the devices: Thompson sampling, and
    # an (untrained) AD model decoding from its key/value cache.
    env = envs.make("bernoulli_bandit", arms=4)
    model = ad_model_config()
    model.update(dict(d_model=16, num_layers=1, num_heads=2, max_len=32, label_smoothing=0.0))
    ad = AD(model, 4, 1)
    example = copy_task_data().example
    params = ad.init(jax.random.PRNGKey(0), jax.tree.map(jnp.asarray, example))
    policies = {"ts": build_source("thompson_sampling", env, 30, {}),
                "ad": in_context_source(ad, params, env, 32, False, max_steps=30)}
    rollouts = run_policies(env, policies, env.task_params(np.arange(24)), 30,
                            jax.random.PRNGKey(3))
    out["eval_actions"] = {k: r["actions"].tolist() for k, r in rollouts.items()}
    # Sweep: 8 replicas (learning rates), sharded over the devices when they divide.
    from icrl_jax.methods.fields import ad_config
    config = ad_config()
    config.model.update(dict(d_model=32, num_layers=1, num_heads=2, max_len=32))
    config.train = tiny_train_config()
    hyper = trainer.replica_hyperparameters(config, [{"train.learning_rate": float(lr)}
                                               for lr in np.linspace(1e-3, 3e-3, 8)])
    state, _ = trainer.train_replicas(lambda m: AD(m, 4, 16), config, copy_task_data(), sys.argv[1],
                                {"t": 1}, list(range(8)), hyper)
    out["sweep_params"] = [np.asarray(x).tolist() for x in jax.tree.leaves(state.params)]
    print("RESULT" + json.dumps(out))
""")


def _sharded_run(tmp_path, devices: int) -> dict:
    proc = subprocess.run([sys.executable, "-c", SHARDED, str(tmp_path / f"sweep{devices}")],
                          cwd=ROOT, env=_env(devices), capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(l for l in proc.stdout.splitlines() if l.startswith("RESULT"))
    return json.loads(line[len("RESULT"):])


def test_eight_devices_evaluate_and_sweep_like_one(tmp_path):
    one, eight = _sharded_run(tmp_path, 1), _sharded_run(tmp_path, 8)
    assert (one["devices"], eight["devices"]) == (1, 8)
    for name in ("ts", "ad"):
        np.testing.assert_array_equal(one["eval_actions"][name], eight["eval_actions"][name])
    # Replica k computes the same math on one device or spread over eight; XLA may vectorise
    # it differently, and 40 Adam steps amplify last-bit differences of near-zero gradients.
    a, b = (np.concatenate([np.ravel(x) for x in run["sweep_params"]]) for run in (one, eight))
    assert np.linalg.norm(a - b) <= 1e-3 * np.linalg.norm(b), np.linalg.norm(a - b)
    np.testing.assert_allclose(a, b, rtol=0, atol=5e-3)


def test_bf16_trains_close_to_fp32(tmp_path):
    """bf16 compute (fp32 parameters, optimiser state and loss) reaches the fp32 loss of a tiny
    AD run within 5%, and its parameters stay float32."""
    from test_training import copy_task_data, tiny_method, tiny_train_config
    from icrl_jax.pipeline import train as trainer

    losses = {}
    for precision in ("fp32", "bf16"):
        config = tiny_train_config(compute_dtype=precision)
        state = trainer.train(tiny_method(), copy_task_data(), config, str(tmp_path / precision), {"t": 1},
                        show_progress=False)
        assert {x.dtype for x in jax.tree.leaves(state.params)} == {np.dtype("float32")}
        with open(tmp_path / precision / "metrics.jsonl") as f:
            losses[precision] = [json.loads(l)["loss"] for l in f][-1]
    assert abs(losses["bf16"] - losses["fp32"]) <= 0.05 * losses["fp32"], losses
    assert trainer.compute_dtype("auto") == jnp.float32  # the CPU has no fast bf16
    with pytest.raises(UserError, match="train.compute_dtype"):
        trainer.compute_dtype("fp8")


def test_attention_falls_back_to_xla_on_the_cpu():
    from icrl_jax.models.attention import attention_implementation, dot_product_attention
    q, k, v = jax.random.normal(jax.random.PRNGKey(0), (3, 2, 5, 4, 8))
    mask = jnp.tril(jnp.ones((5, 5), bool))[None, None]
    assert attention_implementation(q) == "xla"
    assert attention_implementation(q.astype(jnp.bfloat16)) == "xla"  # no GPU here
    logits = jnp.einsum("bqhd,bkhd->bhqk", q, k) / jnp.sqrt(8.0)
    weights = jax.nn.softmax(jnp.where(mask, logits, -jnp.inf), -1)
    expected = jnp.einsum("bhqk,bkhd->bqhd", weights, v)
    np.testing.assert_allclose(dot_product_attention(q, k, v, jnp.broadcast_to(
        mask, (2, 1, 5, 5))), expected, atol=1e-5)


def test_unreachable_coordinator_is_named():
    import ml_collections
    port = _free_port()  # nothing listens there
    dist = ml_collections.ConfigDict(dict(coordinator=f"127.0.0.1:{port}", num_processes=2,
                                          process_id=1, cluster=False, timeout_s=2))
    with pytest.raises(distributed.CoordinatorUnreachableError, match=f"127.0.0.1:{port}"):
        distributed.initialize(dist)
    dist.process_id = 2
    with pytest.raises(UserError, match="process_id"):
        distributed.initialize(dist)


def test_batch_that_does_not_divide_over_the_devices_is_named():
    import types
    from test_training import copy_task_data, tiny_method, tiny_train_config
    from icrl_jax.pipeline import train as trainer

    config = tiny_train_config()
    mesh = types.SimpleNamespace(devices=np.empty(3))  # as a 3-device mesh: batch 8 won't split
    with pytest.raises(UserError, match="batch_size=8 does not divide over the 3 devices"):
        trainer.make_train_steps(lambda _: (tiny_method(), trainer.make_optimizer(config)), copy_task_data(),
                           config, mesh)


def _history_id_store(path, num_histories=6, length=40):
    """A pixel store whose frames show one of 3 colours (the action: learnable from pixels) and
    whose every reward is the history's id (so a window tells which history it came from)."""
    from icrl_jax.data.pixel_store import PixelStoreWriter
    colours = np.array([[255, 0, 0], [0, 255, 0], [0, 0, 255]], np.uint8)
    rng = np.random.default_rng(0)
    with PixelStoreWriter(str(path), (8, 8, 3), chunk_steps=64) as w:
        for h in range(num_histories):
            actions = rng.integers(0, 3, length)
            w.add_history(np.broadcast_to(colours[actions][:, None, None, :], (length, 8, 8, 3)),
                          actions, np.full(length, h, np.float32), np.arange(length) % 10 == 9)


def test_a_process_part_of_a_pixel_store_holds_only_its_histories(tmp_path):
    from icrl_jax.data.pixel_store import PixelStore, PixelStoreWriter, StepWindowsLoader
    from icrl_jax.data.pixel_trajectories import PixelTrajectoryStore

    _history_id_store(tmp_path / "s")
    store = PixelStore(str(tmp_path / "s"))
    for index in (0, 1, 2):
        batch = store.sample(np.random.default_rng(index), 64, 12, previous_fill=3,
                             shard=(index, 3))
        assert set(np.unique(batch["rewards"])) == {index, index + 3}  # histories h % 3 == index
    # the loader yields this part's share of every call's windows, from a stream of its own
    loader = StepWindowsLoader(store, 3, 4, 12, 2, shard=(1, 2))
    item = next(loader)
    loader.close()
    assert isinstance(item.observations, np.ndarray) and item.actions.shape == (8, 12)
    assert set(np.unique(item.prev_rewards)) <= {0.0, 1.0, 3.0, 5.0}
    with pytest.raises(ValueError, match="part 0 of 2"):
        store.sample(np.random.default_rng(0), 4, 41, shard=(0, 2))
    # DT windows: every history ends with done -> one episode per history
    with PixelStoreWriter(str(tmp_path / "t"), (2, 2, 1), (1,)) as w:
        for h, n in enumerate((5, 9, 3, 7)):
            w.add_history(np.zeros((n, 2, 2, 1), np.uint8), np.zeros((n, 1), np.int32),
                          np.full(n, h, np.float32), np.arange(n) == n - 1)
    episodes = PixelTrajectoryStore(str(tmp_path / "t"))
    windows = episodes.sample(np.random.default_rng(0), 200, 4, shard=(1, 2))
    seen = np.unique(windows.rewards[windows.mask])
    assert set(seen) == {1.0, 3.0}


PIXEL_WORKER = textwrap.dedent("""
    import json, sys
    from icrl_jax.core import distributed
    distributed.initialize(None)  # from JAX_COORDINATOR_ADDRESS / _NUM_PROCESSES / _PROCESS_ID
    import jax, numpy as np
    from icrl_jax.core.config import default_train_config
    from icrl_jax.pipeline import train as trainer
    from icrl_jax.data.pixel_store import PixelStore, StepWindowsLoader, example_step_windows
    from icrl_jax.data.train_data import TrainData
    from icrl_jax.methods.ad import AD
    from test_miniworld_ad import tiny_model_config

    store = PixelStore(sys.argv[1])
    example = example_step_windows(store, 3, 12)  # shapes only
    seen = set()
    sample = store.sample

    def recording(*args, **kwargs):  # which histories this process reads
        out = sample(*args, **kwargs)
        seen.update(np.unique(out["rewards"]).tolist())
        return out
    store.sample = recording
    config = default_train_config()
    config.update(dict(num_steps=40, batch_size=8, seq_len=12, steps_per_call=2,
                       learning_rate=3e-3, warmup_steps=5, log_every=10, checkpoint_every=40))

    def loader_fn(start, shard=(0, 1)):
        return StepWindowsLoader(store, 3, 8 // shard[1], 12, 2, start, seed=3, shard=shard)

    data = TrainData(example, loader_fn=loader_fn)
    state = trainer.train(AD(tiny_model_config(), 3, None), data, config, sys.argv[2], {"t": 1},
                    show_progress=False)
    flat = np.concatenate([np.ravel(x) for x in jax.tree.leaves(state.params)])
    print("RESULT" + json.dumps({"process": jax.process_index(), "seen": sorted(seen),
                                 "params": flat[:: max(1, len(flat) // 200)].tolist()}))
""")


def test_two_processes_train_from_their_parts_of_a_pixel_store(tmp_path):
    """Each process streams windows of its own histories (h % 2 == its index) into its share of
    every batch; the processes hold one state and the loss falls."""
    _history_id_store(tmp_path / "store")
    port = _free_port()
    procs = []
    for i in range(2):
        env = dict(_env(), JAX_COORDINATOR_ADDRESS=f"127.0.0.1:{port}", JAX_NUM_PROCESSES="2",
                   JAX_PROCESS_ID=str(i))
        procs.append(subprocess.Popen(
            [sys.executable, "-c", PIXEL_WORKER, str(tmp_path / "store"), str(tmp_path / "run")],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    results = {}
    for p in procs:
        out = _finish(p)
        line = next(l for l in out.splitlines() if l.startswith("RESULT"))
        result = json.loads(line[len("RESULT"):])
        results[result["process"]] = result
    assert results[0]["seen"] == [0.0, 2.0, 4.0] and results[1]["seen"] == [1.0, 3.0, 5.0]
    np.testing.assert_array_equal(results[0]["params"], results[1]["params"])
    with open(tmp_path / "run" / "metrics.jsonl") as f:
        losses = [json.loads(line)["loss"] for line in f]
    assert len(losses) == 4 and losses[-1] < 0.7 * losses[0], losses
