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
- Every file is written to a temporary name, flushed and renamed over the target, so an
  interrupted write leaves the previous file intact (and its temporary file, which the
  next run into the folder removes).
"""

import contextlib
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import click
import xarray as xr

from .._core.errors import ParameterError
from .._core.serialize import plain
from .._estimate.files import Lock, LockBusy, atomic_write, writable_folder

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
        "started",
        # The compilation cache changes how long a run takes, never its numbers.
        "cache",
        "cache_dir",
    }
)


def result_arguments(options: dict[str, Any]) -> dict[str, Any]:
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
    ):
        self.folder = Path(path)
        self.dataset = self.folder / dataset
        self.arguments = arguments
        self.writer = writer
        self.lock: Lock | None = None
        self.created = False
        self.wrote = False
        if not writer:
            return
        self.created = writable_folder(self.folder, "--out")
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
        except BaseException:
            self.close()
            raise
        self._remove_temporaries([dataset, *figures, Path(dataset).stem + ".checkpoint.nc"])

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

    def write(self, name: str, write: Callable[[Path], None]) -> Path:
        """Write ``name`` in the folder atomically with ``write(temporary_path)``."""
        path = self.folder / name
        atomic_write(path, write)
        self.wrote = True
        return path

    def close(self) -> None:
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


def _recorded_arguments(path: Path) -> dict[str, Any] | None:
    """The arguments recorded in a finished dataset (None when unreadable or absent)."""
    try:
        with xr.open_dataset(path) as ds:
            return json.loads(ds.attrs["provenance"]).get("arguments")
    except Exception:  # a damaged or foreign file: its arguments are unknown
        return None


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
