"""Shared helpers for the tests."""

import math
import os
import subprocess
import sys

import numpy as np
from scipy import stats


def binomial_se(p: float, n: int) -> float:
    """Standard error of a Monte Carlo fraction with true value p over n trials."""
    return math.sqrt(max(p * (1 - p), 1e-12) / n)


def two_sample_ks_pvalue(a, b) -> float:
    """p-value of the two-sample Kolmogorov–Smirnov test."""
    result = stats.ks_2samp(np.asarray(a).ravel(), np.asarray(b).ravel())
    return float(result.pvalue)  # type: ignore[attr-defined]


def run_untyped(code: str) -> str:
    """Run ``code`` in a child Python on the CPU, without the tests' runtime type checker
    (which would refuse wrong kinds before attndyn's own checks: a user's process has only
    those), and return its stdout; the child must succeed."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    child = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    assert child.returncode == 0, child.stderr[-2000:]
    return child.stdout
