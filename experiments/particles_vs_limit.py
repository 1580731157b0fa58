"""Particles against their mean-field limit on S¹, N = 10³ … 10⁶ (issue 43 item 3, issue 45 item 2).

N tokens i.i.d. uniform on S¹, softmax attention with Q = K = V = I, β = 4, the attention
flow (NormalizedAttentionODE, Post-LN), float32 (the spectral route above 2,048 tokens).
Beside each draw, attndyn.MeanFieldFlow (K = 128 modes, float64) started from the same
tokens' empirical Fourier coefficients c_k, k ≤ K (their 1/N floor and phases kept; the
modes above K, the granularity of N points, dropped), and the linear theory
P_ℓ(t) = P_ℓ(0) e^{2λ_ℓ t} from the same start. The mode powers P_ℓ(t), ℓ = 1 … 6, of
the three, and the particles' cluster count (tol = 10⁻³).

Where they part: the first save at which some degree's particle power differs from the
limit's by more than 10 % of the limit's (``part_time``; likewise from the linear theory,
``linear_part_time``). How the gap closes in N: each parting time fitted against ln N
(least squares over all draws, the SE of the slope from the scatter of the draws about
the line). The relative gap at t = 2 (inside every N's linear window) is recorded too:
there the two agree to the particles' float32 rounding, since the empirical measure is
itself a solution and the kernel couples degrees only up to ~27 at β = 4.

Writes figures/particles_vs_limit.{png,json} (``--quick``: N = 10³, 10⁴, two draws, T = 6,
to figures/particles_vs_limit_quick.*; T = 15 otherwise). All 19 draws took 334 s of CPU
(259 s wall; the N = 10⁶ draw's particles 123 s of CPU; 2 cores, load ~1.5, 2026-11-29).
Each draw is written to a partial JSON in the temporary directory as it ends;
``--resume`` keeps those.
"""

import json
import os
import tempfile
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
from _common import FIGURES, figure_stem, parser

import attndyn as ad

BETA, MODES, ELLS, TOL = 4.0, 128, (1, 2, 3, 4, 5, 6), 1e-3
#: The degrees whose departure from the linear theory marks the end of the linear window:
#: the fast ones (2λ_ℓ ≥ 1 at β = 4). A slow degree's own power is soon outgrown by what
#: the fast ones drive into it (products of two modes, ~1/N), so it leaves its linear
#: curve early at every N (at t ≈ 0.25-1.5 with all of ℓ = 1 … 6).
LINEAR_ELLS = (2, 3, 4)
#: Draws (seeds) per N: more where a draw is cheap.
DRAWS = {1_000: 8, 10_000: 6, 100_000: 4, 1_000_000: 1}
#: A time inside the linear window of every N (P_ℓ ≤ 10⁻¹ at N = 10³ up to it).
GAP_TIME = 2.0
PART = 0.1


def particles(x0, ts):
    """P_ℓ(t), the cluster count and the solver's steps of the tokens' flow (float32)."""
    model = ad.NormalizedAttentionODE(
        ad.Attention(BETA), ad.PostLN(), ad.SaveAt(float(ts[-1]), ts=tuple(ts))
    )
    sol = model.solve(jnp.asarray(x0, jnp.float32))
    powers = jax.jit(jax.vmap(lambda x: ad.mode_powers(x, max(ELLS))))(sol.theta)
    counts = jax.jit(jax.vmap(lambda x: ad.clusters(x, TOL).n_clusters))(sol.theta)
    return np.asarray(powers, np.float64), np.asarray(counts), int(np.asarray(sol.num_steps))


def part_time(ts, p, m):
    """The first save where some degree's |p − m| > PART · m (None if never; a save past
    the mean field's last, NaN, counts as parted)."""
    with np.errstate(invalid="ignore"):
        off = np.nonzero(np.any(~(np.abs(p - m) <= PART * m), axis=1))[0]
    return None if off.size == 0 else float(ts[off[0]])


def linear_part_time(ts, p, linear):
    """:func:`part_time` of the particles from the linear theory over :data:`LINEAR_ELLS`
    (``p``, ``linear``: the columns of :data:`ELLS`)."""
    idx = [ELLS.index(ell) for ell in LINEAR_ELLS]
    return part_time(ts, np.asarray(p)[:, idx], np.asarray(linear)[:, idx])


def limit(flow, c0, ts):
    """P_ℓ(t) of the mean field (NaN past the last save it reaches) and its solution: the
    whole horizon, or, where the solver gives up (the clusters sharper than K modes hold),
    the longest prefix of the saves, by thirds, that it solves."""
    count = len(ts)
    while True:
        try:
            sol = flow.solve(c0, ad.SaveAt(float(ts[count - 1]), ts=tuple(ts[:count])))
            break
        except ad.NonFiniteError:
            if count <= 3:
                raise
            count = max(3, (2 * count) // 3)
    m = np.full((len(ts), max(ELLS) + 1), np.nan)
    m[:count] = sol.mode_powers(max(ELLS))
    return m, sol


def one_draw(flow, n, seed, ts):
    """Particles, limit and linear theory of one draw of N tokens, with their CPU times."""
    key = jax.random.fold_in(jax.random.key(seed), n)
    x0 = np.asarray(ad.uniform_sphere(key=key, n_tokens=n, dim=2), np.float64)
    cpu, wall = time.process_time(), time.perf_counter()
    p, counts, steps = particles(x0, ts)
    cost = (time.process_time() - cpu, time.perf_counter() - wall)
    cpu = time.process_time()
    m, sol = limit(flow, flow.coefficients_from_tokens(x0), ts)
    cost_limit = time.process_time() - cpu
    ell = np.arange(max(ELLS) + 1)
    rates = np.array([0.0] + [2 * ad.theory.mode_growth_rate(BETA, 2, k) for k in ell[1:]])
    linear = p[0][None, :] * np.exp(rates[None, :] * ts[:, None])
    at = int(np.argmin(np.abs(ts - GAP_TIME)))
    gap = np.abs(p[at, list(ELLS)] - m[at, list(ELLS)]) / m[at, list(ELLS)]
    pick = list(ELLS)
    return {
        "n_tokens": n,
        "seed": seed,
        "cpu_s_particles": round(cost[0], 2),
        "wall_s_particles": round(cost[1], 2),
        "cpu_s_mean_field": round(cost_limit, 2),
        "particle_steps": steps,
        "mean_field_steps": int(np.asarray(sol.num_steps).sum()),
        "part_time": part_time(ts, p[:, pick], m[:, pick]),
        "linear_part_time": linear_part_time(ts, p[:, pick], linear[:, pick]),
        "gap_at_gap_time": float(gap.max()),
        "n_clusters": counts.tolist(),
        "particles": p[:, list(ELLS)].tolist(),
        "mean_field": m[:, list(ELLS)].tolist(),
        "linear": linear[:, list(ELLS)].tolist(),
        "mean_field_horizon": float(np.asarray(sol.ts)[-1]),
        "velocity_tail": np.asarray(sol.velocity_tail).tolist(),
    }


def fit_line(x, y):
    """Least squares y = a + b x; the SEs from the residuals' scatter (n − 2 dof); None
    with fewer than three points or one value of x."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    if len(x) < 3 or np.ptp(x) == 0:
        return None
    design = np.stack([np.ones_like(x), x], axis=1)
    coef, *_ = np.linalg.lstsq(design, y, rcond=None)
    resid = y - design @ coef
    sigma2 = resid @ resid / max(len(x) - 2, 1)
    cov = sigma2 * np.linalg.inv(design.T @ design)
    return {"a": coef[0], "b": coef[1], "se_a": cov[0, 0] ** 0.5, "se_b": cov[1, 1] ** 0.5}


def laws(runs):
    """The times at which the particles part from the limit and from the linear theory,
    each fitted against log N over all draws that parted before the horizon."""
    out: dict = {"draws": len(runs)}
    for name in ("part_time", "linear_part_time"):
        parted = [r for r in runs if r[name] is not None]
        fit = fit_line([np.log(r["n_tokens"]) for r in parted], [r[name] for r in parted])
        out[f"{name}_vs_log_n"] = None if fit is None else {k: float(v) for k, v in fit.items()}
        out[f"draws_parted_{name}"] = len(parted)
    return out


def main():
    p = parser(__doc__)
    p.add_argument("--quick", action="store_true", help="N = 10³, 10⁴, two draws, T = 6")
    p.add_argument(
        "--resume", action="store_true", help="keep the draws of an interrupted run's partial JSON"
    )
    p.add_argument(
        "--from-json",
        action="store_true",
        help="analyse and draw the written JSON again (no simulation)",
    )
    args = p.parse_args()
    if args.from_json:
        stem = figure_stem("particles_vs_limit" + ("_quick" if args.quick else ""), args)
        payload = json.loads((FIGURES / f"{stem}.json").read_text())
        ts, runs = np.asarray(payload["ts"]), payload["runs"]
        for r in runs:
            r["linear_part_time"] = linear_part_time(ts, r["particles"], r["linear"])
        draws = {int(n): c for n, c in payload["conditions"]["draws"].items()}
        write(ts, draws, runs, laws(runs), args, payload.get("totals"))
        return
    draws = {1_000: 2, 10_000: 2} if args.quick else DRAWS
    horizon = 6.0 if args.quick else 15.0
    ts = np.linspace(0.0, horizon, int(4 * horizon) + 1)
    flow = ad.MeanFieldFlow(BETA, n_modes=MODES)
    started = time.perf_counter()
    stem = figure_stem("particles_vs_limit" + ("_quick" if args.quick else ""), args)
    partial = Path(tempfile.gettempdir()) / f"attndyn-{stem}.partial.json"  # draws so far
    runs = json.loads(partial.read_text())["runs"] if args.resume and partial.exists() else []
    for n, count in draws.items():
        for seed in range(args.seed, args.seed + count):
            if any(r["n_tokens"] == n and r["seed"] == seed for r in runs):
                continue
            runs.append(one_draw(flow, n, seed, ts))
            partial.write_text(json.dumps({"ts": ts.tolist(), "runs": runs}) + "\n")
            r = runs[-1]
            print(
                f"N = {n:>9,} seed {seed}: particles {r['cpu_s_particles']:.1f} s CPU "
                f"({r['particle_steps']} steps), mean field {r['cpu_s_mean_field']:.1f} s; "
                f"parts from the limit at t = {r['part_time']}, from the linear theory at "
                f"t = {r['linear_part_time']}; gap(t = {GAP_TIME:g}) = {r['gap_at_gap_time']:.1e}"
            )
    totals = {
        "cpu_s_this_process": round(time.process_time(), 1),
        "wall_s": round(time.perf_counter() - started, 1),
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "load_average_at_end": [round(v, 1) for v in os.getloadavg()],
    }
    write(ts, draws, runs, laws(runs), args, totals)


def write(ts, draws, runs, fitted, args, totals=None):
    sizes = list(draws)
    fig = plt.figure(figsize=(4.0 * len(sizes), 7.2))
    grid = fig.add_gridspec(2, max(len(sizes), 3))
    colours = plt.cm.viridis(np.linspace(0, 0.9, len(ELLS)))
    for column, n in enumerate(sizes):
        ax = fig.add_subplot(grid[0, column])
        r = next(r for r in runs if r["n_tokens"] == n)  # the first draw of each N
        for j, (ell, colour) in enumerate(zip(ELLS, colours, strict=True)):
            ax.semilogy(ts, np.asarray(r["particles"])[:, j], color=colour, label=f"ℓ = {ell}")
            ax.semilogy(ts, np.asarray(r["mean_field"])[:, j], "--", color=colour)
            ax.semilogy(ts, np.asarray(r["linear"])[:, j], ":", color=colour, lw=0.8)
        ax.axhline(1 / n, color="grey", lw=0.6)
        if r["part_time"] is not None:
            ax.axvline(r["part_time"], color="red", lw=0.8)
        ax.set(title=f"N = {n:,}", xlabel="t", ylim=(0.05 / n, 1.5))
        if column == 0:
            ax.set_ylabel("P_ℓ (— particles, -- limit, ··· linear)")
            ax.legend(fontsize=7, loc="lower right", ncol=2)
    _gap_panel(fig.add_subplot(grid[1, 0]), ts, runs, sizes)
    _parting_panel(fig.add_subplot(grid[1, 1]), runs, fitted)
    _cluster_panel(fig.add_subplot(grid[1, 2]), ts, runs, sizes)
    fig.suptitle(
        f"S¹, softmax, β = {BETA:g}: N particles against the mean-field limit from the same\n"
        f"tokens (K = {MODES}) and the linear theory; red: where they part (first draw)"
    )
    fig.tight_layout()
    stem = figure_stem("particles_vs_limit" + ("_quick" if args.quick else ""), args)
    fig.savefig(FIGURES / f"{stem}.png", dpi=100)
    meta = {"beta": BETA, "dim": 2, "kind": "softmax", "n_modes": MODES, "ells": list(ELLS)}
    meta |= {"cluster_tol": TOL, "part_threshold": PART, "gap_time": GAP_TIME, "draws": draws}
    meta |= {"linear_ells": list(LINEAR_ELLS)}
    payload = {"conditions": meta, "ts": ts.tolist(), "laws": fitted, "totals": totals}
    payload["runs"] = runs
    (FIGURES / f"{stem}.json").write_text(json.dumps(payload, indent=1) + "\n")
    print(json.dumps(fitted, indent=1))
    print(f"wrote figures/{stem}.png and .json")


def _parting_panel(ax, runs, fitted):
    for name, marker, label in (
        ("part_time", "o", "from the limit"),
        ("linear_part_time", "s", "from the linear theory (ℓ = 2-4)"),
    ):
        parted = [r for r in runs if r[name] is not None]
        x = np.array([np.log10(r["n_tokens"]) for r in parted])
        line = ax.plot(x, [r[name] for r in parted], marker, ms=4, alpha=0.6)[0]
        law = fitted[f"{name}_vs_log_n"]
        if law is None:
            continue
        grid = np.linspace(x.min(), x.max(), 10)
        ax.plot(
            grid,
            law["a"] + law["b"] * np.log(10.0) * grid,
            "-",
            color=line.get_color(),
            lw=0.8,
            label=f"{label}: ({law['b']:.2f} ± {law['se_b']:.2f}) ln N",
        )
    ax.set(xlabel="log₁₀ N", ylabel="time the particles part (10 %)")
    ax.legend(fontsize=7)


def _gap_panel(ax, ts, runs, sizes):
    colours = plt.cm.plasma(np.linspace(0, 0.8, len(sizes)))
    for n, colour in zip(sizes, colours, strict=True):
        for r in (r for r in runs if r["n_tokens"] == n):
            p, m = np.asarray(r["particles"]), np.asarray(r["mean_field"])
            gap = np.max(np.abs(p - m) / m, axis=1)
            ax.semilogy(ts, np.maximum(gap, 1e-9), color=colour, lw=0.6, alpha=0.7)
        ax.plot([], [], color=colour, label=f"N = {n:,}")
    ax.axhline(PART, color="red", lw=0.8)
    ax.set(xlabel="t", ylabel="max_ℓ |P_particles − P_limit| / P_limit", ylim=(1e-8, 1e2))
    ax.legend(fontsize=7)


def _cluster_panel(ax, ts, runs, sizes):
    colours = plt.cm.plasma(np.linspace(0, 0.8, len(sizes)))
    for n, colour in zip(sizes, colours, strict=True):
        counts = np.array([r["n_clusters"] for r in runs if r["n_tokens"] == n], float)
        ax.semilogy(ts, counts.mean(axis=0), color=colour, label=f"N = {n:,}")
    ax.set(xlabel="t", ylabel=f"clusters (tol {TOL:g}), mean of draws")
    ax.legend(fontsize=7)


if __name__ == "__main__":
    main()
