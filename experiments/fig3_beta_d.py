"""Seed 003, Fig. 3: P(antipodal) for two tokens against β, for several d.

The model is eq. 4 (Post-LN with Gaussian value matrices, σ = 1, softmax attention,
Q = K = I), two tokens started uniformly on the sphere, tolerance 10⁻³. The figure draws
the Monte Carlo fractions with Wilson 95 % bands, the exact t = ∞ probability from the
scale function and β_c(d) = ½ arccosh(d − 2).

Default (reduced, 3.3 min of CPU, 5 min on the shared 2-core CPU): d ∈ {4, 6, 8, 10},
β ∈ {0, 0.25, …, 4}, 4,000 trajectories a point (10× fewer), L = 250, T = 100 (25,000
layers, half the paper's). The depth is chosen from the layer map's bias, which falls like
1/L (−0.39/L at d = 10, β = 2; −0.23/L at d = 10, β = 1.5: ``depth_horizon_bias.py``):
at L = 250 it is about half a standard error of 4,000 trajectories or less where measured
(0.52 SE at d = 10, β = 1.5), where at L = 50 it was 2.1 SE there and 1.8 SE at d = 10,
β = 2 (docs/results.md). From T = 100 on the horizon no longer pulls those points low.
The paper's parameters are ``--full``: d ∈ {4, …, 10}, β ∈ {0, 0.25, …, 4}, 40,000
trajectories, L = 100, T = 500 (50,000 layers) — 2.4·10¹¹ trajectory-steps. Both run on the
exact-in-law two-token chain with early absorption at both ends (a trajectory stops once
its class can change later with probability ≤ 10⁻⁷, and a chunk's cost follows the
trajectories still moving), on every CPU core.

    python experiments/fig3_beta_d.py [--full] [--depth L] [--horizon T] [--out PATH] [--redraw]

The figure defaults to figures/fig3_beta_d.png, or figures/fig3_beta_d_full.png with --full;
the dataset is written beside it as .nc (not committed).
"""

import argparse
import json
import math
from pathlib import Path

import jax
import numpy as np
import xarray as xr

import attndyn as ad

REDUCED = {
    "dims": [4, 6, 8, 10],
    "betas": np.arange(0, 4.01, 0.25),
    "n": 4000,
    "L": 250,
    "T": 100.0,
}
FULL = {
    "dims": list(range(4, 11)),
    "betas": np.arange(0, 4.01, 0.25),
    "n": 40000,
    "L": 100,
    "T": 500.0,
}


def model(*, beta, dim, n_tokens, depth, horizon):
    del dim, n_tokens
    return ad.DiscreteTransformer(
        ad.Attention(beta), ad.MatrixValues(1.0), depth=depth, saveat=ad.SaveAt(horizon)
    )


#: The model's fields as the studies record them: figures draw seed 003's exact curves
#: only for a dataset whose provenance names Post-LN (attndyn.plot, since issue 42 item 8).
MODEL_FIELDS = {
    "scheme": "post-ln",
    "engine": "discrete",
    "attention": "softmax",
    "values": "gaussian",
    "sigma": 1.0,
}


def parse() -> tuple[argparse.Namespace, dict]:
    parser = argparse.ArgumentParser(description="Seed 003 Fig. 3: P(antipodal) against β.")
    parser.add_argument("--full", action="store_true", help="the paper's parameters")
    parser.add_argument(
        "--out",
        default=None,
        help="figure path (default figures/fig3_beta_d.png, or fig3_beta_d_full.png with --full)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--depth", type=int, default=None, help="layers per unit time L (overrides the scale's)"
    )
    parser.add_argument(
        "--horizon", type=float, default=None, help="horizon T (overrides the scale's)"
    )
    parser.add_argument(
        "--redraw",
        action="store_true",
        help="no simulation: draw the figure again from the dataset a run wrote beside it (.nc)",
    )
    args = parser.parse_args()
    cfg = dict(FULL if args.full else REDUCED)
    if args.depth is not None:
        if args.depth < 1:
            parser.error(f"--depth {args.depth}: L must be a whole number >= 1")
        cfg["L"] = args.depth
    if args.horizon is not None:
        if not (math.isfinite(args.horizon) and args.horizon > 0):
            parser.error(f"--horizon {args.horizon}: T must be a finite number > 0")
        cfg["T"] = args.horizon
    return args, cfg


def simulate(args, cfg: dict, out: Path):
    points = ad.grid(dim=cfg["dims"], n_tokens=[2], beta=[float(b) for b in cfg["betas"]])
    ds = ad.estimate_probabilities(
        lambda **p: model(**p, depth=cfg["L"], horizon=cfg["T"]),
        points,
        key=jax.random.key(args.seed),
        n_trajectories=cfg["n"],
        checkpoint=out.with_suffix(".checkpoint.nc"),
        early_absorption=True,
        metadata={
            "experiment": "seed 003 Fig. 3",
            "scale": "full" if args.full else "reduced",
            "depth": cfg["L"],
            "horizon": cfg["T"],
            "seed": args.seed,
            **MODEL_FIELDS,
        },
    )
    ds.to_netcdf(out.with_suffix(".nc"))
    out.with_suffix(".checkpoint.nc").unlink(missing_ok=True)
    return ds


def reread(out: Path):
    """The dataset a run wrote beside ``out``, its provenance completed with the model's
    fields (a dataset written before they were recorded lacks them)."""
    ds = xr.load_dataset(out.with_suffix(".nc"))
    record = json.loads(ds.attrs.get("provenance", "{}"))
    ds.attrs["provenance"] = json.dumps({**MODEL_FIELDS, **record})
    return ds


def draw(ds, out: Path, full: bool) -> None:
    record = ad.provenance(ds)
    n, depth, horizon = record["n_trajectories"], record["depth"], record["horizon"]
    fig = ad.plot.phase_diagram(ds)
    scale = "paper scale" if full else "reduced scale"
    fig.suptitle(
        f"Seed 003 Fig. 3 ({scale}: {n} trajectories, L = {depth}, T = {horizon:g})",
        fontsize=10,
    )
    fig.savefig(out, dpi=130)


def summary(ds, out: Path) -> dict:
    """The fractions against the exact t = ∞ probability: the largest deviation in standard
    errors (of the exact binomial; 1/n where the exact value is 0 or 1), the share within
    2 SE and the mean deviation over the points with 0 < p < 1."""
    last = ds.isel(time=-1).sel(outcome="antipodal")
    n = ad.provenance(ds)["n_trajectories"]
    z = []
    for i in range(ds.sizes["point"]):
        exact = ad.theory.p_antipodal_uniform(float(last["beta"][i]), int(last["dim"][i]))
        se = max(np.sqrt(exact * (1 - exact) / n), 1 / n)
        z.append(((float(last["probability"][i]) - exact) / se, 0 < exact < 1))
    inner = np.array([v for v, inside in z if inside])
    return {
        "figure": str(out),
        "points": ds.sizes["point"],
        "max_abs_z_vs_exact": round(max(abs(v) for v, _ in z), 2),
        "points_0_lt_p_lt_1": len(inner),
        "within_2_se": round(float(np.mean(np.abs(inner) <= 2)), 3),
        "mean_z": round(float(inner.mean()), 2),
        "below": int((inner < 0).sum()),
        "seconds": ad.provenance(ds)["seconds"],
    }


def main() -> None:
    args, cfg = parse()
    out = Path(args.out or f"figures/fig3_beta_d{'_full' if args.full else ''}.png")
    out.parent.mkdir(parents=True, exist_ok=True)
    if args.redraw:
        ds = reread(out)
    else:
        ad.use_all_cores()  # before any JAX work
        ad.enable_compilation_cache()
        ds = simulate(args, cfg, out)
    draw(ds, out, args.full)
    print(json.dumps(summary(ds, out)))


if __name__ == "__main__":
    main()
