"""Resumable tallies: a netCDF file tied to one study by a signature of its arguments."""

import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from .._core.errors import ParameterError
from .._core.observables import OUTCOMES
from .dataset import coordinates
from .keys import canonical
from .plan import Plan
from .tallies import Tallies


def signature(plan: Plan, key_data: list, process: tuple[int, int]) -> str:
    """A hash of everything that determines the numbers of a study (and this process's
    share of them): a checkpoint of any other study is refused."""
    record = {
        "points": [{k: canonical(v) for k, v in p.point.items()} for p in plan.points],
        "n_trajectories": plan.n_trajectories,
        "tol": plan.tol,
        "radius": plan.radius,
        "key": key_data,
        "save_times": plan.save_times.tolist(),
        "models": [repr(p.user_model) for p in plan.points],
        "routes": plan.routes,
        "early_absorption": plan.absorption_bound,
        "process": list(process),
        # Version 2 also tallies pair densities and span dimensions.
        "tallies_format": 2,
    }
    return hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()


def write_checkpoint(
    path: Path, signature: str, tallies: Tallies, points: Sequence[dict[str, Any]], save_times
) -> None:
    """Write the tallies atomically (a partial file, then a rename)."""
    dims = {"counts": ("point", "time", "outcome"), "n_valid": ("point",)}
    dims.update(n_nonfinite=("point",), n_done=("point",))
    ds = xr.Dataset(
        {
            name: (dims.get(name, ("point", "time")), getattr(tallies, name))
            for name in Tallies.FIELDS
        },
        coords={"time": save_times, "outcome": list(OUTCOMES), **coordinates(points)},
        attrs={"signature": signature, "seconds": tallies.seconds},
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    ds.to_netcdf(partial)
    os.replace(partial, path)


def load_checkpoint(path: Path, signature: str) -> Tallies:
    """The tallies saved at ``path``, if they belong to the study with this signature."""
    with xr.open_dataset(path) as ds:
        if ds.attrs.get("signature") != signature:
            raise ParameterError(
                f"checkpoint {str(path)!r} belongs to a different run (other parameters, "
                "seed or model); delete it or choose another checkpoint path."
            )
        integers = ("counts", "n_valid", "n_nonfinite", "n_done")
        fields = {
            name: ds[name].values.astype(np.int64) if name in integers else ds[name].values
            for name in Tallies.FIELDS
        }
        return Tallies(**fields, seconds=float(ds.attrs.get("seconds", 0.0)))
