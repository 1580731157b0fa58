"""The ``--out`` folder of one command: checked, locked and guarded before any computation,
and written atomically after it.

- The folder must be (or become) a writable folder: refused up front otherwise.
- One run at a time: the writer holds ``OUT/.attndyn.lock`` (an ``flock`` with its pid)
  while it runs; a second run into the same folder is refused with that pid. The lock of
  a run that died (even by ``kill -9``) is released by the kernel and taken over.
- Finished results are never replaced by a run with other arguments: each dataset records
  the arguments that made it (``provenance["arguments"]``), and a run whose arguments
  differ is refused, naming the file and the first differing option, unless it is given
  ``--overwrite``. A rerun with the same arguments replaces its own results.
- A study's outputs replace the old ones together or not at all: every file is first
  written to a temporary name beside its target and flushed (:meth:`Output.stage`), and
  only once all of them are written are they renamed into place, one rename after the
  other (:meth:`Output.commit`). A write that fails (a full disk, an I/O error) or is
  interrupted leaves the previous files as they were, and its temporary files are
  removed (or, after a ``kill -9``, removed by the next run into the folder).
- Before anything is computed: a folder (or anything but a file) where an output, the
  checkpoint or the lock goes is refused (status 2), and so is a file system with less
  free space than the outputs need (status 1).
"""

import contextlib
import errno
import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import click
import xarray as xr

from .._core.errors import ParameterError
from .._core.serialize import plain
from .._io import interrupts
from .._io.files import (
    Lock,
    LockBusy,
    StorageError,
    free_bytes,
    replace_all,
    uninterrupted,
    writable_folder,
    write_temporary,
)

LOCK_NAME = ".attndyn.lock"
#: Options that never change the numbers: left out of the recorded arguments.
RUN_OPTIONS = frozenset(
    {
        "out",
        "as_json",
        "no_progress",
        "fresh",
        "overwrite",
        "chunk_size",
        "coordinator",
        "process_count",
        "process_id",
        # How long process 0 waits for the others: never the numbers.
        "coordinator_timeout",
        # The compilation cache changes how long a run takes, never its numbers.
        "cache",
        "cache_dir",
    }
)


def result_arguments(options: Mapping[str, Any]) -> dict[str, Any]:
    """The options that determine a command's results, as plain JSON values."""
    return {k: plain(v) for k, v in sorted(options.items()) if k not in RUN_OPTIONS}


class Output:
    """The output folder of one run (a context manager: the lock is held inside it).

    Args:
        path: the ``--out`` value.
        dataset: the dataset's file name (e.g. ``phase_diagram.nc``).
        figures: the figures' file names.
        arguments: :func:`result_arguments` of this run.
        overwrite: replace results of other arguments.
        writer: False on the processes of a multi-process run that write nothing: they
            neither create, check nor lock the folder.
        needs: bytes the outputs and the checkpoint will take (an estimate): a file system
            with less free space is refused before anything is computed.
    """

    def __init__(
        self,
        path: str,
        *,
        dataset: str,
        figures: Sequence[str],
        arguments: dict[str, Any],
        overwrite: bool,
        writer: bool = True,
        needs: int = 0,
    ):
        self.folder = Path(path)
        self.dataset = self.folder / dataset
        self.arguments = arguments
        self.writer = writer
        self.lock: Lock | None = None
        self.created = False
        self.wrote = False
        self.staged: list[tuple[Path, Path]] = []
        if not writer:
            return
        self.created = writable_folder(self.folder, "--out")
        checkpoint = Path(dataset).stem + ".checkpoint.nc"
        for name in (dataset, *figures, checkpoint, checkpoint + ".lock", LOCK_NAME):
            _check_target(self.folder / name)
        try:
            self.lock = Lock(self.folder / LOCK_NAME)
        except LockBusy as busy:
            raise ParameterError(
                f"--out {str(self.folder)!r} is in use by {busy.holder}; wait for it to finish "
                "or choose another --out."
            ) from None
        try:
            if not overwrite:
                self._check_results(figures)
            self._remove_temporaries([dataset, *figures, checkpoint])
            _check_space(self.folder, needs)
        except BaseException:
            self.close()
            raise

    def _remove_temporaries(self, names: Sequence[str]) -> None:
        """Half-written temporary files of a run that was killed while writing one of
        ``names`` (the folder is ours now: no live run is writing them)."""
        for path in self.folder.glob(".*.partial"):
            if any(path.name.startswith(f".{name}.") for name in names):
                with contextlib.suppress(OSError):
                    path.unlink()

    def _check_results(self, figures: Sequence[str]) -> None:
        """Refuse to replace finished results that other arguments made."""
        if self.dataset.exists():
            theirs = _recorded_arguments(self.dataset)
            if theirs != self.arguments:
                raise ParameterError(
                    f"--out {str(self.folder)!r} already holds {self.dataset.name}, made "
                    f"{_difference(theirs, self.arguments)}; choose another --out, or pass "
                    "--overwrite to replace it."
                )
            return
        for name in figures:
            if (self.folder / name).exists():
                raise ParameterError(
                    f"--out {str(self.folder)!r} already holds {name} from another run (its "
                    f"dataset {self.dataset.name} is missing); choose another --out, or pass "
                    "--overwrite to replace it."
                )

    def stage(self, name: str, write: Callable[[Path], None]) -> Path:
        """Write ``name``'s new content to a temporary file beside it with
        ``write(temporary_path)`` (in a worker a Ctrl-C cannot stop midway); it replaces
        ``name`` at :meth:`commit`, with every other staged file. Returns the final path."""
        interrupts.check()
        path = self.folder / name
        # A Ctrl-C during the write is raised once it is done, before its temporary file
        # is staged: ``undo`` removes it then (it was left behind until the next run).
        temporary = uninterrupted(lambda: write_temporary(path, write), undo=_remove)
        self.staged.append((temporary, path))
        return path

    def commit(self) -> None:
        """Rename every staged file into place (all were written: this needs no space)."""
        interrupts.check()
        staged, self.staged = self.staged, []
        uninterrupted(lambda: replace_all(staged))
        self.wrote = True

    def close(self) -> None:
        for temporary, _ in self.staged:  # not committed: the old outputs stay as they were
            with contextlib.suppress(OSError):
                temporary.unlink()
        self.staged = []
        if self.lock is not None:
            self.lock.release()
            self.lock = None
        if self.created and not self.wrote:
            with contextlib.suppress(OSError):
                self.folder.rmdir()  # only if still empty: nothing of ours is left there

    def __enter__(self) -> "Output":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _remove(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink()


def _check_target(path: Path) -> None:
    """Refuse a folder (or anything but a plain file) where an output file goes: the run
    would compute everything and then fail to write it, every time."""
    try:
        if path.is_symlink() or not path.exists() or path.is_file():
            return
    except OSError as error:  # e.g. a name too long for the file system
        raise ParameterError(
            f"--out: {path.name!r} cannot be written there ({error.strerror}); choose "
            "another --out."
        ) from None
    kind = "a folder" if path.is_dir() else "not a plain file"
    raise ParameterError(
        f"--out {str(path.parent)!r} holds {path.name!r}, which is {kind}, where this run "
        "writes a file; move it away, or choose another --out."
    )


def _check_space(folder: Path, needs: int) -> None:
    """Refuse (status 1: the machine) a file system with less free space than ``needs``."""
    free = free_bytes(folder)
    if free is not None and free < needs:
        raise StorageError(
            errno.ENOSPC,
            f"--out {str(folder)!r} is on a file system with {free / 2**10:.0f} KiB free, and "
            f"this run's outputs and checkpoint need about {needs / 2**10:.0f} KiB; free some "
            "space or choose another --out (nothing was computed)",
            str(folder),
        )


def _recorded_arguments(path: Path) -> dict[str, Any] | None:
    """The arguments recorded in a finished dataset (None when unreadable or absent)."""

    def read():
        with xr.open_dataset(path) as ds:
            return json.loads(ds.attrs["provenance"]).get("arguments")

    try:
        recorded = uninterrupted(read)
    except Exception:  # a damaged or foreign file: its arguments are unknown
        return None
    return _in_todays_names(recorded) if isinstance(recorded, dict) else recorded


def _in_todays_names(recorded: dict[str, Any]) -> dict[str, Any]:
    """Arguments recorded by attndyn 0.4 under the flags 0.5 renamed, in today's names (a
    rerun of the same command then replaces its own results, as before)."""
    from .._core.renamed import DEPRECATED_FLAGS

    out = dict(recorded)
    for old, (new, convert) in DEPRECATED_FLAGS.items():
        if old in out and new not in out:
            out[new] = convert(out.pop(old))
    return out


def _difference(theirs: dict[str, Any] | None, ours: dict[str, Any]) -> str:
    """How the arguments of a finished dataset differ from this run's, as options."""
    if theirs is None:
        return "by a run whose arguments cannot be read (another attndyn version, or damaged)"
    for name in sorted(set(theirs) | set(ours)):
        if theirs.get(name) != ours.get(name):
            option = _option_name(name)
            return (
                f"with {option} {_show(theirs.get(name))} (this run: {option} "
                f"{_show(ours.get(name))})"
            )
    return "with other arguments"


def _option_name(name: str) -> str:
    context = click.get_current_context(silent=True)
    if context is not None:
        for param in context.command.params:
            if param.name == name and param.opts:
                return param.opts[0]
    return "--" + name.replace("_", "-")


def _show(value: Any) -> str:
    if value is None:
        return "(unset)"
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)
