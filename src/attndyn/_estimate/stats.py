"""Confidence intervals for Monte Carlo fractions."""

import numpy as np
from scipy import stats

from .._core.errors import ParameterError


def wilson_interval(
    successes: np.ndarray | int, trials: np.ndarray | int, confidence: float = 0.95
) -> tuple[np.ndarray, np.ndarray]:
    """Wilson score interval for a binomial proportion; NaN where ``trials == 0``.

    Unlike the normal (Wald) interval it stays inside [0, 1] and is not degenerate at
    0 or n successes, which is where phase-diagram estimates live.
    """
    k = np.asarray(successes, dtype=np.float64)
    n = np.asarray(trials, dtype=np.float64)
    if np.any(k < 0) or np.any(k > n):
        raise ParameterError(
            "successes must be between 0 and trials; got successes above trials or below 0."
        )
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
