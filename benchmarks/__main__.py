"""`python -m benchmarks SUITE [--tiny] [--device cpu|gpu|tpu] [--write] [--out DIR] ...`: run one
suite; with no suite, list them with what each measures and about how long it takes.

Every suite is a module of this package with a `main(argv)`; `python -m benchmarks SUITE --help`
lists its own options. `--device` is read here too, before any suite starts JAX.
"""

from __future__ import annotations

import importlib
import inspect
import sys

from benchmarks import harness

#: Suite name -> (module, what it measures, about how long it takes at its default size).
SUITES = {
    "accelerator": ("benchmarks.accelerator",
                    "the device check: training tokens/s and MFU (fp32, bf16) of three models, in-context "
                    "evaluation at 4k-1M envs, every JAX env at 65k envs, history generation",
                    "<= 10 min on one GPU; a few minutes with --tiny on a CPU"),
    "gpu_attention": ("benchmarks.gpu_attention", "the accelerator suite's slow or failing training rows with "
                      "model.attention_impl forced (cudnn, dense, blockwise, pallas): speed, compile time and "
                      "the attention kernels that ran", "<= 200 s on one GPU; about a minute with --tiny on a CPU"),
    "train": ("benchmarks.bench_train", "training tokens/s, model FLOP/s and MFU of every model we train (AD sizes, "
              "the main job, Uni[MASK]'s grid, GPT-DT / DTMA); --headless-paper: Headless-AD at the paper's scale; "
              "--old DIR: rows before/after, one process each, the checkouts alternating",
              "10-20 min on a 2-core CPU (--quick: a few); --headless-paper about 10 min"),
    "context_length": ("benchmarks.bench_context_length", "AD at XLand-100B's size (8x512, ALiBi) on 512-4,096-token "
                       "windows, dense and blockwise attention: steps/s, MFU, peak RSS, one process a point",
                       "an hour or more on a CPU; minutes on a GPU"),
    "scaling": ("benchmarks.bench_scaling", "data-parallel training over 1-8 CPU devices and 2 processes "
                "(jax.distributed): tokens/s and the loss", "about 5 min on a CPU"),
    "core": ("benchmarks.bench_core", "training, in-context evaluation and sweeps against another checkout "
             "(--old DIR), one process per (tree, workload), the trees alternating", "10-20 min on a CPU"),
    "step_ab": ("benchmarks.bench_step_ab", "the whole training step with one function replaced by the code a "
                "change replaced (--reference), both in one process, interleaved", "a few minutes a row on a CPU"),
    "profile_train": ("benchmarks.profile_train", "where a training step's time goes: one traced call, XLA "
                      "operations by model part, forward and backward apart", "a minute or two a row on a CPU"),
    "envs": ("benchmarks.bench_envs", "env steps/s of our envs beside gymnax's bandit, 1-65,536 envs",
             "minutes on a CPU (--quick: 10x fewer steps)"),
    "eval_scaling": ("benchmarks.bench_eval_scaling",
                     "in-context evaluation env-steps/s and peak RSS against the number of envs; the "
                     "authors' loops beside ours with --ref-python and their checkouts", "minutes on a CPU"),
    "histories": ("benchmarks.bench_histories", "learning-history generation (Thompson samplers, NumPy "
                  "generator, Q-learning), 10,000 histories", "minutes on a CPU (--quick: 10x fewer)"),
    "sweep": ("benchmarks.bench_sweep", "sweep assignments/hour, one by one vs vmapped replicas", "minutes"),
    "context_caches": ("benchmarks.bench_context_caches", "rollouts past the context: staggered caches vs the "
                       "recomputed window", "minutes"),
    "vq_context": ("benchmarks.bench_vq_context", "AD + VQ n-grams in context: codes kept vs recomputed",
                   "minutes"),
    "point_maze": ("benchmarks.bench_point_maze", "point maze steps/s, JAX vs gymnasium-robotics' MuJoCo",
                   "minutes (needs gymnasium-robotics)"),
    "mjx_envs": ("benchmarks.bench_mjx_envs", "MJX locomotion steps/s beside gymnasium's MuJoCo and brax",
                 "minutes (needs the continuous extra)"),
    "locomotion": ("benchmarks.bench_locomotion", "brax locomotion steps/s by physics backend: ENV BACKEND [STEPS]",
                   "minutes (needs brax)"),
    "ppo_mjx": ("benchmarks.bench_ppo_mjx", "on-device PPO env steps/s on an MJX env by envs per update",
                "minutes (needs the continuous extra)"),
    "datasets": ("benchmarks.bench_datasets", "Minari dataset generation: time, size, peak memory",
                 "minutes to hours by --preset"),
    "bridge": ("benchmarks.bench_bridge", "host-simulator bridge steps/s vs a Python loop; pools",
               "minutes (needs vizdoom or miniworld)"),
    "gpt_dt_smollm2": ("benchmarks.bench_gpt_dt_smollm2", "GPT-DT training with SmolLM2's first k blocks",
                       "minutes (needs the SmolLM2 GGUF)"),
    "reference_speed": ("benchmarks.bench_reference_speed", "the Headless-AD authors' training step (PyTorch) "
                        "beside ours: --checkout (or $HEADLESS_AD), --ref-python (or $REF_PYTHON)", "minutes"),
    "attention_core": ("benchmarks.bench_attention_core", "attention core and dropout masks against another "
                       "checkout (--old DIR), one process", "minutes"),
    "bf16_products": ("benchmarks.bench_bf16_products", "float32 vs bfloat16 products on the CPU at the "
                      "training step's shapes", "about a minute"),
    "collectives": ("benchmarks.bench_collectives", "gradient all-reduce on CPU devices: per-leaf buffers vs one",
                    "about a minute"),
    "feed_forward": ("benchmarks.bench_feed_forward", "feed-forward token-major vs feature-major", "about a minute"),
    "xland": ("benchmarks.bench_xland", "XLand-MiniGrid steps/s: xminigrid's env.step beside our registered env "
              "(8,192 envs x 1,000 steps, random actions, auto-reset), and recurrent PPO history generation",
              "an hour or more at full size on a 2-core CPU (--steps 100: minutes; --tiny: seconds); "
              "needs the xland extra"),
    "sampling": ("benchmarks.bench_sampling", "sampling windows from histories split over devices",
                 "about a minute"),
}


def usage() -> str:
    lines = ["python -m benchmarks SUITE [--tiny] [--device cpu|gpu|tpu] [--write] [--out DIR] ...", "",
             "suites:"]
    width = max(map(len, SUITES))
    for name, (_, what, duration) in SUITES.items():
        lines.append(f"  {name:<{width}}  {what}")
        lines.append(f"  {'':<{width}}  time: {duration}")
    lines += ["", "benchmarks/README.md says more; `python -m benchmarks SUITE --help` lists a suite's options."]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help", "list"):
        print(usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in SUITES:
        print(f"unknown suite {name!r}\n\n{usage()}", file=sys.stderr)
        return 2
    if "--device" in rest and rest.index("--device") + 1 < len(rest):
        harness.choose_device(rest[rest.index("--device") + 1])  # before the suite imports JAX
    main_function = importlib.import_module(SUITES[name][0]).main
    if inspect.signature(main_function).parameters:
        return main_function(rest) or 0
    sys.argv = [f"python -m benchmarks {name}", *rest]  # a suite whose main() reads sys.argv
    return main_function() or 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
