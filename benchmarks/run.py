"""attndyn benchmarks: trajectory-steps per second against NumPy and against the PRNG alone.

Usage: ``python benchmarks/run.py WORKLOAD [--json] [--route auto|full]`` with WORKLOAD one
of W1, W1-d10, W1-d64, W2, W3 (see ``WORKLOADS``), or W4-discrete / W4-sde (seed 003's Fig.
4 at the paper's scale, whole process: ``benchmarks/hybrid.py``; ``--attention``). One line
of JSON is printed with ``--json`` (a readable summary otherwise):

- ``traj_steps_per_s``: trajectories × layers / steady-state seconds of
  ``estimate_probabilities`` (a second run, compilation cached);
- ``compile_s``: first-run seconds minus second-run seconds (tracing + XLA compilation);
- ``numpy_traj_steps_per_s``: a plain batched NumPy implementation of the same model
  (full N × d Post-LN, softmax, Gaussian values; NumPy's default PCG64 generator) run in
  this process on a few hundred trajectories for a few hundred layers, per trajectory-step;
- ``speedup``: the ratio of the two;
- ``rng_bound_efficiency``: seconds the chosen PRNG alone needs to draw the random numbers
  the run consumes (the same per-layer ``fold_in`` and draw sizes, same batch, same layer
  count), divided by the engine's seconds: 1 means the engine runs at the PRNG's speed;
- ``peak_mem_mb``: the process's peak resident memory (CPU) or the device's peak bytes in
  use (GPU); ``device``; ``route``.

W3 is the whole of seed 003's Fig. 3 (7 dimensions × 17 β × 40,000 trajectories × 50,000
layers, 2.4·10¹¹ trajectory-steps). On a GPU it runs for real (``--w3-points`` limits the
points for a quick check); elsewhere it is projected from the measured per-step rate of
each dimension on a shortened horizon, and the line says ``"projected": true``.
"""

import argparse
import json
import math
import os

# One XLA CPU device per core, so that the estimator's sharding uses every core (set before
# JAX starts; a GPU machine ignores it).
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "")
        + f" --xla_force_host_platform_device_count={os.cpu_count() or 1}"
    ).strip()
import resource
import subprocess
import sys
import time
from datetime import UTC, datetime

import jax
import jax.numpy as jnp
import numpy as np
import xarray as xr

import attndyn as ad
from attndyn._core import random as core_random
from attndyn._models.reduced import samplers

WORKLOADS = {
    "W1": {"n_tokens": 2, "dim": 4, "beta": 3.0, "depth": 100, "horizon": 20.0, "n": 4000},
    "W1-d10": {"n_tokens": 2, "dim": 10, "beta": 3.0, "depth": 100, "horizon": 20.0, "n": 4000},
    "W1-d64": {"n_tokens": 2, "dim": 64, "beta": 3.0, "depth": 100, "horizon": 20.0, "n": 4000},
    "W2": {"n_tokens": 32, "dim": 16, "beta": 1.0, "depth": 100, "horizon": 10.0, "n": 512},
}
#: The PRNG implementation of the study key (``--prng``).
PRNG_IMPL = ["threefry2x32"]
W3_DIMS = tuple(range(4, 11))
W3_BETAS = tuple(float(b) for b in np.linspace(0.0, 4.0, 17))
W3_TRAJ, W3_DEPTH, W3_HORIZON = 40_000, 100, 500.0


def make_model(beta, dim, n_tokens, *, depth, horizon):
    del dim, n_tokens
    return ad.DiscreteTransformer(
        ad.Attention(beta), ad.MatrixValues(1.0), depth=depth, saveat=ad.SaveAt(horizon)
    )


def run_engine(w: dict, route: str, n: int | None = None, points=None) -> tuple[float, xr.Dataset]:
    n = n or w["n"]
    points = points or [{"dim": w["dim"], "n_tokens": w["n_tokens"], "beta": w["beta"]}]
    start = time.perf_counter()
    ds = ad.estimate_probabilities(
        lambda **p: make_model(**p, depth=w["depth"], horizon=w["horizon"]),
        points,
        key=jax.random.key(0, impl=PRNG_IMPL[0]),
        n_trajectories=n,
        progress=False,
        route=route,  # type: ignore[arg-type]
        # W2's 32 tokens in d = 16 cluster to float32 resolution by T = 10 (506 of 512
        # trajectories): a throughput workload, so merges are counted as computed (the
        # default would bound them too, on the host).
        on_merged="count",
    )
    return time.perf_counter() - start, ds


def numpy_rate(w: dict, batch: int = 512, layers: int = 200, repeats: int = 3) -> float:
    """Trajectory-steps/s of a plain batched NumPy loop over layers (full N × d model)."""
    n_tok, dim, beta, depth = w["n_tokens"], w["dim"], w["beta"], w["depth"]
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, n_tok, dim)).astype(np.float32)
    x /= np.linalg.norm(x, axis=-1, keepdims=True)
    scale = np.float32(1 / math.sqrt(depth))

    def layer(x):
        s = beta * (x @ x.transpose(0, 2, 1))
        s -= s.max(axis=-1, keepdims=True)
        p = np.exp(s)
        p /= p.sum(axis=-1, keepdims=True)
        a = p @ x
        m = rng.standard_normal((batch, dim, dim), dtype=np.float32)
        y = x + scale * (a @ m.transpose(0, 2, 1))
        return y / np.linalg.norm(y, axis=-1, keepdims=True)

    for _ in range(5):
        x = layer(x)
    best = math.inf
    for _ in range(repeats):  # best of a few: the machine may be shared
        start = time.perf_counter()
        for _ in range(layers):
            x = layer(x)
        best = min(best, time.perf_counter() - start)
    return batch * layers / best


def plain_jax_rate(
    w: dict, batch: int | None = None, layers: int | None = None, *, sharded: bool = False
) -> float:
    """Trajectory-steps/s of the loop a JAX user writes instead (half an hour's work): the
    same full N × d Post-LN layer with softmax attention and a fresh Gaussian d × d value
    matrix per layer, one trajectory as a ``lax.scan`` over layers with ``fold_in`` keys,
    ``jax.vmap`` over trajectories, one ``jax.jit`` on the default device (``sharded``: the
    keys spread over every local device, as a user who knows ``jax.sharding`` does). The
    engine's extras are absent: no saves, no merge or invariant checks."""
    n_tok, dim, beta, depth = w["n_tokens"], w["dim"], w["beta"], w["depth"]
    batch = batch or w["n"]
    layers = layers or round(w["depth"] * w["horizon"])
    scale = 1.0 / math.sqrt(depth)

    def trajectory(key):
        x = jax.random.normal(key, (n_tok, dim))
        x = x / jnp.linalg.norm(x, axis=-1, keepdims=True)

        def layer(x, i):
            p = jax.nn.softmax(beta * (x @ x.T), axis=-1)
            v = jax.random.normal(jax.random.fold_in(key, i), (dim, dim))
            y = x + scale * (p @ x) @ v.T
            return y / jnp.linalg.norm(y, axis=-1, keepdims=True), None

        return jax.lax.scan(layer, x, jnp.arange(layers))[0]

    keys = _sharded_keys(batch) if sharded else jax.random.split(jax.random.key(2), batch)
    seconds = _best_seconds(jax.jit(jax.vmap(trajectory)), keys)
    return batch * layers / seconds


def _best_seconds(f, *args) -> float:
    """Best of two timed calls of ``f`` (compiled by a first call)."""
    jax.block_until_ready(f(*args))
    best = math.inf
    for _ in range(2):
        start = time.perf_counter()
        jax.block_until_ready(f(*args))
        best = min(best, time.perf_counter() - start)
    return best


def _sharded_keys(n: int):
    keys = jax.random.split(jax.random.key(1, impl=PRNG_IMPL[0]), n)
    mesh = jax.sharding.Mesh(np.array(jax.local_devices()), ("traj",))
    return jax.device_put(
        keys, jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("traj"))
    )


def rng_seconds(w: dict, route: str, n: int) -> float:
    """Seconds the PRNG alone needs for the run's draws (same keys, batch and layer count).

    It calls the engine's own samplers: the value operator's ``draw_noise`` per layer for
    the full route (N × d Gaussians when N < d, d × d otherwise); for the reduced route the
    block-of-layers Gaussians and chi variates of the two-token chain (N = 2, one key per
    LAYER_BLOCK layers) or the ``[B | L_W]`` noise block (N > 2).
    """
    n_layers = round(w["depth"] * w["horizon"])
    n_tok, dim = w["n_tokens"], w["dim"]
    dtype = jnp.float32
    base = make_model(w["beta"], dim, n_tok, depth=1, horizon=1.0)
    reduced = None if route == "full" else ad.ReducedTransformer(base, n_tok, dim)

    def draw(k):
        if reduced is None:
            return jnp.sum(base.values.draw_noise(k, n_tok, dim, dtype))
        return jnp.sum(reduced._noise(k, n_tok, dtype))

    def one(key):
        def body(i, acc):
            return acc + draw(core_random.fold_in(key, i))

        return jax.lax.fori_loop(0, n_layers, body, jnp.zeros((), dtype))

    def chain(keys):
        # The two-token chain draws LAYER_BLOCK layers' variates per key, batch-wide.
        block = samplers.LAYER_BLOCK

        def body(b, acc):
            block_keys = jax.vmap(core_random.fold_in, in_axes=(0, None))(keys, b)
            z, chi = samplers.two_token_block(block_keys, dim, dtype)
            return acc + jnp.sum(z, axis=(0, 1)) + jnp.sum(chi, axis=(0, 1))

        n_blocks = -(-n_layers // block)
        return jax.lax.fori_loop(0, n_blocks, body, jnp.zeros(keys.shape, dtype))

    f = jax.jit(chain if route != "full" and n_tok == 2 else jax.vmap(one))
    return _best_seconds(f, _sharded_keys(n))


def arithmetic_seconds(w: dict, n: int) -> float:
    """Seconds of the full route's layers with the random numbers left out: the same layer
    maps (attention, value product, norms) on one fixed draw of each layer's noise, same
    batch and layer count. With :func:`rng_seconds` this splits the engine's time into its
    arithmetic and its hashing, each at the speed XLA reaches on it alone."""
    n_layers = round(w["depth"] * w["horizon"])
    n_tok, dim = w["n_tokens"], w["dim"]
    model = make_model(w["beta"], dim, n_tok, depth=w["depth"], horizon=w["horizon"])

    def one(key):
        x0 = ad.uniform_sphere(key=key, n_tokens=n_tok, dim=dim)
        noise = model.layer_noise(x0, jnp.asarray(0), key=key)

        def body(i, x):
            # As the engine's layer loop: the scheme's carried state (see Scheme.step).
            return model.layer(x, i, key=key, noise=noise, carried=True)

        return jax.lax.fori_loop(0, n_layers, body, model.scheme.enter(x0))

    return _best_seconds(jax.jit(jax.vmap(one)), _sharded_keys(n))


def peak_memory_mb() -> float:
    dev = jax.local_devices()[0]
    if dev.platform != "cpu":
        stats = dev.memory_stats() or {}
        return stats.get("peak_bytes_in_use", 0) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def device_name() -> str:
    devs = jax.local_devices()
    kind = devs[0].device_kind
    if devs[0].platform == "cpu":
        kind = f"cpu ({os.cpu_count()} cores)"
    return f"{len(devs)}x {kind}"


def commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        )
        return out.stdout.strip()
    except Exception:
        return "unknown"


def bench(name: str, route: str) -> dict:
    w = WORKLOADS[name]
    t_first, ds = run_engine(w, route)
    mem = peak_memory_mb()
    t_second = math.inf
    for _ in range(2):  # best of two steady-state runs: the machine may be shared
        t, ds = run_engine(w, route)
        t_second = min(t_second, t)
    chosen = ad.provenance(ds)["route"]
    steps = w["n"] * round(w["depth"] * w["horizon"])
    rate = steps / t_second
    numpy = numpy_rate(w)
    plain = plain_jax_rate(w) if w["n_tokens"] > 2 else None
    plain_sharded = plain_jax_rate(w, sharded=True) if w["n_tokens"] > 2 else None
    rng = rng_seconds(w, chosen, w["n"])
    arithmetic = arithmetic_seconds(w, w["n"]) if chosen == "full" else None
    return {
        "workload": name,
        "traj_steps_per_s": rate,
        "numpy_traj_steps_per_s": numpy,
        "speedup": rate / numpy,
        # Against the plain JAX loop (vmap + scan, one jit), measured in the same process.
        "plain_jax_traj_steps_per_s": plain,
        "speedup_vs_plain_jax": None if plain is None else rate / plain,
        "plain_jax_sharded_traj_steps_per_s": plain_sharded,
        "speedup_vs_plain_jax_sharded": None if plain_sharded is None else rate / plain_sharded,
        "compile_s": max(t_first - t_second, 0.0),
        "peak_mem_mb": mem,
        "device": device_name(),
        "rng_bound_efficiency": rng / t_second,
        # (seconds of the draws alone + seconds of the arithmetic alone) / engine seconds:
        # near 1, the engine runs at the speed of its parts; below 1, it loses time
        # between them.
        "arithmetic_bound_efficiency": None
        if arithmetic is None
        else (rng + arithmetic) / t_second,
        "arithmetic_s": arithmetic,
        "rng_s": rng,
        "route": chosen,
        "prng_impl": PRNG_IMPL[0],
        "seconds": t_second,
        "date": datetime.now(UTC).date().isoformat(),
        "commit": commit(),
    }


def bench_w3(route: str, max_points: int | None) -> dict:
    layers = round(W3_DEPTH * W3_HORIZON)
    total_steps = len(W3_DIMS) * len(W3_BETAS) * W3_TRAJ * layers
    on_gpu = jax.default_backend() == "gpu"
    if on_gpu:
        points = [{"dim": d, "n_tokens": 2, "beta": b} for d in W3_DIMS for b in W3_BETAS]
        points = points[:max_points] if max_points else points
        w = {"depth": W3_DEPTH, "horizon": W3_HORIZON}
        t_first, _ = run_engine(w, route, n=W3_TRAJ, points=points[:1])
        t_run, ds = run_engine(w, route, n=W3_TRAJ, points=points)
        steps = len(points) * W3_TRAJ * layers
        rate = steps / t_run
        seconds = t_run * total_steps / steps
        projected = len(points) < len(W3_DIMS) * len(W3_BETAS)
        chosen = ad.provenance(ds)["route"]
        compile_s = max(t_first - t_run / len(points), 0.0)
    else:
        # Per-dimension rate on a shortened horizon (T = 5: 500 layers, 4,000 trajectories,
        # one β; the per-step cost does not depend on β or on the horizon).
        seconds, rates, compile_s = 0.0, {}, 0.0
        chosen = route
        for d in W3_DIMS:
            w = {"n_tokens": 2, "dim": d, "beta": 2.0, "depth": W3_DEPTH, "horizon": 5.0, "n": 4000}
            t_first, _ = run_engine(w, route)
            t_run, ds = run_engine(w, route)
            chosen = ad.provenance(ds)["route"]
            compile_s += max(t_first - t_run, 0.0)
            rates[d] = 4000 * 500 / t_run
            seconds += len(W3_BETAS) * W3_TRAJ * layers / rates[d]
        rate = total_steps / seconds
        projected = True
    return {
        "workload": "W3",
        "traj_steps_per_s": rate,
        "numpy_traj_steps_per_s": numpy_rate(
            {"n_tokens": 2, "dim": 7, "beta": 2.0, "depth": W3_DEPTH}
        ),
        "speedup": None,
        "compile_s": compile_s,
        "peak_mem_mb": peak_memory_mb(),
        "device": device_name(),
        "rng_bound_efficiency": None,
        "route": chosen,
        "total_traj_steps": total_steps,
        "seconds": seconds,
        "projected": projected,
        "date": datetime.now(UTC).date().isoformat(),
        "commit": commit(),
    }


#: The user's command of issue 11, timed as a whole process.
CLI_COMMAND = (
    "phase-diagram --beta 3 --dim 4 --n-tokens 2 --n-trajectories 200000 --depth 100 --horizon 20"
)


def bench_cli(cache: bool) -> dict:
    """The whole ``attndyn`` process (start-up, import, compilation, run, files written)
    beside the NumPy loop of the same model, timed in this process, for the same work."""
    import shutil
    import tempfile

    out = tempfile.mkdtemp(prefix="attndyn-bench-")
    cache_dir = tempfile.mkdtemp(prefix="attndyn-cache-")
    env = {**os.environ, "ATTNDYN_CACHE_DIR": cache_dir, "ATTNDYN_CACHE": "1" if cache else "0"}
    # The benchmark's own XLA_FLAGS must not leak into the user's process.
    env.pop("XLA_FLAGS", None)
    command = [sys.executable, "-m", "attndyn.cli", *CLI_COMMAND.split(), "--out", out]
    runs = []
    for _ in range(2):  # a first run fills the compilation cache; the second uses it
        start = time.perf_counter()
        subprocess.run([*command, "--fresh", "--no-progress"], check=True, env=env,
                       capture_output=True)  # fmt: skip
        runs.append(time.perf_counter() - start)
    shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(cache_dir, ignore_errors=True)
    steps = 200_000 * 2000
    numpy = numpy_rate(WORKLOADS["W1"])
    return {
        "workload": "CLI-200k" + ("" if cache else "-nocache"),
        "command": "attndyn " + CLI_COMMAND,
        "whole_process_s_first": runs[0],
        "whole_process_s_cached": runs[1],
        "numpy_traj_steps_per_s": numpy,
        "numpy_projected_s": steps / numpy,
        "speedup_whole_process_first": steps / numpy / runs[0],
        "speedup_whole_process_cached": steps / numpy / runs[1],
        "device": device_name(),
        "date": datetime.now(UTC).date().isoformat(),
        "commit": commit(),
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "workload", choices=[*WORKLOADS, "W3", "W4-discrete", "W4-sde", "CLI", "CLI-nocache"]
    )
    parser.add_argument("--attention", choices=["unnormalized", "softmax"], default="unnormalized")
    parser.add_argument("--json", action="store_true", help="print one JSON line")
    parser.add_argument("--route", choices=["auto", "full"], default="auto")
    parser.add_argument("--w3-points", type=int, default=None, help="W3 on GPU: first k points")
    parser.add_argument(
        "--prng", choices=["threefry2x32", "rbg", "unsafe_rbg"], default="threefry2x32"
    )
    args = parser.parse_args(argv)
    PRNG_IMPL[0] = args.prng
    if args.workload.startswith("CLI"):
        result = bench_cli(cache=args.workload == "CLI")
    elif args.workload.startswith("W4"):
        from hybrid import bench_w4

        result = bench_w4(args.workload.split("-")[1], args.attention)
    elif args.workload == "W3":
        result = bench_w3(args.route, args.w3_points)
        if result["speedup"] is None:
            result["speedup"] = result["traj_steps_per_s"] / result["numpy_traj_steps_per_s"]
    else:
        result = bench(args.workload, args.route)
    if args.json:
        print(json.dumps(result))
    else:
        for k, v in result.items():
            print(f"{k:>24}: {v}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
