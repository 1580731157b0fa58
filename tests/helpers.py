"""Shared helpers for the tests."""

import functools
import math
import os
import subprocess
import sys

import jax
import numpy as np
from scipy import stats

# Test inputs that compile nothing. A test that needs some fixed configuration (not one
# drawn from a model's key) draws it in NumPy: JAX's samplers compile a threefry program
# for every shape, and jnp.asarray compiles a conversion per shape.


def on_device(a) -> jax.Array:
    """``a`` as a float32 JAX array, converted in NumPy and put on the device as it is."""
    return jax.device_put(np.asarray(a, np.float32))


def sphere_rows(seed: int, *shape: int, radius: float = 1.0) -> np.ndarray:
    """Fixed points of radius ``radius`` (rows along the last axis), normalised Gaussians
    drawn in NumPy from ``seed``, as a float32 NumPy array."""
    y = np.random.default_rng(seed).standard_normal(shape)
    return (radius * y / np.linalg.norm(y, axis=-1, keepdims=True)).astype(np.float32)


def sphere_points(seed: int, *shape: int, radius: float = 1.0) -> jax.Array:
    """:func:`sphere_rows` on the device."""
    return jax.device_put(sphere_rows(seed, *shape, radius=radius))


@functools.partial(jax.jit, static_argnums=1)
def noise_keys(seed, n):
    """The noise keys of n trajectories (split, then fold_in 1), as one program: eagerly,
    the split and the fold-in each compiled a program of their own."""
    keys = jax.random.split(jax.random.key(seed), n)
    return jax.vmap(lambda k: jax.random.fold_in(k, 1))(keys)


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


#: What the CF checker says of every attndyn file that is not a defect: the model time t
#: is dimensionless (layers in units of 1/L), not a CF time axis, which the checker
#: assumes of any coordinate named "time".
CF_NOT_DEFECTS = ("Coordinate variable 'time' should have standard_name='time'",)


def assert_cf(path) -> None:
    """The netCDF file at ``path`` describes itself (CF-1.10): a long name and description
    on every variable and coordinate, units on every number, the global title,
    Conventions, history, source and references; and the IOOS CF checker finds no error
    besides :data:`CF_NOT_DEFECTS`."""
    import xarray as xr
    from compliance_checker.runner import CheckSuite

    with xr.open_dataset(path) as ds:
        for name in [*ds.data_vars, *ds.coords]:
            attrs = ds[name].attrs
            assert attrs.get("long_name") and attrs.get("description"), name
            if ds[name].dtype.kind in "biuf":
                assert attrs.get("units"), name
        for attribute in ("title", "Conventions", "history", "source", "references"):
            assert ds.attrs.get(attribute), attribute
        assert ds.attrs["Conventions"] == "CF-1.10"
        assert "seed" not in ds.attrs and "random_seed" in ds.attrs  # apart from the papers
    suite = CheckSuite()
    suite.load_all_available_checkers()
    groups, _ = suite.run_all(suite.load_dataset(str(path)), ["cf:1.10"], [])["cf:1.10"]
    failed = [
        message
        for group in groups
        if group.weight == 3 and group.value[0] < group.value[1]  # the checker's "errors"
        for message in group.msgs
        if not message.startswith(CF_NOT_DEFECTS)
    ]
    assert not failed, failed
