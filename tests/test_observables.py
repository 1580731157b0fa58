import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attndyn as ad
from tests.helpers import on_device

S, A, H, U = range(4)  # index of each outcome in ad.OUTCOMES

# The observables run jitted: one compile per shape, where an eager call compiled each of
# its dozens of operations (tol static, as a Python float is eagerly).
_cluster_classes = jax.jit(ad.cluster_classes, static_argnames="tol")
_pair_observables = jax.jit(ad.pair_observables)
_classes_and_cosine = jax.jit(lambda x: (ad.cluster_classes(x), ad.mean_cosine(x)))


def _classes(rows, tol=1e-3):
    return np.asarray(_cluster_classes(on_device(rows), tol=tol))


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
    x = on_device([[1.0, 0.0], [0.0, 2.0], [-1.0, 0.0]])
    mean, var = jax.jit(lambda x: (ad.mean_cosine(x), ad.variance(x)))(x)
    assert float(mean) == pytest.approx(-1 / 3)
    # θ̄ = (0, 1/3): Var = 1 − |θ̄|² = 8/9.
    assert float(var) == pytest.approx(8 / 9, rel=1e-6)


def test_n_clusters_is_an_exact_integer():
    x = on_device([[1, 0, 0], [1, 0, 0], [-1, 0, 0], [0, 1, 0], [0, 1, 0]])
    count = jax.jit(ad.n_clusters)(x)
    assert jnp.issubdtype(count.dtype, jnp.integer) and int(count) == 3
    # Three clusters of three, five and seven tokens: summing 1/size over the tokens gave
    # 2.9999999999999996 for such sizes, which int() truncated to 2. Built in NumPy, and
    # both counts from one program: eagerly every operation compiles.
    sizes = (3, 5, 7)
    x = np.concatenate(
        [np.tile(np.eye(3, dtype=np.float32)[i], (n, 1)) for i, n in enumerate(sizes)]
    )
    count, span = jax.jit(lambda x: (ad.n_clusters(x), ad.span_dimension(x)))(on_device(x))
    assert int(count) == 3
    assert int(span) == 3
    assert jnp.issubdtype(span.dtype, jnp.integer)


def test_span_dimension_of_two_tokens_is_the_gram_eigenvalue_count():
    # N = 2 is written out (eigenvalues 1 ± cos): it must count what eigvalsh counts, for
    # pairs spread out, nearly together and nearly antipodal (gaps ~1e-4, far from the
    # threshold 1e-3 in float32). The pairs are any fixed points on the sphere, drawn in
    # NumPy, and the count is jitted: JAX's sampler and eager operations compile each.
    rng = np.random.default_rng(9)
    span = jax.jit(ad.span_dimension)
    for i in range(48):
        x = rng.standard_normal((2, 5)).astype(np.float32)
        x /= np.linalg.norm(x, axis=-1, keepdims=True)
        if i % 3:
            sign = 1.0 if i % 3 == 1 else -1.0
            x[1] = sign * x[0] + 1e-2 * x[1]
        theta = x / np.linalg.norm(x, axis=-1, keepdims=True)
        expected = np.sum(np.linalg.eigvalsh(theta @ theta.T) > 1e-3)
        assert float(span(on_device(x))) == float(expected), i
    assert float(span(on_device(np.ones((1, 3))))) == 1.0


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
        assert float(span(on_device(x))) == k, k
    x = rng.standard_normal((n_tokens, dim))
    theta = x / np.linalg.norm(x, axis=-1, keepdims=True)
    eigenvalues = np.linalg.eigvalsh(theta @ theta.T)
    assert np.all(np.abs(eigenvalues - 1e-3) > 1e-4)  # no eigenvalue near the threshold
    assert float(span(on_device(x))) == np.sum(eigenvalues > 1e-3)


def test_span_dimension_of_many_tokens_decomposes_a_d_by_d_matrix():
    # The cost guard: at N = 50, d = 4 the N × N eigendecomposition (which took 80 % of a
    # study's observation time at 41 saves) is never formed.
    jaxpr = str(jax.make_jaxpr(ad.span_dimension)(np.ones((50, 4), np.float32)))
    assert "eigh" in jaxpr and "f32[4,4]" in jaxpr
    assert "f32[50,50]" not in jaxpr


def _planted(rng, n_tokens, dim):
    """Random directions with planted clusters and antipodes: some rows copy (or negate)
    an earlier row up to a jitter far inside the tolerance, the rest stay random."""
    x = rng.standard_normal((n_tokens, dim))
    for i in range(1, n_tokens):
        if rng.random() < 0.5:
            j = int(rng.integers(i))
            x[i] = rng.choice([1.0, -1.0]) * x[j] + 1e-5 * rng.standard_normal(dim)
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def _numpy_pairs(theta, tol=1e-3, threshold=0.999):
    """The three pair observables from a float64 Gram matrix, pair by pair."""
    gram = theta @ theta.T
    cos = gram[np.triu_indices(len(theta), 1)]
    together, apart = cos >= 1 - tol, cos <= -1 + tol
    single = bool(np.all(together))
    antipodal = bool(np.all(together | apart) and np.any(apart))
    classes = [single, antipodal, bool(np.any(apart)), not (single or antipodal)]
    return np.asarray(classes), cos.mean(), np.mean(cos > threshold)


@pytest.mark.default_case("2-3")
@pytest.mark.parametrize(("n_tokens", "dim"), [(2, 3), (7, 3), (12, 4), (20, 8), (9, 16)])
def test_pair_observables_count_the_pairs_as_numpy_does(n_tokens, dim):
    # One reduction makes classes, mean cosine and pair density (pair_observables); a
    # pair-by-pair count in float64 is the independent route. The planted rows sit 10⁻⁵
    # from their partner, random ones far from every threshold (checked), so float32
    # cannot move a pair across one.
    rng = np.random.default_rng(n_tokens * 100 + dim)
    for _ in range(20):
        theta = _planted(rng, n_tokens, dim)
        cos = (theta @ theta.T)[np.triu_indices(n_tokens, 1)]
        assert np.all(np.abs(np.abs(cos) - 0.999) > 1e-4)
        classes, mean, density = _numpy_pairs(theta)
        got = _pair_observables(on_device(theta))
        np.testing.assert_array_equal(np.asarray(got.classes), classes)
        assert float(got.mean_cosine) == pytest.approx(mean, abs=1e-6)
        assert float(got.pair_density) == pytest.approx(density, abs=1e-7)


def test_pair_observables_are_the_single_functions():
    # The estimator reads classes, cosine and density from one pass; a user calling the
    # single functions gets the same classes and densities (counts), and the same mean
    # cosine up to the order of its float32 sum (XLA orders a reduction of one operand
    # differently from one of several): |Δ| ≤ 435 pairs × 2⁻²⁴ ≈ 2.6·10⁻⁵, asked 10⁻⁶.
    rng = np.random.default_rng(3)
    x = on_device(rng.standard_normal((64, 30, 4)))
    both = jax.jit(jax.vmap(ad.pair_observables))(x)
    np.testing.assert_array_equal(both.classes, jax.jit(jax.vmap(ad.cluster_classes))(x))
    np.testing.assert_array_equal(both.pair_density, jax.jit(jax.vmap(ad.pair_density))(x))
    single = jax.jit(jax.vmap(ad.mean_cosine))(x)
    np.testing.assert_allclose(both.mean_cosine, single, rtol=0, atol=1e-6)


def test_one_token_is_one_cluster_with_cosine_and_density_one():
    got = _pair_observables(on_device(np.ones((1, 3))))
    np.testing.assert_array_equal(got.classes, [True, False, False, False])
    assert float(got.mean_cosine) == 1.0 and float(got.pair_density) == 1.0


def test_pair_observables_read_the_gram_matrix_in_one_reduction():
    # The cost guard: three reductions recomputed the Gram matrix three times (1.8 s
    # against 0.49 s at N = 50, d = 4, 2,048 trajectories × 41 saves).
    jaxpr = str(jax.make_jaxpr(ad.pair_observables)(np.ones((50, 4), np.float32)))
    assert re.findall(r"reduce\w*", jaxpr) == ["reduce"]


@pytest.mark.default_case("9-4")
@pytest.mark.parametrize(("n_tokens", "dim"), [(6, 2), (9, 4), (5, 8)])
def test_merges_found_by_coordinates_are_those_found_by_rows(n_tokens, dim, monkeypatch):
    # d ≤ 8 compares one coordinate at a time with each number's own ulp; the general
    # route compares whole rows with the ulp of the larger magnitude. Tokens one ulp
    # apart, exactly equal, negated, or apart by two ulps must get the same answer.
    from attndyn._core import observables

    rng = np.random.default_rng(dim)
    cases = []
    for _ in range(40):
        x = rng.standard_normal((n_tokens, dim)).astype(np.float32)
        x /= np.linalg.norm(x, axis=-1, keepdims=True)
        i, j = rng.choice(n_tokens, 2, replace=False)
        x[j] = rng.choice([1.0, -1.0]) * x[i]
        k = int(rng.integers(dim))
        for _ in range(int(rng.integers(3))):  # 0, 1 or 2 ulps apart in one coordinate
            x[j, k] = np.nextafter(x[j, k], np.float32(np.inf))
        cases.append(x)
    batch = on_device(np.stack(cases))
    # Each route as one program (a fresh jit traces after the patch): eagerly each of
    # their operations compiles.
    by_coordinates = jax.jit(jax.vmap(observables.numerically_merged))(batch)
    monkeypatch.setattr(observables, "SMALL_AXIS", 0)
    by_rows = jax.jit(jax.vmap(observables.numerically_merged))(batch)
    np.testing.assert_array_equal(by_coordinates, by_rows)
    assert 0 < int(np.sum(np.asarray(by_rows))) < len(cases)  # both answers occur


@pytest.mark.parametrize(
    "x",
    [
        [[1.0, 0.0, 0.0], [1.0, 0.0, 0.0], [np.nan, 0.0, 0.0]],  # one NaN coordinate
        [[np.nan] * 3] * 3,  # all NaN
        [[0.0] * 3] * 3,  # all zero: no token has a direction
        [[1.0, 0.0, 0.0], [0.0, 0.0, 0.0]],  # one zero row
        [[0.0, 0.0, 0.0]],  # one token without a direction
    ],
)
def test_a_configuration_without_directions_has_no_class(x):
    # A NaN cosine is neither together nor antipodal, and counting pairs made such a
    # configuration "unclustered": an all-NaN or all-zero state was a result (audit). It
    # belongs to no class now, and its mean cosine is NaN (the estimator counts it as
    # non-finite).
    classes, mean = _classes_and_cosine(on_device(x))
    np.testing.assert_array_equal(classes, [False, False, False, False])
    assert np.isnan(float(mean))
