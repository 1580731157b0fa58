import jax
import numpy as np
import pytest

import attndyn as ad
from attndyn._core.values import sample_entries

# The sampler as one program per distribution and shape (eagerly each operation of its
# unrolled hash compiles on its own); same keys, same draws.
_entries = jax.jit(sample_entries, static_argnums=(1, 2))
#: One sample size for every test of the entries: they share the programs.
N_ENTRIES = 400_000


@pytest.mark.parametrize("distribution", ad.DISTRIBUTIONS)
def test_entries_have_mean_zero_and_unit_variance(distribution):
    z = np.asarray(_entries(jax.random.key(0), (N_ENTRIES,), distribution), np.float64)
    # n = 4e5: the mean has standard error 1/sqrt(n) = 0.0016, so 0.007 is > 4 SE; the
    # variance has SE sqrt((m4 - 1)/n) <= sqrt(2/n) = 0.0022, so 0.01 is > 4 SE.
    assert abs(z.mean()) < 0.007
    assert abs(z.var() - 1) < 0.01


@pytest.mark.parametrize("distribution", ad.DISTRIBUTIONS)
def test_matrix_values_have_variance_sigma_squared(distribution):
    # V = σ M/√L applied to e_1 gives the first column of V: variance σ²/L per entry.
    sigma, depth = 0.7, 4
    values = ad.MatrixValues(sigma, distribution=distribution)
    e1 = jax.device_put(np.eye(1, 5, dtype=np.float32))
    keys = jax.random.split(jax.random.key(1), 20000)
    cols = jax.jit(jax.vmap(lambda k: values.apply(e1, key=k, depth=depth)))(keys)
    cols = np.asarray(cols, np.float64).ravel()
    # 1e5 entries: SE of the variance <= sqrt(2/n)·σ²/L ≈ 5.5e-4, tolerance 3e-3 is > 5 SE.
    assert abs(cols.mean()) < 4 * np.sqrt(sigma**2 / depth / cols.size) + 1e-3
    assert abs(cols.var() - sigma**2 / depth) < 3e-3


def test_rademacher_and_uniform_are_bounded():
    rademacher = np.asarray(_entries(jax.random.key(2), (N_ENTRIES,), "rademacher"))
    assert float(np.max(np.abs(rademacher))) == 1.0
    u = np.asarray(_entries(jax.random.key(2), (N_ENTRIES,), "uniform"))
    assert float(np.max(np.abs(u))) <= np.sqrt(3) + 1e-6


def test_scalar_values_multiply_by_a_scalar():
    # Any fixed entries (NumPy: JAX's sampler compiles per shape); apply as one program.
    a = np.random.default_rng(3).standard_normal((3, 4)).astype(np.float32)
    values = ad.ScalarValues(0.5)
    out = jax.jit(lambda a, key: values.apply(a, key=key, depth=9))(a, jax.random.key(4))
    ratio = np.asarray(out) / a
    np.testing.assert_allclose(ratio, ratio[0, 0], rtol=1e-5)


def test_deterministic_values_are_identity_over_depth():
    a = jax.device_put(np.ones((2, 3), np.float32))
    np.testing.assert_allclose(
        ad.DeterministicValues().apply(a, key=jax.random.key(0), depth=4), np.asarray(a) / 4
    )


@pytest.mark.parametrize(
    ("build", "match"),
    [
        (lambda: ad.MatrixValues(1.0, distribution="cauchy"), "distribution"),  # type: ignore[arg-type]
        (lambda: ad.MatrixValues(0.0), "sigma"),
        (lambda: ad.ScalarValues(-0.1), "eps"),
    ],
)
def test_bad_values_are_named(build, match):
    with pytest.raises(ad.ParameterError, match=match):
        build()
