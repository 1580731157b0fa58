"""The modes study on the mean-field engine: the limit N → ∞ of ``attndyn modes`` (spec §7).

:func:`mean_field_modes` solves the continuity equation (:class:`attndyn.MeanFieldFlow`, S¹
or S²) from the 1/N floor of N uniform tokens, per point (d, N, β[, ε]) and trajectory,
and returns a dataset in the vocabulary of :func:`attndyn.studies.modes_study`: the same
names, dimensions and CF metadata for what both have (``mode_power`` with ``_se`` and
``_trajectory``, ``growth_rate``, ``growth_rate_se``, ``growth_rate_theory`` = 2λ_ℓ,
``ell_star``, ``ell_star_measured``, ``window_end``, ``linear``, ``driven``, the bend
fields), fitted the same way (:func:`attndyn.studies._modes_analysis.fit_growth`: the mean
over trajectories of the least-squares slopes of log P_ℓ over the window, with the
standard error). A density has no clusters: the cluster, energy and plateau fields of a
particle run are absent. :func:`mean_field_summary` gives the ``--json`` records
(``rates`` as :func:`~attndyn.studies._modes_analysis.rate_records` writes them).

**Starts.** ``start="tokens"``: the empirical measure of the very tokens ``attndyn modes``
draws for the same seed and point (float32 tokens from
``fold_in(fold_in(key(seed), point_id), i)``'s first half), so a particle run and its
limit start alike. ``start="floor"``: a draw of the coefficients' law for N uniform
tokens at large N (independent Gaussians, E P_ℓ = 1/N, uniform phases:
:meth:`~attndyn.MeanFieldFlow.coefficients_from_floor`), for any N: no tokens are drawn.

**The linear window.** Particles need a statistical window (``linear_window``: the
1/N noise and the drive of faster degrees); the mean field is deterministic, and its own
nonlinearity can be measured exactly: at every save the engine's derivative is split into
its linear part (the Jacobian at the uniform measure, by forward differentiation) and the
rest (:meth:`~attndyn.MeanFieldFlow.linear_residual`). The window is the saves before the
first where, for some degree ℓ = 1 … ell_max and some trajectory, the rest exceeds
``linear_tolerance`` (default 10⁻⁴) of the linear part. Within it the slope of log P_ℓ is
within that fraction of 2λ_ℓ at every instant, so the fitted rate (a weighted mean of the
slopes) is too: ``driven`` is False by construction and ``linear_residual`` records the
largest fraction met. A start is in its linear regime only if its perturbation is small:
the floor of N = 4,096 tokens (amplitudes ~1.6 %) is not, at the 10⁻⁴ level, for the slow
degrees, whose quadratic drive by the fast ones is then comparable to their own growth;
N = 10¹² (amplitudes 10⁻⁶) is. With too short a window (fewer than four saves) the rates
are NaN, never a fit of a nonlinear stretch.

**Common noise.** ``eps`` > 0: scalar common noise (seed 003 eq. 8) as the stochastic
continuity equation (:meth:`~attndyn.MeanFieldFlow.solve_noisy`, Itô–Milstein with step
``dt``), each trajectory with its own Brownian path from the second half of its key.
Then the trajectories differ by their paths as well as their starts; the window is
measured on the noise-free part of the derivative; ``growth_rate_theory`` stays 2λ_ℓ and
``growth_rate_theory_noise`` gives the mean slope of log P_ℓ the linearised equation
predicts, ``2λ_ℓ(1 − ε²c) − ε²λ_ℓ²`` (c = ⟨x, A⟩ at the uniform measure).
"""

import math
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import jax
import numpy as np
import xarray as xr

from .._core.errors import (
    ParameterError,
    check_choice,
    check_int,
    check_real_in,
    check_seed,
    check_sequence,
)
from .._core.saveat import SaveAt
from .._core.serialize import plain
from .._core.sphere import uniform_sphere
from .._estimate.dataset import (
    attach_provenance,
    coordinates,
    package_version,
    provenance_record,
    study_fields,
)
from .._estimate.keys import point_key
from .._models.mean_field import MEAN_FIELD_DIMS, MEAN_FIELD_KINDS, MeanFieldFlow, needed_modes
from ..theory._modes import mode_growth_rate, most_unstable_degree
from ._modes_analysis import MIN_WINDOW_SAVES, cf_name, driven_degrees, fit_growth, rate_records

__all__ = ["check_mean_field_study", "mean_field_modes", "mean_field_points", "mean_field_summary"]

#: How a mean-field modes study starts (module docstring).
STARTS = ("floor", "tokens")
#: The window ends where the nonlinear part of some degree's derivative passes this
#: fraction of its linear part (module docstring).
LINEAR_TOLERANCE = 1e-4
#: The most tokens whose empirical measure ``start="tokens"`` sums (N K² work on S²).
MAX_TOKEN_START = 1 << 24
#: The smallest N of the floor's law: below it the Gaussian law of every coefficient at
#: once is no measure's (its density, even its kernel smoothing, can be negative); the
#: empirical measure of tokens (``start="tokens"``) always is one.
MIN_FLOOR_TOKENS = 1e6
#: ``attndyn modes --engine mean-field``'s N when --n-tokens is not given: the floor's law
#: of 10¹² tokens, a perturbation of size 10⁻⁶ in every degree, linear to ~10⁻⁶ until
#: exp(λ t) has grown it a thousandfold (the limit's rates to the window's tolerance).
DEFAULT_FLOOR_TOKENS = 10**12
#: The largest N of the floor's law (its amplitude 1/√N must stay far above rounding).
MAX_FLOOR_TOKENS = 1e24


def mean_field_points(
    *,
    dims: Sequence[int],
    n_tokens: Sequence[int | float],
    betas: Sequence[float | int],
    eps: Sequence[float | int] | None = None,
) -> list[dict[str, Any]]:
    """The grid (d, N, β[, ε]) as ``attndyn modes`` writes its points (floats for β and
    ε, so that a point's key, and with ``start="tokens"`` its tokens, are the modes
    study's); ``eps=None``: no noise axis."""
    for name, values in (("dims", dims), ("n_tokens", n_tokens), ("betas", betas)):
        check_sequence(name, values)
        if not len(values):
            raise ParameterError(f"{name} is empty; give at least one value.")
    levels = [None] if eps is None else [float(e) for e in eps]
    points = []
    for d in dims:
        for n in n_tokens:
            for b in betas:
                for e in levels:
                    point: dict[str, Any] = {"dim": d, "n_tokens": n, "beta": float(b)}
                    if e is not None:
                        point["eps"] = e
                    points.append(point)
    return points


def _check(points, attention, start, horizon, saves, ell_max, n_trajectories, seed, tol):
    check_choice("attention", attention, MEAN_FIELD_KINDS)
    check_choice("start", start, STARTS)
    check_real_in("horizon", horizon, lower=0.0, lower_open=True)
    check_int("saves", saves, lower=MIN_WINDOW_SAVES, upper=10_000)
    check_int("ell_max", ell_max, lower=1, upper=256)
    check_int("n_trajectories", n_trajectories, lower=2, upper=4096)
    check_seed("seed", seed)
    check_real_in("linear_tolerance", tol, lower=0.0, lower_open=True, upper=1.0)
    if not points:
        raise ParameterError("points is empty; give at least one (d, N, beta) point.")
    for p in points:
        if isinstance(p["dim"], bool) or p["dim"] not in MEAN_FIELD_DIMS:
            raise ParameterError(
                f"dim={p['dim']!r}: the mean-field engine is built for dim 2 (S^1) and 3 (S^2)."
            )
        if start == "tokens":
            check_int("n_tokens", p["n_tokens"], lower=1, upper=MAX_TOKEN_START)
        else:
            check_real_in("n_tokens", p["n_tokens"], lower=MIN_FLOOR_TOKENS, upper=MAX_FLOOR_TOKENS)
        check_real_in("beta", p["beta"], lower=0.0, lower_open=True)
        check_real_in("eps", p.get("eps", 0.0), lower=0.0)


def check_mean_field_study(
    points: Sequence[Mapping[str, Any]],
    *,
    horizon: float,
    saves: int,
    ell_max: int,
    seed: int = 0,
    attention: str = "softmax",
    n_trajectories: int = 4,
    start: str = "floor",
    dt: float = 1e-3,
    linear_tolerance: float = LINEAR_TOLERANCE,
) -> None:
    """Every argument of :func:`mean_field_modes` checked, nothing solved: the command
    line refuses bad input before it makes an output folder."""
    _check(
        points, attention, start, horizon, saves, ell_max, n_trajectories, seed, linear_tolerance
    )
    if any(p.get("eps", 0.0) > 0 for p in points):
        check_real_in("dt", dt, lower=0.0, lower_open=True, upper=float(horizon))


def mean_field_modes(
    points: Sequence[Mapping[str, Any]],
    *,
    horizon: float,
    saves: int,
    ell_max: int,
    seed: int = 0,
    attention: str = "softmax",
    n_trajectories: int = 4,
    start: str = "floor",
    dt: float = 1e-3,
    n_modes: int | None = None,
    linear_tolerance: float = LINEAR_TOLERANCE,
    metadata: Mapping[str, Any] | None = None,
) -> xr.Dataset:
    """Solve the mean-field equation at every point (:func:`mean_field_points`) for
    ``n_trajectories`` starts, observe P_ℓ (ℓ ≤ ell_max) at ``saves`` times evenly spaced
    in [0, horizon], fit the rates over the linear window (module docstring): a CF-style
    dataset with provenance in the modes study's vocabulary.

    ``n_modes``: K (default: what β needs, :func:`attndyn._models.mean_field.needed_modes`,
    and at least ell_max). ``dt``: the step of the noisy solves (points with ε > 0)."""
    points = [dict(p) for p in points]
    check_mean_field_study(
        points,
        horizon=horizon,
        saves=saves,
        ell_max=ell_max,
        seed=seed,
        attention=attention,
        n_trajectories=n_trajectories,
        start=start,
        dt=dt,
        linear_tolerance=linear_tolerance,
    )
    flows = [_flow(p, attention, ell_max, n_modes) for p in points]
    started = time.process_time()
    times = np.linspace(0.0, float(horizon), int(saves))
    per_point = [
        _run_point(flow, p, times, ell_max, seed, n_trajectories, start, dt, linear_tolerance)
        for flow, p in zip(flows, points, strict=True)
    ]
    ds = _dataset(per_point, points, times, attention, ell_max)
    fields = {
        **study_fields("modes"),
        "engine": "mean-field",
        "attention": attention,
        "start": start,
        "horizon": float(horizon),
        "saves": int(saves),
        "seed": int(seed),
        "n_trajectories": int(n_trajectories),
        "ell_max": int(ell_max),
        "n_modes": [f.n_modes for f in flows],
        "linear_tolerance": float(linear_tolerance),
        "dt": float(dt),
        "dtype": "float64",
        "model_equation": "mean-field continuity equation of the attention flow (spec 7)"
        + ("; scalar common noise, seed 003 eq. 8" if any("eps" in p for p in points) else ""),
        **(dict(metadata) if metadata else {}),
    }
    attach_provenance(ds, provenance_record(time.process_time() - started, **fields))
    return _attach_cf(ds, attention, fields.get("command"))


def _flow(point, attention, ell_max, n_modes) -> MeanFieldFlow:
    dim, beta = int(point["dim"]), float(point["beta"])
    k = n_modes if n_modes is not None else max(needed_modes(beta, dim), ell_max)
    if k < ell_max:
        raise ParameterError(f"n_modes={n_modes} is below ell_max={ell_max}; raise it.")
    return MeanFieldFlow(beta, attention, dim, n_modes=k)


def _starts(flow, point, seed, n_trajectories, start) -> tuple[np.ndarray, Any]:
    """The starts of every trajectory, and the key of their Brownian paths."""
    key = point_key(jax.random.key(seed), point)
    starts = []
    for i in range(n_trajectories):
        first, _ = jax.random.split(jax.random.fold_in(key, i))
        if start == "tokens":
            x = uniform_sphere(
                key=first, n_tokens=int(point["n_tokens"]), dim=flow.dim, dtype=np.dtype("float32")
            )
            starts.append(flow.coefficients_from_tokens(np.asarray(x)))
        else:
            bits = np.asarray(jax.random.key_data(first)).ravel().tolist()
            rng = np.random.default_rng(bits)
            starts.append(flow.coefficients_from_floor(float(point["n_tokens"]), rng))
    return np.stack(starts), jax.random.split(key)[1]


def _run_point(flow, point, times, ell_max, seed, n_traj, start, dt, tol) -> dict[str, Any]:
    """One point's solves, powers, window and fits."""
    c0, noise_key = _starts(flow, point, seed, n_traj, start)
    saveat = SaveAt(float(times[-1]), ts=tuple(times.tolist()))
    eps = float(point.get("eps", 0.0))
    if eps > 0:
        sol = flow.solve_noisy(c0, saveat, eps=eps, dt=dt, key=noise_key)
    else:
        sol = flow.solve(c0, saveat)
    power = sol.mode_powers(ell_max)  # (traj, time, ell)
    residual = flow.linear_residual(sol.coefficients, ell_max).max(axis=0)  # (time, ell)
    ends = np.full(ell_max + 1, len(times))
    for ell in range(1, ell_max + 1):
        over = np.nonzero(residual[:, ell] > tol)[0]
        ends[ell] = int(over[0]) if over.size else len(times)
    fits = [
        fit_growth(power[..., ell : ell + 1], times, int(ends[ell])) for ell in range(ell_max + 1)
    ]
    fit = {key: np.concatenate([f[key] for f in fits]) for key in fits[0]}
    inside = np.asarray(
        [residual[: ends[ell], ell].max() if ends[ell] else np.nan for ell in range(ell_max + 1)]
    )
    return {
        "power": power,
        "fit": fit,
        "ends": ends,
        "residual": inside,
        "density_min": sol.density_min.min(axis=0),
        "velocity_tail": sol.velocity_tail.max(axis=0),
        "density_tail": sol.density_tail.max(axis=0),
        "n_modes": flow.n_modes,
    }


def _theory(point, attention, ell) -> tuple[np.ndarray, np.ndarray, int]:
    """2λ_ℓ (N = ∞), the noisy mean log-slope, ℓ* (module docstring)."""
    beta, dim = float(point["beta"]), int(point["dim"])
    lam = np.asarray(mode_growth_rate(beta, dim, ell, attention), np.float64)
    eps = float(point.get("eps", 0.0))
    radial = _radial_part(beta, dim, attention)
    noisy = 2 * lam * (1 - eps**2 * radial) - eps**2 * lam**2
    return 2 * lam, noisy, int(most_unstable_degree(beta, dim, attention))


def _radial_part(beta: float, dim: int, attention: str) -> float:
    """c = ⟨x, A⟩ at the uniform measure: ``D_0'(β)/D_0(β)`` (softmax) or ``D_0'(β)``
    (unnormalised), D_0 = I_0 (S¹) or i_0 (S²) (``I_0' = I_1``, ``i_0' = i_1``)."""
    from scipy import special

    if dim == 2:
        ratio, base = special.ive(1, beta) / special.ive(0, beta), special.ive(1, beta)
    else:
        ratio = special.spherical_in(1, beta) / special.spherical_in(0, beta)
        base = float(special.spherical_in(1, beta))
        return float(ratio if attention == "softmax" else base)
    return float(ratio if attention == "softmax" else base * math.exp(beta))


def _mean_se(values: np.ndarray, axis: int = 0) -> tuple[np.ndarray, np.ndarray]:
    n = values.shape[axis]
    return values.mean(axis=axis), values.std(axis=axis, ddof=1) / math.sqrt(n)


def _dataset(per_point, points, times, attention, ell_max) -> xr.Dataset:
    ell = np.arange(ell_max + 1)
    power = np.stack([r["power"] for r in per_point])  # (point, traj, time, ell)
    mean, se = _mean_se(power, axis=1)
    theory = [_theory(p, attention, ell) for p in points]
    fits = {key: np.stack([r["fit"][key] for r in per_point]) for key in per_point[0]["fit"]}
    fitted = np.isfinite(fits["rate"])
    fitted[:, 0] = False
    driven_p = [driven_degrees(p)[1] for p in fits["bend_p"]]
    residual = np.stack([r["residual"] for r in per_point])
    driven = np.zeros_like(fitted)  # never within the window (module docstring)
    masked = np.where(fitted, fits["rate"], -np.inf)
    star = np.where(fitted.any(axis=1), np.argmax(masked, axis=1), 0)
    ends = np.stack([r["ends"] for r in per_point])  # saves in each degree's window
    end_times = np.where(ends >= MIN_WINDOW_SAVES, times[np.maximum(ends - 1, 0)], 0.0)
    shortest = np.where(fitted, end_times, np.inf).min(axis=1)
    variables: dict[str, Any] = {
        "mode_power": (("point", "time", "ell"), mean),
        "mode_power_se": (("point", "time", "ell"), se),
        "mode_power_trajectory": (("point", "trajectory", "time", "ell"), power),
        "growth_rate_theory": (("point", "ell"), np.stack([t[0] for t in theory])),
        "growth_rate_theory_noise": (("point", "ell"), np.stack([t[1] for t in theory])),
        "ell_star": ("point", np.asarray([t[2] for t in theory], np.int64)),
        "growth_rate": (("point", "ell"), fits["rate"]),
        "growth_rate_se": (("point", "ell"), fits["rate_se"]),
        "growth_bend": (("point", "ell"), fits["bend"]),
        "growth_bend_se": (("point", "ell"), fits["bend_se"]),
        "growth_bend_p": (("point", "ell"), fits["bend_p"]),
        "growth_bend_p_holm": (("point", "ell"), np.stack(driven_p)),
        "driven": (("point", "ell"), driven),
        "linear": (("point", "ell"), fitted & ~driven),
        "linear_residual": (("point", "ell"), residual),
        "window_end": ("point", np.where(np.isfinite(shortest), shortest, 0.0)),
        "window_end_degree": (("point", "ell"), end_times),
        "ell_star_measured": ("point", star.astype(np.int64)),
        "n_modes": ("point", np.asarray([r["n_modes"] for r in per_point], np.int64)),
    }
    for name in ("density_min", "velocity_tail", "density_tail"):
        variables[name] = (("point", "time"), np.stack([r[name] for r in per_point]))
    coords = {
        "point": np.arange(len(points)),
        "trajectory": np.arange(power.shape[1]),
        "time": np.asarray(times, np.float64),
        "ell": ell,
        **coordinates(points),
    }
    return xr.Dataset(variables, coords=coords)


#: (long_name, units) of the variables a particle run does not have, or means otherwise.
CF = {
    "growth_rate_theory": (
        "growth rate 2 lambda_l of P_l at the uniform state (theory, N = inf)",
        "1",
    ),
    "growth_rate_theory_noise": (
        "mean slope of log P_l of the linearised noisy equation, "
        "2 lambda_l (1 - eps^2 c) - eps^2 lambda_l^2 (theory)",
        "1",
    ),
    "driven": (
        "whether the nonlinear part of the degree's derivative exceeded linear_tolerance of "
        "its linear part within the window (never: the window ends before)",
        "1",
    ),
    "linear_residual": (
        "largest nonlinear/linear ratio of the degree's derivative within the window",
        "1",
    ),
    "n_modes": ("degrees K kept by the mean-field engine", "1"),
    "window_end": ("last save time of the shortest linear window of a fitted degree", "1"),
    "window_end_degree": ("last save time of the degree's linear window (0: none)", "1"),
    "density_min": ("smallest value of the truncated density on the grid, over trajectories", "1"),
    "velocity_tail": (
        "largest share of the velocity in the top third of the degrees kept, over trajectories",
        "1",
    ),
    "density_tail": ("largest sqrt(P_l) in the top third of the degrees kept", "1"),
    "time": ("model time t of the mean-field flow", "1"),
}


def _attach_cf(ds: xr.Dataset, attention: str, command: str | None) -> xr.Dataset:
    for name in [*ds.data_vars, *ds.coords]:
        long_name, units = CF.get(str(name)) or cf_name(str(name))
        ds[name].attrs.update(long_name=long_name, units=units)
    now = datetime.now(UTC).isoformat(timespec="seconds")
    ds.attrs.update(
        title=f"attndyn modes: the mean-field limit from the uniform state ({attention} "
        "attention, mean-field engine)",
        Conventions="CF-1.10",
        history=f"{now}: {command or 'attndyn.studies.mean_field.mean_field_modes'}",
        source=f"attndyn {package_version()}",
        references="spec section 7; docs/guides/many-tokens.md",
    )
    return ds


def mean_field_summary(ds: xr.Dataset) -> list[dict[str, Any]]:
    """One JSON-ready record per point: its coordinates, ℓ* (theory and data), the
    linear window's end, every degree's fitted rate (``rates``, as the particles' records:
    :func:`~attndyn.studies._modes_analysis.rate_records`, with ``theory_power_rate`` =
    2λ_ℓ), and the engine's resolution diagnostics."""
    records = []
    for i in range(ds.sizes["point"]):
        row = ds.isel(point=i)
        record: dict[str, Any] = {
            name: row[name].item()
            for name in ("dim", "n_tokens", "beta", "eps")
            if name in row.coords
        }
        record.update(
            engine="mean-field",
            ell_star=int(row["ell_star"]),
            ell_star_measured=int(row["ell_star_measured"]),
            window_end=float(row["window_end"]),
            rates=rate_records(row),
            n_modes=int(row["n_modes"]),
            density_min=float(row["density_min"].min()),
            velocity_tail_max=float(row["velocity_tail"].max()),
        )
        records.append(record)
    return plain(records)
