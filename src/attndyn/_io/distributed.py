"""Several hosts: which trajectories each process runs, and the exact combination.

Every process runs the same study with the same arguments. The trajectories of a point are
cut into ``P`` contiguous blocks; process ``p`` of ``P`` runs block
``[⌊p·n/P⌋, ⌊(p+1)·n/P⌋)`` (:func:`process_block`) in chunks, on all of its local devices.
The blocks do not depend on the chunk size, so a process that resumes from its checkpoint
with another chunk size still runs exactly the indices it has not run. Because trajectory
i's randomness is ``fold_in(fold_in(key, point_id), i)`` whoever runs it, the union over
processes is exactly the single-process run. At the end each process's tallies (integer counts and
fixed-point cosine sums) are gathered and added in process order, once: every process
holds the same, exact totals.

Start a study on several hosts with :func:`initialize_distributed` (or the ``attndyn`` flags
``--coordinator HOST:PORT --process-count P --process-id p``, or the environment variables
``ATTNDYN_COORDINATOR``, ``ATTNDYN_PROCESS_COUNT``, ``ATTNDYN_PROCESS_ID``), then call the
estimator as usual on every process. Each process waits a bounded time for the coordinator
and its peers (``--coordinator-timeout``, ``ATTNDYN_COORDINATOR_TIMEOUT``; 120 s), then
stops with one line naming the coordinator.
"""

import dataclasses
import errno
import math
import os
import socket
import sys
import threading
import time
from collections.abc import Sequence

import jax
import numpy as np

from .._core import defaults
from .._core.errors import DistributedError, ParameterError, check_int

ENV_COORDINATOR = "ATTNDYN_COORDINATOR"
ENV_PROCESS_COUNT = "ATTNDYN_PROCESS_COUNT"
ENV_PROCESS_ID = "ATTNDYN_PROCESS_ID"
ENV_COORDINATOR_TIMEOUT = "ATTNDYN_COORDINATOR_TIMEOUT"
#: JAX's own limit is set this many seconds past ours: past it, JAX ends the process
#: with a C++ abort and a stack trace (status 134) rather than an exception.
_JAX_GRACE = 60
#: Seconds between two attempts to reach the coordinator.
_RETRY = 0.5


def initialize_distributed(
    coordinator: str | None = None,
    process_count: int | None = None,
    process_id: int | None = None,
    initialization_timeout: int | None = None,
    *,
    progress: bool = False,
) -> bool:
    """Join a multi-process run through ``jax.distributed`` (arguments or environment).

    Returns whether a multi-process run was set up (False when no coordinator is given
    anywhere, i.e. a plain single-process run). Must run before any other JAX call.

    Every process waits at most ``initialization_timeout`` seconds (default 120;
    ``ATTNDYN_COORDINATOR_TIMEOUT``; CLI: ``--coordinator-timeout``) for the coordinator
    and all ``process_count`` processes; ``progress=True`` says so in one line on stderr.
    A process other than 0 that cannot reach the coordinator in that time, and a process
    0 whose port is taken, raise :class:`DistributedError`. A process that reached the
    coordinator but whose peers did not all join in time cannot be stopped by an
    exception (JAX would abort it a little later): it writes one line ``Error: …`` on
    stderr and ends with status 1.
    """
    join = _join_request(coordinator, process_count, process_id, initialization_timeout)
    if join is None:
        return False
    if progress:
        print(join.waiting(), file=sys.stderr, flush=True)
    deadline = time.monotonic() + join.timeout
    if join.process_id == 0:
        _check_port_free(join)
    else:
        _wait_for_coordinator(join, deadline)
    # CPU collectives (used to gather the tallies) need an implementation; harmless on GPU.
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    _connect(join, max(1, math.ceil(deadline - time.monotonic())))
    return True


@dataclasses.dataclass(frozen=True)
class _Join:
    """A checked request to join a multi-process run, and its messages."""

    coordinator: str
    process_count: int
    process_id: int
    timeout: int

    @property
    def address(self) -> tuple[str, int]:
        host, _, port = self.coordinator.rpartition(":")
        return host.strip("[]"), int(port)

    def waiting(self) -> str:
        return (
            f"waiting up to {self.timeout} s for the coordinator at {self.coordinator} and "
            f"all {self.process_count} processes to join (this is process {self.process_id})…"
        )

    def unreachable(self, reason: str) -> str:
        host, port = self.address
        return (
            f"no coordinator answered at {self.coordinator} within {self.timeout} s "
            f"({reason}); check that process 0 runs with the same coordinator and "
            f"process count {self.process_count}, that {host} is its address and port {port} "
            "is open to this host, or wait longer (initialization_timeout; CLI: "
            "--coordinator-timeout)."
        )

    def not_joined(self) -> str:
        return (
            f"not all {self.process_count} processes joined the coordinator at "
            f"{self.coordinator} within {self.timeout} s (this is process {self.process_id}; "
            f"JAX does not say which are missing); start every process 0-{self.process_count - 1} "
            "with the same coordinator and process count, or wait longer "
            "(initialization_timeout; CLI: --coordinator-timeout)."
        )


def _join_request(
    coordinator: str | None,
    process_count: int | None,
    process_id: int | None,
    timeout: int | None,
) -> _Join | None:
    """The checked arguments, each read from its environment variable when not given;
    None for a single-process run (no coordinator anywhere)."""
    coordinator = coordinator or _environment(ENV_COORDINATOR, "HOST:PORT")
    if process_count is None:
        process_count = _environment_int(ENV_PROCESS_COUNT, "an integer ≥ 1")
    if process_id is None:
        process_id = _environment_int(ENV_PROCESS_ID, "an integer ≥ 0")
    if timeout is None:
        timeout = _environment_int(ENV_COORDINATOR_TIMEOUT, "a number of seconds ≥ 1")
    if coordinator is None:
        _refuse_without_coordinator(
            process_count=process_count, process_id=process_id, initialization_timeout=timeout
        )
        return None
    check_coordinator(coordinator)
    if process_count is None or process_id is None:
        raise ParameterError("a coordinator needs both process_count and process_id.")
    check_int("process_count", process_count, lower=1)
    check_int("process_id", process_id, lower=0)
    if process_id >= process_count:
        raise ParameterError(
            f"process_id={process_id} must be below process_count={process_count}."
        )
    if timeout is None:
        timeout = defaults.COORDINATOR_TIMEOUT
    elif isinstance(timeout, bool) or not isinstance(timeout, int | np.integer) or timeout < 1:
        raise ParameterError(
            f"initialization_timeout={timeout!r} must be a whole number of seconds ≥ 1 "
            "(CLI: --coordinator-timeout)."
        )
    return _Join(str(coordinator), int(process_count), int(process_id), int(timeout))


def _refuse_without_coordinator(**given: int | None) -> None:
    """Refuse multi-host settings given without a coordinator (they would be ignored)."""
    for name, value in given.items():
        if value is not None:
            cli = " (CLI: --coordinator-timeout)" if name == "initialization_timeout" else ""
            raise ParameterError(
                f"{name}={value}{cli} needs a coordinator address (HOST:PORT; CLI: "
                f"--coordinator, or {ENV_COORDINATOR})."
            )


def _check_port_free(join: _Join) -> None:
    """Process 0 serves the coordinator on every address at its port; a port it could not
    open (one already in use, say) crashed JAX with a segmentation fault in gRPC. Refused
    here, by binding the port briefly as gRPC will (SO_REUSEADDR: closed connections do
    not count)."""
    if os.environ.get("JAX_COORDINATOR_BIND_ADDRESS"):
        return  # JAX serves elsewhere than the coordinator's port
    _, port = join.address
    for family, anywhere in ((socket.AF_INET6, "::"), (socket.AF_INET, "0.0.0.0")):
        try:
            with socket.socket(family, socket.SOCK_STREAM) as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                probe.bind((anywhere, port))
            return
        except OSError as error:
            if error.errno in (errno.EAFNOSUPPORT, errno.EADDRNOTAVAIL):
                continue  # no IPv6 on this host: try IPv4
            raise DistributedError(
                f"process 0 cannot serve the coordinator at {join.coordinator}: port {port} "
                f"of this host cannot be opened ({error.strerror or error}); free it (an "
                "earlier run?) or give every process another port."
            ) from None


def _wait_for_coordinator(join: _Join, deadline: float) -> None:
    """Try to open a connection to the coordinator until it answers or ``deadline``
    passes (then :class:`DistributedError`, naming the last reason)."""
    reason = "no answer"
    while (left := deadline - time.monotonic()) > 0:
        try:
            with socket.create_connection(join.address, timeout=min(left, 5.0)):
                return
        except OSError as error:
            reason = error.strerror or str(error) or type(error).__name__
        time.sleep(max(0.0, min(_RETRY, deadline - time.monotonic())))
    raise DistributedError(join.unreachable(reason))


def _connect(join: _Join, seconds: int) -> None:
    """``jax.distributed.initialize``, given ``seconds`` to return. JAX waits in C++ until
    every process has joined and aborts the process if they do not in its own time, so a
    watchdog ends the process first, in one line (:func:`_give_up`)."""
    done = threading.Event()
    watchdog = threading.Thread(
        target=_give_up, args=(done, seconds, join.not_joined()), daemon=True
    )
    watchdog.start()
    try:
        jax.distributed.initialize(
            coordinator_address=join.coordinator,
            num_processes=join.process_count,
            process_id=join.process_id,
            initialization_timeout=seconds + _JAX_GRACE,
        )
    except RuntimeError as error:  # JaxRuntimeError is one
        first = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise DistributedError(
            f"joining the coordinator at {join.coordinator} failed: {first}"
        ) from None
    finally:
        done.set()


def _give_up(done: threading.Event, seconds: float, message: str) -> None:
    """Unless ``done`` is set within ``seconds``, write ``Error: message`` on stderr and
    end the process with status 1 (the main thread is blocked inside JAX)."""
    if done.wait(seconds):
        return
    sys.stdout.flush()
    sys.stderr.write(f"Error: {message}\n")
    sys.stderr.flush()
    os._exit(1)


def _environment(name: str, allowed: str) -> str | None:
    """The value of the environment variable ``name`` (None when unset); a set but blank
    one (``ATTNDYN_PROCESS_COUNT= attndyn …``) is refused, naming what it must hold."""
    text = os.environ.get(name)
    if text is not None and not text.strip():
        raise ParameterError(
            f"{name} is set but empty; set it to {allowed} (CLI: --{_flag(name)}), or unset it."
        )
    return text


def _environment_int(name: str, allowed: str) -> int | None:
    text = _environment(name, allowed)
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        raise ParameterError(
            f"{name}={text!r} is not an integer; set it to {allowed} (CLI: --{_flag(name)}), "
            "or unset it."
        ) from None


def _flag(name: str) -> str:
    """``ATTNDYN_PROCESS_COUNT`` → ``process-count``: the CLI option of the variable."""
    return name.removeprefix("ATTNDYN_").lower().replace("_", "-")


def check_coordinator(coordinator: str) -> None:
    """``HOST:PORT`` with a port in 1-65535 (a bare host failed inside JAX with an
    IndexError)."""
    host, _, port = str(coordinator).rpartition(":")
    if not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ParameterError(
            f"coordinator={coordinator!r} must be HOST:PORT with a port in 1-65535, e.g. "
            "localhost:12345."
        )


def process_layout() -> tuple[int, int]:
    """(process index, process count) of this run."""
    return jax.process_index(), jax.process_count()


def process_block(
    n_trajectories: int, process_index: int, process_count: int, tile: int = 1
) -> tuple[int, int]:
    """The trajectory indices ``[start, stop)`` of a point that this process runs: the
    p-th of P contiguous blocks of (nearly) equal numbers of tiles, whatever the chunk
    size. Blocks start on multiples of ``tile`` (see :func:`.runner.tile_size`), so each
    trajectory runs at the same place of the same tile for any process count."""
    check_int("n_trajectories", n_trajectories, lower=1)
    check_int("process_count", process_count, lower=1)
    if not 0 <= process_index < process_count:
        raise ParameterError(f"process_index={process_index} must be in [0, {process_count}).")
    n_tiles = -(-n_trajectories // tile)
    start = min(process_index * n_tiles // process_count * tile, n_trajectories)
    stop = min((process_index + 1) * n_tiles // process_count * tile, n_trajectories)
    return start, stop


def combine_tallies(parts: Sequence[Sequence[np.ndarray]]) -> list[np.ndarray]:
    """Add the per-process tallies field by field, in process order (exact for integers and
    fixed-point sums)."""
    if not parts:
        raise ParameterError("no tallies to combine.")
    return [np.sum(np.stack(field), axis=0) for field in zip(*parts)]


def gather_tallies(fields: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Every process's tallies, combined exactly once (identity for a single process)."""
    if jax.process_count() == 1:
        return [np.asarray(f) for f in fields]
    return combine_tallies(gather_parts(fields))


def gather_parts(fields: Sequence[np.ndarray]) -> list[list[np.ndarray]]:
    """Every process's ``fields``, by process (``[fields]`` for a single process), bit
    for bit: every process receives the same."""
    if jax.process_count() == 1:
        return [[np.asarray(f) for f in fields]]
    from jax.experimental import multihost_utils

    gathered = [_gather_exactly(multihost_utils.process_allgather, f) for f in fields]
    return [[g[p] for g in gathered] for p in range(jax.process_count())]


def _gather_exactly(allgather, field: np.ndarray) -> np.ndarray:
    """``allgather(field)`` stacked by process, bit for bit. Without x64, JAX carries int64
    as int32 and float64 as float32 (2⁴⁰ + 1 came back as 1): the field travels as its
    uint32 words, which JAX keeps, and is read back in its own type."""
    field = np.ascontiguousarray(field)
    if field.dtype.itemsize % 4:
        return np.asarray(allgather(field))
    words = np.asarray(allgather(field.reshape(-1).view(np.uint32)), np.uint32)
    return np.ascontiguousarray(words).view(field.dtype).reshape(len(words), *field.shape)
