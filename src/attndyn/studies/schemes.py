"""Clustering speed of the six normalization schemes (seed 004) as a typed study.

Four parts, all in one dataset (:func:`schemes_study`):

(a) γ(t) from the symmetric orthogonal start for every scheme: the reduced ODE
    (Thm 4.1) drawn over the full n-particle solve (seed 004 Fig. 2);
(b) nGPT for several α (Fig. 3);
(c) random weights, layer by layer (Fig. 4): see :func:`random_weights_cosine`;
(d) fitted terminal rates of 1 − γ against theory (:func:`attndyn.studies.fit_terminal_rate`).
"""

import dataclasses
import math
import sys
import time
from collections.abc import Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import xarray as xr
from jaxtyping import Array, Float, PRNGKeyArray
from tqdm.auto import tqdm

from .._core import defaults
from .._core.attention import Attention
from .._core.errors import (
    NonFiniteError,
    ParameterError,
    check_int,
)
from .._core.linalg import dot
from .._core.observables import mean_cosine
from .._core.renamed import renamed
from .._core.saveat import SaveAt
from .._core.schemes import NGPT, SCHEME_NAMES, AbstractScheme
from .._core.sphere import uniform_sphere
from .._core.weights import RandomWeights
from .._estimate.dataset import attach_provenance, provenance, provenance_record, study_fields
from .._io.metadata import describe
from .._models.integrators import ODEIntegrator
from .._models.ode import NormalizedAttentionODE
from .._models.symmetric import SymmetricODE, symmetric_start
from ..theory import initial_slope, terminal_rate_theory
from ._schemes_checks import (
    FIT_GAP as FIT_GAP,
    FIT_HORIZON as FIT_HORIZON,
    MAX_SIZE as MAX_SIZE,
    R0_RANGE as R0_RANGE,
    STIFF_STEPS_PER_TIME as STIFF_STEPS_PER_TIME,
    TAU_MAX as TAU_MAX,
    _check_arguments,
    _schemes,
    check_horizon_steps as check_horizon_steps,
    check_schemes_start as check_schemes_start,
)
from .rates import fit_terminal_rate

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
    weights: RandomWeights | None = None,
) -> Float[Array, " n_layers_plus_1"]:
    """Mean pairwise cosine after each layer of a random-weight stack (seed 004 Fig. 4).

    One head. By default layer n draws fresh Q_n, K_n, V_n with i.i.d. N(0, 1/d) entries
    (Kaiming scale for a linear layer: |V x| ≈ |x|; ``RandomWeights("kaiming", "gaussian",
    redraw_every=1)``) and applies the scheme's map with update ``V_n A(Z; Q_n, K_n)`` and
    L = 1: a plain residual stack, updates of size O(1) as in a transformer at
    initialisation, t = n the layer index (sqrt-scaling divides by √(n + 1)). Mix-LN's τ is
    read as a fraction of the depth (Post-LN for the first ⌈τ·n_layers⌉ layers). Tokens
    start uniform on the sphere. Returns n_layers + 1 values (the start included).

    ``weights`` changes how the weights are drawn: ``redraw_every=None`` draws them once
    and keeps them for every layer (frozen, as in a real network), ``redraw_every=k``
    every k layers; a ``key`` in ``weights`` makes every call share the same draws (runs
    then differ only by their starts). Draw b uses ``fold_in(base, b)`` with base that key
    or this run's own layer key.
    """
    check_int("n_tokens", n_tokens, lower=2)
    check_int("dim", dim, lower=2)
    check_int("n_layers", n_layers, lower=1)
    if weights is None:
        weights = RandomWeights("kaiming", "gaussian", redraw_every=1)
    scheme = scheme.scale_switch(n_layers)  # Mix-LN's τ: a fraction of the stack
    start_key, layers_key = jax.random.split(key)
    x0 = uniform_sphere(key=start_key, n_tokens=n_tokens, dim=dim)
    base = layers_key if weights.key is None else weights.key

    def layer(x, n):
        block = n if weights.redraw_every is None else n // weights.redraw_every
        if weights.frozen:
            block = jnp.zeros_like(n)
        drawn = weights.sample(jax.random.fold_in(base, block), dim, x.dtype)
        attention = Attention(beta, query=drawn.query, key_matrix=drawn.key_matrix)

        def update(z):
            out = attention(z)
            return out if drawn.value is None else dot(out, drawn.value.T)

        x = scheme.layer(x, update, layer=n.astype(x.dtype), depth=1)
        return x, mean_cosine(x)

    _, cosines = jax.lax.scan(layer, x0, jnp.arange(n_layers))
    return jnp.concatenate([mean_cosine(x0)[None], cosines])


def _rate_window(law: str, t_start: float, value: float) -> tuple[np.ndarray, tuple[float, float]]:
    """Save times and fit window past ``t_start`` (when 1 − γ first reaches 10⁻²).

    The window spans 1 − γ falling by ≈ e^{−40} (exponential laws, from the predicted
    rate) or three decades of t (power law): deep in the terminal regime.
    """
    if law == "power":
        end = 1000.0 * t_start
        return np.geomspace(t_start, end, 160), (10.0 * t_start, end)
    if law == "sqrt-exponential":
        # Evenly spaced in the law's variable √(t + 1).
        root = math.sqrt(t_start + 1.0)
        ts = np.linspace(root, root + 40.0 / value, 160) ** 2 - 1.0
        return ts, (float(ts[40]), float(ts[-1]))
    end = t_start + 40.0 / value
    ts = np.linspace(t_start, end, 160)
    return ts, (float(ts[40]), end)


#: Where the probe looks for that start: geometric in t up to FIT_HORIZON and one step of
#: its grid past it, so that the solver's own error (1e-6 relative, against the closed form
#: 1e-11) cannot move a start the closed form puts before FIT_HORIZON out of the probe.
_PROBE = np.geomspace(1e-2, FIT_HORIZON, 400)
_PROBE = np.append(_PROBE, _PROBE[-1] * _PROBE[-1] / _PROBE[-2])


def terminal_fit(scheme: AbstractScheme, *, beta: float, n_tokens: int, r0: float):
    """Fit the terminal rate of 1 − γ on the reduced ODE, deep in the terminal regime.

    The reduced ODE runs in float64 (it is two numbers): in float32 the fit window of an
    exponential law, 40/rate long, is not resolved once it starts past t ≈ 1e4 (float32's
    spacing at 1e7 is 1).
    """
    theory = terminal_rate_theory(scheme)
    with jax.enable_x64(True):
        probe = _reduced(scheme, beta, n_tokens, r0, _PROBE)
        reached = np.nonzero(np.asarray(probe.log_gap) <= math.log(FIT_GAP))[0]
        if reached.size == 0:
            raise ParameterError(
                f"{scheme.name}: 1 − γ does not fall to {FIT_GAP:g} by t = {_PROBE[-1]:.3g}, "
                "so its terminal rate cannot be fitted; lower beta (check_schemes_start "
                "refuses this in closed form)."
            )
        t_start = float(_PROBE[reached[0]])
        ts, window = _rate_window(theory.law, t_start, theory.value)
        fits = []
        for rtol in (1e-8, 1e-10):
            sol = _reduced(
                scheme, beta, n_tokens, r0, ts, ODEIntegrator(rtol=rtol, atol=rtol / 100)
            )
            fits.append(
                fit_terminal_rate(sol.ts, law=theory.law, log_gap=sol.log_gap, window=window)
            )
    # The fit's interval covers the pre-asymptotic bias; the solver's own global error
    # (seen: 1.1e-6 in sqrt-scaling's exactly linear law at rtol 1e-8 in float32) is
    # estimated by a solve 100x tighter, and the interval widened by the difference.
    loose, fit = fits
    solver = abs(fit.value - loose.value)
    fit = dataclasses.replace(fit, interval=(fit.interval[0] - solver, fit.interval[1] + solver))
    return theory, fit, (np.asarray(sol.ts), np.asarray(sol.log_gap))


def _reduced(scheme, beta, n_tokens, r0, ts, integrator=None):
    """The reduced ODE's solution at the save times ``ts``."""
    saveat = SaveAt(float(ts[-1]), ts)
    integrator = integrator or ODEIntegrator(rtol=1e-8, atol=1e-10)
    return SymmetricODE(scheme, beta, n_tokens, r0, saveat, integrator).solve()


def _measured_slope(scheme, x0, *, beta: float, horizon: float, theory_slope: float) -> float:
    """γ'(0) of the full solve: Richardson extrapolation of γ(h)/h, second order."""
    h = min(1e-3 / max(theory_slope, 1e-12), horizon / 4)
    small = NormalizedAttentionODE(
        Attention(beta),
        scheme,
        saveat=SaveAt(2 * h, (h, 2 * h)),
        integrator=ODEIntegrator(rtol=1e-7, atol=1e-10),
    ).solve(x0)
    g = np.asarray(jax.vmap(mean_cosine)(small.theta), dtype=np.float64)
    return float((4 * g[0] - g[1]) / (2 * h))


class _Stages:
    """The study's progress bar on stderr: one step per stage (two per scheme, nGPT over
    α, one random-weight stack per scheme), the running stage named beside it."""

    def __init__(self, total: int, progress: bool):
        self.bar = tqdm(
            total=total,
            unit="stage",
            desc="attndyn schemes",
            file=sys.stderr,
            disable=not progress,
            dynamic_ncols=True,
        )
        self.started = False

    def begin(self, label: str) -> None:
        """Count the stage before as done and name this one."""
        if self.started:
            self.bar.update(1)
        self.started = True
        self.bar.set_postfix_str(label)

    def close(self) -> None:
        if self.started:
            self.bar.update(1)
        self.bar.close()


def _scheme_part(scheme, x0, stages, *, beta, n_tokens, r0, horizon, ts) -> dict[str, Any]:
    """Part (a) and (d) for one scheme: γ(t) both ways, initial slopes, terminal rate."""
    stages.begin(f"{scheme.name}: symmetric start")
    red = SymmetricODE(scheme, beta, n_tokens=n_tokens, r0=r0, saveat=SaveAt(horizon, ts)).solve()
    full = NormalizedAttentionODE(Attention(beta), scheme, saveat=SaveAt(horizon, ts)).solve(x0)
    _check_solved(f"{scheme.name} (symmetric start)", horizon, red.gamma, red.r)
    # nGPT's clustered tokens make its full ODE stiff at rate α: about 0.3·α·horizon steps.
    lower = "the horizon, or alpha" if "alpha" in scheme.parameters else "the horizon"
    _check_solved(f"{scheme.name} (full ODE)", horizon, full.theta, lower=lower)
    theory_slope = initial_slope(scheme, beta=beta, n_tokens=n_tokens, r0=r0)
    stages.begin(f"{scheme.name}: terminal rate")
    theory, fit, curve = terminal_fit(scheme, beta=beta, n_tokens=n_tokens, r0=r0)
    return {
        "gamma_reduced": np.asarray(red.gamma),
        "r_reduced": np.asarray(red.r),
        "gamma_full": np.asarray(jax.vmap(mean_cosine)(full.theta)),
        "sphere_drift": float(jnp.max(full.sphere_drift)),
        "initial_slope": _measured_slope(
            scheme, x0, beta=beta, horizon=horizon, theory_slope=theory_slope
        ),
        "initial_slope_theory": theory_slope,
        "terminal_rate": fit.value,
        "terminal_rate_lower": fit.interval[0],
        "terminal_rate_upper": fit.interval[1],
        "terminal_rate_theory": theory.value,
        "terminal_rate_law": fit.law,
        "terminal_rate_variable": fit.variable,
        "terminal_law": theory.formula,
        "curve": curve,
    }


def _check_solved(what: str, horizon: float, *arrays, lower: str = "the horizon") -> None:
    """Refuse NaN from a solve (a failed solve returns NaN states: max_steps reached, or a
    field that overflowed) instead of writing it into the dataset; ``lower`` names what
    to lower."""
    if not all(bool(np.all(np.isfinite(np.asarray(a)))) for a in arrays):
        raise NonFiniteError(
            f"the ODE solve of {what} failed (NaN states) before horizon={horizon:g}: its "
            f"step budget (max_steps) was used up or the field overflowed; lower {lower}."
        )


def _ngpt_part(alphas, *, beta, n_tokens, r0, horizon, ts) -> np.ndarray:
    """Part (b): (alpha, time) γ of nGPT's reduced ODE for every α."""
    saveat = SaveAt(horizon, ts)
    ngpt = np.stack(
        [
            np.asarray(SymmetricODE(NGPT(alpha=a), beta, n_tokens, r0, saveat).solve().gamma)
            for a in alphas
        ]
    )
    _check_solved("nGPT over alpha", horizon, ngpt)
    return ngpt


def _random_weights_part(
    objs, stages, *, seed, rw_n_tokens, rw_dim, rw_beta, rw_n_layers, rw_n_trajectories
):
    """Part (c): (scheme, run, layer) mean cosines of random-weight stacks."""
    keys = jax.random.split(jax.random.key(seed), rw_n_trajectories)
    rw = []
    for scheme in objs:
        stages.begin(f"{scheme.name}: random weights")
        run = eqx.filter_jit(
            jax.vmap(
                lambda k, s=scheme: random_weights_cosine(
                    s, n_tokens=rw_n_tokens, dim=rw_dim, beta=rw_beta, n_layers=rw_n_layers, key=k
                )
            )
        )
        rw.append(np.asarray(run(keys)))
    return np.stack(rw)


def _padded_curves(curves) -> tuple[np.ndarray, np.ndarray]:
    """The terminal-rate curves (t, log gap) padded with NaN to a common length."""
    n_rate = max(len(c[0]) for c in curves)
    rate_t = np.full((len(curves), n_rate), np.nan)
    rate_log_gap = np.full((len(curves), n_rate), np.nan)
    for i, (t_, lg) in enumerate(curves):
        rate_t[i, : len(t_)] = t_
        rate_log_gap[i, : len(lg)] = lg
    return rate_t, rate_log_gap


#: Per-scheme variables of the dataset, in order.
_SCHEME_VARIABLES = (
    "initial_slope",
    "initial_slope_theory",
    "terminal_rate",
    "terminal_rate_lower",
    "terminal_rate_upper",
    "terminal_rate_theory",
    "terminal_rate_law",
    "terminal_rate_variable",
    "terminal_law",
)


def _dataset(parts, ngpt, rw, *, names, ts, alphas, rw_n_layers, rw_n_trajectories) -> xr.Dataset:
    rate_t, rate_log_gap = _padded_curves([p["curve"] for p in parts])
    data = {
        "gamma_reduced": (("scheme", "time"), np.stack([p["gamma_reduced"] for p in parts])),
        "gamma_full": (("scheme", "time"), np.stack([p["gamma_full"] for p in parts])),
        "r_reduced": (("scheme", "time"), np.stack([p["r_reduced"] for p in parts])),
        "sphere_drift": ("scheme", np.asarray([p["sphere_drift"] for p in parts])),
        **{name: ("scheme", np.asarray([p[name] for p in parts])) for name in _SCHEME_VARIABLES},
        "rate_time": (("scheme", "rate_point"), rate_t),
        "rate_log_gap": (("scheme", "rate_point"), rate_log_gap),
        "ngpt_gamma": (("alpha", "time"), ngpt),
        "random_weights_cosine": (("scheme", "run", "layer"), rw),
    }
    return xr.Dataset(
        data,
        coords={
            "scheme": names,
            "time": ts,
            "alpha": np.asarray(alphas, dtype=np.float64),
            "layer": np.arange(rw_n_layers + 1),
            "run": np.arange(rw_n_trajectories),
        },
    )


@renamed(
    tokens="n_tokens",
    rw_tokens="rw_n_tokens",
    rw_layers="rw_n_layers",
    rw_runs="rw_n_trajectories",
)
def schemes_study(
    *,
    schemes: Sequence[str] = SCHEME_NAMES,
    n_tokens: int = defaults.SCHEMES_N_TOKENS,
    dim: int = defaults.SCHEMES_DIM,
    beta: float = defaults.SCHEMES_BETA,
    horizon: float = defaults.horizon_of("schemes"),
    alphas: Sequence[float] = defaults.SCHEMES_ALPHAS,
    tau: float = defaults.TAU,
    r0: float = defaults.R0,
    seed: int = defaults.SEED,
    rw_dim: int = defaults.RANDOM_WEIGHTS["rw_dim"],
    rw_n_tokens: int = defaults.RANDOM_WEIGHTS["rw_n_tokens"],
    rw_beta: float | None = None,
    rw_n_layers: int = defaults.RANDOM_WEIGHTS["rw_n_layers"],
    rw_n_trajectories: int = defaults.RANDOM_WEIGHTS["rw_n_trajectories"],
    progress: bool = True,
) -> xr.Dataset:
    """All four parts as one dataset (see the module docstring); ``alphas[0]`` is nGPT's α.
    ``progress`` shows a bar of the study's stages on stderr."""
    started = time.perf_counter()
    # Every argument, and what the study would only find mid-run (n > d, a radius float32
    # cannot hold, a terminal-rate fit that would start after t = 1e7), before any solve.
    _check_arguments(
        schemes, n_tokens=n_tokens, dim=dim, beta=beta, horizon=horizon, alphas=alphas, tau=tau,
        r0=r0, seed=seed, rw_dim=rw_dim, rw_n_tokens=rw_n_tokens, rw_beta=rw_beta,
        rw_n_layers=rw_n_layers, rw_n_trajectories=rw_n_trajectories,
    )  # fmt: skip
    x0 = symmetric_start(n_tokens, dim, r0)
    rw_beta = math.sqrt(rw_dim) if rw_beta is None else rw_beta
    alpha = float(alphas[0])
    objs = _schemes(schemes, tau=tau, alpha=alpha)
    ts = np.linspace(0.0, horizon, N_SAVES)
    kw = {"beta": beta, "n_tokens": n_tokens, "r0": r0, "horizon": horizon, "ts": ts}
    stages = _Stages(3 * len(objs) + 1, progress)
    try:
        parts = [_scheme_part(scheme, x0, stages, **kw) for scheme in objs]
        stages.begin("nGPT over alpha")
        ngpt = _ngpt_part(alphas, **kw)
        rw = _random_weights_part(
            objs, stages, seed=seed, rw_n_tokens=rw_n_tokens, rw_dim=rw_dim, rw_beta=rw_beta,
            rw_n_layers=rw_n_layers, rw_n_trajectories=rw_n_trajectories,
        )  # fmt: skip
    finally:
        stages.close()
    names = [s.name for s in objs]
    ds = _dataset(
        parts,
        ngpt,
        rw,
        names=names,
        ts=ts,
        alphas=alphas,
        rw_n_layers=rw_n_layers,
        rw_n_trajectories=rw_n_trajectories,
    )
    params = {
        "beta": beta, "n": n_tokens, "d": dim, "r0": r0, "alpha": alpha,
        "alphas": list(map(float, alphas)), "tau": tau, "horizon": horizon,
        "schemes": list(names),
        "random_weights": {
            "d": rw_dim, "n": rw_n_tokens, "beta": rw_beta, "layers": rw_n_layers,
            "runs": rw_n_trajectories,
        },
    }  # fmt: skip
    return _with_provenance(ds, params, seed=seed, seconds=time.perf_counter() - started)


def _with_provenance(ds: xr.Dataset, params: dict, *, seed: int, seconds: float) -> xr.Dataset:
    record = provenance_record(
        seconds,
        **study_fields("schemes"),
        params=params,
        random_seed=seed,  # named apart from the papers ("seed 004" is a paper)
        description="attndyn schemes: seed 004 Figs 2-4 and terminal rates",
    )
    describe(ds, title=TITLE)
    return attach_provenance(ds, record)


#: The ``title`` of the dataset.
TITLE = (
    "attndyn schemes: clustering speed of the normalization schemes from the symmetric "
    "start, nGPT over alpha, random weights and terminal rates (seed 004 Figs. 2-4)"
)


def _rate_law(row: xr.Dataset) -> xr.DataArray:
    """The terminal law of a scheme's row: ``terminal_rate_law``, or ``terminal_rate_kind``
    in a dataset of attndyn 0.4."""
    return row["terminal_rate_law" if "terminal_rate_law" in row else "terminal_rate_kind"]


def schemes_summary(ds: xr.Dataset) -> dict[str, Any]:
    """The ``--json`` object of a :func:`schemes_study` dataset."""
    prov = provenance(ds)
    params = prov["params"]
    out: dict[str, Any] = {
        "params": {k: params[k] for k in ("beta", "n", "d", "r0", "alpha", "tau")},
        "schemes": {},
        "seed": prov["random_seed"],
        "package_version": prov["attndyn_version"],
        "seconds": prov["seconds"],
    }
    for name in ds["scheme"].values:
        row = ds.sel(scheme=name)
        law = str(_rate_law(row).values)
        out["schemes"][str(name)] = {
            "initial_slope": float(row["initial_slope"]),
            "initial_slope_theory": float(row["initial_slope_theory"]),
            "terminal_rate": {
                # "law" names the law (0.4 wrote it as "kind", still written beside
                # it in 0.5; its formula, 0.4's "law", is "formula").
                "law": law,
                "kind": law,
                "variable": str(row["terminal_rate_variable"].values),
                "formula": str(row["terminal_law"].values),
                "value": float(row["terminal_rate"]),
                "interval": [float(row["terminal_rate_lower"]), float(row["terminal_rate_upper"])],
            },
            "terminal_rate_theory": float(row["terminal_rate_theory"]),
        }
    return out
