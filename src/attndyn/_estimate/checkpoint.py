"""Resumable tallies: a netCDF file tied to one study by a record of everything that
determines its numbers.

The *study record* (:func:`study_record`) lists the grid, every field of every point's
model (array leaves by value, or by SHA-256 when large; static fields as they are), the
routes, the early-absorption bound, the trajectory count, the PRNG key and implementation,
``tol``, ``radius``, the save times, this process's place among the processes and the
package version; the chunk size is not in it, because it never changes the numbers. The
checkpoint stores the record and its hash; a run resumes only from a checkpoint whose hash
is its own, and otherwise the first differing entry is named.

Progress is counted by trajectory index: ``n_done[p]`` trajectories of point ``p`` are
finished, and they are the first ``n_done[p]`` indices of this process's block (see
:func:`attndyn._io.distributed.process_block`), whatever chunk size ran them. A run
resumes at the next index, with any chunk size, and never counts a trajectory twice.
"""

import dataclasses
import hashlib
import json
import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import xarray as xr

from .._core.errors import ParameterError
from .._core.observables import OUTCOMES
from .._io.files import atomic_write, uninterrupted
from .dataset import coordinates, package_version
from .keys import canonical
from .plan import Plan
from .tallies import SUM_UNITS, Tallies

#: Version of the checkpoint layout (1: attndyn ≤ 0.2.0, a hash of fewer fields; 2: attndyn
#: ≤ 0.4.0, the means' sums as float64, read and converted; 3: every tally an integer).
FORMAT = 3
#: Older layouts this version reads.
READABLE = (2, FORMAT)
#: Arrays with at most this many entries (scalars, short vectors) are recorded by value, so a
#: mismatch shows them; larger ones by SHA-256.
SMALL_ARRAY = 8

HOW_TO_START_AFRESH = (
    "To start afresh, delete the file (the CLI's --fresh does) or choose another "
    "checkpoint path (CLI: another --out)."
)


def describe(value: Any) -> Any:
    """A JSON description of a model (or any field of one) that changes whenever its
    numbers can: modules by class and fields, arrays by dtype, shape and value (or hash),
    functions by qualified name. Nothing in it depends on memory addresses."""
    if isinstance(value, eqx.Module) or dataclasses.is_dataclass(value):
        kind = type(value)
        fields = {f.name: describe(getattr(value, f.name, None)) for f in dataclasses.fields(value)}
        return {"class": f"{kind.__module__}.{kind.__qualname__}", **fields}
    if isinstance(value, jax.Array) and jnp.issubdtype(value.dtype, jax.dtypes.prng_key):
        return {"prng_key": describe(jax.random.key_data(value))}
    if isinstance(value, jax.Array | np.ndarray | np.generic):
        return _describe_array(np.asarray(value))
    if isinstance(value, tuple | list):
        return [describe(v) for v in value]
    if isinstance(value, dict):
        return {str(k): describe(v) for k, v in value.items()}
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return _number(value)
    if callable(value) and hasattr(value, "__qualname__"):
        return f"{getattr(value, '__module__', '')}.{value.__qualname__}"
    return re.sub(r" at 0x[0-9a-fA-F]+", "", repr(value))


def _describe_array(array: np.ndarray) -> Any:
    record: dict[str, Any] = {"dtype": str(array.dtype), "shape": list(array.shape)}
    if array.size <= SMALL_ARRAY:
        values = array.ravel().tolist()
        record["value"] = [
            v if not isinstance(v, float) or math.isfinite(v) else repr(v) for v in values
        ]
    else:
        record["sha256"] = hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()
    return record


def study_record(
    plan: Plan, key_data: list, prng_impl: str, process: tuple[int, int]
) -> dict[str, Any]:
    """Everything that determines the numbers of a study and this process's share of them."""
    return {
        "format": FORMAT,
        "attndyn_version": package_version(),
        "prng_impl": prng_impl,
        "key": key_data,
        "n_trajectories": plan.n_trajectories,
        "tol": plan.tol,
        "radius": plan.radius,
        "early_absorption": plan.absorption_bound,
        "save_times": plan.save_times.tolist(),
        "process": list(process),
        "x64": plan.x64,
        # "auto" tallies float64 reruns of merged trajectories; the other choices tally
        # the arithmetic as it ran and share their checkpoints (on_merged decides only
        # how the dataset reads them).
        "merges": "auto" if plan.on_merged == "auto" else "as computed",
        # What is tallied (pair densities, span dimensions and merges joined in 0.2).
        "tallies": list(Tallies.FIELDS),
        "points": [
            {
                "point": {k: describe(canonical(v)) for k, v in p.point.items()},
                "route": p.route,
                "model": describe(p.user_model),
            }
            for p in plan.points
        ],
    }


def _number(value: Any) -> Any:
    """JSON has no NaN or infinity: those become their repr."""
    return value if not isinstance(value, float) or math.isfinite(value) else repr(value)


def signature(record: dict[str, Any]) -> str:
    """The SHA-256 of the record's canonical JSON."""
    return hashlib.sha256(_json(record).encode()).hexdigest()


def _json(record: Any) -> str:
    return json.dumps(record, sort_keys=True, separators=(",", ":"))


def write_checkpoint(
    path: Path,
    record: dict[str, Any],
    tallies: Tallies,
    points: Sequence[dict[str, Any]],
    save_times,
) -> None:
    """Write the tallies atomically (a temporary file, flushed, then renamed)."""
    dims = {"counts": ("point", "time", "outcome"), "n_valid": ("point",)}
    dims.update(merged_counts=("point", "time", "outcome"))
    dims.update(n_nonfinite=("point",), n_done=("point",))
    dims.update(n_rerun=("point",), n_unbounded=("point",), n_nonfinite_rerun=("point",))
    study = np.frombuffer(_json(record).encode(), dtype=np.uint8)
    ds = xr.Dataset(
        {
            **{
                name: (dims.get(name, ("point", "time")), getattr(tallies, name))
                for name in Tallies.FIELDS
            },
            "study": ("study_bytes", study),
        },
        coords={"time": save_times, "outcome": list(OUTCOMES), **coordinates(points)},
        attrs={
            "format": FORMAT,
            "signature": signature(record),
            "checksum": _checksum(tallies),
            "seconds": tallies.seconds,
            "runs": json.dumps(tallies.runs),
        },
    )
    atomic_write(path, lambda temporary: ds.to_netcdf(temporary))


def _checksum(tallies: Tallies) -> str:
    digest = hashlib.sha256()
    for array in tallies.arrays():
        digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()


def damaged(path: Path, reason: str) -> ParameterError:
    return ParameterError(
        f"checkpoint {str(path)!r} is damaged or is not an attndyn checkpoint ({reason}). "
        + HOW_TO_START_AFRESH
    )


def load_checkpoint(path: Path, record: dict[str, Any], block_sizes: np.ndarray) -> Tallies:
    """The tallies saved at ``path``, if they belong to the study with this ``record``
    (``block_sizes[p]``: how many trajectories of point p this process runs)."""
    try:
        # Read in a worker a Ctrl-C cannot stop midway (xarray's locks stay consistent).
        ds = uninterrupted(lambda: _read(path))
    except Exception as error:  # netCDF/HDF5 raise many types for a truncated or foreign file
        raise damaged(path, f"{type(error).__name__}: {error}".strip()[:200]) from None
    if ds.attrs.get("format") not in READABLE:
        raise ParameterError(
            f"checkpoint {str(path)!r} was written by another attndyn version (checkpoint "
            f"format {ds.attrs.get('format', 1)}, this version writes {FORMAT}). "
            + HOW_TO_START_AFRESH
        )
    if "study" not in ds:
        raise damaged(path, "its variable 'study', the record of its study, is missing")
    if ds.attrs.get("signature") != signature(record):
        raise ParameterError(mismatch(path, _stored_record(path, ds), record))
    tallies = _tallies(path, ds)
    _check_consistent(path, tallies, record, block_sizes)
    return tallies


def _read(path: Path) -> xr.Dataset:
    with xr.open_dataset(path) as ds:
        return ds.load()


def _stored_record(path: Path, ds: xr.Dataset) -> dict[str, Any]:
    try:
        return json.loads(ds["study"].values.astype(np.uint8).tobytes().decode())
    except (ValueError, UnicodeDecodeError):
        raise damaged(path, "its study record is unreadable") from None


def _tallies(path: Path, ds: xr.Dataset) -> Tallies:
    try:
        fields = {name: ds[name].values for name in Tallies.FIELDS}
    except KeyError as error:
        raise damaged(path, f"variable {error} is missing") from None
    stored = Tallies(**fields, seconds=float(ds.attrs.get("seconds", 0.0)), runs=_runs(path, ds))
    if ds.attrs.get("checksum") != _checksum(stored):
        raise damaged(path, "its tallies do not match their checksum")
    return _as_integers(stored)


def _runs(path: Path, ds: xr.Dataset) -> list[dict]:
    """The runs that made the checkpoint (none recorded before 0.4.8)."""
    try:
        runs = json.loads(ds.attrs.get("runs", "[]"))
    except ValueError:
        raise damaged(path, "its record of runs is unreadable") from None
    if not isinstance(runs, list):
        raise damaged(path, "its record of runs is not a list")
    return runs


def _as_integers(stored: Tallies) -> Tallies:
    """Format 2 kept the means' sums as float64 multiples of their unit (exact below 2²¹
    trajectories per point): back to the integers they are."""
    fields = {}
    for name in Tallies.FIELDS:
        array = np.asarray(getattr(stored, name))
        if np.issubdtype(array.dtype, np.floating):
            array = np.rint(array * SUM_UNITS[name])
        fields[name] = array.astype(np.int64)
    return Tallies(**fields, seconds=stored.seconds, runs=stored.runs)


def _check_consistent(path: Path, t: Tallies, record: dict[str, Any], block_sizes) -> None:
    n_points, n_saves = len(record["points"]), len(record["save_times"])
    if t.counts.shape != (n_points, n_saves, len(OUTCOMES)) or t.n_done.shape != (n_points,):
        raise damaged(path, "its tallies have the wrong shape")
    ok = (
        np.all((t.n_done >= 0) & (t.n_done <= block_sizes))
        and np.all(t.n_valid + t.n_nonfinite == t.n_done)
        and np.all((t.counts >= 0) & (t.counts <= t.n_valid[:, None, None]))
    )
    if not ok:
        raise damaged(path, "its counts are inconsistent")


def mismatch(path: Path, stored: Any, current: Any, *, study: str = "a different study") -> str:
    """Why the checkpoint at ``path`` (of record ``stored``) is not this run's
    (``current``): its first differing entry, named (``study``: how to name a study of
    another record)."""
    where, old, new = _first_difference(stored, current, [])
    if where == ["points"]:
        what = f"the grid has {_count(len(old), 'point')} there and {len(new)} in this run"
    else:
        shown = _show(old), _show(new)
        if shown[0] == shown[1] and _is_array(old) and _is_array(new):
            # Equal values of other types (a float64 run's β against a float32 one's).
            shown = tuple(f"{s} ({v['dtype']})" for s, v in zip(shown, (old, new)))
        what = f"{_name(where, current)} is {shown[0]} there and {shown[1]} in this run"
    return f"checkpoint {str(path)!r} belongs to {study}: {what}. " + HOW_TO_START_AFRESH


_mismatch = mismatch  # its earlier name


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _is_array(value: Any) -> bool:
    return isinstance(value, dict) and "dtype" in value and "shape" in value


def _first_difference(a: Any, b: Any, where: list) -> tuple[list, Any, Any]:
    """The path to the first entry where two records differ, and the two entries."""
    if isinstance(a, dict) and isinstance(b, dict) and not (_is_array(a) and _is_array(b)):
        # Plain entries (x64, tol, the key, ...) before nested ones: a change of x64 also
        # changes the dtype of every parameter inside points, and x64 is what the user set.
        def plain_first(key):
            return isinstance(a.get(key), dict | list), key

        shared = sorted(set(a) & set(b), key=plain_first)
        for key in [*shared, *sorted(set(a) ^ set(b))]:
            x, y = a.get(key, "<absent>"), b.get(key, "<absent>")
            if x != y:
                return _first_difference(x, y, [*where, key])
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            if x != y:
                return _first_difference(x, y, [*where, i])
    return where, a, b


def _name(where: list, record: dict[str, Any]) -> str:
    """``points[3].model.values.sigma`` as "the model's values.sigma at point {...}"."""
    if len(where) >= 2 and where[0] == "points" and isinstance(where[1], int):
        point = record["points"][where[1]]["point"]
        rest = [str(w) for w in where[2:]]
        if rest and rest[0] == "model":
            return f"the model's {'.'.join(rest[1:]) or 'class'} at point {point}"
        return f"{'.'.join(rest) or 'the point'} at point {point}"
    names = {
        "key": "the PRNG key (seed)",
        "prng_impl": "the PRNG implementation",
        "x64": "the precision, x64 (CLI: --x64),",
        "merges": "the treatment of merged tokens, on_merged (CLI: --on-merged),",
    }
    if where and where[0] in names:
        return names[where[0]]
    return ".".join(str(w) for w in where) or "the study"


def _show(value: Any) -> str:
    if _is_array(value) and "value" in value:
        value = value["value"][0] if value["shape"] == [] else value["value"]
    elif _is_array(value):
        shape = "×".join(map(str, value["shape"]))
        return f"a {shape} array (SHA-256 {value.get('sha256', '?')[:12]}…)"
    text = json.dumps(value)
    return text if len(text) <= 80 else text[:77] + "…"
