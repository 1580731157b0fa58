"""``estimate_probabilities``: the stages of :mod:`attndyn._estimate` put together."""

import contextlib
import dataclasses
import functools
import os
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np
import xarray as xr
from jaxtyping import PRNGKeyArray
from tqdm.auto import tqdm

from .._core.errors import (
    NonFiniteError,
    NumericalMergeError,
    NumericalMergeWarning,
    ParameterError,
    check_bool,
)
from .._models.base import AbstractModel
from .._models.merging import resolution_gap
from . import interrupts
from .checkpoint import load_checkpoint, signature, study_record, write_checkpoint
from .cost import FirstTile, resuming
from .dataset import attach_provenance, probabilities_dataset, provenance_record
from .distributed import gather_tallies, process_block, process_layout
from .files import Lock, LockBusy, writable_folder
from .keys import Point, check_key, point_key
from .merges import (
    BOUND_UNIT,
    MERGE_BOUND,
    RERUN_TILE,
    Resolution,
    Trajectories,
    resolve,
    tallies_of,
)
from .nonfinite import nonfinite_message
from .plan import Plan, PointPlan, check_options, make_plan, to_float64
from .runner import (
    Blocks,
    TileResults,
    chunk_indices,
    chunk_statistics,
    default_chunk_size,
    round_up,
    tile_size,
)
from .runtime import compile_seconds
from .tallies import Tallies

#: Seconds between checkpoint writes within a point (one is always written after each point).
CHECKPOINT_EVERY = 20.0
#: The provenance fields the estimator records itself (:func:`_provenance`): ``metadata``
#: may not name them. ``kind`` is not among them: a study names its own kind.
ESTIMATOR_FIELDS = (
    "key_data",
    "n_trajectories",
    "tol",
    "radius",
    "chunk_size",
    "tiles",
    "devices",
    "prng_impl",
    "route",
    "routes",
    "simulated",
    "route_requested",
    "early_absorption",
    "process_count",
    "dtype",
    "compile_seconds",
    "on_nonfinite",
    "nonfinite_rerun",
    "on_merged",
    "merges",
    "model",
    "signature",
    "runs",
)


def estimate_probabilities(
    model_fn: Callable[..., AbstractModel],
    points: Sequence[Point],
    *,
    key: PRNGKeyArray,
    n_trajectories: int,
    tol: float = 1e-3,
    radius: float = 1.0,
    chunk_size: int | None = None,
    checkpoint: str | os.PathLike | None = None,
    on_nonfinite: str = "raise",
    progress: bool = True,
    metadata: Mapping[str, Any] | None = None,
    route: str = "auto",
    early_absorption: bool | float | Literal["auto"] = False,
    x64: bool = False,
    on_merged: Literal["auto", "raise", "exclude", "count"] = "auto",
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
    record = _provenance(plan, study, tallies, metadata)
    warn_merged(plan, tallies)
    points = [p.point for p in plan.points]
    ds = probabilities_dataset(tallies, points, plan.save_times, on_merged=plan.on_merged)
    return attach_provenance(ds, record)


class _Held:
    """Warnings held by :func:`deferred_warnings`, and where to show them."""

    def __init__(self, show):
        self.show = show
        self.warnings: list[tuple] = []
        self.holding = True

    def release(self) -> None:
        self.holding = False
        held, self.warnings = self.warnings, []
        for args in held:
            self.show(*args)


_held: list[_Held] = []


@contextlib.contextmanager
def deferred_warnings() -> Iterator[None]:
    """Hold the warnings raised inside (building the points' models, planning, reading the
    checkpoint) until the study starts running (:func:`release_warnings`) or the block
    ends, and drop them if the block refuses the arguments (:class:`ParameterError`): a
    warning (a horizon off the layer grid) followed by the error that stops the run was two
    lines for one mistake. Nested uses share the outermost (the CLI holds a whole
    command's)."""
    if _held:
        yield
        return
    held = _Held(warnings.showwarning)

    def show(message, category, filename, lineno, file=None, line=None):
        if held.holding:
            held.warnings.append((message, category, filename, lineno, file, line))
        else:
            held.show(message, category, filename, lineno, file, line)

    warnings.showwarning = show
    _held.append(held)
    try:
        yield
    except ParameterError:
        held.warnings.clear()
        raise
    finally:
        _held.remove(held)
        warnings.showwarning = held.show
        held.release()


def release_warnings() -> None:
    """Show the warnings :func:`deferred_warnings` holds, and every later one at once: the
    arguments passed every check and the study runs."""
    for held in _held:
        held.release()


def merge_message(plan: Plan, tallies: Tallies, index: int) -> str:
    """Where and how often tokens merged at point ``index``, and the ways out."""
    merged = tallies.n_merged[index]
    first = int(np.argmax(merged > 0))
    dtype = "float64" if plan.x64 else "float32"
    ways_out = "a reduced route (route='auto', where one applies)" + (
        "" if plan.x64 else " or x64=True (CLI: --x64)"
    )
    return (
        f"tokens merged numerically in {int(merged.max())} of {int(tallies.n_valid[index])} "
        f"trajectories at {plan.points[index].point} (first at t = "
        f"{plan.save_times[first]:.4g}): {dtype} cannot resolve their gap, so the "
        f"arithmetic, not the dynamics, fixes their class; {ways_out} resolves far smaller "
        "gaps."
    )


def warn_merged(plan: Plan, tallies: Tallies) -> None:
    """Tell the user where tokens merged numerically (``on_merged`` "count" or "exclude":
    "raise" stopped at the first merge, and "auto" bounded them); ``n_merged`` says how
    many."""
    points = [i for i, n in enumerate(tallies.n_merged.max(axis=1)) if n > 0]
    if not points or plan.on_merged == "auto":
        return
    done = "counted in their class" if plan.on_merged == "count" else "excluded"
    warnings.warn(
        f"at {len(points)} of {len(plan.points)} points: "
        f"{merge_message(plan, tallies, points[0])} They are {done} (on_merged="
        f"{plan.on_merged!r}); n_merged says how many at each point and save time.",
        NumericalMergeWarning,
        stacklevel=3,
    )


def host_trajectories(results: TileResults, saves: np.ndarray) -> Trajectories:
    """A call's per-trajectory results on the host (with ``saves`` for its states)."""
    _, _, _, cosines, densities, spans, merged, _ = results.tallied
    return Trajectories(
        np.asarray(results.classes),
        np.asarray(results.valid),
        np.asarray(cosines),
        np.asarray(densities),
        np.asarray(spans),
        np.asarray(merged),
        saves,
    )


def merged_states(saves: jax.Array, rows: np.ndarray) -> np.ndarray:
    """The saved states of the trajectories ``rows`` on the host. A CPU's arrays are host
    memory already; an accelerator sends only those rows, gathered in a batch padded to a
    power of two (a handful of compiled shapes, not one per count)."""
    if all(d.platform == "cpu" for d in saves.devices()):
        return np.asarray(saves)[rows]
    size = 1 << max(0, int(rows.size - 1).bit_length())
    padded = np.resize(rows, size)
    return np.asarray(jnp.take(saves, jnp.asarray(padded), axis=0))[: rows.size]


def unbounded_message(plan: Plan, tallies: Tallies, index: int) -> str:
    """Why ``on_merged="auto"`` stops at point ``index``, and what to pass instead."""
    point = plan.points[index]
    law = point.model.merge_law(point.dim)
    why = (
        f"no law of a merged pair's gap is derived for {type(point.user_model).__name__} "
        "with these options"
        if law is None
        else "their gap can grow back there (e.g. the hybrid model above ε_c, where +1 "
        "repels), so no bound on a changed class holds"
    )
    precision = "" if plan.x64 or not point.model.same_path_in_float64 else " in float64"
    return (
        f"tokens stayed merged numerically{precision} in {int(tallies.n_unbounded[index])} "
        f"of {int(tallies.n_valid[index])} trajectories at {point.point} and {why}: the "
        "arithmetic, not the dynamics, would fix their class. Pass on_merged='count' "
        "(CLI: --on-merged count, with --fresh) to count them in that class, or 'exclude' "
        "to drop them; n_merged and merge_ci report them either way."
    )


def check_metadata(metadata: Mapping[str, Any] | None) -> None:
    """Refuse, before anything runs, metadata keys that the provenance records itself: they
    would either fail after the simulation (a key passed twice) or overwrite the record of
    what ran (the package version, the trajectory count...)."""
    if metadata is None:
        return
    if not isinstance(metadata, Mapping):
        raise ParameterError(
            f"metadata must be a dict of extra provenance; got {type(metadata).__name__}."
        )
    reserved = sorted({*provenance_record(0.0), *ESTIMATOR_FIELDS})
    taken = [k for k in metadata if k in reserved]
    if taken:
        raise ParameterError(
            f"metadata names {', '.join(map(repr, taken))}, which the provenance records "
            f"itself; use other keys than {', '.join(reserved)}."
        )


def check_checkpoint_path(checkpoint: str | os.PathLike) -> Path:
    """A checkpoint path that can be written: not a folder, in an existing writable folder
    (a mistyped folder is refused rather than created, wherever it would land)."""
    if not isinstance(checkpoint, str | os.PathLike) or not str(checkpoint):
        raise ParameterError(
            f"checkpoint={checkpoint!r} must be a file path (a str or pathlib.Path, e.g. "
            "'runs/study.nc'), or None for no checkpoint."
        )
    path = Path(checkpoint)
    if path.is_dir():
        raise ParameterError(
            f"checkpoint={str(path)!r} is a folder; give a file path (e.g. {str(path / 'x.nc')!r})."
        )
    if not path.parent.exists():
        raise ParameterError(
            f"checkpoint={str(path)!r} is in a folder that does not exist "
            f"({str(path.parent)!r}); create it first, or give a path in an existing folder."
        )
    writable_folder(path.parent, "the checkpoint's folder")
    return path


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


class _Study:
    """The running state of one ``estimate_probabilities`` call: devices, tallies and the
    checkpoint (locked while the study runs)."""

    def __init__(self, plan: Plan, key: PRNGKeyArray, checkpoint: Path | None):
        self.plan = plan
        self.key = key
        self.checkpoint = checkpoint
        self.devices = study_devices(plan)
        self.process = process_layout()
        self.mesh = jax.sharding.Mesh(np.array(self.devices), ("traj",))
        self.sharding = jax.sharding.NamedSharding(self.mesh, jax.sharding.PartitionSpec("traj"))
        self.key_data = np.asarray(jax.random.key_data(key)).tolist()
        self.prng_impl = str(jax.random.key_impl(key))
        self.record = study_record(plan, self.key_data, self.prng_impl, self.process)
        self.signature = signature(self.record)
        self.tiles = [point_tile(plan, point) for point in plan.points]
        self.blocks = [
            process_block(plan.n_trajectories, *self.process, tile) for tile in self.tiles
        ]
        self.tallies = Tallies.zeros(len(plan.points), len(plan.save_times))
        self.lock = self._lock()
        try:
            if checkpoint is not None and checkpoint.exists():
                sizes = np.asarray([stop - start for start, stop in self.blocks])
                self.tallies = load_checkpoint(checkpoint, self.record, sizes)
        except BaseException:
            self.close()
            raise
        self.seconds_before = self.tallies.seconds
        self.runs_before = list(self.tallies.runs)
        self.done_before = int(self.tallies.n_done.sum())
        self.compile_before = compile_seconds()
        self.started = time.perf_counter()
        self.started_at = datetime.now(UTC).isoformat(timespec="seconds")
        self.last_save = self.started
        self.chunks: list[int] = []
        # Float64 models for reruns, by point, with the blocks their steps run in.
        self.models64: dict[int, tuple[AbstractModel, Blocks]] = {}
        self.first_tile = FirstTile()
        self.bar_shown = False
        # By point, the index of the first trajectory that stayed broken (NaN, inf, a
        # broken invariant) after every rerun this run made: the error names it.
        self.first_broken: dict[int, int] = {}

    def _lock(self) -> Lock | None:
        if self.checkpoint is None:
            return None
        try:
            return Lock(self.checkpoint.with_name(self.checkpoint.name + ".lock"))
        except LockBusy as busy:
            raise ParameterError(
                f"checkpoint {str(self.checkpoint)!r} is in use by {busy.holder}; wait for "
                "it to finish, or choose another checkpoint path."
            ) from None

    def close(self) -> None:
        if self.lock is not None:
            self.lock.release()

    def __enter__(self) -> "_Study":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def stamp(self) -> None:
        """Bring the tallies' seconds and their record of runs up to now: this process's
        run is listed once it has added trajectories, so a study resumed on another
        machine names both machines in its provenance."""
        elapsed = time.perf_counter() - self.started
        self.tallies.seconds = self.seconds_before + elapsed
        added = int(self.tallies.n_done.sum()) - self.done_before
        this_run = {
            "started": self.started_at,
            "backend": jax.default_backend(),
            "device_kind": self.devices[0].device_kind,
            "n_devices": len(self.devices),
            "process_count": self.process[1],
            "trajectories": added,
            "seconds": round(elapsed, 3),
        }
        self.tallies.runs = self.runs_before + ([this_run] if added else [])

    def save(self) -> None:
        if self.checkpoint is None:
            return
        with interrupts.deferred():  # the state stamped is the state written
            self.stamp()
            points = [p.point for p in self.plan.points]
            write_checkpoint(
                self.checkpoint, self.record, self.tallies, points, self.plan.save_times
            )
            self.last_save = time.perf_counter()

    def run(self, progress: bool) -> None:
        release_warnings()
        plan = self.plan
        bar = tqdm(
            total=len(plan.points) * plan.n_trajectories,
            initial=int(self.tallies.n_done.sum()),
            unit="traj",
            desc="attndyn",
            file=sys.stderr,
            disable=not progress,
            dynamic_ncols=True,
        )
        if self.done_before and self.checkpoint is not None and progress:
            bar.write(resuming(self.checkpoint, self.done_before, int(bar.total)), sys.stderr)
        self.bar_shown = progress
        try:
            with interrupts.watching():
                for index, point in enumerate(plan.points):
                    self.run_point(index, point, bar)
                    self.save()
                    if self.alone:
                        self.check_nonfinite(index, point)
                # An interrupt Python swallowed (in a garbage-collection callback) during
                # the last block still stops the run.
                interrupts.check()
        except KeyboardInterrupt:
            # The blocks of device work are short and waited for: nothing is left running.
            self.save()
            raise
        finally:
            bar.close()
        self.stamp()

    def chunk_size(self, index: int, point: PointPlan, block: int) -> int:
        """The plan's chunk size (or one that fits device memory), never more than the
        block of trajectories it serves, rounded up to a multiple of the device count times
        the point's tile (:func:`.runner.tile_size`)."""
        plan, n_devices = self.plan, len(self.devices)
        chunk = plan.chunk_size or default_chunk_size(
            block, **_sizes(plan, point), n_devices=n_devices
        )
        return round_up(min(chunk, block), n_devices * self.tiles[index])

    def run_point(self, index: int, point: PointPlan, bar) -> None:
        """The trajectories of one point that this process has not finished yet.

        This process runs the indices ``[start, stop)`` of its block in order, so the
        finished ones are always ``[start, start + n_done)``: a resumed run (with any chunk
        size) continues at the first unfinished index and counts none twice."""
        plan, tallies = self.plan, self.tallies
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
                results = chunk_statistics(
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
            if time.perf_counter() - self.last_save > CHECKPOINT_EVERY:
                self.save()

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

    def resolve_call(
        self, index: int, results: TileResults, key: PRNGKeyArray, first: int, stop: int
    ) -> tuple[tuple, Resolution]:
        """The call's tallies after rerunning its broken trajectories in float64 and, with
        ``on_merged="auto"``, bounding, rerunning and counting its merged ones
        (:func:`.merges.resolve`), and what that did (for the tallies)."""
        plan, point = self.plan, self.plan.points[index]
        tallied = results.tallied
        saves = results.saves
        merged = np.asarray(tallied[6])
        auto = plan.on_merged == "auto"
        rows = np.flatnonzero(merged.any(axis=1)) if auto else np.zeros(0, np.int64)
        saves_host = np.zeros((merged.shape[0], *saves.shape[1:]), saves.dtype)
        if rows.size:
            saves_host[rows] = merged_states(saves, rows)
        trajectories = host_trajectories(results, saves_host)
        tile = self.tiles[index]
        tiles = [np.arange(i, min(i + tile, merged.shape[0])) for i in range(0, len(merged), tile)]
        rerun = None
        if not plan.x64 and point.model.same_path_in_float64:
            rerun = functools.partial(self.rerun_float64, index, key, first=first, stop=stop)
        in_range = first + np.arange(merged.shape[0]) < stop
        law = point.model.merge_law(point.dim) if auto else None
        resolution = resolve(
            trajectories, tiles, law=law, tol=plan.tol, rerun=rerun, in_range=in_range, bound=auto
        )
        return tallies_of(resolution.trajectories, in_range), resolution

    def rerun_float64(
        self, index: int, key, positions: np.ndarray, *, first: int, stop: int
    ) -> Trajectories:
        """The trajectories at ``positions`` of the call starting at index ``first`` of
        point ``index``, in float64 from the same random numbers (at most
        :data:`.merges.RERUN_TILE` of them, run as one tile on one device), its steps in
        blocks with a check for Ctrl-C after each (the same numbers whatever the blocks)."""
        plan, point = self.plan, self.plan.points[index]
        indices = first + positions
        padded = np.resize(indices, RERUN_TILE)  # repeats: their rows are dropped below
        with jax.enable_x64(True):
            if index not in self.models64:
                model64 = to_float64(point.model)
                self.models64[index] = model64, Blocks(model64.stepping()[1])
            model64, blocks = self.models64[index]
            results = chunk_statistics(
                model64,
                key,
                jnp.asarray(padded, jnp.int32),
                jnp.asarray(stop, jnp.int32),
                jnp.asarray(plan.tol, jnp.float64),
                jnp.asarray(plan.radius, jnp.float64),
                point.n_tokens,
                point.dim,
                blocks=blocks,
            )
            rows = host_trajectories(results, np.asarray(results.saves))
            return Trajectories(*(a[: indices.size] for a in rows))

    @property
    def alone(self) -> bool:
        """Whether this is the only process. With several, each sees only its own
        trajectories: a check that raised in one process alone would leave the others
        waiting for it at the gather, so the checks wait for the totals
        (:meth:`check_totals`), and every process raises alike."""
        return self.process[1] == 1

    def check_merged(self, index: int, tallies: Tallies | None = None) -> None:
        """Under ``on_merged="raise"``, stop at the end of the first chunk in which tokens
        merged, once the checkpoint holds it: a rerun with ``"exclude"`` or ``"count"``
        resumes there (their tallies are the same). Under ``"auto"``, stop at the end of
        the first chunk with a merge that no bound covers."""
        tallies = self.tallies if tallies is None else tallies
        if self.plan.on_merged == "auto" and tallies.n_unbounded[index]:
            raise NumericalMergeError(unbounded_message(self.plan, tallies, index))
        if self.plan.on_merged != "raise" or not tallies.n_merged[index].any():
            return
        self.save()
        raise NumericalMergeError(
            merge_message(self.plan, tallies, index) + " Pass on_merged='exclude' "
            "(CLI: --on-merged exclude) to drop such trajectories from the estimates, or "
            "'count' to keep them in the class the arithmetic fixed (right inside clusters "
            "that contract, wrong where a cluster can come apart)"
            + (": a rerun resumes from the checkpoint." if self.checkpoint else ".")
        )

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


def merge_provenance(plan: Plan, tallies: Tallies) -> dict[str, Any] | None:
    """What ``on_merged="auto"`` did and assumed (``None`` under the other choices): the
    bound it rests on, and per point the trajectories rerun in float64, the largest summed
    bound over save times and the merge law (``None`` where the model has none)."""
    if plan.on_merged != "auto":
        return None
    laws = [p.model.merge_law(p.dim) for p in plan.points]
    return {
        "bound": (
            "a merged pair's gap returns to tol with probability <= 2 (delta/tol)^kappa, "
            "kappa the least exponent of its gap's diffusion (worst over the gap's "
            "direction) at the save times since it merged, delta the float's resolution"
        ),
        "assumes": (
            "the diffusion limit of the model (finite L close to it), and an exponent "
            "between save times no smaller than at them"
        ),
        "rerun_above": MERGE_BOUND,
        "resolution_gap": {
            "float32": resolution_gap(np.float32, 1),
            "float64": resolution_gap(np.float64, 1),
            "per": "coordinate",
        },
        "n_rerun": tallies.n_rerun.tolist(),
        "merge_bound_max": (tallies.merge_bound.max(axis=1) / BOUND_UNIT).tolist(),
        "laws": [None if law is None else dataclasses.asdict(law) for law in laws],
    }


def _provenance(
    plan: Plan, study: _Study, tallies: Tallies, metadata: Mapping[str, Any] | None
) -> dict[str, Any]:
    routes = plan.routes
    gaps = [p.model.absorption_gaps() for p in plan.points]
    fields: dict[str, Any] = {"kind": "probabilities", **(dict(metadata) if metadata else {})}
    return provenance_record(
        tallies.seconds,
        key_data=study.key_data,
        n_trajectories=plan.n_trajectories,
        tol=plan.tol,
        radius=plan.radius,
        chunk_size=max(study.chunks) if study.chunks else plan.chunk_size,
        tiles=study.tiles,
        devices=[str(d) for d in study.devices],
        prng_impl=study.prng_impl,
        route=routes[0] if len(set(routes)) == 1 else "mixed",
        routes=routes,
        simulated=[type(p.model).__name__ for p in plan.points],
        route_requested=plan.route,
        early_absorption=None
        if plan.absorption_bound is None
        else {"bound": plan.absorption_bound, "gaps": [list(g) if g else None for g in gaps]},
        process_count=study.process[1],
        dtype="float64" if plan.x64 else "float32",
        compile_seconds=compile_seconds() - study.compile_before,
        on_nonfinite=plan.on_nonfinite,
        # Per point: trajectories float32 broke, rerun in float64 (those float64 ran
        # through are counted; the others are in n_nonfinite).
        nonfinite_rerun=tallies.n_nonfinite_rerun.tolist(),
        on_merged=plan.on_merged,
        merges=merge_provenance(plan, tallies),
        model=repr(plan.points[0].user_model),
        signature=study.signature,
        runs=tallies.runs,
        **fields,
    )
