"""The uniform-state theory over its whole domain (issue 42, item 5): every β ≥ 0, every
degree ℓ ≥ 0, every d ≥ 2.

Before: NaN for every ℓ ≥ 2³⁰ or β ≥ 2³⁰ (SciPy's ``ive`` gives up there), ℓ* = 1 at
β = 10¹⁰ (√(2β) ≈ 141,421 expected), and USA's ℓ* collapsing to 8, 1, 1 at β = 710, 720,
1,000 where softmax's is 38, 38, 45 (the USA rates overflowed to inf, and argmax picked the
first inf). Checked here against closed forms (d = 3's spherical Bessel functions, the
hypergeometric series of K̂_0, the large-order and large-argument asymptotics), two routes
of one quantity (``ive`` and Debye's expansion; the float64 and the decimal ℓ* searches),
and the shape of the rates (concave in ℓ, ℓ* non-decreasing in β).
"""

import itertools
import math
from decimal import Decimal, localcontext
from fractions import Fraction

import numpy as np
import pytest
from scipy import special

import attndyn as ad
from attndyn import theory
from attndyn.theory import _bessel, _modes

# --- Debye's expansion -------------------------------------------------------------------------


def test_debye_coefficients_are_dlmf_10_41_10():
    # r_k = u_k/p^k, u_1 = (3p − 5p³)/24, u_2 = (81p² − 462p⁴ + 385p⁶)/1152,
    # u_3 = (30375p³ − 369603p⁵ + 765765p⁷ − 425425p⁹)/414720 (DLMF 10.41.10, printed there).
    r1, r2, r3 = _bessel.debye_coefficients()[:3]
    assert r1 == (Fraction(3, 24), 0, Fraction(-5, 24))
    assert r2 == tuple(Fraction(c, 1152) if c else 0 for c in (81, 0, -462, 0, 385))
    printed = (30375, 0, -369603, 0, 765765, 0, -425425)
    assert r3 == tuple(Fraction(c, 414720) if c else 0 for c in printed)


def test_debye_route_equals_ive_where_both_hold():
    # s = √(μ² + β²) from DEBYE_MIN to 3·10⁴ (where ive is still accurate), every direction.
    # 3e-14 relative: ive's own error at half-integer orders is ~1e-14 (mpmath, 2026-05).
    for beta in np.geomspace(_bessel.DEBYE_MIN, 3e4, 9):
        mu = np.concatenate([[0.0, 0.5, 1.0, 1.5], np.geomspace(2.0, 3e3, 12)])
        scaled = special.ive(mu, beta)
        held = scaled > 1e-280  # where ive has not underflowed
        debye = _bessel._log_ive_debye(mu[held], beta)
        np.testing.assert_allclose(debye, np.log(scaled[held]), rtol=3e-14, atol=3e-14)


def test_series_and_debye_agree_at_large_orders_and_small_beta():
    # ive underflows (I_μ(2)e^{−2} < 1e-280 from μ ≈ 150): the power series takes over
    # below DEBYE_MIN, Debye's expansion above it; both routes, one quantity.
    mu = np.asarray([40.0, 150.0, 300.0, 1000.0])
    series = _bessel._log_ive_small(mu, 2.0)
    np.testing.assert_allclose(series, _bessel._log_ive_debye(mu, 2.0), rtol=1e-15)


@pytest.mark.parametrize("order", [10**6, 2**40, 10**12, 10**18])
def test_huge_orders_follow_the_leading_power_law(order):
    # μ ≫ β²: I_μ(β) = (β/2)^μ/Γ(μ + 1) · (1 + β²/(4(μ + 1)) + O(μ⁻²)).
    beta = 4.0
    expected = order * math.log(beta / 2) - math.lgamma(order + 1) + beta**2 / (4 * (order + 1))
    got = float(_bessel.log_ive(np.asarray(order), beta)[()]) + beta
    assert got == pytest.approx(expected, rel=1e-15)


@pytest.mark.parametrize("beta", [1e8, 1e20, 1e300])
def test_huge_arguments_follow_hankel(beta):
    # β → ∞ at fixed μ: log(I_μ(β)e^{−β}) = −½ log 2πβ − (4μ² − 1)/(8β) + O(β⁻²).
    mu = np.asarray([0.0, 1.0, 7.5])
    expected = -0.5 * math.log(2 * math.pi * beta) - (4 * mu**2 - 1) / (8 * beta)
    np.testing.assert_allclose(_bessel.log_ive(mu, beta), expected, rtol=1e-15)


# --- closed forms at d = 3 (spherical Bessel functions) ----------------------------------------


def _sphere_ratios(beta: float) -> tuple[float, float]:
    """i_1/i_0 and i_2/i_0 in closed form: coth β − 1/β (Langevin) and 1 + 3/β² − 3 coth β/β."""
    coth = 1 / math.tanh(beta)
    return coth - 1 / beta, 1 + 3 / beta / beta - 3 * coth / beta


@pytest.mark.parametrize("beta", [5.0, 40.0, 1e3, 1e6, 1e10, 1e100, 1e300])
def test_sphere_rates_are_the_spherical_bessel_closed_forms(beta):
    # d = 3, softmax: λ_ℓ = ℓ(ℓ + 1) i_ℓ(β)/(β i_0(β)); finite at every β (was NaN from 2³⁰).
    r1, r2 = _sphere_ratios(beta)
    rates = theory.mode_growth_rate(beta, 3, [1, 2])
    np.testing.assert_allclose(rates, [2 * r1 / beta, 6 * r2 / beta], rtol=1e-13)


def test_funk_hecke_zero_is_its_hypergeometric_series():
    # K̂_0 = ₀F₁(; d/2; β²/4) = Σ_k (β²/4)^k / (k! (d/2)_k): an independent route to the
    # Bessel form, here where ive underflows (d = 1024, 10⁶) and where it does not.
    for beta, dim in ((2.0, 1024), (30.0, 7), (100.0, 1000), (100.0, 10**6)):
        log_terms = [
            k * math.log(beta**2 / 4)
            - math.lgamma(k + 1)
            - (math.lgamma(dim / 2 + k) - math.lgamma(dim / 2))
            for k in range(400)
        ]
        series = float(np.logaddexp.reduce(log_terms))
        assert theory.log_funk_hecke_exponential(beta, dim, 0) == pytest.approx(series, rel=1e-12)


def test_k0_tends_to_one_only_when_d_is_much_larger_than_beta_squared():
    # log K̂_0 ≈ β²/(2d) (the series' first term): → 0 needs d ≫ β², not d ≫ β
    # (self_attention_weight's docstring; issue 45). At d = 10β it is still ≈ 5.
    beta = 100.0
    assert theory.log_funk_hecke_exponential(beta, 10**6, 0) == pytest.approx(
        beta**2 / 2e6, rel=1e-3
    )
    assert theory.log_funk_hecke_exponential(beta, 1000, 0) > 4.9


# --- the reported cases --------------------------------------------------------------------------


def test_huge_degrees_give_a_zero_rate_not_nan():
    # mode_growth_rate(4, 2, 10**12) was NaN; the rate is e^{−2.6·10¹³}: 0 in float64.
    assert theory.mode_growth_rate(4, 2, 10**12) == 0.0
    assert theory.mode_growth_rate(4, 2, 10**12, "unnormalized", depth=100) == 0.0
    log_rate = _modes._log_flow_rate(4.0, 2, np.asarray(10**12), "softmax", None)
    expected = (
        math.log(1e24) + 1e12 * math.log(2) - math.lgamma(1e12 + 1) - math.log(special.iv(0, 4))
    ) - math.log(4)
    assert float(log_rate) == pytest.approx(expected, rel=1e-14)


def test_huge_beta_is_finite_everywhere_it_can_be():
    with np.errstate(all="raise"):
        rates = theory.mode_growth_rate(1e300, 2, [1, 2])
        log_k = theory.log_funk_hecke_exponential(1e300, 2, [1, 2])
        weight = theory.self_attention_weight(1e300, 2, 3)
        layered = theory.mode_growth_rate(1e300, 2, [1, 2], "unnormalized", depth=10)
    np.testing.assert_allclose(rates, [1e-300, 4e-300], rtol=1e-15)  # ℓ² I_ℓ/(β I_0) → ℓ²/β
    np.testing.assert_allclose(log_k, 1e300, rtol=1e-15)
    assert weight == 1.0  # 1/(1 + 2/√(2πβ)), to float64
    # USA layers: λ_ℓ/(L + c) → ℓ² I_ℓ/(β I_1) → ℓ²/β: the rate L log(1 + ℓ²/β) ≈ ℓ²·L/β.
    # (USA goes through logs of size log β ≈ 690: 690 × 1.1e-16 ≈ 8e-14 relative.)
    np.testing.assert_allclose(layered, [1e-299, 4e-299], rtol=2e-13)
    # A USA flow rate beyond float64 is inf (documented), never NaN.
    assert np.all(np.isinf(theory.funk_hecke_exponential(1e300, 2, [1, 2])))


@pytest.mark.parametrize(("beta", "star"), [(700, 37), (710, 38), (720, 38), (1000, 45)])
def test_usa_and_softmax_share_the_most_unstable_degree(beta, star):
    # USA gave 37, 8, 1, 1: its rates overflowed to inf. The rates differ by K̂_0 > 0.
    for kind in ("softmax", "unnormalized"):
        assert theory.most_unstable_degree(beta, 2, kind) == star
        # and it is the largest of the layer-map rates (finite at every β)
        ell = np.arange(1, 120)
        rates = theory.mode_growth_rate(beta, 2, ell, kind, depth=100, n_tokens=4096)
        assert np.all(np.isfinite(rates))
        assert ell[np.argmax(rates)] == star


# --- ℓ* at every β -------------------------------------------------------------------------------


@pytest.mark.parametrize("dim", [2, 3, 7])
def test_most_unstable_degree_follows_the_asymptotic_law(dim):
    # ℓ(ℓ + d − 2) = 2β at the continuous maximum of x e^{−x/(2β)}: ℓ* is within 1 of
    # √(2β + ν²) − ν (the corrections move it by ~0.1/√β). Exact Python ints at any β.
    nu = Decimal(dim / 2 - 1)
    for beta in (1e5, 1e10, 1e20, 1e100, 1e300):
        star = theory.most_unstable_degree(beta, dim)
        assert isinstance(star, int)
        with localcontext() as context:
            context.prec = 400  # the law to every digit of a 151-digit ℓ*
            law = (2 * Decimal(beta) + nu * nu).sqrt() - nu
            assert abs(star - law) <= 1, (beta, star, law)
    assert theory.most_unstable_degree(1e10, 2) == 141421


@pytest.mark.parametrize("dim", [2, 3, 7, 1000])
def test_the_largest_rate_tends_to_two_over_e_at_every_beta(dim):
    # λ_ℓ ≈ (x/β)e^{−x/(2β)} is 2/e at x = 2β. ℓ* is a Python int of any size (151 digits at
    # β = 10³⁰⁰), which mode_growth_rate takes back; nothing overflows up to float64's top.
    for beta in (1e10, 1e100, 1e300, 1.79e308):
        star = theory.most_unstable_degree(beta, dim)
        rates = np.asarray(theory.mode_growth_rate(beta, dim, [star - 1, star, star + 1]))
        np.testing.assert_allclose(rates, 2 / math.e, rtol=1e-9)


def test_the_degree_found_is_the_largest_rate_in_float64():
    # At β = 10¹⁰ the rates of ℓ* ± 1 differ from ℓ*'s by ~10⁻¹⁰ relative: float64 sees it.
    star = theory.most_unstable_degree(1e10, 2)
    rates = np.asarray(theory.mode_growth_rate(1e10, 2, [star - 1, star, star + 1]))
    assert rates[1] > rates[0] and rates[1] > rates[2]


@pytest.mark.parametrize("dim", [2, 3, 7, 100])
def test_float_and_decimal_searches_agree(dim):
    # Two routes: every degree in float64 (used up to β = 10⁴) and the decimal search from
    # the asymptotic ℓ* (beyond it), on both sides of the switch.
    for beta in (20.0, 300.0, 9999.0, 2e4, 1e5):
        assert _modes._star_float(beta, dim) == _modes._star_decimal(beta, dim), beta


def test_the_rates_are_log_concave_in_the_degree_and_star_grows_with_beta():
    # Turán's inequality I_μ² > I_{μ−1} I_{μ+1} and log x_ℓ concave: log λ_ℓ is concave in
    # ℓ, which the ℓ* search relies on. I_{μ+1}/I_μ grows with β, so ℓ* does too.
    for dim in (2, 3, 9):
        for beta in (0.5, 9.0, 400.0, 1e6):
            ell = np.arange(1, 400)  # rates in logs: they underflow at small β
            log_rates = _modes._log_flow_rate(beta, dim, ell, "softmax", None)
            assert np.all(np.isfinite(log_rates)) and np.all(np.diff(log_rates, 2) < 1e-12)
        stars = [theory.most_unstable_degree(b, dim) for b in np.geomspace(0.1, 1e12, 60)]
        assert all(a <= b for a, b in itertools.pairwise(stars))


def test_first_peak_finds_the_top_of_a_concave_sequence_from_anywhere():
    def rises(n: int) -> bool:  # −(n − 37.3)²: largest at 37
        return -((n + 1 - 37.3) ** 2) > -((n - 37.3) ** 2)

    for start in (1, 2, 36, 37, 38, 500, 10**9):
        assert _modes._first_peak(rises, start) == 37
    assert _modes._first_peak(lambda n: False, 50) == 1  # decreasing: ℓ* = 1


# --- domain errors naming the argument (right types; wrong types: test_api_validation) ----------


@pytest.mark.parametrize(
    ("call", "needle"),
    [
        (lambda: theory.mode_growth_rate(float("nan"), 2, 1), "beta=nan must be finite"),
        (lambda: theory.mode_growth_rate(-1.0, 2, 1), "beta=-1.0 is outside"),
        (lambda: theory.mode_growth_rate(1.0, 2, -1), "ell=-1 must be whole degrees"),
        (lambda: theory.mode_growth_rate(1.0, 2, 1, depth=0), "depth=0.0 is outside"),
        (lambda: theory.most_unstable_degree(1.0, 1), "dim=1 must be an integer >= 2"),
        (lambda: theory.most_unstable_degree(1.0, 2, "linear"), "attention='linear'"),
        (lambda: theory.log_funk_hecke_exponential(0.0, 2, 1), "beta=0.0 is outside"),
        (lambda: theory.self_attention_weight(math.inf, 2, 3), "beta=inf must be finite"),
    ],
)
def test_domain_errors_name_the_argument(call, needle):
    with pytest.raises(ad.ParameterError) as error:
        call()
    assert needle in str(error.value)


# --- the two-token and cluster theory at large arguments -----------------------------------------


def test_cluster_rates_at_large_beta_are_their_limits_not_overflow_errors():
    # SA: λ = 2 − (d − 1) sech²β → 2 (cosh β overflowed: OverflowError at β ≥ 355). USA:
    # cosh 2β − (d − 2) is beyond float64 there: inf, as USA's mode rates. USA's split level
    # push/λ = ½(d − 1)(k − m)²(1 + e^{−2β})²/(k + m)² / (½(1 + e^{−4β}) − (d − 2)e^{−2β}),
    # both sides divided by e^{2β}: → (d − 1)(k − m)²/(k + m)² (was inf/inf).
    for beta in (400.0, 1e5, 1e300):
        assert theory.antipodal_contraction_rate(beta, 4) == 2.0
        assert theory.antipodal_contraction_rate(beta, 4, attention="unnormalized") == math.inf
        level = theory.antipodal_split_level(beta, 6, (3, 1), attention="unnormalized")
        assert level == pytest.approx(5 * 4 / 16, rel=1e-15)
    # USA's signed coefficients beyond float64 are refused by name, not NaN.
    with pytest.raises(ad.ParameterError, match=r"beta=400\.0: the overlap's drift"):
        theory.two_cluster_overlap_coefficients(0.3, 400.0, 4, attention="unnormalized")


def test_initial_slope_and_hybrid_ends_at_huge_arguments():
    # γ'(0) = 2/(e^β + n − 1) → 2e^{−β}: 0.0 in float64 at β = 10⁵ (was OverflowError).
    post = ad.scheme_from_name("post-ln")
    assert theory.initial_slope(post, beta=700.0, n_tokens=4) == pytest.approx(
        2 * math.exp(-700.0), rel=1e-13
    )
    assert theory.initial_slope(post, beta=1e5, n_tokens=4) == 0.0
    # ε beyond ε_c: only −1 attracts, P(antipodal) = 1 (ε² overflowed: OverflowError).
    for attention in ("unnormalized", "softmax"):
        assert theory.hybrid_attracts(1.0, 1e300, attention) == (False, True)
        assert theory.p_antipodal_hybrid_uniform(1.0, 1e300, attention=attention) == 1.0
