"""Particles against their mean-field limit on S¹ (issue 45 items 1-2, first look).

N = 10³, 10⁴, 10⁵ tokens i.i.d. uniform on S¹ (one draw each, fixed seed), softmax
attention with Q = K = V = I, β = 8, the attention flow (NormalizedAttentionODE, Post-LN:
speed 1). Beside each, attndyn.MeanFieldFlow from the same tokens' empirical measure
(truncated at K = 128 modes; its 1/N floor and phases kept). The mode powers
P_ℓ(t) = |(1/N) Σ_j e^{iℓθ_j}|² of both, ℓ = 2 … 6 (ℓ* = 4), to T = 10 (41 saves).

Writes figures/mean_field_vs_particles.{png,json}; the JSON has, per N and degree, both
curves, the first save where they differ by more than 10 % of the particles' value (where
they part) and the mean field's resolution diagnostics (density minimum, spectral tails).
The default run takes ~2-4 min of CPU (2 cores).
"""

import json
import time

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
from _common import FIGURES, parser

import attndyn as ad

BETA, HORIZON, SAVES, ELLS, MODES = 8.0, 10.0, 41, (2, 3, 4, 5, 6), 128


def particles(x0, ts):
    """P_ℓ(t) of the tokens' flow (float32, the default route: spectral above 2,048)."""
    model = ad.NormalizedAttentionODE(
        ad.Attention(BETA), ad.PostLN(), ad.SaveAt(HORIZON, ts=tuple(ts))
    )
    states = model.solve(jnp.asarray(x0, jnp.float32)).theta
    powers = jax.jit(jax.vmap(lambda x: ad.mode_powers(x, max(ELLS))))(states)
    return np.asarray(powers, np.float64)


def part_time(ts, a, b, tolerance=0.1):
    """The first save where |a − b| > tolerance·a (None if never)."""
    off = np.nonzero(np.abs(a - b) > tolerance * a)[0]
    return None if off.size == 0 else float(ts[off[0]])


def main():
    args = parser(__doc__).parse_args()
    sizes = (1_000, 10_000, 100_000) + ((1_000_000,) if args.full else ())
    ts = np.linspace(0, HORIZON, SAVES)
    flow = ad.MeanFieldFlow(BETA, n_modes=MODES)
    records, curves = [], {}
    for i, n in enumerate(sizes):
        key = jax.random.fold_in(jax.random.key(args.seed), i)
        x0 = np.asarray(ad.uniform_sphere(key=key, n_tokens=n, dim=2), np.float64)
        start = time.process_time()
        p_particles = particles(x0, ts)
        cost_particles = time.process_time() - start
        start = time.process_time()
        sol = flow.solve(flow.coefficients_from_tokens(x0), ad.SaveAt(HORIZON, ts=tuple(ts)))
        cost_mean_field = time.process_time() - start
        p_limit = sol.mode_powers(max(ELLS))
        curves[n] = (p_particles, p_limit)
        records.append(
            {
                "n_tokens": n,
                "cpu_s_particles": round(cost_particles, 2),
                "cpu_s_mean_field": round(cost_mean_field, 2),
                "mean_field_steps": int(sol.num_steps),
                "degrees": [
                    {
                        "ell": ell,
                        "particles": p_particles[:, ell].tolist(),
                        "mean_field": p_limit[:, ell].tolist(),
                        "part_time_10pct": part_time(ts, p_particles[:, ell], p_limit[:, ell]),
                    }
                    for ell in ELLS
                ],
                "density_min": sol.density_min.tolist(),
                "density_tail": sol.density_tail.tolist(),
                "velocity_tail": sol.velocity_tail.tolist(),
            }
        )
        print(f"N = {n}: particles {cost_particles:.1f} s CPU, mean field {cost_mean_field:.1f} s")
    write(ts, sizes, curves, records, args)


def write(ts, sizes, curves, records, args):
    fig, axes = plt.subplots(1, len(sizes), figsize=(4.2 * len(sizes), 3.6), sharey=True)
    colours = plt.cm.viridis(np.linspace(0, 0.9, len(ELLS)))
    for ax, n in zip(np.atleast_1d(axes), sizes, strict=True):
        p_particles, p_limit = curves[n]
        for ell, colour in zip(ELLS, colours, strict=True):
            ax.semilogy(ts, p_particles[:, ell], color=colour, label=f"ℓ = {ell}")
            ax.semilogy(ts, p_limit[:, ell], "--", color=colour)
        lam = ad.theory.mode_growth_rate(BETA, 2, 4)
        ax.semilogy(ts, np.exp(2 * lam * ts) / n, ":", color="grey", label="e^{2λ₄t}/N")
        ax.set(title=f"N = {n:,}", xlabel="t", ylim=(0.3 / n, 1.5))
    np.atleast_1d(axes)[0].set_ylabel("P_ℓ(t): particles (solid), mean field (dashed)")
    np.atleast_1d(axes)[0].legend(fontsize=8, loc="lower right")
    fig.suptitle(f"S¹, softmax, β = {BETA:g}: N particles against the mean-field equation")
    fig.tight_layout()
    stem = "mean_field_vs_particles" + ("_full" if args.full else "")
    fig.savefig(FIGURES / f"{stem}.png", dpi=120)
    meta = {"beta": BETA, "dim": 2, "kind": "softmax", "horizon": HORIZON, "n_modes": 128}
    payload = {"conditions": meta, "seed": args.seed, "ts": ts.tolist(), "runs": records}
    (FIGURES / f"{stem}.json").write_text(json.dumps(payload, indent=1) + "\n")
    print(f"wrote figures/{stem}.png and .json")


if __name__ == "__main__":
    main()
