"""The long-context threshold as published (Chen, Lin, Polyanskiy, Rigollet,
arXiv:2510.05554, Theorem 2.1; attndyn.theory._long_context), issue 45 item 4.

Closed forms (γ* = 1/(1 − ρ); the theorem's limits 1, 4ρ/(1 + 3ρ), ρ; the self-weight's
0, ½, 1), the exact finite-n formula against attndyn's own attention layer on the
orthonormal simplex (deterministic: float64, to rounding), its approach to the limits away
from γ*, and the refusals. All of it is milliseconds: a 64-token layer.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attndyn as ad
from attndyn import theory


def simplex_tokens(n: int, rho: float, *, norm_sq: float = 1.0) -> np.ndarray:
    """x_i = √q (√ρ u + √(1 − ρ) e_i) in d = n + 1 orthonormal coordinates (u first)."""
    y = np.zeros((n, n + 1))
    y[:, 0] = math.sqrt(rho)
    y[np.arange(n), np.arange(1, n + 1)] = math.sqrt(1 - rho)
    return math.sqrt(norm_sq) * y


def one_layer(x: np.ndarray, gamma: float, residual: float = 0.0) -> np.ndarray:
    """The paper's layer, pre-LN then attention then residual, through ad.Attention in
    float64; returns the raw outputs x_i'."""
    n = x.shape[0]
    with jax.enable_x64(True):
        y = ad.normalize(jnp.asarray(x, jnp.float64))
        out = ad.Attention(gamma * math.log(n))(y) + residual * jnp.asarray(x)
        return np.asarray(out)


def pair_overlaps(out: np.ndarray) -> np.ndarray:
    y = out / np.linalg.norm(out, axis=1, keepdims=True)
    gram = y @ y.T
    return gram[~np.eye(len(y), dtype=bool)]


def test_critical_gamma_closed_form():
    assert theory.simplex_critical_gamma(0) == 1.0  # orthogonal tokens: β = log n
    assert theory.simplex_critical_gamma(0.5) == 2.0
    assert theory.simplex_critical_gamma(0.75) == 4.0


@pytest.mark.parametrize("rho", [0.1, 0.5, 0.9])
def test_limits_are_theorem_2_1(rho):
    star = theory.simplex_critical_gamma(rho)
    below, above = 0.7 * star, 1.3 * star
    assert [theory.long_context_regime(g, rho) for g in (below, star, above)] == [
        "subcritical",
        "critical",
        "supercritical",
    ]
    assert [theory.simplex_self_weight(g, rho) for g in (below, star, above)] == [0, 0.5, 1]
    limits = [theory.simplex_output_overlap(g, rho) for g in (below, star, above)]
    assert limits == pytest.approx([1.0, 4 * rho / (1 + 3 * rho), rho], rel=1e-15)


def test_residual_limits_stay_contractive_below_and_at_threshold():
    # With a residual, overlap > ρ ⇔ a∞ < 1: contractive sub- and at-critical, the
    # identity above (the paper: a residual cannot replace the scaling).
    rho, star = 0.5, 2.0
    for residual, q in [(0.5, 1.0), (1.0, 4.0)]:
        c = residual * math.sqrt(q)
        values = [
            theory.simplex_output_overlap(g, rho, residual=residual, norm_sq=q)
            for g in (1.0, star, 3.0)
        ]
        expect = [
            (1 + c) ** 2 * rho / ((1 + c) ** 2 * rho + (1 - rho) * (a + c) ** 2)
            for a in (0, 0.5, 1)
        ]
        assert values == pytest.approx(expect, rel=1e-15)
        assert values[0] > values[1] > rho and values[2] == pytest.approx(rho)


@pytest.mark.parametrize("rho", [0.25, 0.75])
@pytest.mark.parametrize("factor", [0.5, 1.0, 2.0])
def test_exact_formula_is_the_attention_layer(rho, factor):
    # Deterministic: every pair of the 64-token simplex has the same output overlap, and
    # attndyn's layer gives the module's formula to float64 rounding; the self-weight is
    # the output's coordinate along the token's own e_i over √(1 − ρ).
    n, gamma = 64, factor * theory.simplex_critical_gamma(rho)
    out = one_layer(simplex_tokens(n, rho), gamma)
    overlaps = pair_overlaps(out)
    assert np.ptp(overlaps) < 1e-13
    assert overlaps.mean() == pytest.approx(theory.simplex_output_overlap(gamma, rho, n), abs=1e-13)
    self_weight = out[np.arange(n), np.arange(1, n + 1)] / math.sqrt(1 - rho)
    assert self_weight == pytest.approx(theory.simplex_self_weight(gamma, rho, n), abs=1e-13)


def test_exact_formula_with_residual_is_the_layer():
    n, rho, gamma, residual, q = 64, 0.5, 1.5, 0.7, 2.0
    out = one_layer(simplex_tokens(n, rho, norm_sq=q), gamma, residual)
    exact = theory.simplex_output_overlap(gamma, rho, n, residual=residual, norm_sq=q)
    assert pair_overlaps(out) == pytest.approx(exact, abs=1e-13)


@pytest.mark.parametrize("rho", [0.25, 0.5])
def test_simulation_near_the_limits_away_from_threshold(rho):
    # n = 64, γ = γ*/2 and 2γ*: the self-weight is within n^{−|1 − γ(1−ρ)|}·(n/(n−1)) of
    # its limit (0 or 1), so the overlap is within (1 − ρ)/ρ·that² (below) or
    # 2(1 − ρ)/ρ·that (above) of Theorem 2.1's 1 or ρ: a bound, not a fit.
    n, star = 64, theory.simplex_critical_gamma(rho)
    x = simplex_tokens(n, rho)
    for gamma, limit in [(star / 2, 1.0), (2 * star, rho)]:
        gap = n ** -abs(1 - gamma * (1 - rho)) * n / (n - 1)
        bound = (1 - rho) / rho * (gap**2 if limit == 1.0 else 2 * gap)
        measured = pair_overlaps(one_layer(x, gamma)).mean()
        assert abs(measured - limit) <= bound
        assert abs(measured - theory.simplex_output_overlap(gamma, rho)) <= bound


def test_exact_values_converge_to_the_limits():
    rho = 0.5
    for gamma in (1.0, 2.0, 3.0):  # γ* = 2
        limit = theory.simplex_output_overlap(gamma, rho)
        gaps = [
            abs(theory.simplex_output_overlap(gamma, rho, n) - limit) for n in (2**6, 2**20, 2**60)
        ]
        assert gaps[0] > gaps[1] > gaps[2] and gaps[2] < 1e-6
    # At γ*, exactly n/(2n − 1): ½ only in the limit (attndyn's heuristic asks ½ at every N).
    for n in (64, 4096):
        assert theory.simplex_self_weight(2.0, rho, n) == pytest.approx(n / (2 * n - 1), rel=1e-14)


def test_attndyn_heuristic_meets_the_published_threshold_only_at_rho_zero():
    # Uniform tokens in many dimensions are nearly orthogonal (ρ ≈ 0): critical_gamma → 1,
    # the published γ* at ρ = 0; at ρ > 0 the published threshold is elsewhere.
    heuristic = theory.critical_gamma(4096, 10**6)
    assert heuristic == pytest.approx(theory.simplex_critical_gamma(0.0), abs=1e-3)
    assert theory.simplex_critical_gamma(0.5) - heuristic > 0.9


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: theory.simplex_critical_gamma(1.0), "rho"),
        (lambda: theory.simplex_critical_gamma(-0.1), "rho"),
        (lambda: theory.simplex_critical_gamma(float("nan")), "rho"),
        (lambda: theory.simplex_self_weight(-1.0, 0.5), "gamma"),
        (lambda: theory.simplex_self_weight(1.0, 0.5, 1), "n_tokens"),
        (lambda: theory.simplex_output_overlap(1.0, 0.5, residual=-0.1), "residual"),
        (lambda: theory.simplex_output_overlap(1.0, 0.5, norm_sq=0.0), "norm_sq"),
        (lambda: theory.simplex_output_overlap(1.0, 0.0), "rho"),
    ],
)
def test_refusals_name_the_argument(call, name):
    # Values of the annotated types (strings, lists, floats for counts are refused before
    # the function runs by the test suite's type checker; the package's own refusal of
    # them is the same check_real_in / check_int as every theory function's).
    with pytest.raises(ad.ParameterError, match=name):
        call()
