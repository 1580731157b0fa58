"""JSON summaries of results datasets (what ``--json`` prints)."""

from typing import Any

import numpy as np
import xarray as xr

from .._core.observables import OUTCOMES
from .._core.serialize import plain


def _coordinate(value: Any) -> Any:
    """A coordinate value for JSON: strings unquoted, non-finite floats as null."""
    if isinstance(value, str):
        return value.strip('"')
    return plain(value)


def json_points(ds: xr.Dataset) -> list[dict[str, Any]]:
    """One JSON record per grid point, at the last save time."""
    last = ds.isel(time=-1)
    records = []
    for i in range(ds.sizes["point"]):
        row = last.isel(point=i)

        def p(outcome, row=row):
            return plain(float(row["probability"].sel(outcome=outcome)))

        record = {
            name: _coordinate(row[name].item())
            for name in ("model", "beta", "dim", "n_tokens", "eps", "sigma")
            if name in row.coords
        }
        simulated = int(row["n_valid"]) + int(row["n_nonfinite"])
        record.update(
            n_trajectories=simulated,
            trajectories=simulated,  # 0.4's key, kept through 0.5 (scripts may read it)
            n_valid=int(row["n_valid"]),
            n_nonfinite=int(row["n_nonfinite"]),
            n_merged=int(row["n_merged"]) if "n_merged" in row else 0,
            # The denominators: n_valid, less n_merged with --on-merged exclude.
            n_counted=int(row["n_counted"]) if "n_counted" in row else int(row["n_valid"]),
            p_single=p("single"),
            p_antipodal=p("antipodal"),
            p_unclustered=p("unclustered"),
            ci_antipodal=[
                plain(float(row["ci_lower"].sel(outcome="antipodal"))),
                plain(float(row["ci_upper"].sel(outcome="antipodal"))),
            ],
        )
        if "n_rerun" in row and int(row["n_rerun"]):
            record["n_rerun"] = int(row["n_rerun"])  # rerun in float64 (on_merged auto)
        if record["n_merged"] and "merge_ci_lower" in row:
            # However the merged trajectories' classes were fixed (the dataset's
            # merge_ci_lower/upper), and the bound on those in a wrong class where known.
            if "merge_bound" in row:
                record["merge_bound"] = plain(float(row["merge_bound"]))
            record["merge_ci_antipodal"] = [
                plain(float(row["merge_ci_lower"].sel(outcome="antipodal"))),
                plain(float(row["merge_ci_upper"].sel(outcome="antipodal"))),
            ]
        if int(row["n_tokens"].item()) > 2:
            record["p_has_antipodal_pair"] = p("has_antipodal_pair")
        for name in ("p_antipodal_exact", "p_antipodal_pair_three_tokens"):
            if name in row and np.isfinite(float(row[name])):
                record[name] = float(row[name])
        if "sphere_drift" in row:
            record["sphere_drift"] = plain(float(row["sphere_drift"]))
        records.append(record)
    return records


def series(ds: xr.Dataset) -> list[dict[str, Any]]:
    """Per point: the save times, each outcome's fraction at every time, and the means of
    the pair density and span dimension (with standard errors) at every time."""
    out = []
    for i in range(ds.sizes["point"]):
        row = ds.isel(point=i)
        record = {
            k: _coordinate(row[k].item())
            for k in ("model", "beta", "dim", "n_tokens", "eps")
            if k in row.coords
        }
        record["time"] = [float(t) for t in ds["time"].values]
        for outcome in OUTCOMES:
            probs = row["probability"].sel(outcome=outcome).values
            record[f"p_{outcome}"] = [plain(float(v)) for v in probs]
        for name in ("mean_cosine", "pair_density", "span_dim"):
            if name in row:
                record[name] = [plain(float(v)) for v in row[name].values]
                record[f"{name}_se"] = [plain(float(v)) for v in row[f"{name}_se"].values]
        out.append(record)
    return out
