"""Seed 003 Fig. 4: the hybrid model's (β, ε) phase diagram, with the exact t = ∞ answer.

Discrete eq. 7 with bounded (Rademacher) v_n, or the SDE eq. 8 with --engine sde (run, for
two tokens, as the exact overlap diffusion); N = 2, d = 3, L = 100, uniform starts.
Unnormalised attention by default (Prop. 1 is stated for it: ε_c(β) = √(2e^{−β})); with
--attention softmax the band 1 + e^{−2β} < ε² < 2 where both ends attract appears.
Reduced: a 9 x 8 grid, 200 trajectories, T = 20. --full: the paper's grid, β ∈ [0, 4]
step 0.25, ε ∈ [0.05, 2] step 0.05, 1,000 trajectories, T = 50.

Writes figures/fig4_beta_eps_<engine>_<attention>[_full].{png,json}: three panels (the
most likely class and its probability, P(unclustered), and P(antipodal) against the exact
value; cells whose layer step exceeds 0.1 crossed), and per cell the probabilities with
Wilson intervals. --replot redraws the figure from the JSON alone (no simulation).
"""

import json
import time
import warnings

import numpy as np
import xarray as xr
from _common import FIGURES, parser

import attndyn as ad


def grid(full: bool):
    if full:
        return np.arange(0, 4.01, 0.25), np.arange(0.05, 2.001, 0.05), 1000, 50.0
    return np.linspace(0, 4, 9), np.linspace(0.25, 2, 8), 200, 20.0


def cells(ds) -> list[dict]:
    last = ds.isel(time=-1)
    rows = []
    for i in range(ds.sizes["point"]):
        r = last.isel(point=i)
        row: dict = {k: float(r[k]) for k in ("beta", "eps")}
        for o in ("single", "antipodal", "unclustered"):
            p = r.sel(outcome=o)
            row[o] = [float(p["probability"]), float(p["ci_lower"]), float(p["ci_upper"])]
        row["p_antipodal_exact"] = float(r["p_antipodal_exact"])
        row["n_merged"] = int(r["n_merged"])
        rows.append(row)
    return rows


def from_cells(record: dict) -> xr.Dataset:
    """The last-time dataset of a written JSON record, as plot.beta_eps draws it: the
    cells' probabilities and Wilson bounds (two tokens: has_antipodal_pair is antipodal),
    and, for the discrete engine, the layer step's far_from_limit flag."""
    prov, rows = record["provenance"], record["cells"]
    outcomes = ("single", "antipodal", "has_antipodal_pair", "unclustered")
    values = np.array(
        [[row["antipodal" if o == "has_antipodal_pair" else o] for o in outcomes] for row in rows]
    )  # (point, outcome, [p, lower, upper])
    dims3 = ("point", "time", "outcome")
    data: dict[str, tuple] = {
        name: (dims3, values[None, :, :, k].transpose(1, 0, 2))
        for k, name in enumerate(("probability", "ci_lower", "ci_upper"))
    }
    data["n_valid"] = ("point", np.full(len(rows), record["trajectories"]))
    if prov["engine"] == "discrete":
        steps = [
            ad.theory.hybrid_layer_step(r["beta"], r["eps"], prov["depth"], prov["attention"])
            for r in rows
        ]
        data["far_from_limit"] = ("point", (np.asarray(steps) > 0.1).astype(np.int8))
    ds = xr.Dataset(
        data,
        coords={
            "time": [record["horizon"]],
            "outcome": list(outcomes),
            "dim": ("point", np.full(len(rows), 3)),
            "n_tokens": ("point", np.full(len(rows), 2)),
            "eps": ("point", [r["eps"] for r in rows]),
            "beta": ("point", [r["beta"] for r in rows]),
        },
    )
    ds.attrs.update(provenance=json.dumps(prov, default=str), attention=prov["attention"])
    return ds


def main():
    p = parser(__doc__)
    p.add_argument("--attention", default="unnormalized", choices=("unnormalized", "softmax"))
    p.add_argument(
        "--replot", action="store_true", help="redraw the figure from its JSON (no simulation)"
    )
    args = p.parse_args()
    stem = f"fig4_beta_eps_{args.engine}_{args.attention}" + ("_full" if args.full else "")
    if args.replot:
        record = json.loads((FIGURES / f"{stem}.json").read_text())
        ad.plot.beta_eps(from_cells(record)).savefig(FIGURES / f"{stem}.png", dpi=120)
        return
    betas, epss, n, horizon = grid(args.full)
    points = ad.studies.phase_points(
        "beta-eps",
        betas=[round(float(b), 4) for b in betas],
        dims=[3],
        n_tokens=[2],
        eps=[round(float(e), 4) for e in epss],
    )
    spec = ad.studies.ModelSpec(
        noise="scalar", engine=args.engine, attention=args.attention, depth=100, horizon=horizon
    )
    mc = ad.studies.MonteCarlo(n_trajectories=n, seed=args.seed)
    started = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the coarse-step warning: that is the point here
        ds = ad.studies.phase_diagram_study("beta-eps", spec, mc, points, progress=True)
    seconds = time.perf_counter() - started
    FIGURES.mkdir(exist_ok=True)
    ad.plot.beta_eps(ds).savefig(FIGURES / f"{stem}.png", dpi=120)
    record = {
        "seconds": seconds,
        "points": len(points),
        "trajectories": n,
        "horizon": horizon,
        "provenance": ad.provenance(ds),
        "cells": cells(ds),
    }
    (FIGURES / f"{stem}.json").write_text(json.dumps(record, indent=1, default=str))
    print(f"{len(points)} points x {n} trajectories in {seconds:.0f} s -> {stem}.png")


if __name__ == "__main__":
    main()
