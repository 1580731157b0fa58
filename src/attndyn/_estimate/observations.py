"""What :func:`.observables.estimate_observables` keeps: every trajectory's observables at
every save, in its own row, and their checkpoint.

A trajectory's observables are written once, into the row of its index, by the process
that runs it; nothing is summed while the study runs. So the totals cannot depend on the
tile or chunk size, the device count or the process count: the processes' blocks are put
side by side once at the end (:func:`combine_blocks`), bit for bit, and a study's means
and standard errors are computed afterwards, from the rows in index order, whoever ran
them. Integer observables stay integers (their field's dtype); real ones are float64.

The checkpoint (netCDF, written atomically) holds the rows this process finished, its
``n_done`` per point (the first ``n_done`` trajectories of its block), the trajectories
that turned NaN or infinite, and the record of its study (:func:`observations_record`):
a run resumes only from a checkpoint of the same record, otherwise the first entry that
differs is named.
"""

import dataclasses
import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from .._core.errors import ParameterError
from .._io.files import atomic_write, uninterrupted
from .checkpoint import damaged, describe, mismatch, signature
from .dataset import package_version
from .keys import canonical

#: Version of the observations' checkpoint layout.
FORMAT = 1


@dataclasses.dataclass(frozen=True)
class Field:
    """One observable at one save of one trajectory: its dtype, its shape beyond (point,
    trajectory, time), the value of a row not yet run, and the names of its extra axes."""

    dtype: str
    shape: tuple[int, ...] = ()
    fill: float = 0
    dims: tuple[str, ...] = ()

    def __post_init__(self):
        if len(self.dims) not in (0, len(self.shape)):
            raise ParameterError(f"a field of shape {self.shape} names {len(self.dims)} axes.")

    def axes(self, name: str) -> tuple[str, ...]:
        extra = self.dims or tuple(f"{name}_{i}" for i in range(len(self.shape)))
        return ("point", "trajectory", "time", *extra)


@dataclasses.dataclass
class Observations:
    """Per point (P), trajectory (n) and save (S): each field's rows; per point, the
    trajectories finished (``n_done``, of this process's block) and those that turned NaN
    or infinite; ``seconds`` of simulation so far and ``runs``, where they ran."""

    arrays: dict[str, np.ndarray]
    n_done: np.ndarray  # (P,) int64
    n_nonfinite: np.ndarray  # (P,) int64
    seconds: float = 0.0
    runs: list[dict] = dataclasses.field(default_factory=list)

    @classmethod
    def empty(
        cls, fields: Mapping[str, Field], n_points: int, n_trajectories: int, n_saves: int
    ) -> "Observations":
        arrays = {
            name: np.full((n_points, n_trajectories, n_saves, *f.shape), f.fill, f.dtype)
            for name, f in fields.items()
        }
        zeros = np.zeros(n_points, np.int64)
        return cls(arrays, zeros, zeros.copy())

    def add(self, p: int, start: int, values: Mapping[str, np.ndarray], count: int, finite) -> None:
        """Store the first ``count`` rows of a tile (``values``: field → (tile, S, …),
        a trailing axis shorter than the field's fills its first entries) at trajectory
        ``start`` of point ``p``; ``finite``: (tile,), which of them stayed finite."""
        for name, target in self.arrays.items():
            rows = np.asarray(values[name])[:count]
            place = target[p, start : start + count]
            place[tuple(slice(0, k) for k in rows.shape)] = rows
        self.n_nonfinite[p] += int(count - np.count_nonzero(np.asarray(finite)[:count]))
        self.n_done[p] += count

    def checksum(self) -> str:
        digest = hashlib.sha256()
        for name in sorted(self.arrays):
            array = self.arrays[name]
            if np.issubdtype(array.dtype, np.floating):  # one NaN, whatever its payload
                array = np.where(np.isnan(array), np.nan, array)
            digest.update(np.ascontiguousarray(array).tobytes())
        for array in (self.n_done, self.n_nonfinite):
            digest.update(np.ascontiguousarray(array).tobytes())
        return digest.hexdigest()


def combine_blocks(
    parts: Sequence[Observations], blocks: Sequence[Sequence[tuple[int, int]]]
) -> Observations:
    """The processes' observations side by side: process q's rows ``blocks[q][p]`` of
    point p (its block), copied, never added; the counts summed."""
    first = parts[0]
    arrays = {name: array.copy() for name, array in first.arrays.items()}
    for part, spans in zip(parts[1:], blocks[1:], strict=True):
        for p, (start, stop) in enumerate(spans):
            for name, array in arrays.items():
                array[p, start:stop] = part.arrays[name][p, start:stop]
    n_done = np.sum([part.n_done for part in parts], axis=0)
    n_nonfinite = np.sum([part.n_nonfinite for part in parts], axis=0)
    return Observations(arrays, n_done, n_nonfinite, first.seconds, first.runs)


def observations_record(
    study: Mapping[str, Any],
    points: Sequence[Mapping[str, Any]],
    fields: Mapping[str, Field],
    *,
    n_trajectories: int,
    save_times: np.ndarray,
    key_data: list,
    prng_impl: str,
    process: tuple[int, int],
) -> dict[str, Any]:
    """Everything that determines the observations and this process's share of them:
    ``study``, the caller's own record (its model's arguments), and the estimator's."""
    return {
        "format": FORMAT,
        "attndyn_version": package_version(),
        "prng_impl": prng_impl,
        "key": key_data,
        "n_trajectories": n_trajectories,
        "save_times": np.asarray(save_times, np.float64).tolist(),
        "process": list(process),
        "fields": {name: describe(dataclasses.asdict(f)) for name, f in fields.items()},
        "points": [{k: describe(canonical(v)) for k, v in p.items()} for p in points],
        "study": describe(dict(study)),
    }


def write_observations(path: Path, record: dict[str, Any], obs: Observations, fields) -> None:
    """Write the observations atomically (a temporary file, flushed, then renamed)."""
    variables: dict[str, Any] = {
        name: (fields[name].axes(name), array) for name, array in obs.arrays.items()
    }
    variables["n_done"] = ("point", obs.n_done)
    variables["n_nonfinite"] = ("point", obs.n_nonfinite)
    text = json.dumps(record, sort_keys=True, separators=(",", ":"))
    variables["study"] = ("study_bytes", np.frombuffer(text.encode(), dtype=np.uint8))
    attrs = {
        "format": FORMAT,
        "signature": signature(record),
        "checksum": obs.checksum(),
        "seconds": obs.seconds,
        "runs": json.dumps(obs.runs),
    }
    ds = xr.Dataset(variables, attrs=attrs)
    atomic_write(path, lambda temporary: ds.to_netcdf(temporary))


def load_observations(
    path: Path,
    record: dict[str, Any],
    fields: Mapping[str, Field],
    block_sizes: np.ndarray,
    *,
    study: str,
) -> Observations:
    """The observations saved at ``path``, if they belong to the study with this
    ``record`` (``block_sizes[p]``: how many trajectories of point p this process runs;
    ``study``: how the refusal names a study of another record, e.g. "another modes
    study")."""
    try:
        ds = uninterrupted(lambda: _read(path))
    except Exception as error:  # netCDF/HDF5 raise many types for a truncated or foreign file
        raise damaged(path, f"{type(error).__name__}: {error}".strip()[:200]) from None
    if ds.attrs.get("format") != FORMAT or "study" not in ds:
        raise damaged(path, "it is not a checkpoint of observations of this attndyn version")
    if ds.attrs.get("signature") != signature(record):
        try:
            stored = json.loads(ds["study"].values.astype(np.uint8).tobytes().decode())
        except (ValueError, UnicodeDecodeError):
            raise damaged(path, "its study record is unreadable") from None
        raise ParameterError(mismatch(path, stored, record, study=study))
    try:
        obs = Observations(
            {name: np.asarray(ds[name].values, f.dtype) for name, f in fields.items()},
            np.asarray(ds["n_done"].values, np.int64),
            np.asarray(ds["n_nonfinite"].values, np.int64),
            float(ds.attrs.get("seconds", 0.0)),
            json.loads(ds.attrs.get("runs", "[]")),
        )
    except (KeyError, ValueError) as error:
        raise damaged(path, f"{type(error).__name__}: {error}"[:200]) from None
    if ds.attrs.get("checksum") != obs.checksum():
        raise damaged(path, "its observations do not match their checksum")
    if not np.all((obs.n_done >= 0) & (obs.n_done <= block_sizes)):
        raise damaged(path, "its counts are inconsistent")
    return obs


def _read(path: Path) -> xr.Dataset:
    with xr.open_dataset(path) as ds:
        return ds.load()
