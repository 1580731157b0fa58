"""Files that survive interruption and concurrent use: atomic writes, writable folders and
advisory locks.

- :func:`atomic_write` writes to a temporary name in the same folder, flushes it to disk
  and renames it over the target (``os.replace``, atomic on POSIX): a run killed at any
  moment leaves the previous file or the new one, never a partial one.
- :func:`writable_folder` creates a folder and proves that a file can be created in it,
  before any computation starts.
- :class:`Lock` is an exclusive ``flock`` on a small file holding the owner's pid. The
  kernel drops the lock when its process dies (even by ``kill -9``), so the lock of a dead
  run is taken over at once, while a live run's lock is refused with its pid.
"""

import contextlib
import datetime
import errno
import math
import os
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: pid files only
    fcntl = None

from .._core.errors import ParameterError

T = TypeVar("T")

#: One file operation at a time: netCDF and HDF5 are not thread-safe, and a Ctrl-C that
#: lands while a worker starts leaves that worker running beside the next call's.
_FILE_WORK = threading.Lock()


def uninterrupted(
    work: Callable[[], T], *, undo: Callable[[T], object] | None = None, serial: bool = True
) -> T:
    """``work()``, run in a worker thread that a Ctrl-C cannot stop midway: a
    ``KeyboardInterrupt`` that arrives meanwhile is held until the work is done, then
    raised. xarray and netCDF take process-wide locks around every file access; an
    interrupt between taking one and the ``try`` that releases it left it taken, and the
    next write in the same process (a notebook user resuming) waited on it for ever.
    Signals reach only the main thread, so the worker always finishes. ``undo(value)``
    runs before the held interrupt is raised (what the caller will never see, such as a
    lock taken, is given back); ``serial``: one such work at a time in the process."""
    outcome: dict[str, Any] = {}
    began, done = threading.Event(), threading.Event()

    def target() -> None:
        began.set()
        try:
            with _FILE_WORK if serial else contextlib.nullcontext():
                outcome["value"] = work()
        except BaseException as error:  # handed to the caller, whatever it is
            outcome["error"] = error
        finally:
            done.set()

    worker = threading.Thread(target=target, name="attndyn-file", daemon=True)
    interrupted = False
    try:
        worker.start()
    except KeyboardInterrupt:  # while start() waited for the thread to begin
        interrupted = True
    # A thread interrupted before it was even launched never begins: do not wait for it.
    deadline = time.monotonic() + 10.0
    while interrupted and not began.is_set() and time.monotonic() < deadline:
        _wait(began, 0.1)
    launched = began.is_set() or not interrupted
    while launched and not done.is_set():
        interrupted |= not _wait(done)
    if "error" in outcome:
        raise outcome["error"]
    if interrupted:
        if "value" in outcome and undo is not None:
            undo(outcome["value"])
        raise KeyboardInterrupt
    return outcome["value"]


def _wait(event: threading.Event, timeout: float | None = None) -> bool:
    """``event.wait(timeout)``, but False (rather than raising) on a Ctrl-C meanwhile."""
    try:
        return event.wait(timeout)
    except KeyboardInterrupt:
        return False


class StorageError(OSError):
    """Writing a file failed for a reason of the machine, not of the arguments: a full
    disk (netCDF reports it as "NetCDF: HDF error"), an I/O error. The message names the
    file, what the library said and the free space left."""


def storage_error(path: Path, error: BaseException) -> StorageError:
    """:class:`StorageError` for a failed write of ``path`` (``error``: what the writer
    raised), with the free space of its file system; its errno is the writer's, else
    ENOSPC when under 1 MiB is free, else EIO."""
    free = free_bytes(path.parent)
    code = getattr(error, "errno", None)
    if not isinstance(code, int):
        code = errno.ENOSPC if free is not None and free < 2**20 else errno.EIO
    left = "" if free is None else f"; {_size(free)} free on its file system"
    text = " ".join(str(error).split()) or type(error).__name__
    return StorageError(code, f"writing {path.name} failed ({text}{left})", str(path))


def free_bytes(folder: Path) -> int | None:
    """Bytes this user may still write on ``folder``'s file system (None if unknown)."""
    try:
        stats = os.statvfs(folder)
    except (OSError, AttributeError):
        return None
    return stats.f_bavail * stats.f_frsize


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} bytes"
    exponent = min(3, int(math.log(n, 1024)))
    return f"{n / 1024**exponent:.1f} {('KiB', 'MiB', 'GiB')[exponent - 1]}"


def write_temporary(path: Path, write: Callable[[Path], None]) -> Path:
    """Call ``write(temporary)`` for a new file next to ``path``, flush it to disk and give
    it the mode ``path`` would have; returns the temporary file (removed on failure).
    netCDF's errors (a full disk is "NetCDF: HDF error") become :class:`StorageError`."""
    path = Path(path)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent)
    os.close(fd)
    temporary = Path(name)
    try:
        try:
            write(temporary)
            with open(temporary, "rb+") as handle:
                os.fsync(handle.fileno())
        except OSError as error:
            if isinstance(error, StorageError):
                raise
            raise storage_error(path, error) from None
        except RuntimeError as error:  # netCDF4 raises RuntimeError for HDF5's failures
            raise storage_error(path, error) from None
        os.chmod(temporary, _file_mode(path))
    except BaseException:
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise
    return temporary


def replace_all(pairs: Sequence[tuple[Path, Path]]) -> None:
    """Rename each temporary file over its target (``(temporary, target)`` pairs), then
    make the renames durable. Every file was written before: nothing here needs space."""
    for temporary, target in pairs:
        os.replace(temporary, target)
    for folder in {Path(target).parent for _, target in pairs}:
        _sync_folder(folder)


def atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    """Call ``write(temporary)`` for a file next to ``path``, then rename it over ``path``;
    in a worker that a Ctrl-C cannot stop midway (:func:`uninterrupted`)."""

    def work() -> None:
        replace_all([(write_temporary(path, write), Path(path))])

    uninterrupted(work)


def _file_mode(path: Path) -> int:
    """The mode the file would have if opened plainly: the old file's, else 0o666 less the
    umask (a temporary file is created private, 0o600)."""
    try:
        return os.stat(path).st_mode & 0o7777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def _sync_folder(folder: Path) -> None:
    """Make a rename durable (best effort: not every platform can open a folder)."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def writable_folder(folder: Path, what: str) -> bool:
    """Create ``folder`` if needed and check that files can be created in it; returns whether
    it was created here. Raises :class:`ParameterError` naming ``what`` otherwise (a file,
    a read-only place, a name too long for the file system)."""
    folder = Path(folder)
    try:
        if folder.exists() and not folder.is_dir():
            raise ParameterError(f"{what} {str(folder)!r} is a file, not a folder; give a folder.")
        created = not folder.exists()
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as error:
        reason = error.strerror or type(error).__name__
        raise ParameterError(
            f"{what} {_shown(folder)} is not a writable folder ({reason}); give a folder "
            "this user can write to."
        ) from None
    return created


def _shown(path: Path) -> str:
    """A path as an error message shows it: quoted, its middle cut when very long."""
    text = str(path)
    return repr(text if len(text) <= 120 else f"{text[:60]}…{text[-40:]}")


class LockBusy(ParameterError):
    """Another live process holds the lock; ``holder`` says who (pid, host, since when)."""

    def __init__(self, path: Path, holder: str):
        super().__init__(f"{path} is locked by {holder}")
        self.path = path
        self.holder = holder


class Lock:
    """An exclusive lock on ``path`` for the life of this object (or until :meth:`release`).

    The lock file holds ``pid host start-time``. With ``flock`` (POSIX) the kernel releases
    the lock when the holder dies, so a stale file is taken over; where ``flock`` is not
    supported the pid is checked instead (same host only).
    """

    def __init__(self, path: Path):
        self.path = Path(path)
        self.fd: int | None = None
        # In a worker: a Ctrl-C between creating the file and returning its descriptor
        # would leave the file behind, held by nobody.
        self.fd = uninterrupted(self._acquire, undo=self._abandon, serial=False)

    def _acquire(self) -> int:
        fd = None
        while fd is None:
            fd = self._try_acquire()
        return fd

    def _abandon(self, fd: int) -> None:
        self.fd = fd
        self.release()

    def _try_acquire(self) -> int | None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        state = "busy"
        try:
            state = _flock(fd)
            if state == "busy" or (state == "unsupported" and _pid_alive(_read(fd))):
                state = "busy"
                raise LockBusy(self.path, _describe(_read(fd)))
            # A finishing holder unlinks the file after we opened it: lock the new one.
            if not _same_file(fd, self.path):
                os.close(fd)
                return None
            stamp = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()} {socket.gethostname()} {stamp}\n".encode(), 0)
            return fd
        except BaseException:
            if state != "busy":  # ours (a Ctrl-C midway): leave no file behind
                with contextlib.suppress(OSError):
                    self.path.unlink()
            os.close(fd)
            raise

    def release(self) -> None:
        if self.fd is None:
            return
        with contextlib.suppress(OSError):
            self.path.unlink()
        os.close(self.fd)
        self.fd = None

    def __enter__(self) -> "Lock":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def _flock(fd: int) -> str:
    """Take the flock without waiting: ``"locked"``, ``"busy"`` (a live process holds it)
    or ``"unsupported"`` (this platform or file system has no flock: check the pid)."""
    if fcntl is None:
        return "unsupported"
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return "busy"
    except OSError as error:
        if error.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
            return "unsupported"
        raise
    return "locked"


def _read(fd: int) -> str:
    return os.pread(fd, 512, 0).decode(errors="replace").strip()


def _same_file(fd: int, path: Path) -> bool:
    try:
        return os.stat(path).st_ino == os.fstat(fd).st_ino
    except FileNotFoundError:
        return False


def _pid_alive(holder: str) -> bool:
    """Whether the pid in a lock file is a live process (True when unsure: another host)."""
    parts = holder.split()
    if len(parts) < 2 or not parts[0].isdigit():
        return False
    if parts[1] != socket.gethostname():
        return True
    try:
        os.kill(int(parts[0]), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _describe(holder: str) -> str:
    parts = holder.split()
    if len(parts) >= 3 and parts[0].isdigit():
        return f"another attndyn run (pid {parts[0]} on {parts[1]}, since {parts[2]})"
    return "another attndyn run"
