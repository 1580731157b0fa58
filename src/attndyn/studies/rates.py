"""Clustering-speed observables: the gap 1 − γ, time to a tolerance, fitted terminal rates.

Terminal laws are fitted as straight lines of −log(gap) against a *clock* s(t):

| law | gap | clock s (the law's variable) | value |
|---|---|---|---|
| exponential | gap ~ e^{−c t} | t | c |
| power | gap ~ t^{−c} | log t | c |
| sqrt-exponential | gap ~ e^{−c√(t+1)} | √(t + 1) | c |

A rate is only meaningful with its variable: c is per unit of t, of log t or of √(t + 1)
(:data:`RATE_VARIABLES`, ``RateFit.variable``). sqrt-scaling's exact law is e^{−4√(t+1)}
(its speed factor is √(t + 1)), so it is fitted in √(t + 1): in √t the local slope carries
an O(1/√t) bias (3.984 instead of 4 on seed 004's setting).

The uncertainty of a fit to a deterministic curve is not statistical: it is the
pre-asymptotic bias of the local rate. The window is cut in two halves of equal clock
length; the value is the least-squares slope on the later half, and the interval is that
value ± (|later − earlier| + 4 standard errors of the later slope). When the local rate
approaches its limit monotonically and its distance to it at least halves from one half
to the next (true for the 1/t and 1/√t corrections of seed 004's laws once the window
spans a factor ≥ 4 in t), the limit lies inside the interval; the standard-error term
covers noise in Monte Carlo curves.
"""

import equinox as eqx
import jax
import numpy as np
from jaxtyping import Array, Float

from .._core.errors import ParameterError, check_bound, check_choice
from .._core.observables import mean_cosine
from .._core.renamed import old_attribute, renamed
from ..theory._symmetric import RateLaw, rate_clock

#: The terminal laws a rate is fitted in (0.4 called a law a rate's ``kind``).
RATE_LAWS: tuple[RateLaw, ...] = ("exponential", "power", "sqrt-exponential")
#: The variable each law is exponential in: the rate c is per unit of it.
RATE_VARIABLES = {"exponential": "t", "power": "log t", "sqrt-exponential": "√(t+1)"}


@jax.jit  # one program per shape: eagerly, the vmapped observable ran op by op
def cosine_gap(x: Float[Array, "*S N d"]) -> Float[Array, "*S"]:
    """1 − mean pairwise cosine of each state (any leading batch/save axes)."""
    flat = x.reshape(-1, *x.shape[-2:])
    return (1.0 - jax.vmap(mean_cosine)(flat)).reshape(x.shape[:-2])


def clustering_time(ts, gap, tol: float) -> float:
    """The first time the gap falls to ``tol``, interpolated linearly in log(gap).

    ``nan`` when it never does within ``ts``; ``ts[0]`` when it already starts there.
    """
    check_bound("tol", tol, lower=0.0, lower_open=True)
    ts = np.asarray(ts, dtype=np.float64)
    gap = np.asarray(gap, dtype=np.float64)
    below = np.nonzero(gap <= tol)[0]
    if below.size == 0:
        return float("nan")
    k = int(below[0])
    if k == 0:
        return float(ts[0])
    g0, g1 = gap[k - 1], gap[k]
    if g1 <= 0:
        return float(ts[k])
    w = (np.log(g0) - np.log(tol)) / (np.log(g0) - np.log(g1))
    return float(ts[k - 1] + w * (ts[k] - ts[k - 1]))


class RateFit(eqx.Module):
    """A fitted terminal rate: ``value`` of the terminal ``law`` with ``interval`` (see
    module docstring)."""

    law: str = eqx.field(static=True)
    value: float = eqx.field(static=True)
    interval: tuple[float, float] = eqx.field(static=True)
    stderr: float = eqx.field(static=True)
    earlier: float = eqx.field(static=True)
    window: tuple[float, float] = eqx.field(static=True)

    def contains(self, value: float) -> bool:
        return self.interval[0] <= value <= self.interval[1]

    @property
    def variable(self) -> str:
        """The variable of the law: the rate is per unit of t, log t or √(t + 1)."""
        return RATE_VARIABLES[self.law]

    #: 0.4's name of ``law`` (deprecated).
    kind = old_attribute("kind", "law", "RateFit")

    def as_dict(self) -> dict:
        return {
            "law": self.law,
            "variable": self.variable,
            "value": self.value,
            "interval": list(self.interval),
        }


@renamed(kind="law")
def clock(ts, law: str) -> np.ndarray:
    """The clock s(t) in which the terminal ``law`` is linear
    (:func:`attndyn.theory._symmetric.rate_clock`, which the figures share)."""
    check_choice("law", law, RATE_LAWS)
    return rate_clock(ts, law)


def _ols(s: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Slope of y on s and its standard error."""
    s_c = s - s.mean()
    sxx = float(np.sum(s_c**2))
    slope = float(np.sum(s_c * (y - y.mean())) / sxx)
    resid = y - y.mean() - slope * s_c
    dof = max(len(s) - 2, 1)
    return slope, float(np.sqrt(np.sum(resid**2) / dof / sxx))


@renamed(kind="law")
def fit_terminal_rate(
    ts,
    gap=None,
    *,
    law: str,
    log_gap=None,
    window: tuple[float, float] | None = None,
    floor: float = 0.0,
) -> RateFit:
    """Fit gap ~ ``law`` on the terminal window.

    Args:
        ts: save times.
        gap: 1 − γ (or 1 − mean cosine, or Var) at ``ts``; or give ``log_gap`` instead
            (exact where the gap underflows, e.g. :class:`SymmetricSolution.log_gap`).
        law: ``"exponential"``, ``"power"`` or ``"sqrt-exponential"`` (``kind=`` in 0.4,
            deprecated).
        window: (t_a, t_b); default the later part of the run: t ≥ T/2 (exponential),
            t ≥ T/4 (sqrt-exponential), t ≥ T/16 (power), T the last save.
        floor: ignore points whose gap is at or below this (round-off level).
    """
    check_choice("law", law, RATE_LAWS)
    ts = np.asarray(ts, dtype=np.float64)
    if log_gap is None:
        if gap is None:
            raise ParameterError("give gap or log_gap.")
        with np.errstate(divide="ignore", invalid="ignore"):
            log_gap = np.log(np.asarray(gap, dtype=np.float64))
    log_gap = np.asarray(log_gap, dtype=np.float64)
    if window is None:
        t_end = float(ts[-1])
        window = (
            t_end * {"exponential": 0.5, "sqrt-exponential": 0.25, "power": 1 / 16}[law],
            t_end,
        )
    keep = (ts >= window[0]) & (ts <= window[1]) & np.isfinite(log_gap)
    if law == "power":
        keep &= ts > 0
    if floor > 0:
        keep &= log_gap > np.log(floor)
    s, y = clock(ts[keep], law), -log_gap[keep]
    if s.size < 6:
        raise ParameterError(
            f"fitting a {law} rate needs at least 6 usable save times in the window "
            f"{window}; got {s.size}."
        )
    mid = 0.5 * (s[0] + s[-1])
    early, late = s <= mid, s >= mid
    if early.sum() < 3 or late.sum() < 3:
        raise ParameterError("the fit window needs at least 3 save times in each half.")
    earlier, _ = _ols(s[early], y[early])
    value, se = _ols(s[late], y[late])
    half = abs(value - earlier) + 4 * se
    return RateFit(
        law, value, (value - half, value + half), se, earlier, (float(window[0]), float(window[1]))
    )
