"""The theory of the uniform state (attndyn.theory, spec §7): Funk–Hecke coefficients in
closed form against quadrature, λ_ℓ against the attention code's own linearised velocity
on a harmonic perturbation (flow and layer map), ℓ*, and overflow safety."""

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import special

import attndyn as ad
from attndyn import theory


@pytest.mark.parametrize("dim", [2, 3, 4, 7])
def test_funk_hecke_closed_form_equals_quadrature(dim):
    for beta in (0.5, 5.0, 30.0):
        for ell in range(7):
            closed = float(theory.funk_hecke_exponential(beta, dim, ell))
            quad = theory.funk_hecke_quadrature(lambda t, b=beta: math.exp(b * t), dim, ell)
            assert closed == pytest.approx(quad, rel=1e-9), (dim, beta, ell)


def test_circle_rates_are_the_bessel_closed_forms():
    """d = 2: λ_ℓ = ℓ² I_ℓ(β)/β (USA) and ℓ² I_ℓ(β)/(β I_0(β)) (softmax)."""
    ell = np.arange(1, 9)
    for beta in (0.3, 3.0, 12.0):
        usa = theory.mode_growth_rate(beta, 2, ell, "unnormalized")
        sa = theory.mode_growth_rate(beta, 2, ell, "softmax")
        np.testing.assert_allclose(usa, ell**2 * special.iv(ell, beta) / beta, rtol=1e-12)
        np.testing.assert_allclose(
            sa, ell**2 * special.iv(ell, beta) / (beta * special.iv(0, beta)), rtol=1e-12
        )


def _displaced_circle(ell: int, eps: float, m: int = 2048) -> np.ndarray:
    """A grid of m tokens on S¹ moved by ε ∇cos(ℓφ): density (1 + εℓ² cos ℓφ)/2π to first
    order. The grid is an exact quadrature of the smooth kernels here (trapezoidal rule).
    A NumPy array (float64): the tests' arithmetic on it runs in NumPy, as eager JAX ops
    would each compile."""
    phi = 2 * np.pi * np.arange(m) / m
    angle = phi - eps * ell * np.sin(ell * phi)
    return np.stack([np.cos(angle), np.sin(angle)], axis=1)


#: The tangential attention velocity, one program for every β of a kind (β is a leaf).
_tangent_velocity = eqx.filter_jit(lambda att, x: ad.tangent_project(x, att(x)))
#: Layer 0 of a model, one program (op by op, each op of the layer would compile).
_first_layer = eqx.filter_jit(
    lambda model, x: model.layer(x, jnp.asarray(0), key=jax.random.key(0))
)


@pytest.mark.parametrize("kind", ["softmax", "unnormalized"])
def test_the_attention_code_moves_a_harmonic_at_the_theory_rate(kind):
    """Tokens displaced by u = ε ∇Y_ℓ (Y_ℓ = cos ℓφ) move, to first order in ε, with velocity
    λ_ℓ u: the displacement grows at λ_ℓ. Measured with the engine's own Attention (central
    difference in ε, float64), against mode_growth_rate (σ exact on the grid: no finite-N
    correction)."""
    m = 2048
    phi = 2 * np.pi * np.arange(m) / m
    with jax.enable_x64(True):
        for beta, ell in ((4.0, 3), (9.0, 6)):
            att = ad.Attention(beta, kind=kind)

            def angular(eps, ell=ell, att=att):
                x = _displaced_circle(ell, eps, m)
                v = np.asarray(_tangent_velocity(att, jnp.asarray(x)))
                return x[:, 0] * v[:, 1] - x[:, 1] * v[:, 0]

            eps = 1e-5
            measured = (angular(eps) - angular(-eps)) / (2 * eps)
            u = -ell * np.sin(ell * phi)
            rate = float(theory.mode_growth_rate(beta, 2, ell, kind))
            np.testing.assert_allclose(measured, rate * u, atol=1e-6 * abs(rate) * ell)


@pytest.mark.default_case("unnormalized")
@pytest.mark.parametrize("kind", ["softmax", "unnormalized"])
def test_one_layer_multiplies_a_harmonic_as_the_depth_formula_says(kind):
    """One Post-LN layer x ← normalize(x + A(x)/L) multiplies the displacement of a
    degree-ℓ harmonic by 1 + λ_ℓ/(L + c), c = ⟨x, A[σ](x)⟩ the radial part normalising
    divides out: the rate per unit time is L log(1 + λ_ℓ/(L + c)) (mode_growth_rate with
    depth). At β = 9 USA, c = I_1(9) ≈ 1,030 slows the layers 11-fold against the flow."""
    m, ell, beta, depth = 2048, 4, 9.0, 100
    phi = 2 * np.pi * np.arange(m) / m
    model = ad.DiscreteTransformer(
        ad.Attention(beta, kind=kind),
        ad.DeterministicValues(),
        depth=depth,
        saveat=ad.SaveAt(1 / depth),
    )
    with jax.enable_x64(True):

        def displacement(eps):
            y = np.asarray(_first_layer(model, jnp.asarray(_displaced_circle(ell, eps, m))))
            angle = np.unwrap(np.arctan2(y[:, 1], y[:, 0]))
            return angle - phi - (angle - phi).mean()

        eps = 1e-5
        moved = (displacement(eps) - displacement(-eps)) / (2 * eps)
        u = -ell * np.sin(ell * phi)
        multiplier = np.dot(moved, u) / np.dot(u, u)
    per_unit_time = depth * math.log(multiplier)
    expected = float(theory.mode_growth_rate(beta, 2, ell, kind, depth=depth))
    assert per_unit_time == pytest.approx(expected, rel=1e-6)
    flow = float(theory.mode_growth_rate(beta, 2, ell, kind))
    if kind == "unnormalized":
        assert expected < flow / 5


def test_most_unstable_degree_and_limits():
    # Large β: λ_ℓ ∝ x e^{−x/(2β)}, x = ℓ(ℓ + d − 2), largest near x = 2β.
    for dim in (2, 3, 5):
        for beta in (16.0, 64.0, 400.0):
            star = theory.most_unstable_degree(beta, dim)
            ells = np.arange(1, 200)
            assert star == ells[np.argmax(theory.mode_growth_rate(beta, dim, ells))]
            x = star * (star + dim - 2)
            assert abs(math.sqrt(x) - math.sqrt(2 * beta)) <= dim + 1
    # β → 0: λ_1 → (d − 1)/d, λ_ℓ → 0 for ℓ ≥ 2; the same for both kinds.
    for kind in ("softmax", "unnormalized"):
        small = theory.mode_growth_rate(1e-8, 3, [1, 2], kind)
        np.testing.assert_allclose(small, [2 / 3, 0.0], atol=1e-7)
        np.testing.assert_allclose(theory.mode_growth_rate(0.0, 3, [1, 2], kind), [2 / 3, 0])


def test_rates_never_overflow_on_the_way():
    """Softmax rates are ratios of scaled Bessel functions: finite at any β; K̂_ℓ in logs
    at β = 10⁴ and at orders where ive underflows; a USA rate beyond float64 is inf."""
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        rates = theory.mode_growth_rate(1e4, 3, np.arange(1, 300), "softmax")
        log_k = theory.log_funk_hecke_exponential(1e4, 3, np.array([0, 50, 5000]))
    assert np.all(np.isfinite(rates)) and np.all(rates > 0)
    assert np.all(np.isfinite(log_k)) and np.all(np.diff(log_k) < 0)
    assert np.isinf(theory.mode_growth_rate(800.0, 3, 2, "unnormalized"))
    # Large dimension and small β (ive underflows): the series route, against quadrature.
    closed = float(theory.funk_hecke_exponential(2.0, 1024, 3))
    quad = theory.funk_hecke_quadrature(lambda t: math.exp(2.0 * t), 1024, 3)
    assert closed == pytest.approx(quad, rel=1e-7)


def test_finite_n_softmax_correction():
    """A token's own weight e^β/N enters a softmax row's normaliser: λ_ℓ(N)/λ_ℓ(∞) =
    1/(1 − 1/N + e^β/(N K̂_0)), → 1 as N → ∞; USA is unchanged."""
    beta, dim, ell = 9.0, 2, 4
    k0 = special.iv(0, beta)
    ratio = theory.mode_growth_rate(beta, dim, ell, n_tokens=512) / theory.mode_growth_rate(
        beta, dim, ell
    )
    assert ratio == pytest.approx(1 / (1 - 1 / 512 + math.exp(beta) / (512 * k0)), rel=1e-12)
    usa = theory.mode_growth_rate(beta, dim, ell, "unnormalized", n_tokens=512)
    assert usa == pytest.approx(theory.mode_growth_rate(beta, dim, ell, "unnormalized"))


def test_long_context_crossover():
    """γ_c solves e^β = (N − 1) K̂_0(β) at β = γ_c log N (the self-weight is ½); it tends
    to 1 as d grows (K̂_0 → 1) and grows with N in few dimensions (no log N scaling)."""
    for n, dim in ((256, 32), (4096, 64)):
        gamma = theory.critical_gamma(n, dim)
        assert theory.self_attention_weight(gamma * math.log(n), dim, n) == pytest.approx(0.5)
    assert theory.critical_gamma(4096, 4096) == pytest.approx(1.0, abs=0.01)
    assert theory.critical_gamma(4096, 8) > theory.critical_gamma(256, 8) > 1.5
    assert theory.critical_gamma(65536, 2) == math.inf
