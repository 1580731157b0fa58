"""The chunk kernel: simulate a fixed-size batch of trajectory indices and tally it.

Each chunk is a fixed-size batch (padded and masked at the end), so one compilation serves
every chunk and every point whose shapes agree; swept parameters are array leaves of the
model and never trigger recompilation. The kernel sees models only through
:class:`attndyn.AbstractModel`.
"""

import time
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Int, PRNGKeyArray

from .._core import random
from .._core.observables import numerically_merged, pair_observables, span_dimension
from .._core.sphere import sphere_points
from .._io import interrupts
from .._models.base import AbstractModel

#: Trajectories per CPU device in a default chunk (see :func:`default_chunk_size`).
CPU_CHUNK_PER_DEVICE = 4096


def trajectories_in_memory(*, n_tokens: int, dim: int, n_saves: int) -> int:
    """How many trajectories of this size one device holds comfortably: the per-trajectory
    footprint counts the saved states, the attention scores and one value matrix, times a
    safety factor of 8 for XLA temporaries; the budget is an eighth of the device's memory
    where JAX reports it, else 512 MiB."""
    per_traj = 4 * 8 * (n_saves * n_tokens * dim + n_tokens**2 + dim**2 + 4 * n_tokens * dim)
    budget = 512 * 2**20
    try:
        stats = jax.local_devices()[0].memory_stats() or {}
        if "bytes_limit" in stats:
            budget = int(stats["bytes_limit"]) // 8
    except Exception:
        pass
    return max(1, budget // per_traj)


def default_chunk_size(
    n_trajectories: int, *, n_tokens: int, dim: int, n_saves: int, n_devices: int
) -> int:
    """A chunk that fits comfortably in device memory and runs at full speed
    (:func:`trajectories_in_memory` a device). On CPU a chunk is also capped at
    ``CPU_CHUNK_PER_DEVICE`` trajectories a device: bigger batches fall out of cache
    (measured: 40,000 trajectories of the two-token chain in one chunk ran at 0.75× the
    speed of chunks of 4,000)."""
    in_memory = trajectories_in_memory(n_tokens=n_tokens, dim=dim, n_saves=n_saves)
    by_memory = in_memory * n_devices
    cap = 1 << 16
    if jax.default_backend() == "cpu":
        cap = CPU_CHUNK_PER_DEVICE * n_devices
    chunk = min(by_memory, cap, n_trajectories)
    return round_up(chunk, n_devices)


def round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


#: Trajectories per tile on CPU and on accelerators (see :func:`tile_size`). On CPU the
#: size that runs at full speed (:data:`CPU_CHUNK_PER_DEVICE`). An accelerator runs a
#: tile's trajectories side by side and is not filled by tens of thousands (measured on
#: one H100, W3's two-token chain: 1.8·10⁹ steps/s in tiles of 10,000, 3.2·10⁹ in tiles
#: of 32,768, 6.7·10⁹ in one tile of 40,000), so its tiles are large.
CPU_TILE = 4096
ACCELERATOR_TILE = 1 << 17


#: On CPU, a study smaller than this many full tiles is cut into this many tiles instead,
#: so that up to this many devices (one per core) have work; the tile may not depend on
#: the device count. More and smaller tiles would cost calls: W2 (512 trajectories) ran
#: 13 % slower in tiles of 32. Accelerators do not spread: below a full tile they are
#: limited by the trajectories they run side by side, so four devices with a quarter each
#: do no more than one with all of them, and one device would do a quarter as much.
TILE_SPREAD = 4


def tile_size(n_trajectories: int, *, n_tokens: int, dim: int, n_saves: int) -> int:
    """The trajectories one compiled simulation always runs together on a device, for a
    point of ``n_trajectories`` trajectories of this size.

    XLA compiles a batch's arithmetic differently for different batch shapes (vector
    bodies and remainders, dot blockings, fusions), so a trajectory's last bits depended
    on the chunk size and the device count. The estimator therefore always runs one tile
    of this size per device, aligned on multiples of it in the trajectory index, through
    one compiled program: trajectory i is computed at position i mod tile of its tile
    whatever the chunk size, device count or process count (a chunk is a number of such
    calls between checkpoints).

    The study is cut into as few tiles as the backend's full tile (:data:`CPU_TILE`,
    :data:`ACCELERATOR_TILE`, or fewer trajectories where a device's memory takes fewer:
    :func:`trajectories_in_memory`) allows, at least :data:`TILE_SPREAD` on CPU so every
    core-device has work, and the tiles are of equal size (a multiple of 8): a study a
    little over a multiple of the full tile would otherwise pad its last tile to a full
    one (140,000 trajectories on a GPU ran 262,144). The tile depends on the backend, its
    memory, the trajectory count and the point, never on the device count."""
    on_cpu = jax.default_backend() == "cpu"
    full = min(
        CPU_TILE if on_cpu else ACCELERATOR_TILE,
        trajectories_in_memory(n_tokens=n_tokens, dim=dim, n_saves=n_saves),
    )
    count = max(-(-n_trajectories // full), TILE_SPREAD if on_cpu else 1)
    return max(1, min(round_up(-(-n_trajectories // count), 8), full))


def span_dimensions(saves: Array) -> Array:
    """:func:`span_dimension` of every trajectory and save, ``(batch, saves)``, one Gram
    matrix at a time. jaxlib 0.10's batched LAPACK kernels (``eigvalsh`` of a batch) split
    the batch over the intra-op thread pool and block until it is done; with every device
    inside such a call, every pool thread waits and the run deadlocks (seen: 512
    trajectories of N = 32 tokens on 2 CPU devices hung every time). One matrix at a time
    runs inline, and the same way on one device or several.
    """
    if saves.shape[-2] <= 2:  # N ≤ 2 is written out: no LAPACK.
        return jax.vmap(jax.vmap(span_dimension))(saves)
    flat = saves.reshape(-1, *saves.shape[-2:])
    return jax.lax.map(span_dimension, flat).reshape(saves.shape[:2])


def begin_tile(model: AbstractModel, point_key, indices, radius, n_tokens, dim):
    """The starts of a batch of trajectory indices (one tile per device) and the model's
    state before its first step, with the trajectories' keys.

    Starts are drawn in the dtype of ``radius`` (float64 when the study runs in x64)."""

    def start(index):
        # jax.random's keys bit for bit, the hash unrolled: the program compiles ~0.2 s
        # faster (measured, the main job's three programs). The Gaussians stay
        # jax.random.normal's: the unrolled one fuses with the normalisation and moves
        # the starts by a rounding (benchmarks/same_numbers.py sees it).
        start_key, noise_key = random.split(random.fold_in(point_key, index))
        # N and d were checked where the point entered: the unchecked sampler.
        x0 = sphere_points(start_key, n_tokens, dim, radius.dtype)
        return radius * x0, noise_key

    x0, keys = jax.vmap(start)(indices)
    return model.begin(x0, keys), keys


def finish_tile(model: AbstractModel, state, tol, mesh=None):
    """Per-trajectory classes, mean cosines, pair densities, span dimensions, merges,
    soundness (:func:`observe`) and the saved states of a batch whose steps are done (the
    states are read back only for trajectories whose tokens merged, to bound them).

    The span dimensions take one Gram matrix at a time (:func:`span_dimensions`): the same
    arithmetic on one device or several. ``mesh``: the devices GSPMD shards the batch
    over, when this runs outside ``shard_map`` on several devices."""
    saves = model.finish(state)
    classes, cosines, densities, merged, finite = jax.vmap(lambda s: observe(model, s, tol))(saves)
    if mesh is not None and mesh.size > 1 and saves.shape[-2] > 2:
        spans = _span_dimensions_per_device(saves, mesh)
    else:
        spans = span_dimensions(saves)
    return classes, cosines, densities, spans, merged, finite, saves


#: How far a saved row's squared norm may be from 1, and a mean cosine outside [−1, 1],
#: from rounding alone (float32 normalisation leaves ~d·eps ≈ 10⁻⁶ at d = 16, 10⁻⁴ at d = 2¹⁶).
INVARIANT_SLACK = 1e-3


def observe(model: AbstractModel, saves: Array, tol):
    """The observables of one trajectory's saves, and whether they are sound: every number
    finite, every row's squared norm finite (a row whose squared norm overflows has no
    direction: the observables would normalise it to zero), every mean cosine in [−1, 1]
    (NaN when a row is zero), and, for a model that keeps its rows on the unit sphere
    (:meth:`AbstractModel.keeps_unit_rows`), every row after t = 0 a unit vector. A broken
    invariant means the arithmetic failed (an overflow the model did not foresee): such
    a trajectory counts as non-finite, never as a result."""
    squares = jnp.sum(saves**2, -1)
    sound = jnp.all(jnp.isfinite(saves)) & jnp.all(jnp.isfinite(squares))
    classes, cosines, densities = jax.vmap(pair_observables, in_axes=(0, None))(saves, tol)
    sound &= jnp.all(jnp.abs(cosines) <= 1 + INVARIANT_SLACK)
    if model.keeps_unit_rows():
        later = jnp.asarray(np.asarray(model.save_times) > 0)[:, None]
        sound &= jnp.all(~later | (jnp.abs(squares - 1) <= INVARIANT_SLACK))
    if model.tokens_can_meet:  # coincidences are the model's dynamics, not rounding
        merged = jnp.zeros(saves.shape[0], bool)
    else:
        merged = jax.vmap(numerically_merged)(saves)
    return classes, cosines, densities, merged, sound


def _span_dimensions_per_device(saves: Array, mesh: jax.sharding.Mesh) -> Array:
    """:func:`span_dimensions` of a batch GSPMD shards over ``mesh``: each device takes its
    own slice one matrix at a time (a sequential map over the sharded axis would gather the
    whole batch onto every device and repeat the work there)."""
    batch = jax.sharding.PartitionSpec("traj")
    return jax.shard_map(
        span_dimensions,
        mesh=mesh,
        in_specs=batch,
        out_specs=batch,
        check_vma=False,
    )(saves)


class TileResults(NamedTuple):
    """What one call returns: the tallies of its trajectories (:func:`tally`, what
    :meth:`Tallies.add_chunk` takes) and, per trajectory, what the host needs to redo them
    where tokens merged (``on_merged="auto"``): classes, validity and the saved states."""

    tallied: tuple
    classes: Array  # (batch, S, 4)
    valid: Array  # (batch,)
    saves: Array  # (batch, S, N, k)


def tally(classes, cosines, densities, spans, merged, finite, indices, n_total):
    """Counts over the valid trajectories of the chunk (in range and finite), and over
    those of them whose tokens merged numerically (with the per-trajectory flags, so the
    host can sum the means over them too)."""
    in_range = indices < n_total
    valid = in_range & finite
    counts = jnp.sum(classes & valid[:, None, None], axis=0, dtype=jnp.int32)
    merged = merged & valid[:, None]
    merged_counts = jnp.sum(classes & merged[..., None], axis=0, dtype=jnp.int32)
    # Per-trajectory means (cosine, pair density, span dimension) go back to the host,
    # which sums them exactly (fixed point, or integers): the totals are then independent
    # of chunk size, device and process count.
    keep = valid[:, None]
    return (
        counts,
        jnp.sum(valid, dtype=jnp.int32),
        jnp.sum(in_range & ~finite, dtype=jnp.int32),
        jnp.where(keep, cosines, 0),
        jnp.where(keep, densities, 0),
        jnp.where(keep, spans, 0),
        merged,
        merged_counts,
    )


#: Seconds of device work between two host checks (for Ctrl-C): the block of steps is
#: sized from the measured time of the previous one.
BLOCK_SECONDS = 0.5
#: Steps in the first block of a point (then sized by time; each block at most 8 times the
#: one before).
FIRST_BLOCK = 64


class Blocks:
    """How many steps the next block of a point runs: about :data:`BLOCK_SECONDS` of
    device work, measured on the blocks before (the block size never changes a number:
    each step is taken by the same compiled program whatever the blocks)."""

    def __init__(self, multiple: int = 1):
        self.multiple = max(1, multiple)
        self.size = round_up(FIRST_BLOCK, self.multiple)

    def next_stop(self, done: int, steps: int) -> int:
        return min(steps, (done + self.size) // self.multiple * self.multiple or self.multiple)

    def measured(self, ran: int, seconds: float) -> None:
        wanted = ran * BLOCK_SECONDS / max(seconds, 1e-4)
        size = int(min(wanted, 8 * max(ran, self.size)))
        self.size = max(self.multiple, size // self.multiple * self.multiple)


def chunk_statistics(
    model: AbstractModel,
    point_key: PRNGKeyArray,
    indices: Int[Array, " chunk"],
    n_total: Int[Array, ""],
    tol: Array,
    radius: Array,
    n_tokens: int,
    dim: int,
    mesh: jax.sharding.Mesh | None = None,
    *,
    blocks: Blocks | None = None,
):
    """Tallies of one tile per device (:func:`tile_size`), with what the host needs to redo
    merged trajectories (:class:`TileResults`): the starts and the model's state
    (:func:`begin_tile`), its steps a block at a time (:meth:`AbstractModel.advance`), each
    block about :data:`BLOCK_SECONDS` long (``blocks``; without it, one block) and followed
    by a check for Ctrl-C (:func:`.interrupts.check`), then the observables and their
    counts (:func:`finish_tile`, :func:`tally`). Three compiled programs, whatever the
    blocks, so the numbers never depend on them."""
    state = _begin(model, point_key, indices, radius, n_tokens, dim, mesh)
    steps, _ = model.stepping()
    done = 0
    while done < steps:
        stop = steps if blocks is None else blocks.next_stop(done, steps)
        started = time.perf_counter()
        state = _advance(model, state, jnp.int32(done), jnp.int32(stop), mesh)
        if blocks is not None:
            jax.block_until_ready(state)
            blocks.measured(stop - done, time.perf_counter() - started)
            interrupts.check()
        done = stop
    return _finish(model, state, indices, n_total, tol, mesh)


def _per_device(model: AbstractModel, mesh) -> bool:
    """Whether each device runs its own slice in its own loops (``shard_map``): with a mesh
    of several devices and a model that allows it (:attr:`AbstractModel.per_device`).
    Data-dependent loops (early absorption, exact rejection samplers) then never wait on a
    cross-device reduction at every step, and each trajectory's numbers stay those of its
    key alone. diffrax's closure-converted solver internals reject the per-device array
    types that shard_map gives their inputs, and GSPMD shards them well: those models opt
    out."""
    return mesh is not None and mesh.size > 1 and model.per_device


BATCH = jax.sharding.PartitionSpec("traj")
REPLICATED = jax.sharding.PartitionSpec()


def _on_each_device(mesh, work, model, in_specs: tuple, *args):
    """``work(model, *args)`` with each device running its own tile in its own loops
    (``shard_map``; ``in_specs``: how each argument is placed, batch or replicated)."""
    dynamic, static = eqx.partition(model, eqx.is_array)

    def local(dynamic, *args):
        return work(eqx.combine(dynamic, static), *args)

    return jax.shard_map(
        local,
        mesh=mesh,
        in_specs=(REPLICATED, *in_specs),
        out_specs=BATCH,
        check_vma=False,
    )(dynamic, *args)


@eqx.filter_jit
def _begin(model, point_key, indices, radius, n_tokens: int, dim: int, mesh):
    # Every program of a tile is traced with every dot in full precision: JAX's default
    # lets a GPU round float32 dot operands to TF32 (10-bit mantissas), and library code
    # (diffrax's stochastic Runge–Kutta stages) does not ask otherwise; attndyn's own
    # products ask for it anyway (:func:`.linalg.dot`).
    with jax.default_matmul_precision("highest"):
        if not _per_device(model, mesh):
            return begin_tile(model, point_key, indices, radius, n_tokens, dim)
        work = lambda m, k, i, r: begin_tile(m, k, i, r, n_tokens, dim)  # noqa: E731
        specs = (REPLICATED, BATCH, REPLICATED)
        return _on_each_device(mesh, work, model, specs, point_key, indices, radius)


def _advance_state(model, state, start, stop):
    inner, keys = state
    return model.advance(inner, keys, start, stop), keys


@eqx.filter_jit
def _advance(model, state, start, stop, mesh):
    with jax.default_matmul_precision("highest"):
        if not _per_device(model, mesh):
            return _advance_state(model, state, start, stop)
        specs = (BATCH, REPLICATED, REPLICATED)
        return _on_each_device(mesh, _advance_state, model, specs, state, start, stop)


@eqx.filter_jit
def _finish(model, state, indices, n_total, tol, mesh):
    with jax.default_matmul_precision("highest"):
        inner, _ = state
        if not _per_device(model, mesh):
            return _results(finish_tile(model, inner, tol, mesh), indices, n_total)
        simulated = _on_each_device(mesh, finish_tile, model, (BATCH, REPLICATED), inner, tol)
        return _results(simulated, indices, n_total)


def _results(simulated, indices, n_total) -> TileResults:
    classes, cosines, densities, spans, merged, finite, saves = simulated
    tallied = tally(classes, cosines, densities, spans, merged, finite, indices, n_total)
    return TileResults(tallied, classes, (indices < n_total) & finite, saves)


def chunk_indices(start: int, chunk: int, sharding) -> Array:
    """The trajectory indices of the chunk starting at ``start``, placed on the devices."""
    return jax.device_put(np.arange(start, start + chunk, dtype=np.int32), sharding)
