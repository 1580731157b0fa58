"""The metastable staircase (issue 45 item 3): the cluster count of N tokens against log t
to t = 10⁴, from i.i.d. uniform starts, beside the published analyses.

The attention flow (NormalizedAttentionODE, Post-LN: speed 1), softmax attention with
Q = K = V = I, adaptive Tsit5 (rtol 10⁻⁶, atol 10⁻⁸), float32, the exact spectral route of
the attention on S¹ and S² (at the degree of the largest β of each group of runs); 101 saves
log-spaced from t = 0.1 to 10⁴. Clusters: attndyn.clusters at tol = 10⁻³ (pairs with
cosine ≥ 1 − 10⁻³, i.e. within 0.045 rad); plateaus: attndyn.studies.plateaus (a count
held over at least a factor 3 in t, counted from the formation peak). Runs:

- S¹ (d = 2), N = 10³: β = 4, 6, 8, 11, 16, 12 trajectories each;
- S¹, N = 10⁴: β = 4, 8, 16, 4 trajectories each;
- S² (d = 3), N = 10³: β = 4, 8, 16, 4 trajectories each;
- S¹, N = 10⁵: β = 8, one trajectory (only if the rest took < 950 s CPU; else
  ``--add-largest`` runs it later and adds it to the written JSON).

Checks recorded in the JSON: the count at tol = 10⁻² and 10⁻⁵ against 10⁻³ after t = 30
(the clusters, not the tolerance, decide); on S¹ the count recomputed in NumPy by sorting
angles (a second route); two trajectories rerun in float64 (the dynamics, not float32
rounding, decide the merges).

Compared with: Bruno, Pasqualotto, Agazzi (arXiv:2410.23228): the first metastable state
has the structure of the most unstable degree ℓ* (attndyn.theory.most_unstable_degree; on
S¹ ℓ* clusters, ℓ* ≈ √(2β)); Geshkovski, Koubbi, Polyanskiy, Rigollet (arXiv:2410.06833):
clusters stay for times exponential in β before merging, a staircase in rescaled time
log(t)/β. The interaction of two clusters an angle Δ apart is weighted e^{−β(1 − cos Δ)}
against each one's own, so the wait before the closest pair (angle Δ_min) merges is
predicted to grow as e^{β(1 − cos Δ_min)}: the slope of log τ on β(1 − cos Δ_min) is fitted
(1 if that is the law), its intercept (the prefactor) is fitted too.

    nice python experiments/metastable_staircase.py --quick   # smoke, ~25 s CPU
    nice python experiments/metastable_staircase.py           # all but N = 10⁵: 957 s CPU
    nice python experiments/metastable_staircase.py --add-largest figures/metastable_staircase.json
    python experiments/metastable_staircase.py --redraw figures/metastable_staircase.json

The committed figure (2026-11-29): the second command (957 s CPU, its guard skipped
N = 10⁵), then the third (348 s CPU): 1,306 s CPU in all, at nice 10 on 2 shared cores.

Writes figures/metastable_staircase{,_quick}.{png,json}.
"""

import argparse
import datetime
import json
import os
import subprocess
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from _common import FIGURES, ROOT

import attndyn as ad
from attndyn.studies import PLATEAU_FACTOR, plateau_summary, plateaus

TOL, TOLS_CHECK, T_CHECK = 1e-3, (1e-2, 1e-5), 30.0
#: N = 10⁵ (~6-8 min CPU) runs only if the others took less than this (s CPU).
CPU_BEFORE_LARGEST = 950.0

FULL = {
    "runs": [
        # (dim, N, betas, trajectories)
        (2, 1_000, (4.0, 6.0, 8.0, 11.0, 16.0), 12),
        (2, 10_000, (4.0, 8.0, 16.0), 4),
        (3, 1_000, (4.0, 8.0, 16.0), 4),
        (2, 100_000, (8.0,), 1),
    ],
    "horizon": 1e4,
    "saves": 101,
    "x64_check": (2, 1_000, 8.0, 2),  # dim, N, β, trajectories
}
QUICK = {
    "runs": [(2, 300, (4.0, 16.0), 2), (3, 200, (8.0,), 1)],
    "horizon": 300.0,
    "saves": 51,
    "x64_check": (2, 300, 8.0, 1),
}


def model_for(beta: float, times: np.ndarray, beta_max: float) -> ad.NormalizedAttentionODE:
    """The flow at β, attended by the spectral route at the degree of ``beta_max`` ≥ β (one
    compiled program for every β of a group)."""
    attention = ad.Attention(beta, implementation="spectral", spectral_beta_max=beta_max)
    saves = ad.SaveAt(float(times[-1]), ts=tuple(times.tolist()))
    return ad.NormalizedAttentionODE(attention, ad.PostLN(), saves)


def start(dim: int, n: int, beta: float, index: int) -> jax.Array:
    """Trajectory ``index``'s tokens: a key of its own for every (d, N, β, index)."""
    key = jax.random.fold_in(jax.random.key(dim * 7919 + n), int(beta * 100) * 1000 + index)
    return ad.uniform_sphere(key=key, n_tokens=n, dim=dim).astype(jnp.float32)


_COUNTERS: dict = {}


def counts(theta: jax.Array, tol: float) -> np.ndarray:
    """attndyn.clusters' count at every save (one compiled program per tolerance)."""
    if tol not in _COUNTERS:
        _COUNTERS[tol] = jax.jit(jax.vmap(lambda x: ad.clusters(x, tol).n_clusters))
    return np.asarray(_COUNTERS[tol](theta))


def circle_gaps(theta: np.ndarray, tol: float) -> tuple[np.ndarray, np.ndarray]:
    """On S¹, per save: the count by sorting angles (NumPy, a second route: neighbours in
    angle are joined when their cosine is ≥ 1 − tol) and the smallest angle between
    consecutive clusters (NaN with fewer than two)."""
    angles = np.sort(np.arctan2(theta[..., 1], theta[..., 0]).astype(np.float64), axis=-1)
    gaps = np.diff(angles, axis=-1, append=angles[..., :1] + 2 * np.pi)
    big = gaps > np.arccos(1 - tol)
    n_big = big.sum(-1)
    smallest = np.where(big, gaps, np.inf).min(-1)
    return np.maximum(n_big, 1), np.where(n_big >= 2, smallest, np.nan)


_LABELS: dict = {}


def sphere_gaps(theta: jax.Array, tol: float) -> np.ndarray:
    """On S^{d−1}, per save: the smallest angle between two clusters' mean directions
    (clusters from attndyn.cluster_labels; NaN with fewer than two)."""
    if tol not in _LABELS:
        _LABELS[tol] = jax.jit(jax.vmap(lambda x: ad.cluster_labels(x, tol)))
    labels = np.asarray(_LABELS[tol](theta))
    x = np.asarray(theta, np.float64)
    out = np.full(len(labels), np.nan)
    for s, lab in enumerate(labels):
        names, inverse = np.unique(lab, return_inverse=True)
        if names.size < 2:
            continue
        centres = np.zeros((names.size, x.shape[-1]))
        np.add.at(centres, inverse, x[s])
        centres /= np.linalg.norm(centres, axis=-1, keepdims=True)
        cos = np.clip(centres @ centres.T, -1, 1) - 2 * np.eye(names.size)
        out[s] = float(np.arccos(cos.max()))
    return out


def one_trajectory(model, x0: jax.Array, dim: int) -> dict:
    sol = model.solve(x0)
    theta = sol.theta
    record = {
        "counts": counts(theta, TOL),
        "counts_check": {tol: counts(theta, tol) for tol in TOLS_CHECK},
        "steps": int(sol.num_steps),
        "sphere_drift": float(jnp.max(sol.sphere_drift)),
    }
    if dim == 2:
        record["counts_numpy"], record["gap"] = circle_gaps(np.asarray(theta), TOL)
    else:
        record["gap"] = sphere_gaps(theta, TOL)
    return record


def run_point(dim, n, beta, n_traj, times, beta_max) -> dict:
    """Every trajectory of one (d, N, β): counts, checks, plateaus and their gaps."""
    model = model_for(beta, times, beta_max)
    started = time.process_time()
    records, failed = [], 0
    for index in range(n_traj):
        rec = one_trajectory(model, start(dim, n, beta, index), dim)
        if np.any(rec["counts"] < 1) or not np.isfinite(rec["sphere_drift"]):
            failed += 1  # a non-finite solve: reported, never counted
            continue
        records.append(rec)
    cpu = time.process_time() - started
    print(f"d = {dim}, N = {n:,}, β = {beta:g}: {n_traj} trajectories, {cpu:.0f} s CPU", flush=True)
    return point_summary(dim, n, beta, records, failed, times, cpu)


def formed(rec) -> int:
    """The save where the clusters have formed: the first, from the count's peak on, where
    the counts at tol = 10⁻², 10⁻³ and 10⁻⁵ agree (before, a near-uniform cloud's
    single-linkage count depends on the tolerance; on S¹ all three chain it into one
    component at first, hence from the peak), or the last save if they never agree."""
    c = rec["counts"]
    same = np.all([rec["counts_check"][tol] == c for tol in TOLS_CHECK], axis=0)
    after = np.nonzero(same & (np.arange(c.size) >= int(np.argmax(c))))[0]
    return int(after[0]) if after.size else c.size - 1


def plateau_gaps(times, rec, beta) -> list[dict]:
    """Each uncensored plateau's lifetime beside β(1 − cos Δ_min) at its first save."""
    out = []
    for p in plateaus(times, rec["counts"], start=formed(rec)):
        i = int(np.searchsorted(times, p.entry))
        gap = float(rec["gap"][i])
        if p.censored or not np.isfinite(gap):
            continue
        out.append(
            {
                "value": p.value,
                "lifetime": p.lifetime,
                "gap": gap,
                "barrier": beta * (1 - np.cos(gap)),
            }
        )
    return out


def point_summary(dim, n, beta, records, failed, times, cpu) -> dict:
    c = np.stack([r["counts"] for r in records])
    late = times >= T_CHECK
    checks = {
        f"tol={tol:g}": float(
            np.mean(np.stack([r["counts_check"][tol] for r in records])[:, late] == c[:, late])
        )
        for tol in TOLS_CHECK
    }
    if dim == 2:
        checks["numpy_route"] = float(np.mean(np.stack([r["counts_numpy"] for r in records]) == c))
    starts = [formed(r) for r in records]
    summary = plateau_summary(times, c, starts=starts)
    ell_star = ad.theory.most_unstable_degree(beta, dim)
    rate = float(ad.theory.mode_growth_rate(beta, dim, ell_star))
    return {
        "dim": dim,
        "n_tokens": n,
        "beta": beta,
        "ell_star": ell_star,
        # Clusters form when the degree-ℓ* power, 1/N at the start, is O(1): at
        # t ≈ ln N / (2λ_ℓ*) by the linear theory (a scale, not a prediction to a constant).
        "formation_time": _mean_sd_log10([times[s] for s in starts]),
        "linear_time_ln_n_over_2_lambda": float(np.log(n) / (2 * rate)),
        "trajectories": len(records),
        "failed": failed,
        "cpu_s": round(cpu, 1),
        "steps_max": max(r["steps"] for r in records),
        "sphere_drift_max": max(r["sphere_drift"] for r in records),
        "agreement_after_t30": checks,
        "plateaus": summary,
        "lifetime_vs_barrier": [g for r in records for g in plateau_gaps(times, r, beta)],
        # Every trajectory's counts and its staircase's first save, for re-analysis (e.g.
        # another plateau factor) without rerunning.
        "counts": c.tolist(),
        "starts": starts,
        "median_counts": np.median(c, axis=0).tolist(),
        "quartile_counts": np.percentile(c, [25, 75], axis=0).tolist(),
    }


def _mean_sd_log10(values) -> dict:
    logs = np.log10(values)
    se = float(logs.std(ddof=1) / np.sqrt(logs.size)) if logs.size > 1 else None
    return {"log10_mean": float(logs.mean()), "log10_se": se, "n": int(logs.size)}


def x64_check(dim, n, beta, n_traj, times) -> dict:
    """The counts of float32 and float64 solves from the same float32 tokens."""
    model = model_for(beta, times, beta)
    same, started = [], time.process_time()
    for index in range(n_traj):
        x0 = start(dim, n, beta, index)
        c32 = counts(model.solve(x0).theta, TOL)
        with jax.enable_x64(True):
            theta64 = model_for(beta, times, beta).solve(x0.astype(jnp.float64)).theta
            c64 = np.asarray(jax.vmap(lambda x: ad.clusters(x, TOL).n_clusters)(theta64))
        same.append(float(np.mean(c32 == c64)))
        print(f"float64 check {index}: counts equal at {same[-1]:.0%} of saves", flush=True)
    cpu = time.process_time() - started
    return {
        "dim": dim,
        "n_tokens": n,
        "beta": beta,
        "fraction_of_saves_equal": same,
        "cpu_s": round(cpu, 1),
    }


# --- fits ------------------------------------------------------------------------------


def ols(x, y) -> dict:
    """Least squares y = a x + b with the standard errors of a and b (n ≥ 3)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    if x.size < 3:
        return {"n": int(x.size)}
    design = np.stack([x, np.ones_like(x)], axis=1)
    coef, *_ = np.linalg.lstsq(design, y, rcond=None)
    resid = y - design @ coef
    cov = np.linalg.inv(design.T @ design) * (resid @ resid) / (x.size - 2)
    se = np.sqrt(np.diag(cov))
    return {
        "slope": coef[0],
        "slope_se": se[0],
        "intercept": coef[1],
        "intercept_se": se[1],
        "n": int(x.size),
    }


def sqrt_beta_fit(points) -> dict:
    """First-plateau values v = c √β (least squares through the origin, every trajectory
    one value) and c's standard error from the residuals."""
    beta = np.array([p["beta"] for p in points for _ in p["plateaus"]["first"]["values"]])
    v = np.array([x for p in points for x in p["plateaus"]["first"]["values"]], float)
    if v.size < 2:
        return {"n": int(v.size)}
    c = float(v @ np.sqrt(beta) / beta.sum())
    se = float(np.sqrt(np.sum((v - c * np.sqrt(beta)) ** 2) / (v.size - 1) / beta.sum()))
    return {"c": c, "c_se": se, "n": int(v.size), "ell_star_asymptote_c": float(np.sqrt(2))}


def fits(points) -> dict:
    out = {}
    for dim in (2, 3):
        at = [p for p in points if p["dim"] == dim]
        pairs = [g for p in at for g in p["lifetime_vs_barrier"]]
        if not at:
            continue
        out[f"d={dim}"] = {
            "log_lifetime_on_barrier": ols(
                [g["barrier"] for g in pairs], [np.log(g["lifetime"]) for g in pairs]
            ),
            "first_value_c_sqrt_beta": sqrt_beta_fit(
                [p for p in at if p["n_tokens"] == min(q["n_tokens"] for q in at)]
            ),
        }
    small = min(p["n_tokens"] for p in points if p["dim"] == 2)
    first = [p for p in points if p["dim"] == 2 and p["n_tokens"] == small]
    xs, ys = [], []
    for p in first:
        for found in p["plateaus"]["per_trajectory"]:
            if found and not found[0][3]:
                xs.append(p["beta"])
                ys.append(np.log(found[0][2] - found[0][1]))
    out["d=2"]["log_first_lifetime_on_beta"] = ols(xs, ys)
    return {key: jsonable(value) for key, value in out.items()}


def jsonable(x):
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [jsonable(v) for v in x]
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, float) and not np.isfinite(x):
        return None
    return x


# --- figure ----------------------------------------------------------------------------

COLOURS = {4.0: "#0072B2", 6.0: "#56B4E9", 8.0: "#009E73", 11.0: "#E69F00", 16.0: "#D55E00"}


def staircase_panel(ax, points, times, title):
    """Median count (line) and quartiles (band) per β; each plateau value reached as a bar
    from the mean log entry to the mean log exit, labelled 'k/n reached'."""
    for p in points:
        colour = COLOURS.get(p["beta"], "grey")
        style = "--" if p["n_tokens"] >= 100_000 else "-"
        label = f"β = {p['beta']:g}" + (f", N = {p['n_tokens']:,}" if style == "--" else "")
        ax.step(
            times, p["median_counts"], where="post", color=colour, ls=style, lw=1.2, label=label
        )
        if p["trajectories"] > 1:
            lo, hi = p["quartile_counts"]
            ax.fill_between(times, lo, hi, step="post", color=colour, alpha=0.15, lw=0)
        for k, row in p["plateaus"]["by_value"].items():
            start = 10 ** row["log10_entry"][0]
            stop = 10 ** row["log10_exit"][0] if "log10_exit" in row else times[-1]
            ax.plot([start, stop], [k, k], color=colour, lw=4, alpha=0.55, solid_capstyle="butt")
            ax.annotate(
                f"{row['reached']}/{row['of']}",
                (np.sqrt(start * stop), k),
                fontsize=6,
                color=colour,
                ha="center",
                va="bottom",
                xytext=(0, 2),
                textcoords="offset points",
            )
    ax.set(xscale="log", yscale="log", xlabel="t", title=title)
    ax.set_yticks([1, 2, 3, 4, 5, 6, 8, 10, 15, 20, 30])
    ax.set_yticklabels(["1", "2", "3", "4", "5", "6", "8", "10", "15", "20", "30"])
    ax.set_ylim(0.8, 40)
    ax.legend(fontsize=6, loc="upper right")


def first_value_panel(ax, points, fit):
    """The first plateau's value (mean ± SE) against β, beside ℓ*(β, d) and c√β."""
    grid = np.linspace(3.5, 17, 200)
    for dim, marker in ((2, "o"), (3, "s")):
        at = [p for p in points if p["dim"] == dim and p["plateaus"]["first"]["reached"]]
        sizes = sorted({p["n_tokens"] for p in at})
        for n, shift in zip(sizes, (-0.15, 0.15, 0.3), strict=False):
            sel = [p for p in at if p["n_tokens"] == n]
            mean = [p["plateaus"]["first"]["value"][0] for p in sel]
            se = [p["plateaus"]["first"]["value"][1] or 0.0 for p in sel]
            ax.errorbar(
                [p["beta"] + shift for p in sel],
                mean,
                yerr=se,
                fmt=marker,
                ms=4,
                capsize=2,
                mfc="white" if n > sizes[0] else None,
                label=f"S{'¹' if dim == 2 else '²'}, N = {n:,}",
            )
        stars = [ad.theory.most_unstable_degree(b, dim) for b in grid]
        ax.step(
            grid,
            stars,
            where="post",
            color="k",
            ls="-" if dim == 2 else ":",
            lw=1,
            label=f"ℓ*(β), d = {dim}" + (" (a degree)" if dim == 3 else ""),
        )
    c = fit.get("d=2", {}).get("first_value_c_sqrt_beta", {})
    if "c" in c:
        ax.plot(
            grid,
            c["c"] * np.sqrt(grid),
            color="grey",
            lw=1,
            ls="-.",
            label=f"S¹ fit {c['c']:.2f}√β",
        )
    ax.set(
        xlabel="β",
        ylabel="clusters on the first plateau",
        title="first metastable state vs ℓ* (BPA)",
    )
    ax.legend(fontsize=6)


def lifetime_panel(ax, points, fit):
    """ln τ of every closed plateau against β(1 − cos Δ_min) at its entry, with the fit."""
    for dim, marker in ((2, "o"), (3, "s")):
        for p in (q for q in points if q["dim"] == dim):
            pairs = p["lifetime_vs_barrier"]
            ax.scatter(
                [g["barrier"] for g in pairs],
                [np.log(g["lifetime"]) for g in pairs],
                s=10,
                marker=marker,
                color=COLOURS.get(p["beta"], "grey"),
                alpha=0.7,
                facecolors="none" if dim == 3 else None,
            )
        f = fit.get(f"d={dim}", {}).get("log_lifetime_on_barrier", {})
        if "slope" in f:
            x = np.linspace(0, 20, 50)
            ax.plot(
                x,
                f["slope"] * x + f["intercept"],
                color="k",
                ls="-" if dim == 2 else ":",
                lw=1,
                label=f"d = {dim}: slope {f['slope']:.2f} ± {f['slope_se']:.2f} (n = {f['n']})",
            )
    ax.set(
        xlabel="β (1 − cos Δ_min) at the plateau's entry",
        ylabel="ln lifetime",
        title="lifetimes vs the barrier exp(β(1 − cos Δ)) (GKPR)",
    )
    ax.legend(fontsize=6, loc="upper left")


def rescaled_panel(ax, points, times):
    """The median count against GKPR's rescaled time ln(t)/β (S¹, N = 10³)."""
    small = min(p["n_tokens"] for p in points if p["dim"] == 2)
    for p in (q for q in points if q["dim"] == 2 and q["n_tokens"] == small):
        ax.step(
            np.log(times) / p["beta"],
            p["median_counts"],
            where="post",
            color=COLOURS.get(p["beta"], "grey"),
            label=f"β = {p['beta']:g}",
        )
    ax.set(
        xlabel="ln(t) / β",
        ylabel="median cluster count",
        yscale="log",
        xlim=(0, None),
        title=f"S¹, N = {small:,}, in rescaled time (GKPR)",
    )
    ax.set_yticks([1, 2, 3, 4, 6, 10, 20])
    ax.set_yticklabels(["1", "2", "3", "4", "6", "10", "20"])
    ax.legend(fontsize=6)


def larger_title(points, small) -> str:
    sizes = sorted({p["n_tokens"] for p in points if p["dim"] == 2 and p["n_tokens"] > small})
    if not sizes:
        return "S¹, larger N: none run"
    return f"S¹, N = {sizes[0]:,}" + (f" ({sizes[1]:,} dashed)" if len(sizes) > 1 else "")


def _read(path: Path) -> tuple[dict, list]:
    payload = json.loads(path.read_text())
    points = payload["points"]
    for p in points:  # JSON keys are strings; the plateau values are counts
        p["plateaus"]["by_value"] = {int(k): v for k, v in p["plateaus"]["by_value"].items()}
    return payload, points


def redraw(path: Path) -> None:
    """The figure again from a written JSON (no solve): for a change of drawing only."""
    payload, points = _read(path)
    write_figure(points, np.asarray(payload["times"]), payload["fits"], path.with_suffix(".png"))
    print(f"redrew {path.with_suffix('.png')}")


def add_largest(path: Path, args) -> None:
    """Run the N ≥ 10⁵ groups a written full run skipped (its CPU guard), add them to its
    JSON (fits redone, the second command and its cost recorded) and redraw."""
    payload, points = _read(path)
    times = np.asarray(payload["times"])
    started = (time.time(), time.process_time(), list(os.getloadavg()))
    for dim, n, betas, n_traj in FULL["runs"]:
        if n >= 100_000:
            points += [run_point(dim, n, beta, n_traj, times, max(betas)) for beta in betas]
    payload["skipped"] = []
    payload["fits"] = fits(points)
    payload["points"] = jsonable(points)
    payload["provenance_largest"] = provenance(args, *started)
    payload["provenance_largest"]["command"] += f" --add-largest {path.name}"
    path.write_text(json.dumps(payload, indent=1, default=float) + "\n")
    write_figure(points, times, payload["fits"], path.with_suffix(".png"))
    print(f"added N ≥ 10⁵ to {path} ({payload['provenance_largest']['cpu_s']} s CPU)")


def write_figure(points, times, fit, path):
    fig, axes = plt.subplots(2, 3, figsize=(15.5, 8.6), layout="constrained")  # 1,550 px
    small = min(p["n_tokens"] for p in points if p["dim"] == 2)
    groups = [
        ([p for p in points if p["dim"] == 2 and p["n_tokens"] == small], f"S¹, N = {small:,}"),
        (
            [p for p in points if p["dim"] == 2 and p["n_tokens"] > small],
            larger_title(points, small),
        ),
        (
            [p for p in points if p["dim"] == 3],
            "S², N = " + ", ".join(sorted({f"{p['n_tokens']:,}" for p in points if p["dim"] == 3})),
        ),
    ]
    for ax, (sel, title) in zip(axes[0], groups, strict=True):
        staircase_panel(ax, sel, times, title)
    axes[0, 0].set_ylabel("clusters (median, quartiles); bars: plateaus, k/n reached")
    first_value_panel(axes[1, 0], points, fit)
    lifetime_panel(axes[1, 1], points, fit)
    rescaled_panel(axes[1, 2], points, times)
    fig.suptitle(
        "The metastable staircase: softmax attention flow (Post-LN, Q = K = V = I) from "
        f"uniform tokens, clusters at tol = {TOL:g}, a plateau = a count held over "
        f"≥ ×{PLATEAU_FACTOR:g} in t",
        fontsize=10,
    )
    fig.savefig(path, dpi=100)


def provenance(args, started_wall, started_cpu, load_start) -> dict:
    commit = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=False
    ).stdout.strip()
    return {
        "command": "nice python experiments/metastable_staircase.py"
        + (" --quick" if args.quick else ""),
        "date_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "commit": commit,
        "cpu_s": round(time.process_time() - started_cpu, 1),
        "wall_s": round(time.time() - started_wall, 1),
        "load_average_start": load_start,
        "load_average_end": list(os.getloadavg()),
        "niceness": os.nice(0),
        "machine": f"{os.cpu_count()} CPU cores, JAX {jax.__version__} on {jax.default_backend()}",
    }


def main():
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run (small N, T = 300)")
    parser.add_argument("--out", type=Path, default=FIGURES, help="folder of the PNG and JSON")
    parser.add_argument(
        "--redraw", type=Path, default=None, metavar="JSON", help="redraw the PNG of a written JSON"
    )
    parser.add_argument(
        "--add-largest",
        type=Path,
        default=None,
        metavar="JSON",
        help="run the N = 10⁵ group a full run skipped and add it to its JSON",
    )
    args = parser.parse_args()
    if args.redraw is not None:
        return redraw(args.redraw)
    if args.add_largest is not None:
        return add_largest(args.add_largest, args)
    args.out.mkdir(parents=True, exist_ok=True)
    started_wall, started_cpu, load_start = time.time(), time.process_time(), list(os.getloadavg())
    plan = QUICK if args.quick else FULL
    times = np.logspace(-1, np.log10(plan["horizon"]), plan["saves"])
    dim64, n64, beta64, traj64 = plan["x64_check"]
    x64 = x64_check(dim64, n64, beta64, traj64, times)
    points, skipped = [], []
    for dim, n, betas, n_traj in plan["runs"]:
        if n >= 100_000 and time.process_time() - started_cpu > CPU_BEFORE_LARGEST:
            skipped.append({"dim": dim, "n_tokens": n, "why": "the CPU budget (25 min) was near"})
            continue
        points += [run_point(dim, n, beta, n_traj, times, max(betas)) for beta in betas]
    fit = fits(points)
    stem = "metastable_staircase" + ("_quick" if args.quick else "")
    write_figure(points, times, fit, args.out / f"{stem}.png")
    payload = {
        "conditions": {
            "flow": "NormalizedAttentionODE, PostLN, softmax, Q = K = V = I, float32",
            "integrator": "Tsit5, rtol 1e-6, atol 1e-8 (attndyn defaults)",
            "attention": "spectral route, at the degree of the largest beta of its group",
            "tol": TOL,
            "plateau_factor": PLATEAU_FACTOR,
            "times": "logspace(0.1, horizon)",
            "horizon": plan["horizon"],
            "saves": plan["saves"],
        },
        "provenance": provenance(args, started_wall, started_cpu, load_start),
        "fits": fit,
        "float64_check": x64,
        "skipped": skipped,
        "points": jsonable(points),
        "times": times.tolist(),
    }
    (args.out / f"{stem}.json").write_text(json.dumps(payload, indent=1, default=float) + "\n")
    print(json.dumps(payload["fits"], indent=1))
    print(f"wrote {args.out / stem}.png and .json ({payload['provenance']['cpu_s']} s CPU)")


if __name__ == "__main__":
    main()
