import itertools
import math

import jax
import numpy as np
import pytest
from scipy import integrate

import attndyn as ad
from attndyn import theory


def test_beta_critical_solves_cosh():
    for d in range(4, 12):
        assert math.cosh(2 * theory.beta_critical(d)) == pytest.approx(d - 2)
    assert theory.beta_critical(3) == 0.0
    assert theory.beta_critical(2) == 0.0


def test_eps_critical():
    assert theory.eps_critical(0.0) == pytest.approx(math.sqrt(2))
    assert theory.eps_critical(2.0) ** 2 == pytest.approx(2 * math.exp(-2.0))


@pytest.mark.parametrize("beta", [0.0, 0.7, 3.0])
@pytest.mark.parametrize("z", [-0.9, 0.0, 0.4])
def test_d2_by_hand(beta, z):
    # d = 2: the drift term vanishes, s(x) = (1 − x²)^{−1/2}, so
    # P(antipodal | z) = ∫_z^1 s / π = arccos(z)/π; averaged over a uniform angle it is ½.
    assert theory.p_antipodal_given_overlap(z, beta, 2) == pytest.approx(
        math.acos(z) / math.pi, abs=1e-9
    )
    assert theory.p_antipodal_uniform(beta, 2) == pytest.approx(0.5, abs=1e-9)


@pytest.mark.parametrize(
    ("beta", "dim"), [(1.0, 4), (2.0, 6), (0.5, 3), (0.01, 64), (10.0, 4), (120.0, 16)]
)
def test_scale_density_against_direct_quadrature(beta, dim):
    # Independent route: integrate the spec's formula (poles and all) directly by adaptive
    # quadrature, against the Chebyshev table of its pole-free part in v = 1 − y. Near the
    # ends and at β = 120 (boundary layer of width 1/β at +1) included.
    def direct(x):
        inner, _ = integrate.quad(
            lambda y: (dim - 2) / (math.cosh(beta * (1 - y)) * (1 - y * y)),
            0,
            x,
            epsabs=1e-13,
            limit=200,
        )
        return (1 - x * x) ** -0.5 * math.exp(-inner)

    for x in (-0.99, -0.8, -0.3, 0.0, 0.5, 0.9, 0.99):
        assert float(theory.scale_density(x, beta, dim)) == pytest.approx(direct(x), rel=1e-8)


def test_threshold_behaviour():
    for d in (4, 6, 10):
        bc = theory.beta_critical(d)
        assert theory.p_antipodal_uniform(bc - 0.05, d) == 0.0
        assert theory.p_antipodal_uniform(bc + 0.05, d) > 0.0
    # Monotone in β and below ½ (the large-β limit).
    values = [theory.p_antipodal_uniform(b, 4) for b in (0.8, 1.5, 3.0, 6.0)]
    assert all(a < b for a, b in itertools.pairwise(values))
    assert values[-1] < 0.5


def test_given_overlap_is_a_decreasing_probability():
    ps = [theory.p_antipodal_given_overlap(z, 2.0, 4) for z in (-1.0, -0.5, 0.0, 0.5, 1.0)]
    assert ps[0] == pytest.approx(1.0) and ps[-1] == pytest.approx(0.0, abs=1e-12)
    assert all(a > b for a, b in itertools.pairwise(ps))


def test_uniform_average_against_sampled_starts():
    # Averaging P(antipodal | z) over sampled uniform starts (20000 pairs, fixed seed) must give
    # the Fubini quadrature; SE of the mean ≤ 0.5/sqrt(20000) = 0.0035, tolerance 0.015 > 4 SE.
    # The quadrature is on trial, not the sampler (test_overlap_start_cdf checks its law):
    # the starts are drawn in NumPy (attndyn's sampler compiles a program for the shape).
    x = np.random.default_rng(0).standard_normal((2 * 20000, 4))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    z = np.sum(x[::2] * x[1::2], axis=1)
    grid = np.linspace(-1, 1, 201)
    table = [theory.p_antipodal_given_overlap(v, 2.0, 4) for v in grid]
    sampled = np.interp(z, grid, table).mean()
    assert sampled == pytest.approx(theory.p_antipodal_uniform(2.0, 4), abs=0.015)


def test_overlap_start_cdf():
    x = np.asarray(ad.uniform_sphere(key=jax.random.key(1), n_tokens=2 * 20000, dim=5))
    z = np.sum(x[::2] * x[1::2], axis=1)
    # Empirical CDF at 3 points, SE ≤ 0.5/sqrt(20000) = 0.0035; tolerance 0.015 > 4 SE.
    for v in (-0.5, 0.0, 0.3):
        assert np.mean(z <= v) == pytest.approx(float(theory.overlap_start_cdf(v, 5)), abs=0.015)


@pytest.mark.parametrize(
    ("kwargs", "match"), [({"beta": -1.0, "dim": 4}, "beta"), ({"beta": 1.0, "dim": 1}, "dim")]
)
def test_bad_theory_input(kwargs, match):
    with pytest.raises(ad.ParameterError, match=match):
        theory.p_antipodal_uniform(**kwargs)
