import jax
import jax.numpy as jnp
import numpy as np

import attndyn as ad


def test_uniform_sphere_is_on_sphere_and_centred():
    x = ad.uniform_sphere(key=jax.random.key(0), n_tokens=20000, dim=3)
    np.testing.assert_allclose(jnp.linalg.norm(x, axis=-1), 1.0, atol=1e-6)
    # Each coordinate has mean 0 and variance 1/3; the standard error of the mean is
    # sqrt(1/3/20000) ≈ 0.0041, so 0.02 is about 5 standard errors.
    np.testing.assert_allclose(jnp.mean(x, axis=0), 0.0, atol=0.02)


def test_tangent_projection_is_orthogonal():
    x = ad.uniform_sphere(key=jax.random.key(1), n_tokens=5, dim=4)
    y = jax.random.normal(jax.random.key(2), (5, 4))
    p = ad.tangent_project(x, y)
    np.testing.assert_allclose(jnp.sum(p * x, axis=-1), 0.0, atol=1e-6)
    np.testing.assert_allclose(ad.tangent_project(x, p), p, atol=1e-6)


def test_sphere_drift_measures_distance_from_sphere():
    x = jnp.array([[1.0, 0.0], [0.0, 1.25]])
    assert float(ad.sphere_drift(x)) == 0.25
