"""The block's feed-forward, forward and backward, token-major against feature-major, in one
process.

    python benchmarks/bench_feed_forward.py [--devices 1 2] [--rounds 7]

Token-major is what `models/transformer.py` runs: x `(N, d)` @ W1 `(d, 4d)` -> GELU -> @ W2.
Its weight gradient x^T dh contracts the major axis of both operands, which XLA's CPU backend
runs in a generic matmul. Feature-major keeps the hidden layer `(4d, N)` after one transpose
of the input (behind an optimisation barrier), so every product of both passes contracts a
minor axis. Each variant is a residual block (LayerNorm, feed-forward, add) at the small quick
model's shapes (64 x 100 tokens, d = 64), its loss's gradient jitted, the tokens split over
`--devices` CPU devices as `train` splits a batch. Prints median milliseconds per call and the
ratio; nothing is written.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time


def _measure(devices: int, rounds: int, tokens: int, width: int) -> None:
    import jax
    jax.config.update("jax_num_cpu_devices", devices)
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    mesh = Mesh(np.array(jax.devices()), ("data",))
    rows = NamedSharding(mesh, P("data"))
    keys = jax.random.split(jax.random.PRNGKey(0), 4)
    x = jax.device_put(jax.random.normal(keys[0], (tokens, width)), rows)
    cotangent = jax.device_put(jax.random.normal(keys[1], (tokens, width)), rows)
    params = (jax.random.normal(keys[2], (width, 4 * width)) * 0.1, jnp.zeros(4 * width),
              jax.random.normal(keys[3], (4 * width, width)) * 0.1, jnp.zeros(width))

    def norm(h):
        mean = h.mean(-1, keepdims=True)
        return (h - mean) * jax.lax.rsqrt(((h - mean) ** 2).mean(-1, keepdims=True) + 1e-6)

    def token_major(p, h):
        w_in, b_in, w_out, b_out = p
        return h + jax.nn.gelu(norm(h) @ w_in + b_in) @ w_out + b_out

    def feature_major(p, h):
        w_in, b_in, w_out, b_out = p
        features = jax.lax.optimization_barrier(norm(h).T)  # (d, N)
        hidden = jax.nn.gelu(jnp.einsum("dh,dn->hn", w_in, features) + b_in[:, None])
        return h + jnp.einsum("hd,hn->nd", w_out, hidden) + b_out

    def gradient(block):
        return jax.jit(jax.grad(lambda p, h: jnp.sum(block(p, h) * cotangent), argnums=(0, 1)))

    variants = {"token-major": gradient(token_major), "feature-major": gradient(feature_major)}
    reference = variants["token-major"](params, x)
    for name, fn in variants.items():
        error = max(float(jnp.max(jnp.abs(a - b))) for a, b in
                    zip(jax.tree.leaves(fn(params, x)), jax.tree.leaves(reference)))
        assert error < 1e-3, f"{name} differs from the token-major gradient by {error}"
    seconds = {name: [] for name in variants}
    for _ in range(rounds):  # alternate, so that both see the same load
        for name, fn in variants.items():
            start = time.perf_counter()
            for _ in range(20):
                out = fn(params, x)
            jax.block_until_ready(out)
            seconds[name].append((time.perf_counter() - start) / 20)
    token, feature = (float(np.median(seconds[n])) for n in variants)
    print(f"{devices} device(s), {tokens} x {width} tokens: token-major {token * 1e3:.3f} ms, "
          f"feature-major {feature * 1e3:.3f} ms per call ({token / feature:.3f}x); "
          f"load average {os.getloadavg()[0]:.1f}", flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--devices", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--tokens", type=int, default=6400, help="batch x context (64 x 100)")
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return _measure(args.child, args.rounds, args.tokens, args.width)
    for devices in args.devices:  # JAX fixes its device count per process
        subprocess.run([sys.executable, "-m", "benchmarks.bench_feed_forward", "--child", str(devices),
                        "--rounds", str(args.rounds), "--tokens", str(args.tokens), "--width",
                        str(args.width)], check=True, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


if __name__ == "__main__":
    main()
