"""Depth and horizon bias of two-token P(antipodal) in seed 003's Fig. 3 model.

The model of ``fig3_beta_d.py`` (eq. 4: Post-LN, Gaussian value matrices with σ = 1,
softmax attention, Q = K = I; two tokens started uniformly on S^{d−1}; tolerance 10⁻³) on
the exact-in-law two-token chain with early absorption (bound 10⁻⁷). At each (d, β) it
sweeps the depth L (layers per unit time) at a long horizon T = 1,000, saving the classes
at T = 12.5 … 1,000 on the way, and compares P(antipodal) with the exact t = ∞ probability
of the SDE (:func:`attndyn.theory.p_antipodal_uniform`):

- depth: bias(L) = P_L(T = 1,000) − exact is fitted by a/L, a/√L and a·L^{−p} (weighted
  least squares on the binomial standard errors; χ² and its p-value; p's 68 % interval
  where χ² ≤ min + 1);
- horizon: at every L, P_T(antipodal) and P_T(unclustered) at each save; the still
  undecided pairs bracket the t = ∞ answer of the chain, P_T(antipodal) ≲ P_L(∞) ≲
  P_T(antipodal) + P_T(unclustered), apart from the few pairs within the tolerance of −1
  at T that leave it later (their count is the fall of P(antipodal) between T and 1,000).

The points: (6, 3.5), where the spec reports −0.17/L; (10, 2.0), where docs/results.md
reported ~1/√L; (8, 1.75) just above β_c(8) = 1.24, low in the README figure (L = 50,
T = 100); and (10, 1.5), the closest to β_c(10) = 1.38 (κ₋ = 0.10: the −1 end is
approached slowest there, and cannot be absorbed within float32's range, so its antipodal
pairs run to T). ``--full`` runs 4× the trajectories.

    nice -n 10 python experiments/depth_horizon_bias.py         # 3.6 min CPU, 7 min wall (shared)
    nice -n 10 python experiments/depth_horizon_bias.py --full  # 7 min CPU, 14 min wall (shared)

Writes figures/depth_horizon_bias[_full].png and .json (every number with its standard
error or Wilson interval, the fits, the cost and the commit).
"""

import argparse
import datetime
import json
import math
import sys
import time
from pathlib import Path

import jax
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import NullFormatter
from scipy import stats

import attndyn as ad
from attndyn.plot import OKABE_ITO

ROOT = Path(__file__).resolve().parents[1]
FIGURES = ROOT / "figures"

POINTS = ((6, 3.5), (10, 2.0), (8, 1.75), (10, 1.5))
DEPTHS = (30, 50, 100, 300, 1000)
# Trajectories per point at each depth (reduced scale; --full runs 4×). The small depths
# are cheap and carry the law (the bias is largest there); a pair that reaches −1 runs
# long at any n (tiles of live pairs), so the large depths cost about as much at 4× n.
TRAJECTORIES = {30: 10_000, 50: 10_000, 100: 15_000, 300: 3_000, 1000: 1_500}
HORIZON = 1000.0
SAVES = (12.5, 25.0, 50.0, 100.0, 200.0, 500.0, 1000.0)
EXPONENTS = np.linspace(0.2, 2.0, 181)  # the profile of the free exponent p


def model(*, beta, dim, n_tokens, depth):
    del dim, n_tokens
    return ad.DiscreteTransformer(
        ad.Attention(beta), ad.MatrixValues(1.0), depth=depth, saveat=ad.SaveAt(HORIZON, SAVES)
    )


def fit_power(depths, bias, se, exponent: float) -> dict:
    """Weighted least squares of bias = a·L^{−exponent} (one parameter, through 0: the
    chain tends to the SDE as L → ∞): a, its standard error, χ², degrees of freedom and
    the χ² p-value."""
    f = np.asarray(depths, float) ** -exponent
    w = 1 / np.asarray(se, float) ** 2
    b = np.asarray(bias, float)
    a = float(np.sum(w * f * b) / np.sum(w * f * f))
    chi2 = float(np.sum(w * (b - a * f) ** 2))
    dof = len(b) - 1
    return {
        "amplitude": a,
        "amplitude_se": float(np.sum(w * f * f) ** -0.5),
        "chi2": chi2,
        "dof": dof,
        "p_value": float(stats.chi2.sf(chi2, dof)) if dof > 0 else float("nan"),
    }


def fit_exponent(depths, bias, se, exponents=EXPONENTS) -> dict:
    """bias = a·L^{−p} with p free: the χ²-minimising p on a grid and its 68 % profile
    interval (χ² ≤ min + 1, clipped to the grid), with that fit's χ² on n − 2 dof."""
    chi2 = np.array([fit_power(depths, bias, se, p)["chi2"] for p in exponents])
    best = int(np.argmin(chi2))
    inside = exponents[chi2 <= chi2[best] + 1]
    dof = len(bias) - 2
    return {
        "exponent": float(exponents[best]),
        "interval": [float(inside.min()), float(inside.max())],
        "amplitude": fit_power(depths, bias, se, float(exponents[best]))["amplitude"],
        "chi2": float(chi2[best]),
        "dof": dof,
        "p_value": float(stats.chi2.sf(chi2[best], dof)) if dof > 0 else float("nan"),
    }


def run_depth(points, depth: int, n: int, seed: int):
    """One study at one depth over every (d, β); its dataset and CPU seconds."""
    cpu = time.process_time()
    ds = ad.estimate_probabilities(
        lambda **p: model(**p, depth=depth),
        [{"dim": d, "n_tokens": 2, "beta": b} for d, b in points],
        key=jax.random.fold_in(jax.random.key(seed), depth),
        n_trajectories=n,
        early_absorption=True,
        progress=False,
        metadata={"experiment": "depth and horizon bias", "depth": depth, "horizon": HORIZON},
    )
    return ds, time.process_time() - cpu


def classes(ds, i: int) -> dict:
    """Per save time: counts, fractions and Wilson 95 % intervals of antipodal and
    unclustered at point i."""
    r = ds.isel(point=i)
    out = {"T": [float(t) for t in r["time"].values], "n": int(r["n_counted"].values[-1])}
    for o in ("antipodal", "unclustered"):
        s = r.sel(outcome=o)
        out[o] = {
            "count": [int(c) for c in s["count"].values],
            "p": [float(v) for v in s["probability"].values],
            "wilson95": [[float(lo), float(hi)] for lo, hi in zip(s["ci_lower"], s["ci_upper"])],
        }
    return out


def horizon_change(c: dict) -> dict:
    """P_T(antipodal) − P_{T_max}(antipodal) on the same trajectories, and a bound on its
    standard error: √m/n with m the trajectories whose antipodal status changed. Into the
    class come at most the unclustered at T, out go those in minus the
    net change, so m ≤ 2·unclustered(T) + |net change| (a pair within tol of +1 at T is
    taken not to reach −1 later: the +1 end absorbs with exponent (d − 1)/2 ≥ 1.5)."""
    n, count = c["n"], np.array(c["antipodal"]["count"])
    net = count - count[-1]
    moved = 2 * np.array(c["unclustered"]["count"]) + np.abs(net)
    return {
        "T": c["T"],
        "count": [int(x) for x in net],
        "value": [float(x) for x in net / n],
        "se_bound": [float(x) for x in np.sqrt(np.maximum(moved, 1)) / n],  # 0 seen: ~1
    }


def analyse(point, by_depth: dict) -> dict:
    """The depth fits at the last save and the horizon bracket of one (d, β)."""
    dim, beta = point
    exact = ad.theory.p_antipodal_uniform(beta, dim)
    depths = sorted(by_depth)
    p = np.array([by_depth[L]["antipodal"]["p"][-1] for L in depths])
    n = np.array([by_depth[L]["n"] for L in depths])
    # Binomial SE at the estimate (every count here is ≥ ~20, where it is accurate).
    se = np.sqrt(np.maximum(p * (1 - p), 1 / n) / n)
    bias = p - exact
    for L, b, s in zip(depths, bias, se):
        by_depth[L]["bias_at_T_max"] = {"value": float(b), "se": float(s), "z": float(b / s)}
        a, u = by_depth[L]["antipodal"]["p"], by_depth[L]["unclustered"]["p"]
        by_depth[L]["bracket_minus_exact"] = [[ai - exact, ai + ui - exact] for ai, ui in zip(a, u)]
        by_depth[L]["horizon_change"] = horizon_change(by_depth[L])
    return {
        "dim": dim,
        "beta": beta,
        "beta_c": ad.theory.beta_critical(dim),
        "exact": exact,
        "fits": None
        if len(depths) < 3
        else {
            "1/L": fit_power(depths, bias, se, 1.0),
            "1/sqrt(L)": fit_power(depths, bias, se, 0.5),
            "L^-p": fit_exponent(depths, bias, se),
        },
        "depths": {str(L): by_depth[L] for L in depths},
    }


def depth_panel(ax, results) -> None:
    """Bias at the last save against 1/L, ±2 SE, with the a/L and a/√L fits."""
    for k, r in enumerate(results):
        colour = OKABE_ITO[k % len(OKABE_ITO)]
        depths = np.array([int(L) for L in r["depths"]])
        b = np.array([r["depths"][str(L)]["bias_at_T_max"]["value"] for L in depths])
        s = np.array([r["depths"][str(L)]["bias_at_T_max"]["se"] for L in depths])
        label = f"d = {r['dim']}, β = {r['beta']:g}"
        ax.errorbar(1 / depths, b, 2 * s, fmt="o", color=colour, ms=4, capsize=2, label=label)
        x = np.linspace(0, 1 / depths.min(), 200)[1:]
        for key, power, ls in (("1/L", 1.0, "-"), ("1/sqrt(L)", 0.5, ":")):
            if r["fits"] is not None:
                ax.plot(x, r["fits"][key]["amplitude"] * x**power, ls, color=colour, lw=1)
    ax.axhline(0, color="k", lw=0.6)
    ax.set_xlabel("1/L (L: layers per unit time)")
    ax.set_ylabel(f"P_L(antipodal, T = {HORIZON:,.0f}) − exact t = ∞  (±2 SE)")
    ax.set_title("depth: fits a/L (solid) and a/√L (dotted)", fontsize=9)
    ax.legend(fontsize=7)


def horizon_panel(ax, results) -> None:
    """At L = 100 (many trajectories) and the deepest L: the paired change of
    P(antipodal) from T to the last save (same trajectories), ±2 of its SE bound, and the
    band up to + P_T(unclustered)."""
    for k, r in enumerate(results):
        colour = OKABE_ITO[k % len(OKABE_ITO)]
        depths = sorted(int(L) for L in r["depths"])
        shown = sorted({L for L in (100, depths[-1]) if L in depths})
        for L, ls in zip(shown, ("--", "-")[-len(shown) :]):
            h = r["depths"][str(L)]["horizon_change"]
            t, v, se = np.array(h["T"]), np.array(h["value"]), np.array(h["se_bound"])
            u = np.array(r["depths"][str(L)]["unclustered"]["p"])
            ax.fill_between(t, v, v + u, color=colour, alpha=0.2)
            ax.errorbar(t, v, 2 * se, fmt="o" + ls, color=colour, ms=3, capsize=2, lw=1)
    ax.axhline(0, color="k", lw=0.6)
    ax.set_xscale("log")
    ax.set_xticks(SAVES, [f"{t:g}" for t in SAVES])
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("horizon T")
    ax.set_ylabel(f"P_T − P_{HORIZON:.0f} (antipodal); band: + P_T(unclustered)")
    ax.set_title(
        "horizon, same trajectories: L = 100 (dashed), L = 1,000 (solid); ±2 SE", fontsize=9
    )


def plot(results, out: Path, title: str) -> None:
    fig, (left, right) = plt.subplots(1, 2, figsize=(11.5, 4.6))
    depth_panel(left, results)
    horizon_panel(right, results)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)


def run_all(points, trajectories: dict, seed: int):
    """Every depth of ``trajectories`` (depth → trajectories a point); per point and depth
    the classes, the cost per depth, the last provenance and the CPU seconds in all."""
    per_point: dict = {pt: {} for pt in points}
    runs, cpu_total, prov = {}, 0.0, {}
    for depth, n in trajectories.items():
        ds, cpu = run_depth(points, depth, n, seed)
        cpu_total += cpu
        prov = ad.provenance(ds)
        runs[str(depth)] = {
            "n": n,
            "cpu_seconds": round(cpu, 1),
            "wall_seconds": round(prov["seconds"], 1),
        }
        for i, pt in enumerate(points):
            per_point[pt][depth] = classes(ds, i)
        print(f"L = {depth}: {n} trajectories a point, {cpu:.0f} s CPU", flush=True)
    return per_point, runs, prov, cpu_total


def design(args, parser: argparse.ArgumentParser) -> tuple[tuple, dict, str]:
    """The points, depth → trajectories a point, and the output stem: the standard design
    (4× the trajectories with --full), or the one --points/--depths/--trajectories name."""
    custom = args.points or args.depths or args.trajectories
    scale = 4 if args.full else 1
    try:
        points = (
            tuple((int(d), float(b)) for d, b in (x.split(":") for x in args.points.split(",")))
            if args.points
            else POINTS
        )
        depths = tuple(int(x) for x in args.depths.split(",")) if args.depths else DEPTHS
    except ValueError:
        parser.error("--points takes d:beta,d:beta,... and --depths L,L,... (integers)")
    if any(d < 2 or not 0 <= b < math.inf for d, b in points) or any(L < 1 for L in depths):
        parser.error("every d must be >= 2, every beta >= 0 and every L >= 1")
    if args.trajectories is not None and args.trajectories < 1:
        parser.error("--trajectories must be >= 1")
    trajectories = {
        L: args.trajectories or scale * TRAJECTORIES.get(L, TRAJECTORIES[DEPTHS[-1]])
        for L in depths
    }
    stem = "depth_horizon_bias" + ("_full" if args.full else "")
    if custom:
        tag = "_".join(f"d{d}b{b:g}" for d, b in points) + "_L" + "-".join(map(str, depths))
        stem += f"_{tag}_seed{args.seed}"
    return points, trajectories, stem


def title_of(stem: str) -> str:
    scale = stem.removeprefix("depth_horizon_bias").lstrip("_") or "reduced"
    return (
        f"Two tokens, seed 003 Fig. 3 model: depth bias at T = {HORIZON:,.0f} and horizon "
        f"bias ({scale}{' scale' if scale in ('reduced', 'full') else ''})"
    )


COUNTS = ("T", "n", "antipodal", "unclustered")  # what a run measured, per point and depth


def pool(a: dict, b: dict) -> dict:
    """The classes of two independent runs at one point and depth, counted together."""
    if a["T"] != b["T"]:
        raise SystemExit(f"cannot pool runs saved at different times: {a['T']} and {b['T']}")
    out = {"T": a["T"], "n": a["n"] + b["n"]}
    for o in ("antipodal", "unclustered"):
        count = np.add(a[o]["count"], b[o]["count"])
        lo, hi = ad.wilson_interval(count, out["n"])
        out[o] = {
            "count": [int(c) for c in count],
            "p": [float(c / out["n"]) for c in count],
            "wilson95": [[float(x), float(y)] for x, y in zip(lo, hi)],
        }
    return out


def redraw(paths: list[Path]) -> None:
    """Fits, horizon changes and the figure again from the counts in written JSONs (the
    simulations' numbers unchanged): one file is analysed again in place; several runs of
    different seeds are counted together, point by point and depth by depth, into the
    first one's name + ``_pooled``."""
    summaries = [json.loads(p.read_text()) for p in paths]
    if len({s["seed"] for s in summaries}) < len(summaries):
        raise SystemExit("runs of one seed repeat the same trajectories: pool other seeds")
    counts: dict = {}
    for s in summaries:
        for r in s["points"]:
            at = counts.setdefault((r["dim"], r["beta"]), {})
            for L, v in r["depths"].items():
                mine = {k: v[k] for k in COUNTS}
                at[int(L)] = pool(at[int(L)], mine) if int(L) in at else mine
    summary = summaries[0]
    results = [analyse(pt, {L: c[L] for L in sorted(c)}) for pt, c in counts.items()]
    summary["points"] = results
    summary["analysed_again"] = datetime.date.today().isoformat()
    summary.setdefault("title", title_of(paths[0].stem))
    out = paths[0]
    if len(paths) > 1:
        out = out.with_name(out.stem + "_pooled.json")
        summary["pooled"] = [{k: s[k] for k in ("command", "seed", "runs")} for s in summaries]
        summary["command_pooled"] = "python experiments/depth_horizon_bias.py --from-json " + (
            " ".join(str(p.relative_to(ROOT) if p.is_relative_to(ROOT) else p) for p in paths)
        )
        summary["title"] += ", pooled runs"
    plot(results, out.with_suffix(".png"), summary["title"])
    out.write_text(json.dumps(summary, indent=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--full", action="store_true", help="4x the trajectories")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--points", default=None, help="d:beta,... (default: the four above)")
    parser.add_argument("--depths", default=None, help="L,L,... (default 30,50,100,300,1000)")
    parser.add_argument("--trajectories", type=int, default=None, help="a point, every depth")
    parser.add_argument(
        "--from-json",
        type=Path,
        nargs="+",
        default=None,
        metavar="PATH",
        help="no simulation: analyse and draw again the counts a run wrote to PATH; "
        "several PATHs (runs of different seeds) are pooled into the first's name + _pooled",
    )
    args = parser.parse_args()
    if args.from_json is not None:
        return redraw(args.from_json)
    points, trajectories, stem = design(args, parser)
    ad.use_all_cores()  # before any JAX work
    ad.enable_compilation_cache()
    started = time.perf_counter()
    per_point, runs, prov, cpu_total = run_all(points, trajectories, args.seed)
    results = [analyse(pt, per_point[pt]) for pt in points]
    title = title_of(stem)
    summary = {
        "experiment": "depth and horizon bias of two-token P(antipodal), seed 003 Fig. 3 model",
        "command": " ".join(["python experiments/depth_horizon_bias.py", *sys.argv[1:]]),
        "date": datetime.date.today().isoformat(),
        "commit": prov["source_commit"],
        "attndyn_version": prov["attndyn_version"],
        "model": "eq. 4: Post-LN, Gaussian V (sigma 1), softmax, Q = K = I, N = 2, tol 1e-3",
        "route": "reduced two-token chain, early absorption bound 1e-7",
        "horizon": HORIZON,
        "saves": list(SAVES),
        "seed": args.seed,
        "runs": runs,
        "cpu_seconds": round(cpu_total, 1),
        "wall_seconds": round(time.perf_counter() - started, 1),
        "title": title,
        "points": results,
    }
    plot(results, FIGURES / f"{stem}.png", title)
    (FIGURES / f"{stem}.json").write_text(json.dumps(summary, indent=1))
    for r in results:
        fits = {k: round(v["chi2"], 1) for k, v in (r["fits"] or {}).items()}
        print(r["dim"], r["beta"], {L: v["bias_at_T_max"] for L, v in r["depths"].items()}, fits)
    print(f"{cpu_total:.0f} s CPU, {time.perf_counter() - started:.0f} s wall")


if __name__ == "__main__":
    main()
