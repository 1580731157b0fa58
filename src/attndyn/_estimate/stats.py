"""Confidence intervals for Monte Carlo fractions."""

import numpy as np
from scipy import stats

from .._core.errors import ParameterError, check_bound


def wilson_interval(
    successes: np.ndarray | int, trials: np.ndarray | int, confidence: float = 0.95
) -> tuple[np.ndarray, np.ndarray]:
    """Wilson score interval for a binomial proportion; NaN where ``trials == 0``.
    Both counts are whole numbers (integers or whole floats), 0 ≤ successes ≤ trials.

    Unlike the normal (Wald) interval it stays inside [0, 1] and is not degenerate at
    0 or n successes, which is where phase-diagram estimates live.
    """
    k, n = check_counts(successes, trials)
    check_bound("confidence", confidence, lower=0.0, upper=1.0, lower_open=True, upper_open=True)
    return wilson_bounds(k, n, confidence)


def wilson_bounds(
    successes: np.ndarray | int, trials: np.ndarray | int, confidence: float = 0.95
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`wilson_interval` without its checks, the same numbers: for the estimator's
    own counts (whole, 0 ≤ successes ≤ trials by construction) at its own confidence,
    which it tallies itself and would otherwise check again at every interval."""
    k = np.asarray(successes, dtype=np.float64)
    n = np.asarray(trials, dtype=np.float64)
    z = stats.norm.ppf(0.5 + confidence / 2)
    with np.errstate(invalid="ignore", divide="ignore"):
        p = k / n
        denom = 1 + z**2 / n
        centre = (p + z**2 / (2 * n)) / denom
        half = z * np.sqrt(p * (1 - p) / n + z**2 / (4 * n**2)) / denom
    # The interval ends exactly at 0 (1) when no (every) trial succeeds; the closed form only
    # gets there up to rounding.
    lower = np.where(k == 0, 0.0, np.clip(centre - half, 0, 1))
    upper = np.where(k == n, 1.0, np.clip(centre + half, 0, 1))
    lower = np.where(n > 0, lower, np.nan)
    upper = np.where(n > 0, upper, np.nan)
    return lower, upper


def check_counts(successes, trials) -> tuple[np.ndarray, np.ndarray]:
    """Both counts as float64 arrays, once each is a whole number and 0 ≤ successes ≤
    trials; each refusal names the count at fault (a fraction of a trial has no binomial
    meaning, and would give an interval all the same)."""
    k = np.asarray(successes, dtype=np.float64)
    n = np.asarray(trials, dtype=np.float64)
    for name, count in (("trials", n), ("successes", k)):
        if not np.all(np.isfinite(count) & (count >= 0) & (count == np.floor(count))):
            raise ParameterError(f"{name}={_show(count)} must be whole numbers >= 0.")
    if np.any(k > n):
        raise ParameterError(
            f"successes={_show(k)} exceed trials={_show(n)}; successes must be between 0 "
            "and trials."
        )
    return k, n


def _show(array: np.ndarray) -> str:
    if np.all(np.isfinite(array) & (array == np.floor(array))):
        array = array.astype(np.int64)  # counts as the integers they are
    return repr(array.item()) if array.ndim == 0 else np.array2string(array, threshold=6)
