"""What a modes study reports from its per-trajectory observables (plain NumPy).

- **Means** over trajectories with standard errors (sd/√n) at every save.
- **Theory**: 2λ_ℓ, the growth rate of the mode power P_ℓ of the uniform state for the
  model's depth and N (:func:`attndyn.theory.mode_growth_rate`; written for Post-LN,
  Q = K = V = I, no noise), and ℓ*.
- **Growth rates** fitted over each point's *linear window* (:func:`linear_window`): every
  trajectory's log P_ℓ(t) is fitted by least squares over the window's saves; the rate is
  the mean of the trajectories' slopes and its error their standard error. A degree whose
  log-power bends upward within the window (driven by products of faster degrees) is
  flagged out of its linear window (``linear``).
- **Plateau** (:func:`plateau`): when the tokens first sit in clusters, how many they
  mostly keep, and how long that multi-cluster state lasts before at most two clusters
  are left.
- **Long context**: for points with β = γ log N, the self-attention weight of the uniform
  state and the critical γ (:func:`attndyn.theory.critical_gamma`).
"""

import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import numpy as np
import xarray as xr
from scipy.special import comb
from scipy.stats import t as student_t

from .._core.serialize import plain
from .._estimate.dataset import coordinates, package_version
from ..theory._modes import (
    critical_gamma,
    mode_growth_rate,
    most_unstable_degree,
    self_attention_weight,
)

#: The linear window ends before the largest mean mode power passes √(DRIVE_RATIO/N): a
#: degree driven quadratically by the fastest ones then holds at most about this share of
#: its power from the drive (see :func:`linear_window`).
DRIVE_RATIO = 1 / 20
#: The linear window also ends before the growing part of the density perturbation has
#: squared norm ‖f‖² above this (see :func:`linear_window`).
NONLINEAR = 0.02
#: Fewest saves a window must hold to fit a rate.
MIN_WINDOW_SAVES = 4


def _mean_se(values: np.ndarray, axis: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Mean and standard error (sd/√n, n ≥ 2) along ``axis``."""
    values = np.asarray(values, np.float64)
    n = values.shape[axis]
    return values.mean(axis=axis), values.std(axis=axis, ddof=1) / math.sqrt(n)


def harmonic_dimension(ell: np.ndarray, dim: int) -> np.ndarray:
    """dim H_ℓ, the number of independent spherical harmonics of degree ℓ on S^{d−1}:
    C(ℓ + d − 1, d − 1) − C(ℓ + d − 3, d − 1) (2 on S¹ for ℓ ≥ 1, 2ℓ + 1 on S²), as a
    float: it passes the int64 range in a few hundred dimensions (d = 344, ℓ = 16:
    ~10²⁶; the cast to int64 warned and gave garbage), and is only ever a weight."""
    ell = np.asarray(ell)
    return np.round(comb(ell + dim - 1, dim - 1) - comb(ell + dim - 3, dim - 1))


def linear_window(mean_power: np.ndarray, n_tokens: int, dim: int) -> int:
    """The number of saves in the linear window (``mean_power``: time × ℓ, the mean over
    trajectories): those before the first save at which either

    - the largest mode power ``max_{ℓ≥1} P_ℓ`` exceeds ``√(DRIVE_RATIO/N)``, or
    - the growth of the perturbation, ``‖f‖² = Σ_{ℓ≥1} dim H_ℓ (P_ℓ(t) − P_ℓ(0))`` (by the
      addition theorem the squared L²(σ) norm of the density's growing part), exceeds
      :data:`NONLINEAR`.

    Why. The quadratic terms of the continuity equation change each degree's rate by a
    relative amount of order ‖f‖² (on S² the many fast degrees add up: at β = 16 the first
    rule alone let ‖f‖² reach 0.19 and the fast rates fell 3-5 % below 2λ_ℓ by its end).
    They also drive every degree the products of the fastest reach (on S¹ the sums and
    differences of their degrees, on S^{d−1} every degree up to their sum) with a power of
    order P*², growing at up to 4λ*: a degree's own power is at least 1/N, so the drive
    stays below DRIVE_RATIO of it while N·P*² ≤ DRIVE_RATIO (N = 4,096: P* ≤ 3.5·10⁻³,
    grown 14-fold). The window ends for all degrees at once; degrees that are driven
    anyway (those slower than ℓ*, near 2ℓ* or near 0) are flagged by their bend
    (:func:`fit_growth`)."""
    largest = np.max(mean_power[:, 1:], axis=1)
    weights = harmonic_dimension(np.arange(mean_power.shape[1]), dim)[1:]
    growth = np.sum(weights * np.maximum(mean_power[:, 1:] - mean_power[:1, 1:], 0), axis=1)
    over = np.nonzero((largest > math.sqrt(DRIVE_RATIO / n_tokens)) | (growth > NONLINEAR))[0]
    return int(over[0]) if over.size else len(largest)


def fit_growth(power: np.ndarray, times: np.ndarray, end: int) -> dict[str, np.ndarray]:
    """Each degree's growth over saves ``[0, end)`` (``power``: trajectory × time × ℓ):
    ``rate``, the mean over trajectories of the least-squares slopes of log P_ℓ(t), with
    its standard error ``rate_se``; ``bend``, the mean coefficient of t² of a quadratic fit
    of log P_ℓ(t) (positive: the power accelerates), with ``bend_se``; ``bend_p``, the
    one-sided p-value of "no upward bend" (:func:`bend_p_value`). NaN where the window
    holds too few saves."""
    n_ell = power.shape[-1]
    if end < MIN_WINDOW_SAVES:
        nan = np.full(n_ell, np.nan)
        return {"rate": nan, "rate_se": nan, "bend": nan, "bend_se": nan, "bend_p": nan}
    t = times[:end] - times[:end].mean()
    logs = np.log(np.maximum(power[:, :end, :], np.finfo(np.float64).tiny))
    slopes = np.einsum("t,nte->ne", t, logs) / np.dot(t, t)
    basis = np.stack([np.ones_like(t), t, t * t], axis=1)
    coefficients = np.linalg.lstsq(basis, logs.transpose(1, 0, 2).reshape(end, -1), rcond=None)[0]
    bends = coefficients[2].reshape(power.shape[0], n_ell)
    rate, rate_se = _mean_se(slopes, axis=0)
    bend, bend_se = _mean_se(bends, axis=0)
    bend_p = bend_p_value(bend, bend_se, power.shape[0])
    return {"rate": rate, "rate_se": rate_se, "bend": bend, "bend_se": bend_se, "bend_p": bend_p}


#: Family-wise level of the curvature ("driven") test at one point: the chance that any
#: of its degrees is flagged when none bends is at most this (:func:`driven_degrees`).
DRIVEN_LEVEL = 0.05


def bend_p_value(bend: np.ndarray, bend_se: np.ndarray, n_trajectories: int) -> np.ndarray:
    """One-sided p-value of the hypothesis "log P_ℓ does not bend upward" from the mean
    bend and its standard error over ``n_trajectories``: Student's t with n − 1 degrees
    of freedom (the SE is itself estimated from the n trajectories' bends; with 8 of them
    a normal quantile would understate p: P(t₇ > 2) = 0.043, not 0.023). A zero SE
    (identical trajectories) gives 0 for a positive bend, 1 otherwise; NaN stays NaN."""
    bend, bend_se = np.asarray(bend, np.float64), np.asarray(bend_se, np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        score = np.where(bend_se > 0, bend / bend_se, np.where(bend > 0, np.inf, -np.inf))
    score = np.where(np.isfinite(bend) & np.isfinite(bend_se), score, np.nan)
    return student_t.sf(score, max(n_trajectories - 1, 1))


def holm(p: np.ndarray) -> np.ndarray:
    """Holm's step-down adjusted p-values of the family of the finite entries of ``p``
    (NaN entries are not tested and stay NaN): sorted ascending, p̃_(k) =
    max_{j ≤ k} min(1, (m − j + 1) p_(j)). Rejecting where p̃ ≤ α keeps the family-wise
    error at most α whatever the dependence between the tests."""
    p = np.asarray(p, np.float64)
    adjusted = np.full(p.shape, np.nan)
    tested = np.nonzero(np.isfinite(p))[0]
    if tested.size:
        order = tested[np.argsort(p[tested], kind="stable")]
        scaled = (tested.size - np.arange(tested.size)) * p[order]
        adjusted[order] = np.minimum(1.0, np.maximum.accumulate(scaled))
    return adjusted


def driven_degrees(bend_p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Which degrees (ℓ ≥ 1) of one point bend upward within the linear window — driven by
    products of faster degrees — and their Holm-adjusted p-values (``bend_p``: per ℓ, NaN
    where not fitted; ℓ = 0, P_0 = 1, is never tested).

    Why a multiplicity control. A flagged degree leaves the comparison with 2λ_ℓ, so a
    false flag removes exactly the deviation the comparison should see. The former flag
    (bend > 2 SE at each degree alone, over the ~12 degrees of a point) fired 0.3-0.5
    times a point under no bend at all and, in one 8-trajectory run, removed the two
    largest positive deviations. Holm over the degrees tested at the point, at the
    family-wise level :data:`DRIVEN_LEVEL`, flags a degree by chance at no more than 5 %
    of points, under any correlation between degrees (they share trajectories); it is
    never less powerful than Bonferroni. The price: a weakly driven degree can go
    unflagged, and then shows as a deviation, which is the honest side to err on."""
    p = np.asarray(bend_p, np.float64).copy()
    p[0] = np.nan
    adjusted = holm(p)
    with np.errstate(invalid="ignore"):
        return np.isfinite(adjusted) & (adjusted <= DRIVEN_LEVEL), adjusted


def gathered(power: np.ndarray, n_tokens: int) -> np.ndarray:
    """Whether the tokens sit in clusters, per trajectory and save (``power``: trajectory ×
    time × ℓ): the largest mode power ``max_{ℓ≥1} P_ℓ`` is at least ``1/(2√N)``. k clusters
    of weights w_c have P_ℓ averaging Σ w_c² ≥ 1/k over the degrees, so k ≤ √N clusters
    pass, while the uniform start (P_ℓ ≈ 1/N) does not: without this, a start whose
    neighbours all touch (one "cluster" that spans the sphere when the mean spacing is
    below the tolerance) would count as a plateau."""
    return np.max(power[..., 1:], axis=-1) >= 0.5 / math.sqrt(n_tokens)


#: A trajectory has *reached* its plateau once its cluster count (more than two) stays the
#: same over at least this much model time (:func:`plateau`).
PLATEAU_HOLD = 2.0


def plateau(
    counts: np.ndarray, times: np.ndarray, n_tokens: int, ready: np.ndarray
) -> dict[str, np.ndarray]:
    """The multi-cluster metastable state of each trajectory (``counts``: trajectory × time
    cluster counts; ``ready``: where the tokens have :func:`gathered`).

    It starts at the first save where the tokens have gathered into at most √N clusters,
    and ends at the first save from then on with at most two clusters left: one, or an
    antipodal pair, the end states of the noisy dynamics (seed 003) that common noise
    cannot undo. ``level`` is the most frequent count in between (the plateau's number of
    clusters; the count at the start where it ends at once), ``ended`` whether it ended
    before the horizon (its end is the horizon otherwise: the lifetime is then cut, and
    the trajectory counts as censored), ``formed`` whether the tokens gathered at all
    (the start is the horizon and the level 0 otherwise).

    Gathered is not settled: while the clumps still merge the count falls save after save
    (at N = 4,096, T = 12 the defaults end with 38-58 clusters a point, ℓ* = 3-6). So
    ``reached`` says whether the plateau was reached: from some save after gathering the
    count, more than two, stays the same over at least :data:`PLATEAU_HOLD` time units
    and at least three saves, all before the horizon. Clusters contract at rates of order
    one (a token's velocity is at most 1), so a count that holds for two time units is
    not one the collapse is passing through; a metastable state then holds for times
    that grow exponentially with β. ``reached_at`` is that save's time (the horizon where
    not reached) and ``reached_level`` the count (0 where not reached)."""
    horizon = float(times[-1])
    n_traj = counts.shape[0]
    out = {key: np.full(n_traj, horizon) for key in ("start", "end", "reached_at")}
    out |= {key: np.zeros(n_traj, np.int64) for key in ("level", "reached_level")}
    out |= {key: np.zeros(n_traj, bool) for key in ("formed", "ended", "reached")}
    for i, row in enumerate(counts):
        begun = np.nonzero(ready[i] & (row <= math.sqrt(n_tokens)))[0]
        if not begun.size:
            continue
        first = int(begun[0])
        out["formed"][i], out["start"][i] = True, times[first]
        over = np.nonzero(row[first:] <= 2)[0]
        stop = first + int(over[0]) if over.size else len(row)
        if over.size:
            out["end"][i], out["ended"][i] = times[stop], True
        values, seen = np.unique(
            row[first:stop] if stop > first else row[first : first + 1], return_counts=True
        )
        out["level"][i] = values[np.argmax(seen)]
        flat = first_flat(row, times, first, stop)
        if flat is not None:
            out["reached"][i], out["reached_at"][i] = True, times[flat]
            out["reached_level"][i] = row[flat]
    return out


def first_flat(row: np.ndarray, times: np.ndarray, first: int, stop: int) -> int | None:
    """The first save in ``[first, stop)`` from which the count ``row`` stays the same up
    to the first save at least :data:`PLATEAU_HOLD` later and two saves on (``None``:
    none, the horizon included)."""
    # The save that closes each window (a hair of slack: save times are 2.0000000000000004
    # apart where 2 is meant).
    slack = 1e-9 * max(1.0, float(times[-1]))
    closes = np.maximum(
        np.searchsorted(times, times + PLATEAU_HOLD - slack), np.arange(len(times)) + 2
    )
    for k in range(first, stop):
        if closes[k] >= len(row):
            return None  # no window left before the horizon
        if np.all(row[k : closes[k] + 1] == row[k]):
            return k
    return None


def _theory_depth(spec) -> float | int | None:
    """L of the theory: the discrete engine's layers per unit time; ``None`` (the flow)
    for the SDE engine."""
    return spec.study_model().engine.layers_per_unit()


def theory_ell_star(spec, point: Mapping[str, Any]) -> int:
    """ℓ* of the theory at a point (:func:`attndyn.theory.most_unstable_degree` for the
    spec's attention and depth and the point's N): what the dataset's ``ell_star`` holds,
    and what the study's ℓ_max must reach (:func:`attndyn.studies.modes.ell_max_for`)."""
    beta, dim, n = float(point["beta"]), int(point["dim"]), int(point["n_tokens"])
    depth = _theory_depth(spec)
    return int(most_unstable_degree(beta, dim, spec.attention, depth=depth, n_tokens=n))


def _theory(spec, points: Sequence[Mapping[str, Any]], ell: np.ndarray) -> dict[str, Any]:
    depth = _theory_depth(spec)
    rates, stars, weights, gamma_c = [], [], [], []
    for p in points:
        beta, dim, n = float(p["beta"]), int(p["dim"]), int(p["n_tokens"])
        rates.append(2 * mode_growth_rate(beta, dim, ell, spec.attention, depth=depth, n_tokens=n))
        stars.append(theory_ell_star(spec, p))
        weights.append(self_attention_weight(beta, dim, n))
        gamma_c.append(critical_gamma(n, dim) if n >= 3 else math.inf)
    return {
        "growth_rate_theory": (("point", "ell"), np.asarray(rates)),
        "ell_star": ("point", np.asarray(stars, np.int64)),
        "self_weight_theory": ("point", np.asarray(weights)),
        "gamma_critical": ("point", np.asarray(gamma_c)),
    }


def analyse(
    raw: xr.Dataset, spec, mc, points: Sequence[Mapping[str, Any]], times: np.ndarray
) -> xr.Dataset:
    """The study's dataset from its per-trajectory observables (``raw``)."""
    ell = np.arange(raw.sizes["ell"])
    tokens = np.asarray([int(p["n_tokens"]) for p in points])
    power = raw["mode_power"].values  # (point, traj, time, ell)
    variables: dict[str, Any] = {}
    for name, values in (
        ("n_clusters", raw["n_clusters"].values),
        ("largest_fraction", raw["largest"].values / tokens[:, None, None]),
        ("log_energy", raw["log_energy"].values),
        ("min_distance", raw["min_distance"].values),
    ):
        mean, se = _mean_se(values)
        variables[name] = (("point", "time"), mean)
        variables[f"{name}_se"] = (("point", "time"), se)
    for name, values, dims in (
        ("mode_power", power, ("point", "time", "ell")),
        ("cluster_histogram", raw["histogram"].values, ("point", "time", "size_bin")),
    ):
        mean, se = _mean_se(values)
        variables[name] = (dims, mean)
        variables[f"{name}_se"] = (dims, se)
    variables.update(_theory(spec, points, ell))
    dims = np.asarray([int(p["dim"]) for p in points])
    variables.update(_fits(power, variables["mode_power"][1], times, tokens, dims))
    variables.update(_plateaus(raw["n_clusters"].values, power, times, tokens))
    for name, dims in (("n_clusters", "time"), ("largest", "time")):
        variables[f"{name}_trajectory"] = (("point", "trajectory", dims), raw[name].values)
    variables["mode_power_trajectory"] = (("point", "trajectory", "time", "ell"), power)
    coords = {
        "point": np.arange(len(points)),
        "trajectory": np.arange(raw.sizes["trajectory"]),
        "time": np.asarray(times, np.float64),
        "ell": ell,
        "size_bin": 2 ** np.arange(raw.sizes["size_bin"]),
        **coordinates(points),
    }
    return xr.Dataset(variables, coords=coords)


def _fits(power, mean_power, times, tokens, dims) -> dict[str, Any]:
    fits, ends = [], []
    for i, (n, dim) in enumerate(zip(tokens, dims, strict=True)):
        end = linear_window(mean_power[i], int(n), int(dim))
        fits.append(fit_growth(power[i], times, end))
        ends.append(times[end - 1] if end >= MIN_WINDOW_SAVES else 0.0)
    stack = {key: np.asarray([f[key] for f in fits]) for key in fits[0]}
    fitted = np.isfinite(stack["rate"])
    fitted[:, 0] = False  # P_0 = 1: nothing to fit
    tests = [driven_degrees(p) for p in stack["bend_p"]]
    driven = np.stack([t[0] for t in tests])
    linear = fitted & ~driven
    # ℓ* of the data: the degree of the largest fitted rate among all degrees, flagged ones
    # included (0: none fitted). The window ends before a drive holds more than 1/20 of any
    # degree's power (linear_window), so a driven degree's fitted rate stays near its own;
    # choosing among the unflagged degrees only let a chance flag move ℓ*.
    masked = np.where(fitted, stack["rate"], -np.inf)
    star = np.where(fitted.any(axis=1), np.argmax(masked, axis=1), 0)
    return {
        "growth_rate": (("point", "ell"), stack["rate"]),
        "growth_rate_se": (("point", "ell"), stack["rate_se"]),
        "growth_bend": (("point", "ell"), stack["bend"]),
        "growth_bend_se": (("point", "ell"), stack["bend_se"]),
        "growth_bend_p": (("point", "ell"), stack["bend_p"]),
        "growth_bend_p_holm": (("point", "ell"), np.stack([t[1] for t in tests])),
        "driven": (("point", "ell"), driven),
        "linear": (("point", "ell"), linear),
        "window_end": ("point", np.asarray(ends)),
        "ell_star_measured": ("point", star.astype(np.int64)),
    }


def _mean_se_where(values: np.ndarray, chosen: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per point (rows), the mean and standard error of ``values`` over the ``chosen``
    trajectories: 0 where none is chosen, SE 0 where one is."""
    mean, se = [], []
    for v, c in zip(values, chosen, strict=True):
        k = int(c.sum())
        mean.append(v[c].mean() if k else 0.0)
        se.append(v[c].std(ddof=1) / math.sqrt(k) if k > 1 else 0.0)
    return np.asarray(mean, np.float64), np.asarray(se, np.float64)


def _plateaus(counts, power, times, tokens) -> dict[str, Any]:
    per = [
        plateau(counts[i], times, int(n), gathered(power[i], int(n))) for i, n in enumerate(tokens)
    ]
    stack = {key: np.stack([p[key] for p in per]) for key in per[0]}
    formed, reached = stack["formed"], stack["reached"]
    out: dict[str, Any] = {}
    for name, values, chosen in (
        ("plateau_start", stack["start"], formed),
        ("plateau_clusters", stack["level"], formed),
        ("plateau_lifetime", stack["end"] - stack["start"], formed),
        ("plateau_reached_at", stack["reached_at"], reached),
        ("plateau_reached_clusters", stack["reached_level"], reached),
    ):
        mean, se = _mean_se_where(values, chosen)
        out[name], out[f"{name}_se"] = ("point", mean), ("point", se)
    out["n_plateau"] = ("point", formed.sum(axis=1).astype(np.int64))
    out["n_plateau_ended"] = ("point", stack["ended"].sum(axis=1).astype(np.int64))
    out["n_plateau_reached"] = ("point", reached.sum(axis=1).astype(np.int64))
    out["plateau_hold"] = ((), PLATEAU_HOLD)
    for key in ("start", "level", "end", "ended", "reached", "reached_at", "reached_level"):
        out[f"plateau_{key}_trajectory"] = (("point", "trajectory"), stack[key])
    return out


# --- CF metadata --------------------------------------------------------------------

#: (long_name, units) of every variable and coordinate of a modes dataset.
CF = {
    "point": ("index of the parameter point", "1"),
    "trajectory": ("index of the trajectory at the point", "1"),
    "time": ("model time t = n/L (layer n of a depth-L stack; SDE time)", "1"),
    "ell": ("spherical-harmonic degree l", "1"),
    "size_bin": ("lower edge 2^k of the cluster-size class [2^k, 2^(k+1))", "1"),
    "dim": ("token dimension d (tokens on S^(d-1))", "1"),
    "n_tokens": ("number of tokens N", "1"),
    "beta": ("inverse temperature beta of attention", "1"),
    "gamma": ("long-context scaling gamma, beta = gamma log N", "1"),
    "eps": ("scalar value-noise level epsilon (seed 003 eq. 7)", "1"),
    "sigma": ("matrix value-noise scale sigma", "1"),
    "n_clusters": ("mean number of clusters (tokens with overlap >= 1 - tol, connected)", "1"),
    "largest_fraction": ("mean fraction of tokens in the largest cluster", "1"),
    "log_energy": ("mean natural log of the interaction energy E_beta", "1"),
    "min_distance": ("mean minimum pairwise distance |theta_i - theta_j|", "1"),
    "mode_power": ("mean mode power P_l = (1/N^2) sum_ij C_l(<theta_i, theta_j>)", "1"),
    "cluster_histogram": ("mean number of clusters of size in [2^k, 2^(k+1))", "1"),
    "growth_rate_theory": ("growth rate 2 lambda_l of P_l at the uniform state (theory)", "1"),
    "ell_star": ("most unstable degree l* of the uniform state (theory)", "1"),
    "self_weight_theory": (
        "softmax weight of a token on itself among N uniform tokens (theory)",
        "1",
    ),
    "gamma_critical": ("gamma at which that weight is 1/2 (theory; inf: beyond 1e7)", "1"),
    "growth_rate": ("growth rate of P_l fitted over the linear window", "1"),
    "linear": (
        "whether the degree is in its linear window (fitted, and not driven)",
        "1",
    ),
    "driven": (
        "whether log P_l bends upward within the window (one-sided t-test of the bend, Holm "
        "over the point's degrees, family-wise level 0.05): driven by faster degrees",
        "1",
    ),
    "growth_bend": ("coefficient of t^2 of a quadratic fit of log P_l over the window", "1"),
    "growth_bend_p": (
        "one-sided p-value of no upward bend (Student t, n_trajectories - 1 dof)",
        "1",
    ),
    "growth_bend_p_holm": ("Holm-adjusted growth_bend_p over the point's degrees", "1"),
    "window_end": ("last save time of the linear window", "1"),
    "ell_star_measured": ("degree of the largest fitted growth rate, driven ones included", "1"),
    "plateau_start": ("mean time at which the tokens have gathered into clusters", "1"),
    "plateau_clusters": ("mean of the most frequent cluster count on the plateau", "1"),
    "plateau_lifetime": (
        "mean time from the plateau's start until at most two clusters are left, cut at "
        "the horizon",
        "1",
    ),
    "n_plateau": ("trajectories whose tokens gathered into clusters", "1"),
    "n_plateau_ended": ("trajectories left with at most two clusters before the horizon", "1"),
    "n_plateau_reached": (
        "trajectories that reached the plateau: after gathering, a count above two held "
        f"unchanged for at least {PLATEAU_HOLD:g} time units and three saves",
        "1",
    ),
    "plateau_hold": ("time a count above two must hold to make a reached plateau", "1"),
    "plateau_reached_at": ("mean time the plateau was reached, over those that reached it", "1"),
    "plateau_reached_clusters": (
        "mean clusters on the plateau when reached, over those that reached it",
        "1",
    ),
    "n_clusters_trajectory": ("number of clusters, per trajectory", "1"),
    "largest_trajectory": ("tokens in the largest cluster, per trajectory", "1"),
    "mode_power_trajectory": ("mode power P_l, per trajectory", "1"),
    "plateau_start_trajectory": ("plateau start per trajectory (horizon: none formed)", "1"),
    "plateau_level_trajectory": ("clusters on the plateau per trajectory (0: none)", "1"),
    "plateau_end_trajectory": ("plateau end per trajectory (horizon: not ended)", "1"),
    "plateau_ended_trajectory": ("whether at most two clusters were left before the horizon", "1"),
    "plateau_reached_trajectory": ("whether the plateau was reached (see n_plateau_reached)", "1"),
    "plateau_reached_at_trajectory": ("time the plateau was reached (horizon: not)", "1"),
    "plateau_reached_level_trajectory": ("clusters when the plateau was reached (0: not)", "1"),
}


def cf_name(name: str) -> tuple[str, str]:
    """(long_name, units) of a variable, its standard error included."""
    if name.endswith("_se") and name[:-3] in CF:
        long_name, units = CF[name[:-3]]
        return f"standard error across trajectories of: {long_name}", units
    return CF[name]


def attach_cf(ds: xr.Dataset, spec, *, command: str | None = None) -> xr.Dataset:
    """CF-1.10 attributes: units and long_name on every variable and coordinate, and the
    global title, Conventions, history, source and references."""
    for name in [*ds.data_vars, *ds.coords]:
        long_name, units = cf_name(str(name))
        ds[name].attrs.update(long_name=long_name, units=units)
    now = datetime.now(UTC).isoformat(timespec="seconds")
    ds.attrs.update(
        title=f"attndyn modes: many tokens from the uniform state ({spec.attention} attention, "
        f"{spec.scheme}, noise {spec.noise}, {spec.engine} engine)",
        Conventions="CF-1.10",
        history=f"{now}: {command or 'attndyn.studies.modes_study'}",
        source=f"attndyn {package_version()}",
        references="spec section 7; docs/guides/many-tokens.md",
    )
    return ds


def modes_summary(ds: xr.Dataset) -> list[dict[str, Any]]:
    """One JSON-ready record per point: its coordinates, ℓ* (theory and data), the linear
    window, every degree's fitted rate (:func:`rate_records`), and the clusters at the
    horizon and on the plateau (means ± SE)."""
    records = []
    for i in range(ds.sizes["point"]):
        row = ds.isel(point=i)
        record: dict[str, Any] = {
            name: row[name].item()
            for name in ("dim", "n_tokens", "beta", "gamma", "eps", "sigma")
            if name in row.coords
        }
        record.update(
            ell_star=int(row["ell_star"]),
            ell_star_measured=int(row["ell_star_measured"]),
            window_end=float(row["window_end"]),
            rates=rate_records(row),
            n_clusters_end=[
                float(row["n_clusters"].values[-1]),
                float(row["n_clusters_se"].values[-1]),
            ],
            largest_fraction_end=[
                float(row["largest_fraction"].values[-1]),
                float(row["largest_fraction_se"].values[-1]),
            ],
            plateau_clusters=[float(row["plateau_clusters"]), float(row["plateau_clusters_se"])],
            plateau_lifetime=[float(row["plateau_lifetime"]), float(row["plateau_lifetime_se"])],
            n_plateau=int(row["n_plateau"]),
            n_plateau_ended=int(row["n_plateau_ended"]),
            n_plateau_reached=int(row["n_plateau_reached"]),
            plateau_reached_clusters=[
                float(row["plateau_reached_clusters"]),
                float(row["plateau_reached_clusters_se"]),
            ],
            plateau_reached_at=[
                float(row["plateau_reached_at"]),
                float(row["plateau_reached_at_se"]),
            ],
            plateau_hold=PLATEAU_HOLD,
        )
        records.append(record)
    return plain(records)


def rate_records(row: xr.Dataset) -> list[dict[str, Any]]:
    """Every degree ℓ ≥ 1 of one point: ``rate`` ± ``se`` (null where the window held too
    few saves to fit), ``theory_power_rate`` = 2λ_ℓ (the growth rate of P_ℓ, twice the
    amplitude's λ_ℓ), ``driven`` (null where not fitted) with ``bend_p_holm``, its
    Holm-adjusted p-value, and ``linear`` (fitted and not driven: the degrees compared
    with the theory). ``theory`` is the same number under its 0.4 name: deprecated, kept
    through 0.5 (one release), then removed."""
    out = []
    for ell in range(1, row.sizes["ell"]):
        fitted = bool(np.isfinite(row["growth_rate"].values[ell]))
        power_rate = float(row["growth_rate_theory"].values[ell])
        out.append(
            {
                "ell": ell,
                "rate": float(row["growth_rate"].values[ell]),
                "se": float(row["growth_rate_se"].values[ell]),
                "theory_power_rate": power_rate,
                "driven": bool(row["driven"].values[ell]) if fitted else None,
                "bend_p_holm": float(row["growth_bend_p_holm"].values[ell]),
                "linear": bool(row["linear"].values[ell]),
                "theory": power_rate,  # the 0.4 name: deprecated, kept through 0.5
            }
        )
    return out
