"""Monte Carlo estimation of clustering-class probabilities over a grid of parameter points.

Trajectory ``i`` of a point gets the key ``fold_in(fold_in(key, point_id), i)``, with
``point_id`` a hash of the point's parameters: the numbers depend on the seed, the point
and the trajectory index only, never on the chunk size, the device count or which other
points share the grid. Each chunk is a fixed-size batch (padded and masked at the end), so
one compilation serves every chunk and every point whose shapes agree; swept parameters
(β, σ, ε, ...) are array leaves of the model and never trigger recompilation.
"""

import dataclasses
import hashlib
import itertools
import json
import os
import sys
import time
import warnings
import zlib
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import xarray as xr
from jaxtyping import Array, Int, PRNGKeyArray
from tqdm.auto import tqdm

from ._absorption import DEFAULT_BOUND, absorption_applies, absorption_gaps
from ._discrete import DiscreteTransformer
from ._distributed import gather_tallies, process_chunk_starts, process_layout
from ._dynamics import AbstractDynamics
from ._errors import NonFiniteError, ParameterError, check_bound, check_choice, check_int
from ._observables import OUTCOMES, cluster_classes, mean_cosine
from ._reduced import ReducedTransformer, reduction_blocker
from ._sphere import uniform_sphere
from ._stats import wilson_interval

Point = Mapping[str, Any]


def grid(**axes: Sequence[Any]) -> list[dict[str, Any]]:
    """The Cartesian product of parameter axes, the last axis varying fastest.

    >>> grid(dim=[4, 6], beta=[1.0, 2.0])  # doctest: +NORMALIZE_WHITESPACE
    [{'dim': 4, 'beta': 1.0}, {'dim': 4, 'beta': 2.0},
     {'dim': 6, 'beta': 1.0}, {'dim': 6, 'beta': 2.0}]
    """
    for name, values in axes.items():
        if len(values) == 0:
            raise ParameterError(f"the range for {name!r} is empty; give at least one value.")
    names = list(axes)
    return [dict(zip(names, combo)) for combo in itertools.product(*axes.values())]


def point_id(point: Point) -> int:
    """A stable 31-bit identifier of a parameter point (its canonical JSON, hashed)."""
    text = json.dumps({k: _plain(v) for k, v in sorted(point.items())}, sort_keys=True)
    return zlib.crc32(text.encode()) & 0x7FFFFFFF


def trajectory_key(key: PRNGKeyArray, point: Point, index: int | Array) -> PRNGKeyArray:
    """The key of trajectory ``index`` at ``point``."""
    return jax.random.fold_in(jax.random.fold_in(key, point_id(point)), index)


def _plain(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    return value


@eqx.filter_jit
def _chunk_statistics(
    model: AbstractDynamics,
    point_key: PRNGKeyArray,
    indices: Int[Array, " chunk"],
    n_total: Int[Array, ""],
    tol: Array,
    radius: Array,
    n_tokens: int,
    dim: int,
    mesh: jax.sharding.Mesh | None = None,
):
    """Tallies of one chunk. With a mesh, each device simulates its own slice of the chunk
    of a layer-map model in its own loops (``shard_map``): data-dependent loops (early
    absorption, exact rejection samplers) then never wait on a cross-device reduction at
    every step, and each trajectory's numbers stay those of its key alone."""
    # Only the layer-map models: diffrax's closure-converted solver internals reject the
    # per-device array types that shard_map gives their inputs, and GSPMD shards them well.
    per_device = isinstance(model, ReducedTransformer | DiscreteTransformer)
    if mesh is None or mesh.size == 1 or not per_device:
        return _tally(
            *_simulate(model, point_key, indices, tol, radius, n_tokens, dim), indices, n_total
        )
    dynamic, static = eqx.partition(model, eqx.is_array)

    def local(dynamic, point_key, indices, tol, radius):
        return _simulate(
            eqx.combine(dynamic, static), point_key, indices, tol, radius, n_tokens, dim
        )

    replicated = jax.sharding.PartitionSpec()
    batch = jax.sharding.PartitionSpec("traj")
    simulated = jax.shard_map(
        local,
        mesh=mesh,
        in_specs=(replicated, replicated, batch, replicated, replicated),
        out_specs=(batch, batch, batch),
    )(dynamic, point_key, indices, tol, radius)
    return _tally(*simulated, indices, n_total)


def _simulate(model, point_key, indices, tol, radius, n_tokens: int, dim: int):
    """Per-trajectory classes, mean cosines and finiteness for a batch of indices."""

    def start(index):
        start_key, noise_key = jax.random.split(jax.random.fold_in(point_key, index))
        return radius * uniform_sphere(key=start_key, n_tokens=n_tokens, dim=dim), noise_key

    x0, keys = jax.vmap(start)(indices)
    if isinstance(model, ReducedTransformer):
        # Batch-level: early absorption stops the whole chunk once every trajectory is done.
        saves = model.trajectories(x0, keys)
    else:
        saves = jax.vmap(lambda x, k: model.trajectory(x, key=k))(x0, keys)

    def observe(saves):
        finite = jnp.all(jnp.isfinite(saves))
        classes = jax.vmap(cluster_classes, in_axes=(0, None))(saves, tol)
        cosines = jax.vmap(mean_cosine)(saves)
        return classes, cosines, finite

    return jax.vmap(observe)(saves)


def _tally(classes, cosines, finite, indices, n_total):
    in_range = indices < n_total
    valid = in_range & finite
    counts = jnp.sum(classes & valid[:, None, None], axis=0, dtype=jnp.int32)
    # Per-trajectory cosines go back to the host, which sums them in fixed point: the
    # totals are then exact and independent of chunk size, device and process count.
    cosines = jnp.where(valid[:, None], cosines, 0)
    return (
        counts,
        jnp.sum(valid, dtype=jnp.int32),
        jnp.sum(in_range & ~finite, dtype=jnp.int32),
        cosines,
    )


#: Cosines are summed as integers in units of 2⁻³²: exact and order-independent; the float64
#: totals stay exact while |Σ cos| < 2²¹ (2 million trajectories per point).
_FIXED_POINT = 2.0**32


def _fixed_point_sums(cosines: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    values = np.asarray(cosines, np.float64)
    first = np.rint(values * _FIXED_POINT).astype(np.int64).sum(axis=0)
    second = np.rint(values**2 * _FIXED_POINT).astype(np.int64).sum(axis=0)
    return first / _FIXED_POINT, second / _FIXED_POINT


def default_chunk_size(
    n_trajectories: int, *, n_tokens: int, dim: int, n_saves: int, n_devices: int
) -> int:
    """A chunk that fits comfortably in device memory.

    The per-trajectory footprint counts the saved states, the attention scores and one
    value matrix, times a safety factor of 8 for XLA temporaries; the budget is an eighth
    of the device's memory where JAX reports it, else 512 MiB per device.
    """
    per_traj = 4 * 8 * (n_saves * n_tokens * dim + n_tokens**2 + dim**2 + 4 * n_tokens * dim)
    budget = 512 * 2**20
    try:
        stats = jax.local_devices()[0].memory_stats() or {}
        if "bytes_limit" in stats:
            budget = int(stats["bytes_limit"]) // 8
    except Exception:
        pass
    by_memory = max(1, budget // per_traj) * n_devices
    chunk = min(by_memory, 1 << 16, n_trajectories)
    return _round_up(chunk, n_devices)


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


@dataclasses.dataclass
class _Tallies:
    counts: np.ndarray  # (P, S, 4)
    n_valid: np.ndarray  # (P,)
    n_nonfinite: np.ndarray  # (P,)
    n_done: np.ndarray  # (P,)
    cosine_sum: np.ndarray  # (P, S)
    cosine_sumsq: np.ndarray  # (P, S)
    seconds: float = 0.0

    @classmethod
    def zeros(cls, n_points: int, n_saves: int) -> "_Tallies":
        z = np.zeros
        return cls(
            z((n_points, n_saves, len(OUTCOMES)), np.int64),
            z(n_points, np.int64),
            z(n_points, np.int64),
            z(n_points, np.int64),
            z((n_points, n_saves)),
            z((n_points, n_saves)),
        )


def estimate_probabilities(
    model_fn: Callable[..., AbstractDynamics],
    points: Sequence[Point],
    *,
    key: PRNGKeyArray,
    n_trajectories: int,
    tol: float = 1e-3,
    radius: float = 1.0,
    chunk_size: int | None = None,
    checkpoint: str | os.PathLike | None = None,
    on_nonfinite: Literal["raise", "exclude"] = "raise",
    progress: bool = True,
    metadata: Mapping[str, Any] | None = None,
    route: Literal["auto", "full", "reduced"] = "auto",
    early_absorption: bool | float = False,
) -> xr.Dataset:
    """Estimate the probability of each clustering class at each save time, per point.

    Args:
        model_fn: ``model_fn(**point)`` builds the model of one point. Every point must
            name ``dim`` (d ≥ 2) and ``tokens`` (N ≥ 1); the other keys are the model's.
        points: the parameter points, e.g. from :func:`grid`.
        key: the PRNG key of the whole study.
        n_trajectories: trajectories per point (independent uniform starts on the sphere,
            scaled by ``radius``).
        tol: clustering tolerance, in (0, 1).
        chunk_size: trajectories simulated at once (rounded up to a multiple of the local
            device count); chosen from device memory when omitted. It does not change the
            numbers.
        checkpoint: a netCDF path; progress is saved there after each chunk (at most
            every 20 s) and after each point, and a run with the same arguments resumes
            from it.
        on_nonfinite: what to do when a trajectory turns NaN/inf (e.g. USA overflow):
            ``"raise"`` a :class:`NonFiniteError`, or ``"exclude"`` it from the
            denominators with a warning (the count is kept as ``n_nonfinite``).
        progress: show a progress bar on stderr.
        metadata: extra provenance stored in the dataset's attributes.
        route: ``"auto"`` simulates the N × N token coordinates instead of N × d
            wherever that is exact in law (:func:`attndyn.reduction_blocker`: Q = K = I,
            one head, Gaussian full value noise, a built-in scheme, N < d) and the full
            model elsewhere; ``"full"`` always runs the full model; ``"reduced"`` insists
            (a ParameterError says why it does not apply). Provenance records the route of
            every point.
        early_absorption: ``True`` (bound 10⁻⁷) or a per-trajectory bound ε: on the
            reduced two-token route, stop simulating a chunk once every trajectory is within
            δ± of ±1, δ± from the scale function so that an absorbed trajectory changes
            class later with probability ≤ ε (see :mod:`attndyn._absorption`). Needs
            N = 2, plain Post-LN and drift-free Gaussian values; δ± per point go to
            provenance.

    With several processes (``jax.distributed``, see :mod:`attndyn._distributed`), each
    process runs the chunks ``k ≡ process_index (mod process_count)`` of every point and the
    tallies are combined exactly once at the end; every process returns the same dataset.

    Returns:
        An ``xarray.Dataset`` over ``(point, time, outcome)`` with ``count``,
        ``probability``, Wilson 95 % bounds ``ci_lower``/``ci_upper``, ``n_valid``,
        ``n_nonfinite``, the mean pairwise cosine with its standard error, one coordinate
        per parameter along ``point``, and full provenance in ``attrs``.
    """
    points = [dict(p) for p in points]
    if not points:
        raise ParameterError("points is empty; give at least one parameter point.")
    check_int("n_trajectories", n_trajectories, lower=1)
    check_bound("tol", tol, lower=0.0, upper=1.0, lower_open=True, upper_open=True)
    check_bound("radius", radius, lower=0.0, lower_open=True)
    check_choice("on_nonfinite", on_nonfinite, ("raise", "exclude"))
    if chunk_size is not None:
        check_int("chunk_size", chunk_size, lower=1)
    check_choice("route", route, ("auto", "full", "reduced"))
    if isinstance(early_absorption, bool):
        absorption_bound = DEFAULT_BOUND if early_absorption else None
    else:
        check_bound("early_absorption", early_absorption, lower=0.0, upper=1.0, lower_open=True)
        absorption_bound = float(early_absorption)
    for p in points:
        for name, lower in (("dim", 2), ("tokens", 1)):
            if name not in p:
                raise ParameterError(f"every point must give {name!r}; got {p}.")
            check_int(name, p[name], lower=lower)
    models = [model_fn(**p) for p in points]
    routes = [_route(route, m, int(p["tokens"]), int(p["dim"])) for p, m in zip(points, models)]
    gaps: list[tuple[float, float] | None] = [None] * len(points)
    if absorption_bound is not None:
        for i, (p, m) in enumerate(zip(points, models)):
            blocker = absorption_applies(m, int(p["tokens"]))
            if blocker is None and routes[i] != "reduced":
                blocker = "it runs on the reduced route only (route='full' was asked for)"
            if blocker is not None:
                raise ParameterError(f"early_absorption does not apply at {p}: {blocker}.")
            assert isinstance(m, DiscreteTransformer)
            gaps[i] = absorption_gaps(float(m.attention.beta), int(p["dim"]), tol, absorption_bound)
    save_times = np.asarray(models[0].save_times, dtype=np.float64)
    for p, m in zip(points, models):
        if not np.array_equal(np.asarray(m.save_times), save_times):
            raise ParameterError(f"all points must share save times; {p} differs.")

    devices = jax.local_devices()
    process_index, process_count = process_layout()
    mesh = jax.sharding.Mesh(np.array(devices), ("traj",))
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("traj"))
    n_saves = len(save_times)
    key_data = np.asarray(jax.random.key_data(key)).tolist()
    signature = hashlib.sha256(
        json.dumps(
            {
                "points": [{k: _plain(v) for k, v in p.items()} for p in points],
                "n_trajectories": n_trajectories,
                "tol": tol,
                "radius": radius,
                "key": key_data,
                "save_times": save_times.tolist(),
                "models": [repr(m) for m in models],
                "routes": routes,
                "early_absorption": absorption_bound,
                "process": [process_index, process_count],
            },
            sort_keys=True,
        ).encode()
    ).hexdigest()

    tallies = _Tallies.zeros(len(points), n_saves)
    if checkpoint is not None and Path(checkpoint).exists():
        tallies = _load_checkpoint(Path(checkpoint), signature)

    started = time.perf_counter()
    seconds_before = tallies.seconds
    last_save = started
    chunk_used: list[int] = []

    def save_checkpoint() -> None:
        if checkpoint is not None:
            tallies.seconds = seconds_before + time.perf_counter() - started
            _write_checkpoint(Path(checkpoint), signature, tallies, points, save_times)

    bar = tqdm(
        total=len(points) * n_trajectories,
        initial=int(tallies.n_done.sum()),
        unit="traj",
        desc="attndyn",
        file=sys.stderr,
        disable=not progress,
        dynamic_ncols=True,
    )
    try:
        for p_index, (point, model) in enumerate(zip(points, models)):
            n_tokens, dim = int(point["tokens"]), int(point["dim"])
            if routes[p_index] == "reduced":
                assert isinstance(model, DiscreteTransformer)
                model = ReducedTransformer(
                    model,
                    dim,
                    absorb_gap=None
                    if gaps[p_index] is None
                    else jnp.asarray(gaps[p_index], jnp.float32),
                )
            chunk = chunk_size or default_chunk_size(
                n_trajectories,
                n_tokens=n_tokens,
                # The reduced route keeps N × N coordinates per token set.
                dim=n_tokens if routes[p_index] == "reduced" else dim,
                n_saves=n_saves,
                n_devices=len(devices),
            )
            chunk = _round_up(chunk, len(devices))
            chunk_used.append(chunk)
            point_key = jax.random.fold_in(key, point_id(point))
            tol_arr = jnp.asarray(tol, jnp.float32)
            radius_arr = jnp.asarray(radius, jnp.float32)
            total_arr = jnp.asarray(n_trajectories, jnp.int32)
            # n_done counts the trajectories this process has finished at this point, in the
            # order of its own chunks (all chunks when it runs alone).
            finished = 0
            for start in process_chunk_starts(n_trajectories, chunk, process_index, process_count):
                done = min(chunk, n_trajectories - start)
                if finished + done <= tallies.n_done[p_index]:
                    finished += done
                    continue
                indices = jax.device_put(np.arange(start, start + chunk, dtype=np.int32), sharding)
                counts, n_valid, n_bad, cosines = _chunk_statistics(
                    model,
                    point_key,
                    indices,
                    total_arr,
                    tol_arr,
                    radius_arr,
                    n_tokens,
                    dim,
                    mesh,
                )
                cos_sum, cos_sumsq = _fixed_point_sums(np.asarray(cosines))
                tallies.counts[p_index] += np.asarray(counts)
                tallies.n_valid[p_index] += int(n_valid)
                tallies.n_nonfinite[p_index] += int(n_bad)
                tallies.cosine_sum[p_index] += cos_sum
                tallies.cosine_sumsq[p_index] += cos_sumsq
                finished += done
                tallies.n_done[p_index] = finished
                bar.update(done)
                if time.perf_counter() - last_save > 20:
                    save_checkpoint()
                    last_save = time.perf_counter()
            save_checkpoint()
            bad = int(tallies.n_nonfinite[p_index])
            if bad:
                message = (
                    f"{bad} of {n_trajectories} trajectories at point {point} became NaN or "
                    "infinite (overflow? unnormalised attention overflows float32 once "
                    "β ≳ 88: lower β or use softmax attention)."
                )
                if on_nonfinite == "raise":
                    raise NonFiniteError(
                        message + " Pass on_nonfinite='exclude' (CLI: --exclude-nonfinite) to "
                        "drop them from the probabilities."
                    )
                warnings.warn(message + " They are excluded from the probabilities.", stacklevel=2)
    except KeyboardInterrupt:
        save_checkpoint()
        raise
    finally:
        bar.close()
    tallies.seconds = seconds_before + time.perf_counter() - started
    if process_count > 1:
        fields = gather_tallies(
            [
                tallies.counts,
                tallies.n_valid,
                tallies.n_nonfinite,
                tallies.n_done,
                tallies.cosine_sum,
                tallies.cosine_sumsq,
            ]
        )
        tallies = _Tallies(*fields, seconds=tallies.seconds)

    provenance = {
        "package": "attndyn",
        "attndyn_version": _version(),
        "jax_version": jax.__version__,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "seconds": tallies.seconds,
        "key_data": key_data,
        "n_trajectories": n_trajectories,
        "tol": tol,
        "radius": radius,
        "chunk_size": max(chunk_used) if chunk_used else chunk_size,
        "devices": [str(d) for d in devices],
        "prng_impl": str(jax.random.key_impl(key)),
        "route": routes[0] if len(set(routes)) == 1 else "mixed",
        "routes": routes,
        "route_requested": route,
        "early_absorption": None
        if absorption_bound is None
        else {"bound": absorption_bound, "gaps": [list(g) if g else None for g in gaps]},
        "process_count": process_count,
        "on_nonfinite": on_nonfinite,
        "model": repr(models[0]),
        "signature": signature,
        **(dict(metadata) if metadata else {}),
    }
    return _dataset(tallies, points, save_times, provenance)


def _route(route: str, model: AbstractDynamics, n_tokens: int, dim: int) -> str:
    """The route a point runs on: ``"reduced"`` where exact in law (and allowed), else full."""
    if route == "full":
        return "full"
    blocker = reduction_blocker(model, n_tokens, dim)
    if blocker is None:
        return "reduced"
    if route == "reduced":
        raise ParameterError(f"route='reduced' does not apply ({blocker}); use 'auto' or 'full'.")
    return "full"


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("attndyn")
    except PackageNotFoundError:
        return "unknown"


def _coordinates(points: Sequence[Point]) -> dict[str, Any]:
    names: list[str] = []
    for p in points:
        names += [k for k in p if k not in names]
    coords: dict[str, Any] = {}
    for name in names:
        values = [_plain(p.get(name)) for p in points]
        if all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
            coords[name] = ("point", np.asarray(values))
        else:
            coords[name] = ("point", np.asarray([json.dumps(v) for v in values]))
    return coords


def _dataset(
    tallies: _Tallies, points: Sequence[Point], save_times: np.ndarray, provenance: dict
) -> xr.Dataset:
    n_valid = tallies.n_valid[:, None, None]
    with np.errstate(invalid="ignore", divide="ignore"):
        probability = tallies.counts / n_valid
        cos_mean = tallies.cosine_sum / tallies.n_valid[:, None]
        cos_var = tallies.cosine_sumsq / tallies.n_valid[:, None] - cos_mean**2
        cos_se = np.sqrt(np.maximum(cos_var, 0) / np.maximum(tallies.n_valid[:, None] - 1, 1))
    lower, upper = wilson_interval(tallies.counts, np.broadcast_to(n_valid, tallies.counts.shape))
    dims3 = ("point", "time", "outcome")
    ds = xr.Dataset(
        {
            "count": (dims3, tallies.counts),
            "probability": (dims3, probability),
            "ci_lower": (dims3, lower),
            "ci_upper": (dims3, upper),
            "n_valid": ("point", tallies.n_valid),
            "n_nonfinite": ("point", tallies.n_nonfinite),
            "mean_cosine": (("point", "time"), cos_mean),
            "mean_cosine_se": (("point", "time"), cos_se),
        },
        coords={
            "point": np.arange(len(points)),
            "time": save_times,
            "outcome": list(OUTCOMES),
            **_coordinates(points),
        },
    )
    ds["ci_lower"].attrs["description"] = "Wilson score interval, 95 %"
    ds["ci_upper"].attrs["description"] = "Wilson score interval, 95 %"
    ds.attrs["provenance"] = json.dumps(provenance, default=str)
    for name, value in provenance.items():
        if isinstance(value, str | int | float) and not isinstance(value, bool):
            ds.attrs[name] = value
    return ds


def provenance(ds: xr.Dataset) -> dict[str, Any]:
    """The provenance record stored in a results dataset."""
    return json.loads(ds.attrs["provenance"])


def _write_checkpoint(
    path: Path, signature: str, tallies: _Tallies, points: Sequence[Point], save_times
) -> None:
    ds = xr.Dataset(
        {
            "counts": (("point", "time", "outcome"), tallies.counts),
            "n_valid": ("point", tallies.n_valid),
            "n_nonfinite": ("point", tallies.n_nonfinite),
            "n_done": ("point", tallies.n_done),
            "cosine_sum": (("point", "time"), tallies.cosine_sum),
            "cosine_sumsq": (("point", "time"), tallies.cosine_sumsq),
        },
        coords={"time": save_times, "outcome": list(OUTCOMES), **_coordinates(points)},
        attrs={"signature": signature, "seconds": tallies.seconds},
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    ds.to_netcdf(partial)
    os.replace(partial, path)


def _load_checkpoint(path: Path, signature: str) -> _Tallies:
    with xr.open_dataset(path) as ds:
        if ds.attrs.get("signature") != signature:
            raise ParameterError(
                f"checkpoint {str(path)!r} belongs to a different run (other parameters, "
                "seed or model); delete it or choose another checkpoint path."
            )
        return _Tallies(
            counts=ds["counts"].values.astype(np.int64),
            n_valid=ds["n_valid"].values.astype(np.int64),
            n_nonfinite=ds["n_nonfinite"].values.astype(np.int64),
            n_done=ds["n_done"].values.astype(np.int64),
            cosine_sum=ds["cosine_sum"].values,
            cosine_sumsq=ds["cosine_sumsq"].values,
            seconds=float(ds.attrs.get("seconds", 0.0)),
        )
