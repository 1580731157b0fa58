"""``estimate_probabilities``: the stages of :mod:`attndyn._estimate` put together, on the
loop every study shares (:class:`.study.Study`).

Where the rest lives: the loop, lock, checkpoint timing and progress bar in
:mod:`.study`; float64 reruns and merges per call in :mod:`.reruns`; the messages,
refusals and provenance in :mod:`.reports`; held warnings in :mod:`.held_warnings`."""

import os
import sys
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np
import xarray as xr
from jaxtyping import PRNGKeyArray

from .._core import defaults
from .._core.errors import NonFiniteError, ParameterError, check_bool
from .._io import interrupts
from .._io.distributed import gather_tallies, process_layout
from .._models.base import AbstractModel
from .checkpoint import load_checkpoint, signature, study_record, write_checkpoint
from .cost import FirstTile
from .dataset import attach_provenance, probabilities_dataset, provenance_record
from .held_warnings import deferred_warnings
from .keys import Point, check_key, point_key
from .nonfinite import nonfinite_message
from .plan import Plan, PointPlan, check_options, make_plan
from .reports import (
    ESTIMATOR_FIELDS,
    check_checkpoint_path,
    check_metadata,
    provenance,
    warn_merged,
)
from .reruns import MergeHandling
from .runner import (
    Blocks,
    TileResults,
    chunk_indices,
    chunk_statistics,
    default_chunk_size,
    round_up,
    tile_size,
)
from .study import CHECKPOINT_EVERY, Study
from .tallies import Tallies

# Names other modules and tests reach here (tests patch ``process_layout``,
# ``gather_tallies``, ``chunk_statistics``, ``check_options`` and ``_Study``'s methods).
__all__ = [
    "CHECKPOINT_EVERY",
    "ESTIMATOR_FIELDS",
    "estimate_checked",
    "estimate_probabilities",
    "process_layout",
    "provenance_record",
]


def estimate_probabilities(
    model_fn: Callable[..., AbstractModel],
    points: Sequence[Point],
    *,
    key: PRNGKeyArray,
    n_trajectories: int,
    tol: float = defaults.TOL,
    radius: float = 1.0,
    chunk_size: int | None = None,
    checkpoint: str | os.PathLike | None = None,
    on_nonfinite: str = defaults.ON_NONFINITE,
    progress: bool = True,
    metadata: Mapping[str, Any] | None = None,
    route: str = "auto",
    early_absorption: bool | float | Literal["auto"] = False,
    x64: bool = False,
    on_merged: Literal["auto", "raise", "exclude", "count"] = defaults.ON_MERGED,
) -> xr.Dataset:
    """Estimate the probability of each clustering class at each save time, per point.

    Args:
        model_fn: ``model_fn(**point)`` builds the model of one point (any
            :class:`attndyn.AbstractModel`). Every point must name ``dim`` (d ≥ 2) and
            ``n_tokens`` (N ≥ 1); the other keys are the model's.
        points: the parameter points, e.g. from :func:`grid`.
        key: the PRNG key of the whole study.
        n_trajectories: trajectories per point (independent uniform starts on the sphere,
            scaled by ``radius``).
        radius: the starts' norm, > 0 (1: the unit sphere).
        tol: clustering tolerance, in (0, 1).
        chunk_size: trajectories simulated at once (cut to the trajectory count, then
            rounded up to whole tiles on every local device; the padding is not counted);
            chosen from device memory when omitted. It does not change the numbers.
        checkpoint: a netCDF path in an existing folder (a missing folder is refused, not
            created); progress is saved there (atomically) after each point
            and, within a point, after the first chunk that ends more than 20 s after the
            last save, and a run of the same study resumes from it, with any
            chunk size. A checkpoint of another study (any other model field, grid,
            trajectory count, key, ``tol``, ``radius``, route or package version) or a
            damaged one is refused with a ParameterError that says why; delete the file
            to start afresh. While a run uses it, the checkpoint is locked (a second run
            with the same path is refused). Provenance ``runs`` lists each run that added
            trajectories (backend, device kind, trajectories, seconds).
        on_nonfinite: what to do when a trajectory turns NaN/inf (e.g. USA overflow):
            ``"raise"`` a :class:`NonFiniteError`, or ``"exclude"`` it from the
            denominators with a warning (the count is kept as ``n_nonfinite``).
        progress: show a progress bar on stderr.
        metadata: extra provenance stored in the dataset's attributes; a key that the
            provenance records itself (``n_trajectories``, ``seconds``, ``attndyn_version``,
            ...) is refused, except ``kind``.
        route: ``"auto"`` simulates a model's reduced form wherever it has one that is
            exact in law (for :class:`DiscreteTransformer`: Q = K = I, one head, no random
            weights, a built-in scheme with an RMS norm and N < d (or N = d = 2), or Post-LN with a
            centred LayerNorm and N < d − 1, and Gaussian value matrices
            or values that are multiples of I; the N × N token coordinates instead of
            N × d); ``"full"`` always runs the model itself; ``"reduced"`` insists (a
            ParameterError says why it does not apply). Provenance records the route of
            every point.
        early_absorption: ``True`` (bound 10⁻⁷) or a per-trajectory bound ε: stop
            simulating a chunk once every trajectory is within δ± of ±1, δ± from the scale
            function so that an absorbed trajectory changes class later with probability
            ≤ ε (see :mod:`attndyn._models.reduced.absorption`). Needs a model that
            supports it (the reduced two-token Post-LN route with drift-free Gaussian
            values); ``"auto"`` (the CLI's default): bound 10⁻⁷ at the points that
            support it, none elsewhere. δ± per point (``None`` where not absorbed) go to
            provenance.
        x64: run in float64 (starts, states and the model's parameters), for the full
            routes where float32 coordinates merge tokens closer than ~10⁻⁷; recorded in
            provenance as ``dtype``; a bool (a truthy string is refused).
        on_merged: what to do when a trajectory's tokens merge numerically (the float type
            cannot resolve their gap, so the arithmetic, not the dynamics, would fix its
            class; see :func:`attndyn.numerically_merged`). ``"auto"`` (the default):
            bound the chance that each merged pair would have come apart (the model's
            merge law, :mod:`attndyn._models.merging`), rerun in float64, from the same
            random numbers, the float32 trajectories whose bound exceeds 10⁻⁷ or which
            have none, count the merged ones in their class with the summed bound in
            ``merge_bound`` and ``merge_ci``, and stop with a :class:`NumericalMergeError`
            only where a merge stays unbounded (see :mod:`attndyn._estimate.merges`).
            Explicit choices: ``"raise"`` at the end of the first chunk with a merge (the
            checkpoint is saved first, and serves a rerun with ``"exclude"`` or
            ``"count"``); ``"exclude"`` such trajectories from the probabilities and means
            at each save time where they are merged (``n_counted`` = ``n_valid`` −
            ``n_merged``), or ``"count"`` them in the class the arithmetic fixed; either of
            these two warns (:class:`NumericalMergeWarning`). ``n_merged`` says how many,
            always.

    With several processes (``jax.distributed``, see :func:`attndyn.initialize_distributed`),
    each process runs its block of tiles of every point (:func:`.distributed.process_block`)
    and the tallies are combined exactly once at the end; every process returns the same
    dataset.

    Returns:
        An ``xarray.Dataset`` over ``(point, time, outcome)`` with ``count``,
        ``probability``, Wilson 95 % bounds ``ci_lower``/``ci_upper``, ``n_valid``,
        ``n_nonfinite``, ``n_merged``, ``n_counted`` (the denominators), ``n_rerun``,
        ``merge_bound``, ``merge_ci_lower``/``merge_ci_upper`` (95 % however the merged
        trajectories' classes were fixed), the mean pairwise cosine with its standard
        error, one coordinate per parameter along ``point``, and full provenance in
        ``attrs``.
    """
    key = check_key(key)
    check_bool("x64", x64)
    check_options(
        n_trajectories=n_trajectories, tol=tol, radius=radius, on_nonfinite=on_nonfinite,
        chunk_size=chunk_size, route=route, on_merged=on_merged,
        early_absorption=early_absorption,
    )  # fmt: skip
    return estimate_checked(
        model_fn, points, key=key, n_trajectories=n_trajectories, tol=tol, radius=radius,
        chunk_size=chunk_size, checkpoint=checkpoint, on_nonfinite=on_nonfinite,
        progress=progress, metadata=metadata, route=route,
        early_absorption=early_absorption, x64=x64, on_merged=on_merged,
    )  # fmt: skip


def estimate_checked(
    model_fn: Callable[..., AbstractModel],
    points: Sequence[Point],
    *,
    key: PRNGKeyArray,
    n_trajectories: int,
    tol: float,
    radius: float,
    chunk_size: int | None,
    checkpoint: str | os.PathLike | None,
    on_nonfinite: str,
    progress: bool,
    metadata: Mapping[str, Any] | None,
    route: str,
    early_absorption: bool | float | str,
    x64: bool,
    on_merged: str,
) -> xr.Dataset:
    """:func:`estimate_probabilities` with its own options (the key, ``x64`` and
    :func:`.plan.check_options`'s) already checked where they entered: by it, or by
    :class:`attndyn.studies.MonteCarlo` for a study. The points, metadata and checkpoint
    path are checked here."""
    if not callable(model_fn):
        raise ParameterError(
            f"model_fn must be a function that builds the model of a point, model_fn(**point) "
            f"(e.g. lambda beta, dim, n_tokens: attndyn.DiscreteTransformer(...)); got "
            f"{type(model_fn).__name__}."
        )
    check_bool("progress", progress)
    check_metadata(metadata)
    checkpoint = None if checkpoint is None else check_checkpoint_path(checkpoint)
    with jax.enable_x64(bool(x64)):
        study = None
        try:
            with deferred_warnings():
                plan = make_plan(
                    model_fn, points, n_trajectories=n_trajectories, tol=tol, radius=radius,
                    chunk_size=chunk_size, route=route, early_absorption=early_absorption,
                    on_nonfinite=on_nonfinite, x64=bool(x64), on_merged=on_merged,
                )  # fmt: skip
                study = _Study(plan, key, checkpoint)
            study.run(progress)
            tallies = study.combined()
            study.check_totals(tallies)
        finally:  # the lock released, also after a Ctrl-C just after it was taken
            if study is not None:
                study.close()
    assert study is not None  # the study ran (pyright cannot tell after the finally)
    return _results(plan, study, tallies, metadata)


def _results(
    plan: Plan, study: "_Study", tallies: Tallies, metadata: Mapping[str, Any] | None
) -> xr.Dataset:
    """The finished study's dataset, with its provenance (and the merge warning)."""
    record = provenance(plan, study, tallies, metadata)
    warn_merged(plan, tallies)
    points = [p.point for p in plan.points]
    ds = probabilities_dataset(tallies, points, plan.save_times, on_merged=plan.on_merged)
    return attach_provenance(ds, record)


def point_tile(plan: Plan, point: PointPlan) -> int:
    """The tile of ``point`` (:func:`.runner.tile_size`): its trajectories, tokens, the
    coordinates its route keeps per token and the save count."""
    return tile_size(plan.n_trajectories, **_sizes(plan, point))


def _sizes(plan: Plan, point: PointPlan) -> dict[str, int]:
    """What a trajectory of ``point`` holds: tokens, coordinates per token (a reduced route
    keeps N × N), saves."""
    dim = point.n_tokens if point.route == "reduced" else point.dim
    return {"n_tokens": point.n_tokens, "dim": dim, "n_saves": len(plan.save_times)}


def study_devices(plan: Plan) -> list:
    """The local devices the study runs on: all of them, except one CPU device for a model
    that calls batched LAPACK kernels (:meth:`AbstractModel.batched_lapack`), which deadlock
    when several CPU devices run them at once (jaxlib 0.10). The numbers do not depend on
    the device count."""
    devices = jax.local_devices()
    if len(devices) > 1 and devices[0].platform == "cpu":
        if any(point.model.batched_lapack() for point in plan.points):
            warnings.warn(
                "an implicit solver factorises matrices with batched LAPACK kernels, which "
                "deadlock when several CPU devices run them at once (jaxlib 0.10): this study "
                f"runs on 1 of the {len(devices)} CPU devices.",
                stacklevel=4,
            )
            return devices[:1]
    return devices


class _Study(MergeHandling, Study):
    """The running state of one ``estimate_probabilities`` call: devices, tallies and the
    checkpoint (locked while the study runs); the loop is :class:`.study.Study`'s."""

    def __init__(self, plan: Plan, key: PRNGKeyArray, checkpoint: Path | None):
        self.plan = plan
        self.key = key
        devices = study_devices(plan)
        tiles = [point_tile(plan, point) for point in plan.points]
        super().__init__(
            n_trajectories=plan.n_trajectories,
            tiles=tiles,
            checkpoint=checkpoint,
            devices=devices,
            process=process_layout(),
        )
        self.mesh = jax.sharding.Mesh(np.array(self.devices), ("traj",))
        self.sharding = jax.sharding.NamedSharding(self.mesh, jax.sharding.PartitionSpec("traj"))
        self.key_data = np.asarray(jax.random.key_data(key)).tolist()
        self.prng_impl = str(jax.random.key_impl(key))
        self.record = study_record(plan, self.key_data, self.prng_impl, self.process)
        self.signature = signature(self.record)
        self.tallies = Tallies.zeros(len(plan.points), len(plan.save_times))
        self.open()
        self.chunks: list[int] = []
        # Float64 models for reruns, by point, with the blocks their steps run in.
        self.models64: dict[int, tuple[AbstractModel, Blocks]] = {}
        self.first_tile = FirstTile()
        # By point, the index of the first trajectory that stayed broken (NaN, inf, a
        # broken invariant) after every rerun this run made: the error names it.
        self.first_broken: dict[int, int] = {}

    def load(self, path: Path, block_sizes: np.ndarray) -> Tallies:
        return load_checkpoint(path, self.record, block_sizes)

    def write(self, path: Path) -> None:
        points = [p.point for p in self.plan.points]
        write_checkpoint(path, self.record, self.tallies, points, self.plan.save_times)

    def simulate(self, *args, **kwargs) -> TileResults:
        """One call of the chunk kernel (:func:`.runner.chunk_statistics`)."""
        return chunk_statistics(*args, **kwargs)

    def point_done(self, index: int) -> None:
        if self.alone:
            self.check_nonfinite(index, self.plan.points[index])

    def run_point(self, index: int, bar) -> None:
        """The trajectories of one point that this process has not finished yet.

        This process runs the indices ``[start, stop)`` of its block in order, so the
        finished ones are always ``[start, start + n_done)``: a resumed run (with any chunk
        size) continues at the first unfinished index and counts none twice."""
        plan, tallies, point = self.plan, self.tallies, self.plan.points[index]
        start, stop = self.blocks[index]
        if stop == start:
            return
        chunk = self.chunk_size(index, point, stop - start)
        self.chunks.append(chunk)
        key = point_key(self.key, point.point)
        dtype = jnp.float64 if plan.x64 else jnp.float32
        args = (
            # Indices at or past ``stop`` pad the last chunk and are not counted.
            jnp.asarray(stop, jnp.int32),
            jnp.asarray(plan.tol, dtype),
            jnp.asarray(plan.radius, dtype),
        )
        # One tile per device per call (runner.tile_size): the same compiled programs for
        # every chunk size; a chunk is the work between checkpoint checks. Within a call the
        # steps run in blocks of about half a second (the same numbers whatever the
        # blocks), with a check for Ctrl-C after each.
        group = self.tiles[index] * len(self.devices)
        blocks = Blocks(point.model.stepping()[1])
        for first in range(start + int(tallies.n_done[index]), stop, chunk):
            pending = None
            for tile_start in range(first, min(first + chunk, stop), group):
                indices = chunk_indices(tile_start, group, self.sharding)
                self.first_tile.start()
                results = self.simulate(
                    point.model,
                    key,
                    indices,
                    *args,
                    point.n_tokens,
                    point.dim,
                    self.mesh,
                    blocks=blocks,
                )
                self.say_cost(index, min(group, stop - tile_start), tile_start, bar)
                # The devices run this call while the host adds the previous one (JAX
                # dispatches asynchronously; add_chunk waits for its results).
                if pending is not None:
                    self.add(index, *pending, bar)
                pending = results, min(group, stop - tile_start), (key, tile_start, stop)
            if pending is not None:
                self.add(index, *pending, bar)
            if self.alone:
                self.check_merged(index)
                self.check_nonfinite(index, point, final=False)
            if self.save_due():
                self.save()

    def chunk_size(self, index: int, point: PointPlan, block: int) -> int:
        """The plan's chunk size (or one that fits device memory), never more than the
        block of trajectories it serves, rounded up to a multiple of the device count times
        the point's tile (:func:`.runner.tile_size`)."""
        plan, n_devices = self.plan, len(self.devices)
        chunk = plan.chunk_size or default_chunk_size(
            block, **_sizes(plan, point), n_devices=n_devices
        )
        return round_up(min(chunk, block), n_devices * self.tiles[index])

    def say_cost(self, index: int, ran: int, tile_start: int, bar) -> None:
        """After the first tile of this run (its steps done), what the rest will cost
        (:mod:`.cost`), above the progress bar."""
        if not self.bar_shown:
            return
        stop = self.blocks[index][1]
        later = range(index + 1, len(self.blocks))
        left = stop - tile_start - ran
        sizes = (self.blocks[j][1] - self.blocks[j][0] for j in later)
        left += sum(size - int(self.tallies.n_done[j]) for j, size in zip(later, sizes))
        line = self.first_tile.note(ran, left, self.plan.points[index].point)
        if line is not None:
            bar.write(line, sys.stderr)

    def add(self, index: int, results: TileResults, done: int, where: tuple, bar) -> None:
        """Add one call's results (``done`` trajectories of point ``index``; ``where``: the
        point's key, the call's first index and the point's end) to the tallies, whole (a
        Ctrl-C meanwhile is raised after); its broken trajectories (NaN, inf, a broken
        invariant) and, with ``on_merged="auto"``, its merges resolved first (a Ctrl-C
        there leaves the tallies as they were: the call is redone)."""
        results = jax.block_until_ready(results)
        tallied, resolution = results.tallied, None
        merges = self.plan.on_merged == "auto" and np.asarray(tallied[6]).any()
        if merges or int(tallied[2]):
            tallied, resolution = self.resolve_call(index, results, *where)
        with interrupts.deferred():
            if resolution is not None:
                self.tallies.add_resolution(
                    index,
                    resolution.n_rerun,
                    resolution.n_unbounded,
                    resolution.bound_units,
                    resolution.n_broken_rerun,
                )
                if resolution.broken.size and index not in self.first_broken:
                    self.first_broken[index] = where[1] + int(resolution.broken[0])
            self.tallies.add_chunk(index, *tallied)
            self.tallies.n_done[index] += done
        bar.update(done)

    def check_nonfinite(
        self, index: int, point: PointPlan, tallies: Tallies | None = None, *, final: bool = True
    ) -> None:
        """Stop (``on_nonfinite="raise"``: at the end of the chunk in which one appears,
        once the checkpoint holds it) or warn (``"exclude"``: at the end of the point,
        ``final``) where trajectories stayed broken after every rerun
        (:mod:`.nonfinite`)."""
        tallies = self.tallies if tallies is None else tallies
        bad = int(tallies.n_nonfinite[index])
        raising = self.plan.on_nonfinite == "raise"
        if not bad or not (raising or final):
            return
        message = nonfinite_message(
            self.plan,
            point,
            bad=bad,
            done=int(tallies.n_done[index]),
            key=self.key,
            first=self.first_broken.get(index),
        )
        if raising:
            self.save()
            raise NonFiniteError(
                message + " Pass on_nonfinite='exclude' (CLI: --on-nonfinite exclude) to "
                "drop them from the probabilities"
                + (": a rerun resumes from the checkpoint." if self.checkpoint else ".")
            )
        warnings.warn(message + " They are excluded from the probabilities.", stacklevel=4)

    def combined(self) -> Tallies:
        """The totals over every process (this process's own when it runs alone)."""
        if self.alone:
            return self.tallies
        fields = gather_tallies(self.tallies.arrays())
        return Tallies(*fields, seconds=self.tallies.seconds, runs=self.tallies.runs)

    def check_totals(self, tallies: Tallies) -> None:
        """With several processes, the overflow and merge checks on the totals (a process
        alone checks as it goes, :meth:`run`)."""
        if self.alone:
            return
        for index, point in enumerate(self.plan.points):
            self.check_nonfinite(index, point, tallies)
            self.check_merged(index, tallies)
