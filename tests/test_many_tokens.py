"""Observables of many tokens (attndyn._core.many_tokens): closed forms on hand-built
configurations, two routes that must agree, the uniform law, and the existing observables
where they overlap (N ≤ 50)."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import special

import attndyn as ad
from attndyn._core import many_tokens as mt
from tests.helpers import sphere_points

# Compiled once per shape (tolerances and β are array arguments): eager calls compiled
# every operation, and a while loop per tolerance, for each configuration.
_powers = jax.jit(mt.mode_powers, static_argnames=("ell_max", "method", "block"))
_labels = jax.jit(mt.cluster_labels, static_argnames=("block",))
_clusters = jax.jit(mt.clusters, static_argnames=("block",))
_energy = jax.jit(mt.log_interaction_energy, static_argnames=("block",))
_distance = jax.jit(mt.min_distance, static_argnames=("block",))


def _unit(a) -> jax.Array:
    a = np.asarray(a, np.float64)
    # Converted to float32 in NumPy and put on the device as it is: jnp.asarray compiles a
    # small program per shape (a conversion, or a staging copy).
    return jax.device_put((a / np.linalg.norm(a, axis=-1, keepdims=True)).astype(np.float32))


def _circle(angles) -> jax.Array:
    angles = np.asarray(angles, np.float64)
    return _unit(np.stack([np.cos(angles), np.sin(angles)], axis=1))


@pytest.mark.default_case("2")
@pytest.mark.parametrize("dim", [2, 3])
def test_mode_power_routes_agree(dim):
    """Harmonics (Fourier on S¹, Schmidt-normalised Legendre functions on S²) against the
    Gegenbauer pair sums in blocks of 64 rows (N = 300: a ragged last block)."""
    x = sphere_points(dim, 300, dim)
    pairs = _powers(x, ell_max=14, method="pairs", block=64)
    harmonics = _powers(x, ell_max=14, method="harmonics")
    # Float32 sums of 300² terms of size ≤ 1 against N·ℓ_max² terms: ~10⁻⁶ absolute.
    np.testing.assert_allclose(np.asarray(harmonics), np.asarray(pairs), atol=3e-6)
    assert float(np.asarray(pairs)[0]) == pytest.approx(1.0, abs=1e-6)


def test_mode_powers_of_hand_built_configurations():
    # k equal clusters equally spaced on S¹: P_ℓ = 1 where k divides ℓ, else 0.
    k = 5
    x = _circle(np.repeat(2 * np.pi * np.arange(k) / k, 3))
    expected = np.where(np.arange(13) % k == 0, 1.0, 0.0)
    np.testing.assert_allclose(np.asarray(_powers(x, ell_max=12)), expected, atol=1e-6)
    # Two antipodal points on S²: P_ℓ = (1 + P_ℓ(−1))/2 = 1 for even ℓ, 0 for odd.
    y = _unit([[0.3, -0.2, 0.9], [-0.3, 0.2, -0.9]])
    expected = np.where(np.arange(11) % 2 == 0, 1.0, 0.0)
    np.testing.assert_allclose(np.asarray(_powers(y, ell_max=10)), expected, atol=1e-5)
    # The regular tetrahedron: P_ℓ = (4 + 12 P_ℓ(−1/3))/16 (Legendre P_ℓ).
    tetra = _unit([[1, 1, 1], [1, -1, -1], [-1, 1, -1], [-1, -1, 1]])
    ell = np.arange(9)
    expected = (4 + 12 * special.eval_legendre(ell, -1 / 3)) / 16
    np.testing.assert_allclose(np.asarray(_powers(tetra, ell_max=8)), expected, atol=1e-5)
    # In d = 5 (pairs): one point, P_ℓ = 1 for every ℓ.
    point = _unit(np.tile([[1, 2, 3, 4, 5]], (7, 1)))
    np.testing.assert_allclose(np.asarray(_powers(point, ell_max=6)), 1.0, atol=1e-5)


@pytest.mark.default_case("3-harmonics")
@pytest.mark.parametrize(("dim", "method"), [(3, "harmonics"), (5, "pairs")])
def test_uniform_tokens_have_mode_power_one_over_n(dim, method):
    """E P_ℓ = 1/N for i.i.d. uniform tokens (ℓ ≥ 1): only the diagonal survives the mean.
    1,000 configurations of 40 tokens; each degree's mean of N·P_ℓ is 1 within 4 standard
    errors (its sample SE: N·P_ℓ is a sum of squared harmonic means, ~χ²/dim H_ℓ)."""
    n = 40
    x = sphere_points(11 + dim, 1000, n, dim)
    power = np.asarray(jax.jit(jax.vmap(lambda c: mt.mode_powers(c, 6, method=method)))(x)) * n
    mean = power[:, 1:].mean(axis=0)
    se = power[:, 1:].std(axis=0, ddof=1) / math.sqrt(len(power))
    assert np.all(np.abs(mean - 1) <= 4 * se), (mean, se)


def _planted(seed: int, n_tokens: int, dim: int, n_centres: int, spread: float):
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(n_centres, dim))
    x = centres[rng.integers(0, n_centres, n_tokens)]
    x = x / np.linalg.norm(x, axis=1, keepdims=True) + spread * rng.normal(size=x.shape)
    return _unit(x)


@jax.jit
def _both_counts(x, tol):
    found = mt.clusters(x, tol, block=7)
    return found, ad.n_clusters(x, tol), ad.cluster_classes(x, tol)[0]


@pytest.mark.default_case("2")
@pytest.mark.parametrize("dim", [2, 3, 4])
def test_clusters_agree_with_the_existing_observables(dim):
    """For N ≤ 50: the count equals attndyn.n_clusters (reachability by squaring), as an
    integer, over planted and uniform configurations and tolerances (blocks of 7 rows: a
    ragged last one). The class "single" (every pair together) implies one cluster; one
    cluster implies "single" where the clusters are tight (planted, spread ≪ tol), while a
    chain of tokens each within tol of the next is one cluster without being single."""
    planted = [_planted(s, 50, dim, c, 0.002) for s, c in enumerate((1, 2, 3, 6))]
    uniform = [sphere_points(s, 50, dim) for s in range(3)]
    for tight, configurations in ((True, planted), (False, uniform)):
        for x in configurations:
            for tol in (1e-2, 0.05, 0.4):
                found, count, single = _both_counts(x, np.float32(tol))
                assert found.n_clusters.dtype == jnp.int32
                assert int(found.n_clusters) == round(float(count))
                assert int(np.asarray(found.histogram).sum()) == int(found.n_clusters)
                if bool(single):
                    assert int(found.n_clusters) == 1
                elif tight:
                    assert int(found.n_clusters) > 1


def test_cluster_sizes_of_a_hand_built_configuration():
    """Clusters of 1, 2, 5 and 9 tokens far apart: largest 9, one cluster in each size class
    [1,2), [2,4), [4,8), [8,16); the same on S¹ (by angle) and S² (by labels)."""
    sizes = (1, 2, 5, 9)
    angles = np.concatenate(
        [np.full(s, c) + 1e-4 * np.arange(s) for s, c in zip(sizes, (0, 1.5, 3, 4.5))]
    )
    theta = np.concatenate([np.full(s, c) for s, c in zip(sizes, (0.3, 1.2, 2.0, 2.8))])
    on_s2 = _unit(
        np.stack([np.sin(theta) * np.cos(angles), np.sin(theta) * np.sin(angles), np.cos(theta)], 1)
    )
    for x in (_circle(angles), on_s2):
        found = _clusters(x, np.float32(1e-3), block=5)
        assert int(found.n_clusters) == 4
        assert int(found.largest) == 9
        np.testing.assert_array_equal(np.asarray(found.histogram), [1, 1, 1, 1, 0])
        labels = np.asarray(_labels(x, np.float32(1e-3), block=5))
        assert len(set(labels.tolist())) == 4


def test_circle_and_label_routes_agree():
    """On S¹ the clusters by angle equal the min-label propagation (any tolerance)."""
    for seed in range(3):
        x = sphere_points(seed, 200, 2)
        for tol in (1e-3, 0.02, 0.3):
            tol = np.float32(tol)
            sizes = np.bincount(np.asarray(_labels(x, tol, block=64)), minlength=200)
            found = _clusters(x, tol)
            assert int(found.n_clusters) == int(np.count_nonzero(sizes))
            assert int(found.largest) == int(sizes.max())


def test_interaction_energy_and_minimum_distance():
    x = sphere_points(4, 45, 3)
    x64 = np.asarray(x, np.float64)
    gram = x64 @ x64.T
    beta = 3.5
    exact = math.log(np.exp(beta * gram).sum() / (2 * beta * 45**2))
    assert float(_energy(x, beta, block=8)) == pytest.approx(exact, abs=2e-6)
    distances = np.linalg.norm(x64[:, None] - x64[None], axis=-1) + np.diag(np.full(45, np.inf))
    assert float(_distance(x, block=8)) == pytest.approx(distances.min(), rel=1e-5)
    circle = _circle(np.array([0.0, 1e-3, 2.0, 4.0]))
    assert float(_distance(circle)) == pytest.approx(2 * math.sin(5e-4), rel=1e-4)
    # One cluster at huge β: E = e^β/(2β), log E = β − log 2β, no overflow on the way.
    one = _unit(np.tile([[1.0, 2.0, 2.0]], (10, 1)))
    assert float(_energy(one, 500.0)) == pytest.approx(500 - math.log(1000), rel=1e-6)


def test_the_unnormalised_flow_increases_the_energy_at_the_rate_it_should():
    """dE/dt = (1/N) Σ_i |P_{x_i} A_i|² along dx_i/dt = P_{x_i} A_i (USA, Q = K = V = I):
    E_β is the flow's energy. Checked by a central difference in float64."""
    with jax.enable_x64(True):
        # Any fixed uniform tokens, drawn and normalised in NumPy (float64).
        x = np.random.default_rng(5).standard_normal((30, 3))
        x = jax.device_put(x / np.linalg.norm(x, axis=1, keepdims=True))
        beta = 2.0
        h = 1e-5

        @jax.jit
        def rates(x):
            velocity = ad.tangent_project(x, ad.Attention(beta, kind="unnormalized")(x))
            energy = [jnp.exp(mt.log_interaction_energy(x + s * velocity, beta)) for s in (h, -h)]
            return (energy[0] - energy[1]) / (2 * h), jnp.sum(velocity * velocity) / 30

        rate, expected = (float(r) for r in rates(x))
        assert expected > 0
        assert rate == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("dim", [2, 3])
def test_clusters_of_non_finite_tokens_are_a_sentinel_never_a_count(dim):
    """An all-NaN configuration was one cluster of 4 on S¹ (four of one on S²); any
    non-finite coordinate now gives −1 for every count and label, which no configuration
    gives (a count is at least 1)."""
    # Four tokens far apart: four clusters.
    angles = np.array([0.0, 1.5, 3.0, 4.5])
    spread = [np.cos(angles), np.sin(angles)] + [np.full(4, 0.3)] * (dim - 2)
    good = np.asarray(_unit(np.stack(spread, axis=1)))
    for bad in (np.full((4, dim), np.nan), np.where(np.arange(4)[:, None] == 2, np.inf, good)):
        x = jax.device_put(bad.astype(np.float32))
        found = _clusters(x, np.float32(1e-3))
        assert int(found.n_clusters) == -1 and int(found.largest) == -1
        assert np.all(np.asarray(found.histogram) == -1)
        assert np.all(np.asarray(_labels(x, np.float32(1e-3))) == -1)
    assert int(_clusters(jax.device_put(good), np.float32(1e-3)).n_clusters) == 4


@pytest.mark.parametrize("beta", [-1.0, 0.0, float("nan")])
def test_the_interaction_energy_refuses_a_beta_that_is_not_positive(beta):
    # β = −1 gave NaN and β = 0 inf, without an error.
    with pytest.raises(ad.ParameterError, match="beta="):
        mt.log_interaction_energy(_unit(np.eye(3)), beta)


def _circle_tokens(n: int, kind: str, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if kind == "uniform":
        phi = rng.uniform(0, 2 * np.pi, n)
    else:  # four tight clusters and a few lone tokens
        phi = rng.choice([0.3, 1.9, 3.5, 5.0], n) + 1e-3 * rng.standard_normal(n)
        phi[:5] = rng.uniform(0, 2 * np.pi, 5)
    return np.stack([np.cos(phi), np.sin(phi)], axis=1)


def _energy_float64(x: np.ndarray, beta: float) -> float:
    """log E_β by the pairs in float64 NumPy: the independent route."""
    g = beta * (x @ x.T)
    top = g.max()
    return float(top + np.log(np.exp(g - top).sum()) - np.log(2 * beta) - 2 * np.log(len(x)))


@pytest.mark.parametrize("kind", ["uniform", "clusters"])
def test_circle_energy_by_fourier_equals_the_pairs(kind):
    # Above 2,048 tokens on S¹ the energy is Σ_k w_k |c_k|² (no pairs). Its truncation is
    # bounded below ε/8 relative, so it must equal a float64 pair sum to float32 rounding
    # of the coefficients (a few 1e-6 in log E), at β where it runs and where it cannot
    # (β = 5,000: no degree serves it, the pairs run; log E ≈ 4,986 there, so float32's
    # own resolution, 4.9e-4, sets the tolerance: 2 ulp of the value).
    x = _circle_tokens(3000, kind)
    energy = jax.jit(mt.log_interaction_energy)
    for beta in (0.5, 4.0, 30.0, 5000.0):
        got = float(energy(jax.device_put(x.astype(np.float32)), jnp.float32(beta)))
        want = _energy_float64(x, beta)
        assert abs(got - want) < 2e-5 + 2.4e-7 * abs(want), (kind, beta, got)
