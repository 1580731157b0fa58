import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attndyn as ad

S, A, H, U = range(4)  # index of each outcome in ad.OUTCOMES


def _classes(rows, tol=1e-3):
    return np.asarray(ad.cluster_classes(jnp.asarray(rows, jnp.float32), tol))


def test_outcome_order():
    assert ad.OUTCOMES == ("single", "antipodal", "has_antipodal_pair", "unclustered")


@pytest.mark.parametrize(
    ("rows", "expected"),
    [
        ([[1, 0, 0], [1, 0, 0]], [1, 0, 0, 0]),
        ([[1, 0, 0], [-1, 0, 0]], [0, 1, 1, 0]),
        ([[1, 0, 0], [0, 1, 0]], [0, 0, 0, 1]),
        ([[1, 0, 0], [-1, 0, 0], [1, 0, 0]], [0, 1, 1, 0]),
        ([[1, 0, 0], [-1, 0, 0], [0, 1, 0]], [0, 0, 1, 1]),
        ([[0, 0, 1]], [1, 0, 0, 0]),
    ],
)
def test_classes(rows, expected):
    np.testing.assert_array_equal(_classes(rows), np.asarray(expected, bool))


def test_tolerance_is_respected():
    angle = 0.05  # cos = 0.99875: together at tol 1e-2, not at 1e-3
    rows = [[1, 0], [np.cos(angle), np.sin(angle)]]
    assert _classes(rows, 1e-2)[S]
    assert _classes(rows, 1e-3)[U]


def test_mean_cosine_and_variance():
    x = jnp.array([[1.0, 0.0], [0.0, 2.0], [-1.0, 0.0]])
    assert float(ad.mean_cosine(x)) == pytest.approx(-1 / 3)
    # θ̄ = (0, 1/3): Var = 1 − |θ̄|² = 8/9.
    assert float(ad.variance(x)) == pytest.approx(8 / 9, rel=1e-6)


def test_n_clusters():
    x = jnp.array([[1.0, 0, 0], [1.0, 0, 0], [-1.0, 0, 0], [0, 1.0, 0], [0, 1.0, 0]])
    assert float(ad.n_clusters(x)) == pytest.approx(3.0)


def test_span_dimension_of_two_tokens_is_the_gram_eigenvalue_count():
    # N = 2 is written out (eigenvalues 1 ± cos): it must count what eigvalsh counts, for
    # pairs spread out, nearly together and nearly antipodal (gaps ~1e-4, far from the
    # threshold 1e-3 in float32).
    key = jax.random.key(9)
    for i in range(48):
        x = ad.uniform_sphere(key=jax.random.fold_in(key, i), n_tokens=2, dim=5)
        if i % 3:
            sign = 1.0 if i % 3 == 1 else -1.0
            x = x.at[1].set(sign * x[0] + 1e-2 * x[1])
        theta = x / jnp.linalg.norm(x, axis=-1, keepdims=True)
        expected = jnp.sum(jnp.linalg.eigvalsh(theta @ theta.T) > 1e-3)
        assert float(ad.span_dimension(x)) == float(expected), i
    assert float(ad.span_dimension(jnp.ones((1, 3)))) == 1.0
