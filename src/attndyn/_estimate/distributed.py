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

Start a study on several hosts with :func:`initialize` (or the ``attndyn`` flags
``--coordinator HOST:PORT --process-count P --process-id p``, or the environment variables
``ATTNDYN_COORDINATOR``, ``ATTNDYN_PROCESS_COUNT``, ``ATTNDYN_PROCESS_ID``), then call the
estimator as usual on every process.
"""

import os
from collections.abc import Sequence

import jax
import numpy as np

from .._core.errors import ParameterError, check_int

ENV_COORDINATOR = "ATTNDYN_COORDINATOR"
ENV_PROCESS_COUNT = "ATTNDYN_PROCESS_COUNT"
ENV_PROCESS_ID = "ATTNDYN_PROCESS_ID"


def initialize_distributed(
    coordinator: str | None = None,
    process_count: int | None = None,
    process_id: int | None = None,
) -> bool:
    """Join a multi-process run through ``jax.distributed`` (arguments or environment).

    Returns whether a multi-process run was set up (False when no coordinator is given
    anywhere, i.e. a plain single-process run). Must run before any other JAX call.
    """
    coordinator = coordinator or _environment(ENV_COORDINATOR, "HOST:PORT")
    if process_count is None:
        process_count = _environment_int(ENV_PROCESS_COUNT, "an integer ≥ 1")
    if process_id is None:
        process_id = _environment_int(ENV_PROCESS_ID, "an integer ≥ 0")
    if coordinator is None:
        if process_count is not None or process_id is not None:
            given = "process_count" if process_count is not None else "process_id"
            raise ParameterError(
                f"{given}={process_count if given == 'process_count' else process_id} needs "
                f"a coordinator address (HOST:PORT; CLI: --coordinator, or {ENV_COORDINATOR})."
            )
        return False
    check_coordinator(coordinator)
    if process_count is None or process_id is None:
        raise ParameterError("a coordinator needs both process_count and process_id.")
    check_int("process_count", process_count, lower=1)
    check_int("process_id", process_id, lower=0)
    if process_id >= process_count:
        raise ParameterError(
            f"process_id={process_id} must be below process_count={process_count}."
        )
    # CPU collectives (used to gather the tallies) need an implementation; harmless on GPU.
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address=coordinator, num_processes=process_count, process_id=process_id
    )
    return True


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
    from jax.experimental import multihost_utils

    gathered = [_gather_exactly(multihost_utils.process_allgather, f) for f in fields]
    parts = [[g[p] for g in gathered] for p in range(jax.process_count())]
    return combine_tallies(parts)


def _gather_exactly(allgather, field: np.ndarray) -> np.ndarray:
    """``allgather(field)`` stacked by process, bit for bit. Without x64, JAX carries int64
    as int32 and float64 as float32 (2⁴⁰ + 1 came back as 1): the field travels as its
    uint32 words, which JAX keeps, and is read back in its own type."""
    field = np.ascontiguousarray(field)
    if field.dtype.itemsize % 4:
        return np.asarray(allgather(field))
    words = np.asarray(allgather(field.reshape(-1).view(np.uint32)), np.uint32)
    return np.ascontiguousarray(words).view(field.dtype).reshape(len(words), *field.shape)
