"""Many tokens: seconds per layer of one trajectory against the dense matrix-product bound.

Usage: ``python benchmarks/manytokens.py --n-tokens N [--dim 3] [--layers K]
[--implementation auto|dense|blockwise] [--json]``: one process per N (so that the peak
memory is that workload's own). One JSON line (``--json``) with

- ``s_per_layer``: seconds per layer of one trajectory of ``DiscreteTransformer`` (Post-LN,
  softmax attention β = 4, deterministic values ``V = I/L``, L = 100), from one compiled
  run of ``--layers`` layers (compiled ahead of time, so the run holds no compilation);
- ``projected_100_layers_s``: 100 × that;
- ``dot_bound_s``: the best of three ``jnp.dot`` of one layer's two products at full
  precision, ``(N×d)·(d×N)`` (the scores) and ``(N×N)·(N×d)`` (the weighted values):
  measured whole where an N × N float32 matrix takes at most ``--dense-limit-gib`` (default
  4), else on a block of rows and scaled to N rows (``dot_bound_method``);
- ``ratio_to_bound``: ``s_per_layer / dot_bound_s``;
- ``peak_mem_mb``: the process's peak resident memory (CPU) or the device's peak bytes in
  use (accelerator), taken after the run and before the bound's matrices exist;
  ``compile_s``; ``implementation`` (what ``auto`` picked);
  ``device``, ``commit``, ``date``, and the load average where the OS reports it.

The GPU session's ``manytokens`` step (``benchmarks/gpu_session.sh``) runs it for N = 4,096,
65,536 and 10⁶; ``MANYTOKENS_N="512 2048"`` there tries the step on a CPU with small N.
"""

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import time
from datetime import UTC, datetime

import jax
import jax.numpy as jnp
import numpy as np

import attndyn as ad
from attndyn._core.blockwise import default_block

BETA, DEPTH = 4.0, 100


def peak_memory_mb() -> float:
    dev = jax.local_devices()[0]
    if dev.platform != "cpu":
        stats = dev.memory_stats() or {}
        return stats.get("peak_bytes_in_use", 0) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def device_name() -> str:
    dev = jax.local_devices()[0]
    return f"cpu ({os.cpu_count()} cores)" if dev.platform == "cpu" else dev.device_kind


def commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        )
        return out.stdout.strip()
    except Exception:
        return "unknown"


def best_seconds(f, *args, repeats: int = 3) -> float:
    jax.block_until_ready(f(*args))
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(f(*args))
        best = min(best, time.perf_counter() - start)
    return best


def dot_bound(n_tokens: int, dim: int, limit_gib: float) -> tuple[float, str]:
    """Seconds of one layer's two matrix products at full precision (see the module doc)."""
    rows = n_tokens
    if 4 * n_tokens * n_tokens > limit_gib * 2**30:
        rows = max(8, int(limit_gib * 2**30 // (8 * n_tokens)))
    key = jax.random.key(1)
    x = jax.random.normal(key, (n_tokens, dim), jnp.float32)
    p = jax.random.uniform(key, (rows, n_tokens), jnp.float32)
    dot = jax.jit(lambda a, b: jnp.dot(a, b, precision=jax.lax.Precision.HIGHEST))
    seconds = best_seconds(dot, x[:rows], x.T) + best_seconds(dot, p, x)
    if rows == n_tokens:
        return seconds, "full"
    return seconds * n_tokens / rows, f"{rows} rows, scaled to {n_tokens}"


def run(n_tokens: int, dim: int, layers: int, implementation: str, limit_gib: float) -> dict:
    attention = ad.Attention(BETA, implementation=implementation)
    model = ad.DiscreteTransformer(
        attention,
        ad.DeterministicValues(),
        depth=DEPTH,
        saveat=ad.SaveAt(layers / DEPTH),
    )
    x0 = ad.uniform_sphere(key=jax.random.key(0), n_tokens=n_tokens, dim=dim)
    key = jax.random.key(2)
    start = time.perf_counter()
    compiled = jax.jit(lambda x, k: model.trajectory(x, key=k)).lower(x0, key).compile()
    compile_s = time.perf_counter() - start
    start = time.perf_counter()
    out = jax.block_until_ready(compiled(x0, key))
    seconds = time.perf_counter() - start
    finite = bool(np.isfinite(np.asarray(out)).all())
    peak = peak_memory_mb()  # the model's own: before the bound allocates its N × N
    bound, method = dot_bound(n_tokens, dim, limit_gib)
    per_layer = seconds / layers
    return {
        "workload": f"manytokens N={n_tokens} d={dim}",
        "n_tokens": n_tokens,
        "dim": dim,
        "layers": layers,
        "implementation": attention.implementation_for(n_tokens, x0.dtype),
        "block": default_block(n_tokens),
        "s_per_layer": per_layer,
        "projected_100_layers_s": 100 * per_layer,
        "dot_bound_s": bound,
        "dot_bound_method": method,
        "ratio_to_bound": per_layer / bound,
        "compile_s": compile_s,
        "peak_mem_mb": peak,
        "finite": finite,
        "device": device_name(),
        "commit": commit(),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "load_average": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        description="Many tokens: seconds per layer of one trajectory."
    )
    parser.add_argument("--n-tokens", type=int, default=4096)
    parser.add_argument("--dim", type=int, default=3)
    parser.add_argument("--layers", type=int, default=10)
    parser.add_argument("--implementation", default="auto", choices=("auto", "dense", "blockwise"))
    parser.add_argument("--dense-limit-gib", type=float, default=4.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    for n in [args.n_tokens]:
        row = run(n, args.dim, args.layers, args.implementation, args.dense_limit_gib)
        if args.json:
            print(json.dumps(row), flush=True)
        else:
            print(
                f"N={n} d={args.dim} {row['implementation']}: {row['s_per_layer']:.4g} s/layer "
                f"({row['ratio_to_bound']:.2f}x the dot bound {row['dot_bound_s']:.3g} s), "
                f"100 layers ~ {row['projected_100_layers_s']:.3g} s, peak "
                f"{row['peak_mem_mb']:.0f} MB, compile {row['compile_s']:.1f} s",
                file=sys.stderr,
            )


if __name__ == "__main__":
    main()
