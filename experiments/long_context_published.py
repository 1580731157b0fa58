"""Long context as published: Chen, Lin, Polyanskiy and Rigollet (arXiv:2510.05554), Thm 2.1.

Their setting: one attention layer, Q = K = V = I, pre-layer-norm (y_i = x_i/‖x_i‖),
scores β⟨y_i, y_j⟩ with β = γ log n, no residual and no MLP (α = 0), and their observable,
the overlap ⟨y_i', y_j'⟩ of the normalised outputs (→ 1 below γ* = 1/(1 − ρ): collapse;
→ ρ above: the identity; 4ρ/(1 + 3ρ) at γ*). On

- the simplex (their Assumption 1): n tokens of pairwise overlap exactly ρ,
  x_i = √ρ u + √(1 − ρ) e_i in d = n + 1 orthonormal coordinates (deterministic: every
  pair has the same overlap, compared with theory.simplex_output_overlap at that n);
- their experiment's tokens: x_i = √ρ z_0 + √(1 − ρ) z_i, z_0, z_i i.i.d. N(0, I_d),
  d = 512 (overlaps ρ ± O(1/√d); mean over pairs, ± the standard error over seeds).

n = 2^6 … 2^11 (--full: to 2^12, and 8 seeds instead of 3), ρ = 0.25, 0.5, 0.75, γ from 0
to 2.5 γ*, the layer run by attndyn.Attention in float64. Beside each panel, attndyn's
own γ_c(N, d) (theory.critical_gamma: self-weight ½ for i.i.d. uniform tokens), a
heuristic, not the published threshold.

Writes figures/long_context_published[_full].{png,json}.
"""

import json
import math
import time

import equinox as eqx
import jax
import jax.numpy as jnp
import matplotlib
import numpy as np
from _common import FIGURES, figure_stem, parser

import attndyn as ad
from attndyn import theory

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.lines import Line2D

RHOS = (0.25, 0.5, 0.75)
GAUSSIAN_DIM = 512


@eqx.filter_jit
def _layer_overlap(attention: ad.Attention, x: jax.Array) -> jax.Array:
    """The mean pairwise overlap of the normalised outputs of the paper's layer (pre-LN,
    attention, α = 0), from Σ_i y_i' in O(n d): (‖Σ y_i'‖² − n)/(n(n − 1))."""
    out = ad.normalize(attention(ad.normalize(x)))
    total = jnp.sum(out, axis=0)
    n = x.shape[0]
    return (jnp.dot(total, total) - n) / (n * (n - 1))


def simplex(n: int, rho: float) -> jax.Array:
    x = np.zeros((n, n + 1))
    x[:, 0] = math.sqrt(rho)
    x[np.arange(n), np.arange(1, n + 1)] = math.sqrt(1 - rho)
    return jnp.asarray(x)


def gaussian(n: int, rho: float, dim: int, key: jax.Array) -> jax.Array:
    z0, z = jax.random.normal(key, (dim,)), jax.random.normal(jax.random.fold_in(key, 1), (n, dim))
    return math.sqrt(rho) * z0[None] + math.sqrt(1 - rho) * z


def gammas_for(rho: float) -> np.ndarray:
    return np.linspace(0.0, 2.5, 26) * theory.simplex_critical_gamma(rho)


def run_simplex(ns, rho):
    rows = []
    for n in ns:
        x = simplex(n, rho)
        for gamma in gammas_for(rho):
            measured = float(_layer_overlap(ad.Attention(gamma * math.log(n)), x))
            exact = theory.simplex_output_overlap(gamma, rho, n)
            rows.append({"n": n, "gamma": gamma, "overlap": measured, "exact": exact})
    return rows


def run_gaussian(ns, rho, n_seeds, seed):
    rows = []
    for n in ns:
        xs = [
            gaussian(n, rho, GAUSSIAN_DIM, jax.random.key(seed * 1000 + s)) for s in range(n_seeds)
        ]
        y_in = [ad.normalize(x) for x in xs]
        rho_in = [float((jnp.sum(y, 0) @ jnp.sum(y, 0) - n) / (n * (n - 1))) for y in y_in]
        for gamma in gammas_for(rho):
            att = ad.Attention(gamma * math.log(n))
            values = np.array([float(_layer_overlap(att, x)) for x in xs])
            se = values.std(ddof=1) / math.sqrt(n_seeds)
            rows.append(
                {
                    "n": n,
                    "gamma": gamma,
                    "overlap": values.mean(),
                    "se": se,
                    "input_overlap": float(np.mean(rho_in)),
                }
            )
    return rows


def plot(results, ns_simplex, ns, args):
    fig, axes = plt.subplots(2, len(RHOS), figsize=(11, 7.2), sharey=False, constrained_layout=True)
    colours = plt.get_cmap("viridis")(np.linspace(0, 0.9, len(ns)))
    for col, rho in enumerate(RHOS):
        star = theory.simplex_critical_gamma(rho)
        fine = np.linspace(0, gammas_for(rho)[-1], 400)
        limit = [
            theory.simplex_output_overlap(g, rho) if abs(g - star) > 1e-9 else np.nan for g in fine
        ]
        for row, (kind, dim_of) in enumerate(
            [("simplex", lambda n: n + 1), ("gaussian", lambda n: GAUSSIAN_DIM)]
        ):
            ax = axes[row, col]
            data = results[kind][str(rho)]
            sizes = ns_simplex if kind == "simplex" else ns
            for colour, n in zip(colours, ns, strict=True):
                pts = [r for r in data if r["n"] == n]
                if not pts:
                    continue
                g = [r["gamma"] for r in pts]
                y = [r["overlap"] for r in pts]
                if kind == "simplex":
                    ax.plot(g, y, "o", ms=3.5, color=colour, label=f"_n = {n}")
                    exact = [theory.simplex_output_overlap(v, rho, n) for v in fine]
                    ax.plot(fine, exact, "-", lw=0.8, color=colour)
                else:
                    ax.errorbar(
                        g,
                        y,
                        yerr=[2 * r["se"] for r in pts],
                        fmt="o-",
                        ms=3,
                        lw=0.8,
                        color=colour,
                        label=f"_n = {n}",
                    )
            if kind == "simplex":  # how slowly the limit is approached: the formula alone
                far = [theory.simplex_output_overlap(v, rho, 2**20) for v in fine]
                ax.plot(fine, far, "-", lw=0.8, color="tab:orange", label="n = 2^20 (formula)")
            ax.plot(fine, limit, "k--", lw=1.2, label="Thm 2.1, n → ∞")
            ax.plot([star], [4 * rho / (1 + 3 * rho)], "k*", ms=9)
            ax.axvline(star, color="tab:red", lw=1.2, label="γ* = 1/(1 − ρ)")
            n_max = sizes[-1]
            heuristic = theory.critical_gamma(n_max, dim_of(n_max))
            ax.axvline(
                heuristic,
                color="grey",
                ls=":",
                lw=1.4,
                label="attndyn γ_c(n, d), largest n (uniform tokens; heuristic, not published)",
            )
            ax.axhline(rho, color="k", lw=0.5, alpha=0.4)
            title = (
                "simplex, d = n + 1"
                if kind == "simplex"
                else f"Gaussian tokens, d = {GAUSSIAN_DIM}"
            )
            ax.set_title(
                f"ρ = {rho}: {title}\nγ* = {star:.3g}; γ_c({n_max}, {dim_of(n_max)}) = "
                f"{heuristic:.3g}",
                fontsize=9,
            )
            ax.set_xlabel("γ  (β = γ log n)")
            ax.set_ylabel("⟨y'_i, y'_j⟩ after one layer")
            if col == len(RHOS) - 1:  # the sizes, once a row, outside the panels
                marks = [
                    Line2D([], [], marker="o", ls="-", lw=0.8, ms=3.5, color=c, label=f"n = {n}")
                    for c, n in zip(colours, ns, strict=True)
                    if n in sizes
                ]
                ax.legend(handles=marks, fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1))
    # The lines' legend once, below the panels (the simplex row has every line).
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=len(labels), fontsize=8)
    scale = "--full" if args.full else "default"
    fig.suptitle(
        "One pre-LN attention layer (Q = K = V = I, α = 0): collapse below γ* = 1/(1 − ρ), "
        "identity above (Chen, Lin, Polyanskiy, Rigollet 2025).\nMarkers: attndyn; lines: "
        f"exact at n (top), mean ± 2 SE over {results['n_seeds']} seeds (bottom); {scale}",
        fontsize=9,
    )
    return fig


def main():
    args = parser(__doc__).parse_args()
    if args.engine != "discrete":
        raise SystemExit("long_context_published runs one attention layer (--engine discrete).")
    jax.config.update("jax_enable_x64", True)
    # The simplex needs d = n + 1: n² d per layer, 4.5 s a γ at n = 2,048 on 2 cores.
    ns_simplex = [2**k for k in range(6, 12 if args.full else 11)]
    ns = [2**k for k in range(6, 13 if args.full else 12)]
    n_seeds = 8 if args.full else 3
    started = time.perf_counter()
    results = {"n_seeds": n_seeds, "simplex": {}, "gaussian": {}}
    for rho in RHOS:
        results["simplex"][str(rho)] = run_simplex(ns_simplex, rho)
        results["gaussian"][str(rho)] = run_gaussian(ns, rho, n_seeds, args.seed)
        print(f"rho = {rho}: {time.perf_counter() - started:.0f} s")
    stem = figure_stem("long_context_published", args)
    plot(results, ns_simplex, ns, args).savefig(
        FIGURES / f"{stem}.png", dpi=130, bbox_inches="tight"
    )
    worst = max(
        abs(r["overlap"] - r["exact"]) for rows in results["simplex"].values() for r in rows
    )
    record = {
        "paper": "Chen, Lin, Polyanskiy, Rigollet, arXiv:2510.05554, Theorem 2.1 (alpha = 0)",
        "layer": (
            "pre-LN, Q = K = V = I, beta = gamma log n, no residual; attndyn.Attention, float64"
        ),
        "n_tokens_simplex": ns_simplex,
        "n_tokens_gaussian": ns,
        "gaussian_dim": GAUSSIAN_DIM,
        "seed": args.seed,
        "gamma_star": {str(r): theory.simplex_critical_gamma(r) for r in RHOS},
        "limit_at_gamma_star": {str(r): 4 * r / (1 + 3 * r) for r in RHOS},
        "attndyn_heuristic_gamma_c": {
            "note": "theory.critical_gamma(N, d): self-weight 1/2 for uniform tokens; "
            "not published",
            "simplex": {str(n): theory.critical_gamma(n, n + 1) for n in ns_simplex},
            "gaussian": {str(n): theory.critical_gamma(n, GAUSSIAN_DIM) for n in ns},
        },
        "simplex_max_abs_deviation_from_exact": worst,
        "seconds": round(time.perf_counter() - started, 1),
        **results,
    }
    (FIGURES / f"{stem}.json").write_text(json.dumps(record, indent=1) + "\n")
    print(f"simplex: attndyn vs exact formula, max |difference| {worst:.2e}")
    for rho in RHOS:
        star = theory.simplex_critical_gamma(rho)
        at = [r for r in results["simplex"][str(rho)] if abs(r["gamma"] - star) < 1e-9]
        print(
            f"rho = {rho}: gamma* = {star:.3f}; overlap at gamma* by n:",
            ", ".join(f"{r['overlap']:.4f}" for r in at),
            f"(limit {4 * rho / (1 + 3 * rho):.4f})",
        )
    print(f"{record['seconds']} s")


if __name__ == "__main__":
    main()
