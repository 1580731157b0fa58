"""How a centred LayerNorm moves the two-token phase transition (none of the seeds shows it).

Seeds 000-002 normalise with LayerNorm, which centres each token before scaling it: tokens
live on the unit sphere of the mean-zero hyperplane, one dimension fewer than under RMS.
*(derived, spec §0)* Post-LN with full Gaussian value noise is then the RMS model in d − 1
dimensions at the same β, so the antipodal state of two tokens becomes reachable at
β > β_c(d − 1) = ½ arccosh(d − 3) instead of β_c(d) = ½ arccosh(d − 2): at d = 4 for every
β > 0. (A real LayerNorm at radius √d and inverse temperature β is this one at β·d.)

The script estimates P(antipodal) for two uniform tokens with Wilson 95 % intervals:
LayerNorm in d (on the full N × d route: the reduced route runs LayerNorm as the RMS model
in d − 1, the very identity tested here), RMS in d and RMS in d − 1 (on the exact-in-law
reduced route), and draws the exact t = ∞ curves of d and of d − 1. The
identity holds in law at every depth L and horizon T, so LayerNorm in d and RMS in d − 1
are compared directly (difference with a 95 % interval, independent samples): no
discretisation or finite-T bias enters that comparison, while both sit below the t = ∞
curve by the L = 20 bias and, near a threshold, above it by trajectories not yet absorbed.

Default (about 5 minutes on a 2-core CPU): d ∈ {4, 6}, β ∈ {0, 0.25, …, 3}, 4,000
trajectories a point, L = 20, T = 40.

    python experiments/layernorm_threshold.py [--out figures/layernorm_threshold.png]
"""

import argparse
import json
from pathlib import Path

import jax
import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt

import attndyn as ad
from attndyn.plot import OKABE_ITO


def estimate(norm: str, dims, betas, *, n, depth, horizon, seed):
    points = ad.grid(dim=list(dims), n_tokens=[2], beta=[float(b) for b in betas])
    return ad.estimate_probabilities(
        lambda **p: ad.studies.phase_model(**p, depth=depth, horizon=horizon, norm=norm),
        points,
        key=jax.random.key(seed),
        n_trajectories=n,
        progress=False,
        metadata={"experiment": "layernorm threshold", "norm": norm},
        route="full" if norm == "layernorm" else "auto",
    )


def rows(ds, norm):
    """One record per point: the estimate, its Wilson interval and both exact curves."""
    last = ds.isel(time=-1).sel(outcome="antipodal")
    out = []
    for i in range(ds.sizes["point"]):
        r = last.isel(point=i)
        d, beta = int(r["dim"]), float(r["beta"])
        out.append(
            {
                "norm": norm,
                "dim": d,
                "beta": beta,
                "p_antipodal": float(r["probability"]),
                "ci": [float(r["ci_lower"]), float(r["ci_upper"])],
                "exact_d": ad.theory.p_antipodal_uniform(beta, d),
                "exact_d_minus_1": ad.theory.p_antipodal_uniform(beta, d - 1),
                "route": ad.provenance(ds)["routes"][i],
                "trajectories": int(r["n_valid"]),
            }
        )
    return out


def compare(results, dims) -> list[dict]:
    """LayerNorm in d against RMS in d − 1, point by point: the difference and its 95 %
    interval (independent samples)."""
    out = []
    for d in dims:
        ln = [r for r in results if r["norm"] == "layernorm" and r["dim"] == d]
        rms = {r["beta"]: r for r in results if r["norm"] == "rms" and r["dim"] == d - 1}
        for r in ln:
            other = rms[r["beta"]]
            n = r["trajectories"]
            p, q = r["p_antipodal"], other["p_antipodal"]
            half = 1.96 * np.sqrt(max(p * (1 - p) + q * (1 - q), 1.0 / n) / n)
            out.append({"dim": d, "beta": r["beta"], "difference": p - q, "half_width": half})
    return out


def draw(results, dims, out: Path) -> None:
    fig, axes = plt.subplots(1, len(dims), figsize=(5.2 * len(dims), 4.2), layout="constrained")
    fine = np.linspace(0, 3, 121)
    blue, vermillion, green = OKABE_ITO[0], OKABE_ITO[1], OKABE_ITO[2]  # colour-blind safe
    for ax, d in zip(np.atleast_1d(axes), dims):
        series = (
            ("rms", d, blue, "o", f"Monte Carlo, RMS, d = {d}"),
            ("rms", d - 1, green, "^", f"Monte Carlo, RMS, d − 1 = {d - 1}"),
            ("layernorm", d, vermillion, "s", f"Monte Carlo, LayerNorm, d = {d}"),
        )
        for norm, dim, color, marker, label in series:
            sel = [r for r in results if r["norm"] == norm and r["dim"] == dim]
            beta = np.array([r["beta"] for r in sel])
            p = np.array([r["p_antipodal"] for r in sel])
            lo, hi = np.array([r["ci"] for r in sel]).T
            # Wilson 95 % intervals as error bars at the sampled β (no band between them).
            ax.errorbar(beta, p, yerr=[p - lo, hi - p], fmt=marker, color=color, ms=3.5,
                        mfc="none", capsize=2, elinewidth=0.8, label=label)  # fmt: skip
        ax.plot(fine, ad.theory.p_antipodal_curve(fine, d), "-", color=blue, lw=1,
                label=f"exact t = ∞, RMS in d = {d}")  # fmt: skip
        ax.plot(fine, ad.theory.p_antipodal_curve(fine, d, "layernorm"), "--", color=vermillion,
                lw=1, label=f"exact t = ∞, RMS in d − 1 = {d - 1}")  # fmt: skip
        for norm, color in (("rms", blue), ("layernorm", vermillion)):
            bc = ad.theory.beta_critical(d, norm)
            if bc > 0:
                ax.axvline(bc, color=color, ls=":", lw=0.9)
        ax.plot([], [], ":", color="0.3", label="β_c of each (dotted)")
        ax.set(xlabel="β", ylabel="P(antipodal) at t = T", title=f"two tokens, d = {d}")
        ax.legend(fontsize=7)
    fig.suptitle(
        "Centred LayerNorm against RMS tokens: Post-LN, Gaussian values σ = 1, L = 20, T = 40, "
        "Wilson 95 % error bars",
        fontsize=9,
    )
    fig.savefig(out, dpi=130)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", default="figures/layernorm_threshold.png")
    parser.add_argument("--n-trajectories", type=int, default=4000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--replot", action="store_true", help="redraw the figure from its JSON (no simulation)"
    )
    args = parser.parse_args()
    dims, betas = (4, 6), np.arange(0.0, 3.01, 0.25)
    if args.replot:
        out = Path(args.out)
        draw(json.loads(out.with_suffix(".json").read_text())["points"], dims, out)
        return
    kw = {"n": args.n_trajectories, "depth": 20, "horizon": 40.0}
    results = []
    for norm, ds_dims in (("rms", sorted({*dims, *(d - 1 for d in dims)})), ("layernorm", dims)):
        ds = estimate(norm, ds_dims, betas, seed=args.seed, **kw)
        results += rows(ds, norm)
        print(f"{norm}: {ad.provenance(ds)['seconds']:.0f} s", flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    draw(results, dims, out)
    critical = {
        str(d): {norm: ad.theory.beta_critical(d, norm) for norm in ("rms", "layernorm")}
        for d in dims
    }
    summary = {
        "beta_critical": critical,
        "parameters": {"trajectories": args.n_trajectories, "seed": args.seed, **kw},
        "points": results,
        "layernorm_minus_rms_d_minus_1": compare(results, dims),
    }
    out.with_suffix(".json").write_text(json.dumps(summary, indent=1))
    for r in results:
        reference = r["exact_d_minus_1" if r["norm"] == "layernorm" else "exact_d"]
        inside = r["ci"][0] <= reference <= r["ci"][1]
        print(
            f"{r['norm']:9s} d={r['dim']} β={r['beta']:4.2f}  P={r['p_antipodal']:.4f} "
            f"[{r['ci'][0]:.4f}, {r['ci'][1]:.4f}]  exact(d)={r['exact_d']:.4f} "
            f"exact(d−1)={r['exact_d_minus_1']:.4f}  theory {'inside' if inside else 'OUTSIDE'}"
        )
    diffs = summary["layernorm_minus_rms_d_minus_1"]
    inside = sum(abs(c["difference"]) <= c["half_width"] for c in diffs)
    for c in diffs:
        print(
            f"LayerNorm d={c['dim']} − RMS d={c['dim'] - 1}, β={c['beta']:4.2f}: "
            f"{c['difference']:+.4f} ± {c['half_width']:.4f}"
        )
    print(f"0 inside the 95 % interval at {inside} of {len(diffs)} points")
    print("wrote", out, "and", out.with_suffix(".json"))


if __name__ == "__main__":
    main()
