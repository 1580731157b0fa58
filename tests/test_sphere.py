import jax
import numpy as np

import attndyn as ad


def test_uniform_sphere_is_on_sphere_and_centred():
    # The checks in float64 NumPy: eagerly each JAX operation compiles.
    x = np.asarray(ad.uniform_sphere(key=jax.random.key(0), n_tokens=20000, dim=3), np.float64)
    np.testing.assert_allclose(np.linalg.norm(x, axis=-1), 1.0, atol=1e-6)
    # Each coordinate has mean 0 and variance 1/3; the standard error of the mean is
    # sqrt(1/3/20000) ≈ 0.0041, so 0.02 is about 5 standard errors.
    np.testing.assert_allclose(np.mean(x, axis=0), 0.0, atol=0.02)


@jax.jit
def _projections(x, y):
    p = ad.tangent_project(x, y)
    return p, ad.tangent_project(x, p)


def test_tangent_projection_is_orthogonal():
    # Any points and vectors, drawn in NumPy; both projections as one program, the checks
    # in float64 NumPy: JAX's samplers and eager operations compile a program each.
    rng = np.random.default_rng(1)
    x = rng.standard_normal((5, 4)).astype(np.float32)
    x /= np.linalg.norm(x, axis=-1, keepdims=True)
    y = rng.standard_normal((5, 4)).astype(np.float32)
    p, pp = _projections(x, y)
    p, pp = np.asarray(p, np.float64), np.asarray(pp, np.float64)
    np.testing.assert_allclose(np.sum(p * x, axis=-1), 0.0, atol=1e-6)
    np.testing.assert_allclose(pp, p, atol=1e-6)


def test_sphere_drift_measures_distance_from_sphere():
    x = np.array([[1.0, 0.0], [0.0, 1.25]], np.float32)
    assert float(jax.jit(ad.sphere_drift)(x)) == 0.25  # one program, not one per operation
