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


@pytest.mark.parametrize(("n_tokens", "dim"), [(3, 8), (8, 3), (50, 4), (32, 16), (6, 6)])
def test_span_dimension_counts_the_span_of_tokens_in_a_subspace(n_tokens, dim):
    # Tokens in a random k-dimensional subspace, k of them an orthonormal basis of it,
    # span exactly k dimensions: ΘᵀΘ ⪰ the projector on the subspace, so k eigenvalues are
    # ≥ 1 and the others are 0 up to rounding (far below the 1e-3 threshold). For N > d
    # the d × d matrix ΘᵀΘ is used, for N ≤ d the N × N one; both must give k, for every
    # k, and agree with float64 on unconstrained tokens. Inputs are made in NumPy so that
    # one program (per shape) is compiled.
    rng = np.random.default_rng(n_tokens * 100 + dim)
    span = jax.jit(ad.span_dimension)
    for k in range(1, min(n_tokens, dim) + 1):
        basis = np.linalg.qr(rng.standard_normal((dim, k)))[0]  # d × k, orthonormal columns
        x = rng.standard_normal((n_tokens, k)) @ basis.T
        x[:k] = basis.T
        assert float(span(jnp.asarray(x, jnp.float32))) == k, k
    x = rng.standard_normal((n_tokens, dim))
    theta = x / np.linalg.norm(x, axis=-1, keepdims=True)
    eigenvalues = np.linalg.eigvalsh(theta @ theta.T)
    assert np.all(np.abs(eigenvalues - 1e-3) > 1e-4)  # no eigenvalue near the threshold
    assert float(span(jnp.asarray(x, jnp.float32))) == np.sum(eigenvalues > 1e-3)


def test_span_dimension_of_many_tokens_decomposes_a_d_by_d_matrix():
    # The cost guard: at N = 50, d = 4 the N × N eigendecomposition (which took 80 % of a
    # study's observation time at 41 saves) is never formed.
    jaxpr = str(jax.make_jaxpr(ad.span_dimension)(jnp.ones((50, 4))))
    assert "eigh" in jaxpr and "f32[4,4]" in jaxpr
    assert "f32[50,50]" not in jaxpr
