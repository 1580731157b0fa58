"""Many tokens: seconds per layer of one trajectory, against the machine's measured limit and
beside the plain ``lax.map`` version of the same layer that a JAX user writes.

Usage: ``python benchmarks/manytokens.py [--n-tokens 16384] [--dims 2,3,8] [--layers 10]
[--implementation auto|dense|blockwise|spectral] [--json] [--out FILE]``. Per dimension,
one JSON line (``--json``; ``--out`` appends them to a file) with

- ``implementation``: what attention ran (``auto``'s pick for these tokens) and
  ``spectral_degree`` (the truncation degree K where the spectral route runs);
- ``s_per_layer``: seconds per layer of one trajectory of ``DiscreteTransformer`` (Post-LN,
  softmax attention β = 4, deterministic values ``V = I/L``, L = 100), best of
  ``--repeats`` runs of ``--layers`` layers, compiled ahead of time (``compile_s``);
- ``plain_s_per_layer`` and ``speedup_vs_plain``: the same layer written as a user writes
  it — softmax attention in 256-row blocks under ``lax.map``, ``x + A/L`` normalised, in a
  ``fori_loop`` — timed the same way in the same process, alternating with the model;
  ``cpu_s_per_layer``, ``plain_cpu_s_per_layer`` and ``cpu_speedup_vs_plain``: the same in
  CPU seconds of the process (best of the repeats), which the other tenants of a shared
  machine move less than the wall seconds;
- ``limit_s`` and ``ratio_to_limit``: the direct sum's floor on this machine, measured in
  this process: N² exponentials at the measured rate of ``jnp.exp`` (``exp_per_s``, a
  fused exp-and-sum over 2²⁰ float32 in cache) plus 4·d flops per pair at the measured
  rate of a 1,024² float32 matrix product (``flop_per_s``). The spectral route does no
  pairs, so its ratio can be far below 1;
- ``max_abs_err`` (and ``plain_max_abs_err``): the largest absolute difference of one
  layer's output from a float64 direct sum (NumPy) on 1,024 rows;
- ``peak_mem_mb``, ``device``, ``commit``, ``date``, ``load_average`` (1-minute, before
  and after the run).

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

BETA, DEPTH, PLAIN_BLOCK, CHECK_ROWS = 4.0, 100, 256, 1024


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


def load() -> float | None:
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else None


def seconds(f, *args) -> float:
    return wall_and_cpu(f, *args)[0]


def wall_and_cpu(f, *args) -> tuple[float, float]:
    """Wall and CPU seconds (this process, all threads) of one call. On a shared machine the
    CPU seconds move less with the other tenants' load than the wall seconds."""
    start, cpu = time.perf_counter(), time.process_time()
    jax.block_until_ready(f(*args))
    return time.perf_counter() - start, time.process_time() - cpu


def best_seconds(f, *args, repeats: int = 3) -> float:
    jax.block_until_ready(f(*args))
    return min(seconds(f, *args) for _ in range(repeats))


def measured_rates() -> tuple[float, float]:
    """(exponentials per second, float32 flops per second) of this machine, now."""
    a = jax.random.uniform(jax.random.key(3), (1 << 20,), jnp.float32, -4.0, 0.0)
    exp_sum = jax.jit(lambda a: jnp.sum(jnp.exp(a)))
    exp_rate = a.size / best_seconds(exp_sum, a, repeats=10)
    m = jax.random.normal(jax.random.key(4), (1024, 1024), jnp.float32)
    product = jax.jit(lambda a, b: jnp.dot(a, b, precision=jax.lax.Precision.HIGHEST))
    flop_rate = 2 * 1024**3 / best_seconds(product, m, m, repeats=5)
    return exp_rate, flop_rate


def plain_layers(x, layers: int):
    """The layer as a JAX user writes it: 256-row blocks of softmax attention, Post-LN."""
    n, d = x.shape

    def layer(_, x):
        def rows(q):
            s = BETA * q @ x.T
            w = jnp.exp(s - s.max(-1, keepdims=True))
            return (w @ x) / w.sum(-1, keepdims=True)

        a = jax.lax.map(rows, x.reshape(n // PLAIN_BLOCK, PLAIN_BLOCK, d)).reshape(n, d)
        y = x + a / DEPTH
        return y / jnp.linalg.norm(y, axis=-1, keepdims=True)

    return jax.lax.fori_loop(0, layers, layer, x)


def exact_layer(x: np.ndarray) -> np.ndarray:
    """One layer on the first CHECK_ROWS tokens, in float64 NumPy (all N keys)."""
    x = np.asarray(x, np.float64)
    rows = max(1, min(CHECK_ROWS, 2**25 // len(x)))  # ≤ 256 MiB of scores at a time
    out = []
    for start in range(0, CHECK_ROWS, rows):
        q = x[start : min(start + rows, CHECK_ROWS)]
        s = BETA * q @ x.T
        w = np.exp(s - s.max(axis=1, keepdims=True))
        y = q + (w @ x) / w.sum(axis=1, keepdims=True) / DEPTH
        out.append(y / np.linalg.norm(y, axis=1, keepdims=True))
    return np.concatenate(out)


def model(attention, layers: int):
    """The layers, saving after the first (checked against float64) and the last."""
    times = (1 / DEPTH, layers / DEPTH) if layers > 1 else None
    saveat = ad.SaveAt(layers / DEPTH, times)
    return ad.DiscreteTransformer(attention, ad.DeterministicValues(), depth=DEPTH, saveat=saveat)


def run(
    n_tokens: int, dim: int, layers: int, implementation: str, repeats: int, rates, plain: bool
) -> dict:
    load_before = load()
    attention = ad.Attention(BETA, implementation=implementation)
    x0 = ad.uniform_sphere(key=jax.random.key(0), n_tokens=n_tokens, dim=dim)
    key = jax.random.key(2)
    start = time.perf_counter()
    many = jax.jit(lambda x, k: model(attention, layers).trajectory(x, key=k))
    many = many.lower(x0, key).compile()
    compile_s = time.perf_counter() - start
    out = jax.block_until_ready(many(x0, key))
    best_model = best_plain = cpu_model = cpu_plain = math.inf
    plain_err, user = None, None
    if plain:
        user = jax.jit(plain_layers, static_argnums=1).lower(x0, layers).compile()
        jax.block_until_ready(user(x0))
    for _ in range(repeats):  # alternating, so that both see the same load
        wall, cpu = wall_and_cpu(many, x0, key)
        best_model, cpu_model = min(best_model, wall), min(cpu_model, cpu)
        if user is not None:
            wall, cpu = wall_and_cpu(user, x0)
            best_plain, cpu_plain = min(best_plain, wall), min(cpu_plain, cpu)
    peak = peak_memory_mb()
    reference = exact_layer(np.asarray(x0))
    err = float(np.max(np.abs(np.asarray(out[0], np.float64)[:CHECK_ROWS] - reference)))
    if plain:
        first = np.asarray(jax.jit(plain_layers, static_argnums=1)(x0, 1), np.float64)
        plain_err = float(np.max(np.abs(first[:CHECK_ROWS] - reference)))
    exp_rate, flop_rate = rates
    limit = n_tokens**2 / exp_rate + 4 * dim * n_tokens**2 / flop_rate
    per_layer, plain_per_layer = best_model / layers, best_plain / layers
    return {
        "workload": f"manytokens N={n_tokens} d={dim}",
        "n_tokens": n_tokens,
        "dim": dim,
        "beta": BETA,
        "layers": layers,
        "implementation": attention.implementation_for(n_tokens, x0.dtype, dim=dim),
        "spectral_degree": attention.spectral_degree(n_tokens, x0.dtype, dim=dim),
        "s_per_layer": per_layer,
        "plain_s_per_layer": plain_per_layer if plain else None,
        "speedup_vs_plain": plain_per_layer / per_layer if plain else None,
        "cpu_s_per_layer": cpu_model / layers,
        "plain_cpu_s_per_layer": cpu_plain / layers if plain else None,
        "cpu_speedup_vs_plain": cpu_plain / cpu_model if plain else None,
        "limit_s": limit,
        "ratio_to_limit": per_layer / limit,
        "max_abs_err": err,
        "plain_max_abs_err": plain_err,
        "exp_per_s": exp_rate,
        "flop_per_s": flop_rate,
        "projected_100_layers_s": 100 * per_layer,
        "compile_s": compile_s,
        "peak_mem_mb": peak,
        "finite": bool(np.isfinite(np.asarray(out)).all()),
        "device": device_name(),
        "commit": commit(),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "load_average": [load_before, load()],
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description="Many tokens: seconds per layer.")
    parser.add_argument("--n-tokens", type=int, default=16384)
    parser.add_argument("--dims", default="3", help="comma-separated (issue 43: 2,3,8)")
    parser.add_argument("--dim", type=int, default=None, help="one dimension (overrides --dims)")
    parser.add_argument("--layers", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--implementation", default="auto", choices=("auto", "dense", "blockwise", "spectral")
    )
    parser.add_argument(
        "--plain",
        default="auto",
        choices=("auto", "on", "off"),
        help="time the plain lax.map version too (auto: up to 65,536 tokens)",
    )
    parser.add_argument(
        "--dense-limit-gib", type=float, default=None, help="ignored (the old dot bound's)"
    )
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--out", default=None, help="append the JSON lines to this file")
    args = parser.parse_args(argv)
    dims = [args.dim] if args.dim is not None else [int(d) for d in args.dims.split(",")]
    plain = args.plain == "on" or (args.plain == "auto" and args.n_tokens <= 65536)
    if plain and args.n_tokens % PLAIN_BLOCK:
        parser.error(f"--n-tokens must be a multiple of {PLAIN_BLOCK} for the plain version")
    rates = measured_rates()
    for dim in dims:
        row = run(args.n_tokens, dim, args.layers, args.implementation, args.repeats, rates, plain)
        if args.out:
            with open(args.out, "a") as f:
                f.write(json.dumps(row) + "\n")
        if args.json:
            print(json.dumps(row), flush=True)
        else:
            print(
                f"N={args.n_tokens} d={dim} {row['implementation']}: "
                f"{row['s_per_layer']:.4g} s/layer, plain {row['plain_s_per_layer']} "
                f"({row['speedup_vs_plain']}x), {row['ratio_to_limit']:.2f}x the limit "
                f"{row['limit_s']:.3g} s, max |err| {row['max_abs_err']:.1e}, compile "
                f"{row['compile_s']:.1f} s",
                file=sys.stderr,
            )


if __name__ == "__main__":
    main()
