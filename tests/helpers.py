"""Shared helpers for the tests."""

import math

import numpy as np
from scipy import stats


def binomial_se(p: float, n: int) -> float:
    """Standard error of a Monte Carlo fraction with true value p over n trials."""
    return math.sqrt(max(p * (1 - p), 1e-12) / n)


def two_sample_ks_pvalue(a, b) -> float:
    """p-value of the two-sample Kolmogorov–Smirnov test."""
    result = stats.ks_2samp(np.asarray(a).ravel(), np.asarray(b).ravel())
    return float(result.pvalue)  # type: ignore[attr-defined]
