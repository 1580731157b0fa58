"""Discrete → continuous: the depth-L transformer (003 eq. 4) converges in law to the
Transformer SDE (eq. 6) as L grows (Theorem 1), for any admissible value distribution.

Two tokens start orthogonal (Z_0 = 0), d = 4, softmax attention, β = 1, σ = 1. For
L = 10, 30, 100, 300, 1000 we estimate E Z_t and E Z_t² (Z = ⟨x1, x2⟩) at t = 1 and 5 and
compare with a fine reference: the exact two-token overlap diffusion (spec §3.4, SA with
the corrected √2), solved with dt = 1e-3 by Heun over many more paths. The weak error
|E f(X_L) − E f(Y)| is fitted to C·L^{−p} over the L whose error exceeds 2 standard
errors. Theorem 1's invariance: Gaussian, uniform and Rademacher value entries give the
same limit (their E Z² are compared at L = 10, 30 and 100). A second panel shows the weak order of
the projected Euler–Maruyama SDE solver (the default sphere-preserving scheme).

    python experiments/limit_convergence.py          # reduced: ~2-3 min on 2 CPU cores
    python experiments/limit_convergence.py --full   # 10x the trajectories
"""

import argparse
import json
import time
from pathlib import Path

import diffrax
import jax
import jax.numpy as jnp
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import NullFormatter

import attndyn as ad
from attndyn.plot import OKABE_ITO

BETA, DIM, SIGMA = 1.0, 4, 1.0
TIMES = (1.0, 5.0)
DEPTHS = (10, 30, 100, 300, 1000)
ROOT = Path(__file__).resolve().parents[1]


def start():
    return jnp.eye(DIM, dtype=jnp.float32)[:2]  # Z_0 = 0


def moments(z):
    """Means and standard errors of Z and Z² (z shaped (M, n_times))."""
    z = np.asarray(z, np.float64)
    out = {}
    for name, f in (("Z", z), ("Z2", z**2)):
        out[name] = (f.mean(0), f.std(0, ddof=1) / np.sqrt(len(f)))
    return out


def run_batched(fn, n, seed, chunk=20_000):
    outs = []
    for s in range(0, n, chunk):
        keys = jax.random.split(jax.random.fold_in(jax.random.key(seed), s), min(chunk, n - s))
        outs.append(np.asarray(fn(keys)))
    return np.concatenate(outs)


def discrete_overlaps(depth, distribution, n, seed):
    model = ad.DiscreteTransformer(
        ad.Attention(BETA),
        ad.MatrixValues(SIGMA, distribution=distribution),
        depth=depth,
        saveat=ad.SaveAt(max(TIMES), TIMES),
    )
    x0 = start()

    @jax.jit
    def fn(keys):
        def one(k):
            x = ad.normalize(model.trajectory(x0, key=k))
            return jnp.sum(x[:, 0] * x[:, 1], axis=-1)

        return jax.vmap(one)(keys)

    return run_batched(fn, n, seed)


def reference_overlaps(n, seed, dt=1e-3, solver=None):
    o = ad.OverlapSDE(
        beta=BETA,
        attention="softmax",
        noise="full",
        sigma=SIGMA,
        dim=DIM,
        saveat=ad.SaveAt(max(TIMES), TIMES),
        integrator=ad.SDEIntegrator(solver or diffrax.Heun(), dt),
    )
    z0 = jnp.zeros((), jnp.float32)
    fn = jax.jit(jax.vmap(lambda k: o.solve(z0, key=k).z))
    return run_batched(fn, n, seed, chunk=50_000)


def sde_overlaps(dt, n, seed):
    m = ad.TransformerSDE(
        ad.Attention(BETA),
        sigma=SIGMA,
        saveat=ad.SaveAt(max(TIMES), TIMES),
        integrator=ad.SDEIntegrator(dt=dt),
    )
    x0 = start()

    @jax.jit
    def fn(keys):
        def one(k):
            x = ad.normalize(m.trajectory(x0, key=k))
            return jnp.sum(x[:, 0] * x[:, 1], axis=-1)

        return jax.vmap(one)(keys)

    return run_batched(fn, n, seed)


def fit_rate(depths, err, se):
    """Least-squares slope of log|err| on log L over points with |err| > 2 SE."""
    depths, err, se = map(np.asarray, (depths, err, se))
    ok = np.abs(err) > 2 * se
    if ok.sum() < 2:
        return float("nan"), ok
    slope, _ = np.polyfit(np.log(depths[ok]), np.log(np.abs(err[ok])), 1)
    return float(-slope), ok


DISTRIBUTIONS = ("gaussian", "uniform", "rademacher")
SOLVER_DTS = (0.2, 0.1, 0.05, 0.025)


def simulate(n_disc, n_ref):
    """The reference moments, the discrete ones per (distribution, L) and the SDE solver's
    per dt (all as :func:`moments`)."""
    ref = moments(reference_overlaps(n_ref, seed=1))
    table = {}
    for dist in DISTRIBUTIONS:
        # Uniform and Rademacher only where their difference from Gaussian is measurable.
        depths = DEPTHS if dist == "gaussian" else DEPTHS[:3]
        for depth in depths:
            m = moments(discrete_overlaps(depth, dist, n_disc, seed=100 + depth))
            table[(dist, depth)] = m
            print(f"{dist:10s} L={depth:5d}  E Z = {m['Z'][0]}  E Z² = {m['Z2'][0]}", flush=True)
    # Weak order of the projected Euler–Maruyama solver of eq. 6 against the same reference.
    sde = {dt: moments(sde_overlaps(dt, n_disc, seed=7)) for dt in SOLVER_DTS}
    return ref, table, sde


def errors_against(ref, runs, obs, ti):
    """Weak errors of ``runs`` (a list of moments) at save ``ti`` and their standard errors
    (the run's and the reference's combined)."""
    err = [m[obs][0][ti] - ref[obs][0][ti] for m in runs]
    se = [np.hypot(m[obs][1][ti], ref[obs][1][ti]) for m in runs]
    return err, se


def plot_errors(ax, x, err, se, **style):
    ax.errorbar(x, np.abs(err), yerr=2 * np.asarray(se), capsize=2, **style)


def depth_panel(ax, obs, ref, table):
    """|weak error| of E obs against L per distribution and time; the Gaussian rates."""
    markers = {"gaussian": "o", "uniform": "s", "rademacher": "^"}
    colors = dict(zip(DISTRIBUTIONS, OKABE_ITO))  # colour-blind safe; t is the line style
    rates = {}
    for ti, t in enumerate(TIMES):
        for dist in DISTRIBUTIONS:
            depths = [L for (d, L) in table if d == dist]
            err, se = errors_against(ref, [table[(dist, L)] for L in depths], obs, ti)
            style = {"marker": markers[dist], "color": colors[dist], "ls": "-" if ti == 0 else "--"}
            plot_errors(ax, depths, err, se, label=f"{dist}, t = {t:g}", **style)
            if dist == "gaussian":
                rate, ok = fit_rate(depths, err, se)
                rates[f"E{obs} t={t:g}"] = {
                    "rate": rate,
                    "fitted_depths": [int(L) for L, k in zip(depths, ok) if k],
                    "errors": [float(e) for e in err],
                    "se": [float(s) for s in se],
                }
    guide = np.asarray(DEPTHS, float)
    ax.plot(guide, 0.5 / guide, "k:", lw=1, label="∝ 1/L")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("depth L")
    ax.set_ylabel(f"|E {obs}(L) − E {obs}(SDE)|  (±2 SE)")
    name = "Z" if obs == "Z" else "Z²"
    ax.set_title(f"weak error of E {name}_t, discrete eq. 4 vs SDE", fontsize=9)
    ax.legend(fontsize=6, ncols=2)
    return rates


def invariance(table):
    """Theorem 1's invariance: E Z² of uniform and Rademacher values minus Gaussian's, in
    standard errors, at each L all three ran."""
    out = {}
    for L in DEPTHS[:3]:
        for ti, t in enumerate(TIMES):
            vals = [table[(d, L)]["Z2"] for d in DISTRIBUTIONS]
            diffs = [
                (vals[i][0][ti] - vals[0][0][ti]) / np.hypot(vals[i][1][ti], vals[0][1][ti])
                for i in (1, 2)
            ]
            out[f"L={L} t={t:g} (uniform, rademacher) − gaussian in SE"] = [float(x) for x in diffs]
    return out


def solver_panel(ax, ref, sde):
    """|weak error| of the projected Euler–Maruyama solver against dt; its fitted orders."""
    orders = {}
    for ti, t in enumerate(TIMES):
        for k, obs in enumerate(("Z", "Z2")):
            err, se = errors_against(ref, [sde[dt] for dt in SOLVER_DTS], obs, ti)
            style = {"marker": "o", "color": OKABE_ITO[3 + k], "ls": "-" if ti == 0 else "--"}
            plot_errors(ax, SOLVER_DTS, err, se, label=f"E {obs}, t = {t:g}", **style)
            rate, _ = fit_rate(1 / np.asarray(SOLVER_DTS), err, se)
            orders[f"E{obs} t={t:g}"] = {
                "order": rate,
                "errors": [float(e) for e in err],
                "se": [float(s) for s in se],
            }
    ax.plot(SOLVER_DTS, np.asarray(SOLVER_DTS) * 0.3, "k:", lw=1, label="∝ dt")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("dt")
    ax.xaxis.set_minor_formatter(NullFormatter())  # the minor labels overlapped
    ax.set_xticks(SOLVER_DTS, [f"{dt:g}" for dt in SOLVER_DTS])
    ax.set_ylabel("weak error (±2 SE)")
    ax.set_title("projected Euler–Maruyama on eq. 6 (default solver)", fontsize=9)
    ax.legend(fontsize=7)
    return orders


def main():
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--full", action="store_true", help="10x the trajectories")
    parser.add_argument(
        "--out", default=None, help="figure path (default figures/limit_convergence[_full].png)"
    )
    args = parser.parse_args()
    # A --full run writes beside the reduced figure, never over it.
    name = "limit_convergence_full.png" if args.full else "limit_convergence.png"
    args.out = args.out or str(ROOT / "figures" / name)
    scale = 10 if args.full else 1
    n_disc, n_ref = 20_000 * scale, 200_000 * scale
    started = time.perf_counter()
    ref, table, sde = simulate(n_disc, n_ref)

    fig, axes = plt.subplots(1, 3, figsize=(12.3, 4.6), layout="constrained")  # 1,599 px
    rates = {}
    for obs, ax in zip(("Z", "Z2"), axes[:2]):
        rates.update(depth_panel(ax, obs, ref, table))
    summary = {
        "reference": {k: [v[0].tolist(), v[1].tolist()] for k, v in ref.items()},
        "rates": rates,
        "sde_weak_order": solver_panel(axes[2], ref, sde),
        "invariance": invariance(table),
    }
    fig.suptitle(
        "Discrete eq. 4 against its SDE limit, by value law, and the SDE solver against dt: "
        f"N = 2, d = {DIM}, β = {BETA:g}, σ = {SIGMA:g}, Z_0 = 0; "
        f"\nreference: 1-D overlap diffusion, Heun dt = 1e-3, {n_ref:,} paths; "
        f"{n_disc:,} paths per point",
        fontsize=9,
    )
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=130)
    summary["seconds"] = time.perf_counter() - started
    print(json.dumps(summary, indent=1))
    Path(args.out).with_suffix(".json").write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
