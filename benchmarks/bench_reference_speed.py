"""Training speed of the Headless-AD authors' bandit model against ours, side by side, one run.

    python -m benchmarks reference_speed --checkout <headless-ad checkout> \\
        [--ref-python <python with torch>] [--batches 4 32] [--dropouts 0 0.22] \\
        [--steps 3] [--mem-limit-gb 12] [--set model.remat=true ...] [--out table.md]

The paper's Bernoulli-bandit scale (Table 3): 4 layers, d 512, 64 heads, 300-step windows of
20-arm histories, 128-wide action embeddings (their `token_embed_dim`); batch 4 and 32, with
attention dropout 0 and 0.22 (their tuned 0.2187; no other dropout). One training step is the
forward pass, the loss, the backward pass, gradient clipping and the AdamW update. Rows:

* theirs: their `Model` with their `_init_weights`, `ActionMapper` (regenerated each step) and
  `loss_fn`, in a python with torch (`--ref-python`), on a CPU through
  reproductions/matched_headless_ad/reference_port.py (SDPA for flash attention, plain SwiGLU /
  RMSNorm / rotary), float32;
* ours, `model.layout=reference`: the same model in JAX (same tokens: 2 x 300 + 20 + 2);
* ours, default layout: our Headless-AD (one token per step and the 20-token prompt).

Each row is a subprocess of its own, one after the other: `--warmup` untimed steps (JAX
compiles in the first), then `--steps` timed ones; peak memory is the child's maximum resident
set (ru_maxrss). A child whose resident set passes `--mem-limit-gb` is killed and its row says
so. Without torch in `--ref-python` their rows are skipped with one message. `--set KEY=VALUE`
changes our rows' config (e.g. `model.remat=true`, `model.memory_scheduler=true`,
`model.attention_block_size=128`); the table names it. Prints a markdown table (also written
to `--out`).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SCALE = dict(num_layers=4, d_model=512, num_heads=64, steps=300, arms=20, token_dim=128)
LAYOUTS = ("theirs", "reference", "ours")
LABELS = {"theirs": "authors' code (PyTorch, CPU port)", "reference": "ours, layout=reference",
          "ours": "ours, default layout"}


def random_batch(rng, batch: int):
    """Action ids `(B, T)` of 4-20-arm bandits, 0/1 rewards `(B, T)`, arm counts `(B,)`."""
    import numpy as np
    arms = rng.integers(4, SCALE["arms"] + 1, batch)
    actions = np.stack([rng.integers(0, n, SCALE["steps"]) for n in arms])
    rewards = rng.integers(0, 2, (batch, SCALE["steps"]))
    return actions, rewards, arms


def child_theirs(args) -> dict:
    import numpy as np
    try:
        import torch
    except ImportError:
        raise SystemExit("no torch") from None
    from functools import partial
    sys.path.insert(0, os.path.join(ROOT, "reproductions", "matched_headless_ad"))  # in $REF_PYTHON
    import reference_port
    ref = reference_port.load(args.checkout)
    torch.manual_seed(0)
    config = ref.Config(block_size=2 * SCALE["steps"] + 100, n_layer=SCALE["num_layers"],
                        n_head=SCALE["num_heads"], n_embd=SCALE["d_model"], bias=True,
                        rotary_percentage=1.0, parallel_residual=False,
                        shared_attention_norm=False, _norm_class="FusedRMSNorm",
                        _mlp_class="LLaMAMLP", dropout=0.0, attention_dropout=args.dropout)
    model = ref.Model(config=config, n_token=SCALE["token_dim"], use_action_set_prompt=True)
    model.apply(partial(model._init_weights, n_layer=config.n_layer))
    optim = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=1e-4)
    mapper = ref.ActionMapper(action_embed_dim=SCALE["token_dim"], num_actions=SCALE["arms"],
                              device="cpu", sim_measure="dot", rand_emb_type="orthogonal")
    actions, rewards, arms = (torch.from_numpy(x).long()
                              for x in random_batch(np.random.default_rng(0), args.batch))

    def step():
        mapper.regenerate()
        prompt = mapper._get_action_map_as_context(num_actions_per_env=arms)
        pred = model(act_emb=mapper(actions), rewards=rewards, action_set_prompt=prompt)[:, :-1]
        loss, _ = ref.train_module.loss_fn(pred, mapper.action_map, actions, arms, 1.34, "dot")
        optim.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        optim.step()
        return float(loss.item())

    return timed(step, args, lambda x: x, torch=torch.__version__,
                 threads=torch.get_num_threads())


def child_ours(args) -> dict:
    import jax
    import jax.numpy as jnp
    import numpy as np

    from icrl_jax.pipeline import run as R
    from icrl_jax.pipeline import train as T
    from icrl_jax.core.config import set_dotted
    from icrl_jax.data.windows import StepWindows
    from icrl_jax.experiments.headless_ad.bernoulli_bandit import get_config
    from icrl_jax.methods import build_method

    config = get_config("")
    for key, value in {"model.layout": args.layout, "model.action_embed_dim": SCALE["token_dim"],
                       "model.attention_dropout": args.dropout, "model.residual_dropout": 0.0,
                       "model.embedding_dropout": 0.0, "train.batch_size": args.batch,
                       "train.seq_len": SCALE["steps"]}.items():
        set_dotted(config, key, value)
    for key, value in parse_settings(args.set).items():
        set_dotted(config, key, value)
    env = R.build_env(config)
    method = build_method(config, env)
    actions, rewards, arms = random_batch(np.random.default_rng(0), args.batch)
    prev = np.concatenate([np.full((args.batch, 1), SCALE["arms"]), actions[:, :-1]], 1)
    prev_rewards = np.concatenate([np.zeros((args.batch, 1)), rewards[:, :-1]], 1)
    batch = StepWindows(observations=jnp.zeros(actions.shape, jnp.int32),
                        prev_actions=jnp.asarray(prev, jnp.int32),
                        prev_rewards=jnp.asarray(prev_rewards, jnp.float32),
                        actions=jnp.asarray(actions, jnp.int32),
                        action_mask=jnp.asarray(np.arange(SCALE["arms"])[None] < arms[:, None]))
    key = jax.random.PRNGKey(0)
    params = method.init(key, batch)
    optimizer = T.make_optimizer(config.train)
    state = T.TrainState(jnp.int32(0), params, optimizer.init(params))
    step_fn = jax.jit(lambda state, key: T.gradient_step(method, optimizer, state, batch, key),
                      donate_argnums=0)
    T.compile_first(step_fn, state, key)  # as `train` does
    box = {"state": state, "key": key}

    def step():
        box["key"], sub = jax.random.split(box["key"])
        box["state"], metrics = step_fn(box["state"], sub)
        return metrics["loss"]

    return timed(step, args, lambda x: float(jax.block_until_ready(x)),
                 jax=jax.__version__, devices=str(jax.devices()[0].platform))


def timed(step, args, finish, **extra) -> dict:
    for _ in range(args.warmup):
        finish(step())
    start = time.perf_counter()
    for _ in range(args.steps):
        loss = finish(step())
    seconds = (time.perf_counter() - start) / args.steps
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KB -> GB
    return dict(s_per_step=seconds, steps_per_s=1.0 / seconds, peak_rss_gb=peak, loss=loss,
                load_average=os.getloadavg(), **extra)


def parse_settings(settings: list[str]) -> dict:
    """`["model.remat=true", ...]` -> {key: value}, values read as Python literals or strings."""
    import ast
    out = {}
    for setting in settings:
        key, sep, text = setting.partition("=")
        if not sep:
            raise SystemExit(f"--set {setting!r}: expected KEY=VALUE")
        lowered = {"true": "True", "false": "False"}.get(text.lower(), text)
        try:
            out[key] = ast.literal_eval(lowered)
        except (ValueError, SyntaxError):
            out[key] = text
    return out


def rss_gb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return 0.0


def run_child(python: str, layout: str, batch: int, dropout: float, args) -> dict:
    """One row in a subprocess, killed past the memory limit."""
    command = [python, os.path.abspath(__file__), "--child", "--layout", layout,
               "--batch", str(batch), "--dropout", str(dropout), "--steps", str(args.steps),
               "--warmup", str(args.warmup), "--checkout", args.checkout]
    environ = dict(os.environ)
    if layout != "theirs":
        command += [f"--set={setting}" for setting in args.set]
        from icrl_jax.models.fields import MEMORY_SCHEDULER_FIELDS, add_remat_scheduler_flag
        settings = parse_settings(args.set)
        if any(settings.get(f"model.{field}") for field in MEMORY_SCHEDULER_FIELDS):
            add_remat_scheduler_flag(environ)  # as the CLI does (models/fields.py)
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               cwd=ROOT, env=environ)
    peak = 0.0
    while process.poll() is None:
        peak = max(peak, rss_gb(process.pid))
        if peak > args.mem_limit_gb:
            process.kill()
            process.wait()
            return dict(error=f"killed: resident set passed {args.mem_limit_gb:g} GB "
                              f"after {time.perf_counter() - start:.0f} s")
        time.sleep(0.2)
    out, err = process.communicate()
    lines = [line for line in out.splitlines() if line.startswith("{")]
    if process.returncode or not lines:
        tail = (err.strip().splitlines() or ["no output"])[-1]
        return dict(error=f"failed (exit {process.returncode}): {tail[:200]}")
    return json.loads(lines[-1])


def has_torch(python: str) -> bool:
    if not python:
        return False
    probe = subprocess.run([python, "-c", "import torch"], capture_output=True)
    return probe.returncode == 0


def table(rows: list, args) -> str:
    from benchmarks.harness import cpu_model  # the parent only: children run in $REF_PYTHON too
    theirs_runs = [r for _, _, layout, r in rows if layout == "theirs" and "torch" in r]
    torch_line = (f" Their rows: torch {theirs_runs[0]['torch']}, {theirs_runs[0]['threads']} "
                  f"threads, flash-attn / xformers / fused kernels swapped for SDPA and plain "
                  f"ops." if theirs_runs else "")
    skip = f" --skip {' '.join(args.skip)}" if args.skip else ""
    layouts = f" --layouts {' '.join(args.layouts)}" if list(args.layouts) != list(LAYOUTS) else ""
    layouts += "".join(f" --set {setting}" for setting in args.set)
    # The checkout and python are named by their variables: paths are this machine's.
    lines = [f"Headless-AD training step at the paper's bandit scale (4 layers, d 512, 64 heads, "
             f"300 steps, 20 arms, embeddings 128); {args.warmup} warm-up + {args.steps} timed "
             f"steps per row, each row a child process of its own (peak RSS its own). Hardware: "
             f"{cpu_model()}, {os.cpu_count()} cores (shared).{torch_line} Command: `python -m "
             f"benchmarks reference_speed --checkout $HEADLESS_AD --ref-python $REF_PYTHON "
             f"--batches {' '.join(map(str, args.batches))} --dropouts "
             f"{' '.join(map(str, args.dropouts))}{layouts} --steps {args.steps} --warmup "
             f"{args.warmup} --mem-limit-gb {args.mem_limit_gb:g}{skip}`.", "",
             "| batch | attention dropout | implementation | s/step | steps/s | peak RSS (GB) "
             "| speed-up vs theirs | load (1 min) |",
             "|---|---|---|---|---|---|---|---|"]
    def label(layout):
        settings = ", ".join(args.set) if layout != "theirs" else ""
        return f"{LABELS[layout]} ({settings})" if settings else LABELS[layout]

    for batch, dropout, layout, result in rows:
        theirs = next((r for b, d, lay, r in rows if (b, d, lay) == (batch, dropout, "theirs")), {})
        if "error" in result:
            lines.append(f"| {batch} | {dropout:g} | {label(layout)} | {result['error']} "
                         f"| | | | |")
            continue
        ratio = (f"{theirs['s_per_step'] / result['s_per_step']:.1f}x"
                 if "s_per_step" in theirs and layout != "theirs" else "")
        lines.append(f"| {batch} | {dropout:g} | {label(layout)} | {result['s_per_step']:.2f} "
                     f"| {result['steps_per_s']:.3f} | {result['peak_rss_gb']:.2f} | {ratio} "
                     f"| {result['load_average'][0]:.1f} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--checkout", default=os.environ.get("HEADLESS_AD"), required="HEADLESS_AD" not in os.environ,
                        help="a checkout of github.com/corl-team/headless-ad (default: $HEADLESS_AD)")
    parser.add_argument("--ref-python", default=os.environ.get("REF_PYTHON", ""),
                        help="a python with torch for the authors' rows (default: $REF_PYTHON; none: skipped)")
    parser.add_argument("--batches", type=int, nargs="+", default=[4, 32])
    parser.add_argument("--dropouts", type=float, nargs="+", default=[0.0, 0.22])
    parser.add_argument("--layouts", nargs="+", default=list(LAYOUTS), choices=LAYOUTS)
    parser.add_argument("--skip", nargs="*", default=[],
                        help="cells not to run, as layout:batch:dropout (e.g. theirs:32:0.22)")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--mem-limit-gb", type=float, default=12.0)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a config setting of our rows (repeatable), e.g. model.remat=true")
    parser.add_argument("--out", default="")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--layout", default="ours", help=argparse.SUPPRESS)
    parser.add_argument("--batch", type=int, default=4, help=argparse.SUPPRESS)
    parser.add_argument("--dropout", type=float, default=0.0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        result = child_theirs(args) if args.layout == "theirs" else child_ours(args)
        print(json.dumps(result))
        return
    layouts = list(args.layouts)
    if "theirs" in layouts and not has_torch(args.ref_python):
        print(f"skipping the authors' model: {args.ref_python} cannot import torch "
              "(pass --ref-python of an env with torch)")
        layouts.remove("theirs")
    rows = []
    for batch in args.batches:
        for dropout in args.dropouts:
            for layout in layouts:
                if f"{layout}:{batch}:{dropout:g}" in args.skip:
                    rows.append((batch, dropout, layout, dict(error="not run (--skip)")))
                    continue
                python = args.ref_python if layout == "theirs" else sys.executable
                result = run_child(python, layout, batch, dropout, args)
                rows.append((batch, dropout, layout, result))
                print(json.dumps(dict(batch=batch, dropout=dropout, layout=layout, **result)),
                      flush=True)
    text = table(rows, args)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
