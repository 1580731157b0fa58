"""``estimate_observables``: per-trajectory observables at every save, on the loop every
study shares (:class:`.study.Study`: tiles, checkpoint and resume, lock, several
processes, progress bar, Ctrl-C), beside :func:`.estimator.estimate_probabilities`.

The caller says how one tile of trajectories runs (``run_tile``) and what it observes
(``fields``); the estimator runs this process's block of every point's trajectories tile
by tile, keeps each trajectory's observables in its own row (:mod:`.observations`), and
with several processes puts the blocks side by side once at the end. Trajectory i of a
point starts from, and draws its noise from, ``fold_in(point_key(key, point), i)``
(:mod:`.keys`) whoever runs it, and a tile's size depends on the point alone, so the rows
never depend on the chunk size, a resume or the process count.

A trajectory that turns NaN or infinite stops the study (a :class:`NonFiniteError`, with
the caller's message): with one process at the end of its tile, the checkpoint written
first; with several, once the blocks are combined, in every process alike.
"""

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import PRNGKeyArray

from .._core.errors import NonFiniteError, ParameterError, check_bool, check_int
from .._io import interrupts
from .._io.distributed import gather_parts, process_block, process_layout
from .held_warnings import deferred_warnings
from .keys import Point, check_key, point_key
from .observations import (
    Field,
    Observations,
    combine_blocks,
    load_observations,
    observations_record,
    write_observations,
)
from .reports import check_checkpoint_path
from .runner import round_up
from .study import Study

#: ``run_tile(point_index, keys, count, bar)``: the tile's observables (field → array of
#: shape (tile, S, …)) and which of its trajectories stayed finite ((tile,) bool); only
#: the first ``count`` rows are kept (the others pad the point's last tile). ``bar`` is
#: the progress bar, for a tile that moves it as it goes.
RunTile = Callable[[int, jax.Array, int, Any], tuple[Mapping[str, Any], Any]]


def estimate_observables(
    run_tile: RunTile,
    points: Sequence[Point],
    *,
    fields: Mapping[str, Field],
    tiles: Sequence[int],
    key: PRNGKeyArray,
    n_trajectories: int,
    save_times,
    record: Mapping[str, Any],
    checkpoint: str | os.PathLike | None = None,
    chunk_size: int | None = None,
    progress: bool = True,
    name: str = "observables",
    nonfinite: Callable[[int], str] | None = None,
    on_start: Callable[[list[int]], None] | None = None,
    bar_options: Mapping[str, Any] | None = None,
) -> Observations:
    """Run every point's ``n_trajectories`` trajectories, ``tiles[p]`` at a time, and
    return every trajectory's observables (all processes' together).

    Args:
        run_tile: runs one tile (:data:`RunTile`).
        points: the parameter points (each a dict; they key the randomness).
        fields: what a tile observes, by name (:class:`.observations.Field`).
        tiles: per point, the trajectories one call of ``run_tile`` runs (a multiple of
            it starts every process's block).
        key: the PRNG key of the whole study.
        save_times: the save times (recorded).
        record: what else determines the numbers (the model's arguments): a checkpoint of
            another record is refused.
        checkpoint: a netCDF path in an existing folder, written (atomically) after every
            chunk and point; a rerun with the same arguments resumes from it, with any
            chunk size. Locked while the study runs.
        chunk_size: trajectories between checkpoint writes (rounded up to whole tiles;
            default: one tile). Never changes the numbers.
        name: what the progress bar and the refusal of another study's checkpoint call
            this study ("another {name} study").
        nonfinite: ``nonfinite(p)``: the message of a trajectory of point p that turned
            NaN or infinite.
        on_start: called with the trajectories each point still runs in this process
            (whole tiles), once the checkpoint is read and before anything runs (a long
            run's announcement).
        bar_options: further tqdm options of the progress bar.
    """
    key = check_key(key)
    check_int("n_trajectories", n_trajectories, lower=1, upper=1 << 30)
    check_bool("progress", progress)
    if chunk_size is not None:
        check_int("chunk_size", chunk_size, lower=1, upper=1 << 30)
    if len(tiles) != len(points) or not points:
        raise ParameterError("give one tile size per point, and at least one point.")
    path = None if checkpoint is None else check_checkpoint_path(checkpoint)
    study = None
    try:
        with deferred_warnings():
            study = _ObservablesStudy(
                run_tile, points, fields, tiles, key, n_trajectories, save_times, record,
                path, chunk_size, name, nonfinite, bar_options,
            )  # fmt: skip
            if on_start is not None:
                on_start(study.left())
        study.run(progress)
        observations = study.combined()
        study.check_totals(observations)
    finally:  # the lock released, also after a Ctrl-C just after it was taken
        if study is not None:
            study.close()
    return observations


class _ObservablesStudy(Study):
    """The running state of one ``estimate_observables`` call."""

    def __init__(
        self, run_tile, points, fields, tiles, key, n_trajectories, save_times, record,
        checkpoint, chunk_size, name, nonfinite, bar_options,
    ):  # fmt: skip
        super().__init__(
            n_trajectories=n_trajectories,
            tiles=[int(t) for t in tiles],
            checkpoint=checkpoint,
            # One device: a tile is one call on it (its shape fixed by the point alone).
            devices=jax.local_devices()[:1],
            process=process_layout(),
        )
        self.run_tile, self.points, self.fields = run_tile, list(points), dict(fields)
        self.key, self.chunk, self.name, self.nonfinite = key, chunk_size, name, nonfinite
        self.desc = f"attndyn {name}"
        self.bar_options = dict(bar_options or {})
        key_data = np.asarray(jax.random.key_data(key)).tolist()
        self.record = observations_record(
            record,
            self.points,
            self.fields,
            n_trajectories=n_trajectories,
            save_times=save_times,
            key_data=key_data,
            prng_impl=str(jax.random.key_impl(key)),
            process=self.process,
        )
        n_saves = len(save_times)
        self.tallies = Observations.empty(self.fields, len(self.points), n_trajectories, n_saves)
        self.open()

    def load(self, path: Path, block_sizes: np.ndarray) -> Observations:
        study = f"another {self.name} study"
        return load_observations(path, self.record, self.fields, block_sizes, study=study)

    def write(self, path: Path) -> None:
        write_observations(path, self.record, self.tallies, self.fields)

    def left(self) -> list[int]:
        """Per point, the trajectories this process still runs, whole tiles."""
        left = []
        for (start, stop), tile, done in zip(self.blocks, self.tiles, self.tallies.n_done):
            left.append(round_up(max(0, stop - start - int(done)), tile))
        return left

    def run_point(self, index: int, bar) -> None:
        """The tiles of point ``index`` that this process has not finished: its block
        ``[start, stop)`` in order, so a resumed run starts at ``start + n_done``."""
        start, stop = self.blocks[index]
        tile = self.tiles[index]
        chunk = round_up(self.chunk or tile, tile)
        key = point_key(self.key, self.points[index])
        first = start + int(self.tallies.n_done[index])
        for tile_start in range(first, stop, tile):
            count = min(tile, stop - tile_start)
            indices = jnp.arange(tile_start, tile_start + tile, dtype=jnp.uint32)
            keys = jax.vmap(lambda i, key=key: jax.random.fold_in(key, i))(indices)
            values, finite = self.run_tile(index, keys, count, bar)
            if self.alone and not np.all(np.asarray(finite)[:count]):
                # Stopped here, the tile left out: a rerun runs it again, and stops again.
                self.save()
                raise NonFiniteError(self.nonfinite_message(index))
            with interrupts.deferred():  # stored and counted whole
                self.tallies.add(index, tile_start, values, count, finite)
            bar.n = int(self.tallies.n_done.sum())  # exact, whatever the tile moved it by
            bar.refresh()
            if self.save_due() or (tile_start + count - first) % chunk == 0:
                self.save()

    def nonfinite_message(self, index: int) -> str:
        if self.nonfinite is not None:
            return self.nonfinite(index)
        return f"a trajectory at {dict(self.points[index])} became NaN or infinite."

    def combined(self) -> Observations:
        """Every process's rows (this process's own when it runs alone)."""
        if self.alone:
            return self.tallies
        own = self.tallies
        names = list(own.arrays)
        fields = gather_parts([*own.arrays.values(), own.n_done, own.n_nonfinite])
        parts = [
            Observations(
                dict(zip(names, arrays[: len(names)], strict=True)),
                arrays[len(names)],
                arrays[len(names) + 1],
                own.seconds,
                own.runs,
            )
            for arrays in fields
        ]
        count = self.process[1]
        blocks = [
            [process_block(self.n_trajectories, q, count, tile) for tile in self.tiles]
            for q in range(count)
        ]
        return combine_blocks(parts, blocks)

    def check_totals(self, observations: Observations) -> None:
        """With several processes, every process stops alike where a trajectory turned
        NaN or infinite (a process alone stopped as it went, and stored none)."""
        for index, bad in enumerate(observations.n_nonfinite):
            if bad:
                raise NonFiniteError(self.nonfinite_message(index))
