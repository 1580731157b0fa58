"""The loop every study runs on: its points one after another, this process's block of
each point's trajectories in tiles, a checkpoint written as it goes (locked while the
study runs), a progress bar, and Ctrl-C.

:class:`Study` is that loop; what a tile computes and what is kept of it (the class
tallies of :func:`attndyn.estimate_probabilities`, the per-trajectory observables of
:func:`attndyn._estimate.observables.estimate_observables`) is a subclass's. The state it
keeps (``tallies``) has ``n_done`` (per point: trajectories finished, the first ones of
this process's block, :func:`.distributed.process_block`), ``seconds`` and ``runs``.

With several processes (``jax.distributed``) each runs its block of every point; a
subclass combines the blocks once at the end (:meth:`Study.combined`), exactly.
"""

import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jax
import numpy as np
from tqdm.auto import tqdm

from .._core.errors import ParameterError
from .._io import interrupts
from .._io.distributed import process_block, process_layout
from .._io.files import Lock, LockBusy
from .._io.runtime import compile_seconds
from .cost import resuming
from .held_warnings import release_warnings

#: Seconds between checkpoint writes within a point (one is always written after each point).
CHECKPOINT_EVERY = 20.0


class Study:
    """The running state of one study: devices, this process's blocks, its tallies and
    the checkpoint (locked while the study runs). A subclass sets ``tallies`` (its
    empty tallies, before :meth:`open`) and provides :meth:`load`, :meth:`write`,
    :meth:`run_point` and :meth:`point_done`."""

    tallies: Any

    def __init__(
        self,
        *,
        n_trajectories: int,
        tiles: list[int],
        checkpoint: Path | None,
        devices: list,
        process: tuple[int, int] | None = None,
    ):
        self.checkpoint = checkpoint
        self.devices = devices
        # (index, count) of this process: the caller's, or jax's.
        self.process = process_layout() if process is None else process
        self.tiles = tiles
        self.blocks = [process_block(n_trajectories, *self.process, tile) for tile in tiles]
        self.n_trajectories = n_trajectories
        # The progress bar's label and its further tqdm options.
        self.desc = "attndyn"
        self.bar_options: dict[str, Any] = {}
        self.lock: Lock | None = None
        self.bar_shown = False

    def open(self) -> None:
        """Lock the checkpoint and resume from it (a subclass's :meth:`load`)."""
        self.lock = self._lock()
        try:
            if self.checkpoint is not None and self.checkpoint.exists():
                sizes = np.asarray([stop - start for start, stop in self.blocks])
                self.tallies = self.load(self.checkpoint, sizes)
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

    def load(self, path: Path, block_sizes: np.ndarray) -> Any:
        raise NotImplementedError

    def write(self, path: Path) -> None:
        raise NotImplementedError

    def run_point(self, index: int, bar) -> None:
        raise NotImplementedError

    def point_done(self, index: int) -> None:
        """After point ``index`` ran and was saved (a subclass's checks)."""

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

    def __enter__(self) -> "Study":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def alone(self) -> bool:
        """Whether this is the only process. With several, each sees only its own
        trajectories: a check that raised in one process alone would leave the others
        waiting for it at the gather, so the checks wait for the totals, and every
        process raises alike."""
        return self.process[1] == 1

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
            self.write(self.checkpoint)
            self.last_save = time.perf_counter()

    def save_due(self) -> bool:
        return time.perf_counter() - self.last_save > CHECKPOINT_EVERY

    def run(self, progress: bool) -> None:
        """Every point's unfinished trajectories of this process, a checkpoint after each
        point (and within one every :data:`CHECKPOINT_EVERY` seconds); a Ctrl-C writes
        the checkpoint, then stops the run."""
        release_warnings()
        bar = tqdm(
            total=len(self.blocks) * self.n_trajectories,
            initial=int(self.tallies.n_done.sum()),
            unit="traj",
            desc=self.desc,
            file=sys.stderr,
            disable=not progress,
            dynamic_ncols=True,
            **self.bar_options,
        )
        if self.done_before and self.checkpoint is not None and progress:
            bar.write(resuming(self.checkpoint, self.done_before, int(bar.total)), sys.stderr)
        self.bar_shown = progress
        try:
            with interrupts.watching():
                for index in range(len(self.blocks)):
                    self.run_point(index, bar)
                    self.save()
                    self.point_done(index)
                # An interrupt Python swallowed (in a garbage-collection callback) during
                # the last block still stops the run.
                interrupts.check()
        except KeyboardInterrupt:
            # The work waited for is whole in the tallies; the checkpoint keeps it.
            self.save()
            raise
        finally:
            bar.close()
        self.stamp()
