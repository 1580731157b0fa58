"""``attndyn schemes``: clustering speed of the six normalization schemes (seed 004).

Four parts, all in one dataset:

(a) γ(t) from the symmetric orthogonal start for every scheme: the reduced ODE
    (Thm 4.1) drawn over the full n-particle solve (seed 004 Fig. 2);
(b) nGPT for several α (Fig. 3);
(c) random weights, layer by layer (Fig. 4): see :func:`random_weights_cosine`;
(d) fitted terminal rates of 1 − γ against theory (:func:`attndyn.fit_terminal_rate`).
"""

import json
import math
import time
from collections.abc import Sequence
from typing import Any

import click
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import xarray as xr
from jaxtyping import Array, Float, PRNGKeyArray

from ._attention import Attention
from ._cli_common import cli_errors, command_line, emit_json, floats, output_dir, say
from ._errors import ParameterError, check_bound, check_choice, check_int
from ._observables import mean_cosine
from ._ode import NormalizedAttentionODE
from ._rates import fit_terminal_rate
from ._schemes import NGPT, SCHEME_NAMES, AbstractScheme, MixLN, scheme_from_name
from ._sphere import uniform_sphere
from ._symmetric import SymmetricODE, initial_slope, symmetric_start, terminal_rate_theory

#: Save points of the γ(t) curves.
N_SAVES = 121


def random_weights_cosine(
    scheme: AbstractScheme,
    *,
    n_tokens: int,
    dim: int,
    beta: float | Array,
    n_layers: int,
    key: PRNGKeyArray,
) -> Float[Array, " n_layers_plus_1"]:
    """Mean pairwise cosine after each layer of a random-weight stack (seed 004 Fig. 4).

    One head. Layer n draws Q_n, K_n, V_n with i.i.d. N(0, 1/d) entries (Kaiming scale
    for a linear layer: |V x| ≈ |x|) and applies the scheme's map with update
    ``V_n A(Z; Q_n, K_n)`` and L = 1: a plain residual stack, updates of size O(1) as in
    a transformer at initialisation, t = n the layer index (sqrt-scaling divides by
    √(n + 1)). Mix-LN's τ is read as a fraction of the depth (Post-LN for the first
    ⌈τ·n_layers⌉ layers). Tokens start uniform on the sphere. Returns n_layers + 1 values
    (the start included).
    """
    check_int("n_tokens", n_tokens, lower=2)
    check_int("dim", dim, lower=2)
    check_int("n_layers", n_layers, lower=1)
    if isinstance(scheme, MixLN):
        scheme = MixLN(tau=scheme.tau * n_layers)
    start_key, layers_key = jax.random.split(key)
    x0 = uniform_sphere(key=start_key, n_tokens=n_tokens, dim=dim)
    scale = 1.0 / math.sqrt(dim)

    def layer(x, n):
        kq, kk, kv = jax.random.split(jax.random.fold_in(layers_key, n), 3)
        q, k, v = (scale * jax.random.normal(kk_, (dim, dim), x.dtype) for kk_ in (kq, kk, kv))
        attention = Attention(beta, query=q, key_matrix=k)

        def update(z):
            return attention(z) @ v.T

        x = scheme.layer(x, update, layer=n.astype(x.dtype), depth=1)
        return x, mean_cosine(x)

    _, cosines = jax.lax.scan(layer, x0, jnp.arange(n_layers))
    return jnp.concatenate([mean_cosine(x0)[None], cosines])


def _schemes(names: Sequence[str], *, tau: float, alpha: float) -> list[AbstractScheme]:
    return [scheme_from_name(name, tau=tau, alpha=alpha) for name in names]


def _rate_window(kind: str, t_start: float, value: float) -> tuple[np.ndarray, tuple[float, float]]:
    """Save times and fit window past ``t_start`` (when 1 − γ first reaches 10⁻²).

    The window spans 1 − γ falling by ≈ e^{−40} (exponential laws, from the predicted
    rate) or three decades of t (power law): deep in the terminal regime.
    """
    if kind == "power":
        end = 1000.0 * t_start
        return np.geomspace(t_start, end, 160), (10.0 * t_start, end)
    if kind == "sqrt-exponential":
        root_end = math.sqrt(t_start) + 40.0 / value
        ts = np.linspace(math.sqrt(t_start), root_end, 160) ** 2
        return ts, (float(ts[40]), float(ts[-1]))
    end = t_start + 40.0 / value
    ts = np.linspace(t_start, end, 160)
    return ts, (float(ts[40]), end)


def terminal_fit(scheme: AbstractScheme, *, beta: float, n_tokens: int, r0: float):
    """Fit the terminal rate of 1 − γ on the reduced ODE, deep in the terminal regime."""
    theory = terminal_rate_theory(scheme)
    probe_ts = np.geomspace(1e-2, 1e7, 400)
    probe = SymmetricODE(
        scheme, beta, n_tokens=n_tokens, r0=r0, horizon=float(probe_ts[-1]), save_at=probe_ts
    ).solve()
    reached = np.nonzero(np.asarray(probe.log_gap) <= math.log(1e-2))[0]
    if reached.size == 0:
        raise ParameterError(
            f"{scheme.name}: 1 − γ never reaches 1e-2 by t = 1e7; lower beta or the tokens."
        )
    t_start = float(probe_ts[reached[0]])
    ts, window = _rate_window(theory.kind, t_start, theory.value)
    sol = SymmetricODE(
        scheme, beta, n_tokens=n_tokens, r0=r0, horizon=float(ts[-1]), save_at=ts
    ).solve()
    fit = fit_terminal_rate(sol.ts, kind=theory.kind, log_gap=sol.log_gap, window=window)
    return theory, fit, (np.asarray(sol.ts), np.asarray(sol.log_gap))


def schemes_study(
    *,
    schemes: Sequence[str] = SCHEME_NAMES,
    tokens: int = 32,
    dim: int = 32,
    beta: float = 3.0,
    horizon: float = 60.0,
    alphas: Sequence[float] = (1.0, 0.5, 2.0, 4.0),
    tau: float = 0.5,
    r0: float = 1.0,
    seed: int = 0,
    rw_dim: int = 64,
    rw_tokens: int = 32,
    rw_beta: float | None = None,
    rw_layers: int = 48,
    rw_runs: int = 8,
) -> xr.Dataset:
    """All four parts as one dataset (see the module docstring); ``alphas[0]`` is nGPT's α."""
    started = time.perf_counter()
    for name in schemes:
        check_choice("scheme", name, SCHEME_NAMES)
    if len(schemes) == 0:
        raise ParameterError("schemes must name at least one scheme.")
    check_int("tokens", tokens, lower=2)
    check_int("dim", dim, lower=2)
    check_bound("beta", beta, lower=0.0)
    check_bound("horizon", horizon, lower=0.0, lower_open=True)
    check_bound("tau", tau, lower=0.0)
    check_bound("r0", r0, lower=0.0, lower_open=True)
    if len(alphas) == 0:
        raise ParameterError("alpha must name at least one value.")
    check_bound("alpha", np.asarray(alphas), lower=0.0, lower_open=True)
    check_int("rw_layers", rw_layers, lower=1)
    check_int("rw_runs", rw_runs, lower=1)
    x0 = symmetric_start(tokens, dim, r0)  # n > d is refused here, before any solve
    rw_beta = math.sqrt(rw_dim) if rw_beta is None else rw_beta
    alpha = float(alphas[0])
    objs = _schemes(schemes, tau=tau, alpha=alpha)
    ts = np.linspace(0.0, horizon, N_SAVES)

    gamma_reduced, gamma_full, r_reduced, drift = [], [], [], []
    slope_measured, slope_theory = [], []
    rate_rows: list[dict[str, Any]] = []
    rate_curves = []
    for scheme in objs:
        say(f"  {scheme.name}: symmetric start")
        red = SymmetricODE(
            scheme, beta, n_tokens=tokens, r0=r0, horizon=horizon, save_at=ts
        ).solve()
        full = NormalizedAttentionODE(Attention(beta), scheme, horizon=horizon, save_at=ts).solve(
            x0
        )
        gamma_reduced.append(np.asarray(red.gamma))
        r_reduced.append(np.asarray(red.r))
        gamma_full.append(np.asarray(jax.vmap(mean_cosine)(full.theta)))
        drift.append(float(jnp.max(full.sphere_drift)))
        theory_slope = initial_slope(scheme, beta=beta, n_tokens=tokens, r0=r0)
        # Measured slope: Richardson extrapolation of the full solve's γ(h)/h, second order.
        h = min(1e-3 / max(theory_slope, 1e-12), horizon / 4)
        small = NormalizedAttentionODE(
            Attention(beta), scheme, horizon=2 * h, save_at=(h, 2 * h), rtol=1e-7, atol=1e-10
        ).solve(x0)
        g = np.asarray(jax.vmap(mean_cosine)(small.theta), dtype=np.float64)
        slope_measured.append((4 * g[0] - g[1]) / (2 * h))
        slope_theory.append(theory_slope)
        say(f"  {scheme.name}: terminal rate")
        theory, fit, curve = terminal_fit(scheme, beta=beta, n_tokens=tokens, r0=r0)
        rate_rows.append(
            {
                "kind": fit.kind,
                "value": fit.value,
                "lower": fit.interval[0],
                "upper": fit.interval[1],
                "theory": theory.value,
                "formula": theory.formula,
            }
        )
        rate_curves.append(curve)

    say("  nGPT over alpha")
    ngpt = np.stack(
        [
            np.asarray(
                SymmetricODE(
                    NGPT(alpha=a), beta, n_tokens=tokens, r0=r0, horizon=horizon, save_at=ts
                )
                .solve()
                .gamma
            )
            for a in alphas
        ]
    )

    say("  random weights")
    keys = jax.random.split(jax.random.key(seed), rw_runs)
    rw = []
    for scheme in objs:
        run = eqx.filter_jit(
            jax.vmap(
                lambda k, s=scheme: random_weights_cosine(
                    s, n_tokens=rw_tokens, dim=rw_dim, beta=rw_beta, n_layers=rw_layers, key=k
                )
            )
        )
        rw.append(np.asarray(run(keys)))
    rw = np.stack(rw)  # (scheme, run, layer)

    n_rate = max(len(c[0]) for c in rate_curves)
    rate_t = np.full((len(objs), n_rate), np.nan)
    rate_log_gap = np.full((len(objs), n_rate), np.nan)
    for i, (t_, lg) in enumerate(rate_curves):
        rate_t[i, : len(t_)] = t_
        rate_log_gap[i, : len(lg)] = lg

    names = [s.name for s in objs]
    ds = xr.Dataset(
        {
            "gamma_reduced": (("scheme", "time"), np.stack(gamma_reduced)),
            "gamma_full": (("scheme", "time"), np.stack(gamma_full)),
            "r_reduced": (("scheme", "time"), np.stack(r_reduced)),
            "sphere_drift": ("scheme", np.asarray(drift)),
            "initial_slope": ("scheme", np.asarray(slope_measured)),
            "initial_slope_theory": ("scheme", np.asarray(slope_theory)),
            "terminal_rate": ("scheme", np.asarray([r["value"] for r in rate_rows])),
            "terminal_rate_lower": ("scheme", np.asarray([r["lower"] for r in rate_rows])),
            "terminal_rate_upper": ("scheme", np.asarray([r["upper"] for r in rate_rows])),
            "terminal_rate_theory": ("scheme", np.asarray([r["theory"] for r in rate_rows])),
            "terminal_rate_kind": ("scheme", np.asarray([r["kind"] for r in rate_rows])),
            "terminal_law": ("scheme", np.asarray([r["formula"] for r in rate_rows])),
            "rate_time": (("scheme", "rate_point"), rate_t),
            "rate_log_gap": (("scheme", "rate_point"), rate_log_gap),
            "ngpt_gamma": (("alpha", "time"), ngpt),
            "random_weights_cosine": (("scheme", "run", "layer"), rw),
        },
        coords={
            "scheme": names,
            "time": ts,
            "alpha": np.asarray(alphas, dtype=np.float64),
            "layer": np.arange(rw_layers + 1),
            "run": np.arange(rw_runs),
        },
    )
    params = {
        "beta": beta,
        "n": tokens,
        "d": dim,
        "r0": r0,
        "alpha": alpha,
        "alphas": list(map(float, alphas)),
        "tau": tau,
        "horizon": horizon,
        "schemes": list(names),
        "random_weights": {
            "d": rw_dim,
            "n": rw_tokens,
            "beta": rw_beta,
            "layers": rw_layers,
            "runs": rw_runs,
        },
    }
    from . import __version__

    provenance = {
        "params": params,
        "seed": seed,
        "package_version": __version__,
        "jax_version": jax.__version__,
        "seconds": time.perf_counter() - started,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "description": "attndyn schemes: seed 004 Figs 2-4 and terminal rates",
    }
    ds.attrs["provenance"] = json.dumps(provenance, default=str)
    ds.attrs["seed"] = seed
    ds.attrs["package_version"] = __version__
    ds.attrs["seconds"] = provenance["seconds"]
    return ds


def schemes_summary(ds: xr.Dataset) -> dict[str, Any]:
    """The ``--json`` object of a :func:`schemes_study` dataset."""
    prov = json.loads(ds.attrs["provenance"])
    params = prov["params"]
    out: dict[str, Any] = {
        "params": {k: params[k] for k in ("beta", "n", "d", "r0", "alpha", "tau")},
        "schemes": {},
        "seed": prov["seed"],
        "package_version": prov["package_version"],
        "seconds": prov["seconds"],
    }
    for name in ds["scheme"].values:
        row = ds.sel(scheme=name)
        out["schemes"][str(name)] = {
            "initial_slope": float(row["initial_slope"]),
            "initial_slope_theory": float(row["initial_slope_theory"]),
            "terminal_rate": {
                "kind": str(row["terminal_rate_kind"].values),
                "value": float(row["terminal_rate"]),
                "interval": [float(row["terminal_rate_lower"]), float(row["terminal_rate_upper"])],
            },
            "terminal_rate_theory": float(row["terminal_rate_theory"]),
        }
    return out


def plot_schemes(ds: xr.Dataset) -> dict[str, Any]:
    """Figures of a :func:`schemes_study` dataset: {"gamma", "ngpt_alpha", "random_weights",
    "rates"} → matplotlib Figure."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [str(s) for s in ds["scheme"].values]
    colors = dict(zip(names, plt.get_cmap("tab10")(np.arange(len(names)))))
    params = json.loads(ds.attrs["provenance"])["params"]
    figs: dict[str, Any] = {}

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), layout="constrained")
    t = ds["time"].values
    for name in names:
        row = ds.sel(scheme=name)
        for ax in axes:
            ax.plot(
                t,
                row["gamma_reduced"] if ax is axes[0] else 1 - row["gamma_reduced"],
                color=colors[name],
                label=name,
            )
            ax.plot(
                t[::6],
                (row["gamma_full"] if ax is axes[0] else 1 - row["gamma_full"])[::6],
                "o",
                ms=3,
                mfc="none",
                color=colors[name],
            )
    axes[0].set(
        xlabel="t",
        ylabel="γ(t)",
        title=f"symmetric start: reduced ODE (lines), n-particle ODE (circles)\n"
        f"β={params['beta']}, n={params['n']}, d={params['d']}, r0={params['r0']}",
    )
    axes[1].set(xlabel="t", ylabel="1 − γ(t)", yscale="log", title="clustering gap")
    axes[0].legend(fontsize=8)
    figs["gamma"] = fig

    fig, ax = plt.subplots(figsize=(6, 4.2), layout="constrained")
    for a, row in zip(ds["alpha"].values, ds["ngpt_gamma"].values):
        ax.plot(t, row, label=f"α = {a:g}")
    ax.set(xlabel="t", ylabel="γ(t)", title=f"nGPT, symmetric start, β={params['beta']}")
    ax.legend()
    figs["ngpt_alpha"] = fig

    fig, ax = plt.subplots(figsize=(6.5, 4.2), layout="constrained")
    layers = ds["layer"].values
    for name in names:
        runs = ds["random_weights_cosine"].sel(scheme=name).values
        ax.plot(layers, runs.mean(0), color=colors[name], label=name)
        lo, hi = np.quantile(runs, [0.05, 0.95], axis=0)
        ax.fill_between(layers, lo, hi, color=colors[name], alpha=0.15)
    rw = params["random_weights"]
    ax.set(
        xlabel="layer",
        ylabel="mean cosine similarity",
        title=f"random weights (Kaiming, re-drawn per layer): d={rw['d']}, n={rw['n']}, "
        f"β={rw['beta']:.3g}\nmean of {rw['runs']} runs, 90 % band",
    )
    ax.legend(fontsize=8)
    figs["random_weights"] = fig

    fig, axes = plt.subplots(
        1, len(names), figsize=(3.2 * len(names), 3.4), layout="constrained", squeeze=False
    )
    for ax, name in zip(axes[0], names):
        row = ds.sel(scheme=name)
        tt, lg = row["rate_time"].values, row["rate_log_gap"].values
        kind = str(row["terminal_rate_kind"].values)
        ax.plot(tt, lg / np.log(10), color=colors[name])
        ax.set_xscale("log" if kind == "power" else "linear")
        ax.set(
            title=f"{name}\nfit {float(row['terminal_rate']):.4g} "
            f"[{float(row['terminal_rate_lower']):.4g}, "
            f"{float(row['terminal_rate_upper']):.4g}]\n"
            f"theory {row['terminal_law'].values}",
            xlabel="t",
        )
        ax.title.set_fontsize(8)
    axes[0][0].set_ylabel("log10(1 − γ)")
    figs["rates"] = fig
    return figs


@click.command("schemes")
@click.option(
    "--schemes",
    "scheme_list",
    default=",".join(SCHEME_NAMES),
    show_default=True,
    help="Comma-separated scheme names.",
)
@click.option(
    "--tokens",
    default=32,
    show_default=True,
    type=int,
    help="n tokens of the symmetric start (n ≤ d).",
)
@click.option("--dim", default=32, show_default=True, type=int, help="d.")
@click.option("--beta", default=3.0, show_default=True, type=float, help="β ≥ 0.")
@click.option(
    "--horizon",
    default=60.0,
    show_default=True,
    type=float,
    help="T of the γ(t) curves (terminal rates run to their own horizon).",
)
@click.option(
    "--alpha",
    default="1,0.5,2,4",
    show_default=True,
    help="nGPT α > 0; a list: the first is used for the scheme table, all in (b).",
)
@click.option("--tau", default=0.5, show_default=True, type=float, help="Mix-LN switch τ ≥ 0.")
@click.option("--r0", default=1.0, show_default=True, type=float, help="Start radius r0 > 0.")
@click.option("--seed", default=0, show_default=True, type=int, help="PRNG seed (random weights).")
@click.option(
    "--full-size",
    is_flag=True,
    help="Random weights at the paper's size: d = 512, n = 256, β = √d.",
)
@click.option(
    "--layers", default=48, show_default=True, type=int, help="Random-weight stack depth (part c)."
)
@click.option(
    "--runs",
    default=8,
    show_default=True,
    type=int,
    help="Independent random-weight runs (part c).",
)
@click.option(
    "--out",
    default="attndyn-results",
    show_default=True,
    help="Output directory: schemes.nc and schemes_*.png.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object to stdout.")
@cli_errors
def schemes(
    scheme_list,
    tokens,
    dim,
    beta,
    horizon,
    alpha,
    tau,
    r0,
    seed,
    full_size,
    layers,
    runs,
    out,
    as_json,
) -> None:
    """Clustering speed of the normalization schemes (seed 004 Figs 2-4, rate table).

    Writes OUT/schemes.nc (all curves, slopes, fitted rates with intervals, provenance)
    and OUT/schemes_{gamma,ngpt_alpha,random_weights,rates}.png.
    """
    names = [s.strip() for s in scheme_list.split(",") if s.strip()]
    alphas = floats("alpha", alpha)
    rw: dict[str, Any] = {"rw_layers": layers, "rw_runs": runs}
    if full_size:
        rw.update(rw_dim=512, rw_tokens=256)
    ds = schemes_study(
        schemes=names,
        tokens=tokens,
        dim=dim,
        beta=beta,
        horizon=horizon,
        alphas=alphas,
        tau=tau,
        r0=r0,
        seed=seed,
        **rw,
    )
    prov = json.loads(ds.attrs["provenance"])
    prov["command"] = command_line()
    ds.attrs["provenance"] = json.dumps(prov, default=str)
    out_dir = output_dir(out)
    ds.to_netcdf(out_dir / "schemes.nc")
    for key, fig in plot_schemes(ds).items():
        fig.savefig(out_dir / f"schemes_{key}.png", dpi=120)
    if as_json:
        emit_json(schemes_summary(ds))
    else:
        say(f"wrote {out_dir / 'schemes.nc'} and figures in {out_dir}")
