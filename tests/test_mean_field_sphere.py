"""The mean-field engine on S² and under scalar common noise (attndyn._models.mean_field),
and the modes study on it (attndyn.studies.mean_field).

S²: the linear rates against theory.mode_growth_rate (log-Bessel ratios, not the engine's
continued fraction), mass, the uniform fixed point, the tokens' start against
attndyn.mode_powers, the velocity against a direct quadrature of the kernel. Noise: the
linearised solution along each Brownian path, and the Itô drift against the one-layer
push-forward of the density (differentiated by JAX, no integration by parts). The study:
the issue's done-when (rates/2 = λ_ℓ to 1e-3 at d = 2, β = 8 and d = 3, β = 4).

The S² rates share one compiled program (K = 59, nine saves, six starts); the noise on
S² is a slow test (Milstein's derivative at K = 14 compiles and runs for ~40 s)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attndyn as ad
from attndyn._models import mean_field as mf
from attndyn.studies.mean_field import mean_field_modes, mean_field_points, mean_field_summary

K2 = 59  # needed_modes(16, 3): one program serves every β <= 16 on S²
STARTS = [(1, 0), (2, 1), (3, 3), (4, 2), (5, 5), (6, 1)]


@pytest.mark.parametrize(
    ("kind", "betas"), [("softmax", (0.5, 4.0, 16.0)), ("unnormalized", (4.0,))]
)
def test_sphere_linear_rates_equal_theory(kind, betas):
    # One (ℓ, m) perturbed per start (amplitude 1e-9, complex phase for m > 0), over
    # T = 3/λ_max: P_ℓ grows at 2λ_ℓ, λ_ℓ = ℓ(ℓ+1) i_ℓ/(β i_0) (softmax) or ℓ(ℓ+1) i_ℓ/β.
    # Measured agreement ~1e-6 (the solver's tolerance); the issue asks 1e-3.
    ells = np.array([e for e, _ in STARTS])
    for beta in betas:
        flow = ad.MeanFieldFlow(beta, kind, 3, n_modes=K2)
        lam = np.asarray(ad.theory.mode_growth_rate(beta, 3, ells, kind))
        horizon = 3 / lam.max()
        c0 = np.stack(
            [
                flow.coefficients_from_perturbation({(e, m): 1e-9 * (np.exp(1j * e) if m else 1)})
                for e, m in STARTS
            ]
        )
        sol = flow.solve(c0, ad.SaveAt(horizon, ts=np.linspace(0, horizon, 9)))
        rates = sol.growth_rates(ells, 0, horizon)[np.arange(6), np.arange(6)]
        np.testing.assert_allclose(rates, 2 * lam, rtol=1e-5)
        assert np.all(sol.coefficients[..., 0, 0] == 1)  # mass: dC_00/dt = 0 exactly


def test_sphere_tokens_start_powers_and_fixed_point():
    # P_ℓ(0) of the engine = attndyn.mode_powers of the tokens; the uniform measure is a
    # fixed point exactly; a tokens' start moves (so the fixed point is not vacuous).
    x = np.asarray(ad.uniform_sphere(key=jax.random.key(5), n_tokens=300, dim=3))
    flow = ad.MeanFieldFlow(16.0, "softmax", 3, n_modes=K2)
    c = flow.coefficients_from_tokens(x)
    with jax.enable_x64(True):
        expected = np.asarray(ad.mode_powers(jnp.asarray(x, np.float64), 10))
    powers = np.sum(np.abs(c[:11]) ** 2, axis=-1)
    np.testing.assert_allclose(powers, expected, rtol=1e-9, atol=1e-15)
    starts = np.stack([flow.uniform(), c] * 3)
    sol = flow.solve(starts, ad.SaveAt(0.05, ts=np.linspace(0, 0.05, 9)))
    assert np.all(sol.coefficients[0] == flow.uniform())
    assert np.abs(sol.coefficients[1, -1, 1:5] - c[1:5]).max() > 1e-4


def _smooth_sphere(flow):
    return flow.coefficients_from_perturbation({(1, 1): 0.1, (2, 0): 0.06, (3, 2): 0.03j})


@pytest.mark.parametrize("kind", ["softmax", "unnormalized"])
def test_sphere_velocity_equals_quadrature_of_the_kernel(kind):
    # Three routes to v[μ]: the direct harmonic sum (Funk–Hecke, derivative tables), the
    # solver's grid, and the definition P_x ∫ e^{β⟨x,y⟩} y dμ / Z by a product rule
    # (Gauss–Legendre 48 × 96 longitudes, exact to rounding for this analytic integrand).
    beta = 2.0
    flow = ad.MeanFieldFlow(beta, kind, 3, n_modes=K2)
    c = _smooth_sphere(flow)
    z, w = np.polynomial.legendre.leggauss(48)
    phi = 2 * np.pi * np.arange(96) / 96
    zz, pp = np.meshgrid(z, phi, indexing="ij")
    s = np.sqrt(1 - zz**2)
    y = np.stack([s * np.cos(pp), s * np.sin(pp), zz], axis=-1).reshape(-1, 3)
    weight = (w[:, None] * np.full(96, 2 * np.pi / 96)[None]).reshape(-1)
    q = mf.schmidt_legendre(y[:, 2], K2)  # [m, ℓ, point]
    ell = np.arange(K2 + 1)
    phase = np.exp(1j * np.outer(np.arange(K2 + 1), np.arctan2(y[:, 1], y[:, 0])))
    density = np.real(np.einsum("mln,lm,mn->n", q, (2 * ell[:, None] + 1) / (4 * np.pi) * c, phase))
    rng = np.random.default_rng(0)
    x = rng.normal(size=(12, 3))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    kernel = np.exp(beta * (x @ y.T - 1)) * (density * weight)[None]
    num, den = kernel @ y, kernel.sum(axis=1)
    tangent = num - np.sum(num * x, axis=1, keepdims=True) * x
    expected = tangent / den[:, None] if kind == "softmax" else tangent * np.exp(beta)
    np.testing.assert_allclose(flow.velocity(c, x), expected, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("dim", [2, pytest.param(3, marks=pytest.mark.slow)])
def test_noise_is_exact_along_each_path_when_linear(dim):
    # A tiny perturbation of degree ℓ under scalar common noise follows
    # dC = λ(1 − ε²c) C dt + ελ C dB exactly (module docstring), so along each Brownian path
    # log P_ℓ(t) − log P_ℓ(0) = 2(λ(1 − ε²c) − ε²λ²/2) t + 2ελ B_t. Milstein with dt = 1e-3
    # (strong order 1): measured error 3e-4 on S¹ and S² at ε = 0.5; wrong drift terms (c
    # left out: 0.2 here, or Stratonovich instead of Itô: ε²λ²t ≈ 0.3) fail by far.
    from attndyn.studies.mean_field import _radial_part

    beta, eps, ell = 1.0, 0.5, 1
    for key in [ell if dim == 2 else (ell, 1)]:
        flow = ad.MeanFieldFlow(beta, "softmax", dim)
        lam = float(ad.theory.mode_growth_rate(beta, dim, ell))
        c = _radial_part(beta, dim, "softmax")
        c0 = np.stack([flow.coefficients_from_perturbation({key: 1e-9})] * 4)
        sol = flow.solve_noisy(
            c0, ad.SaveAt(1.0, ts=np.linspace(0, 1, 5)), eps=eps, dt=1e-3, key=jax.random.key(1)
        )
        logs = np.log(sol.mode_powers(ell)[..., ell])
        drift = 2 * (lam * (1 - eps**2 * c) - eps**2 * lam**2 / 2)
        predicted = logs[:, :1] + drift * sol.ts + 2 * eps * lam * sol.brownian
        assert np.abs(sol.brownian[:, -1]).max() > 0.1  # the paths moved
        np.testing.assert_allclose(logs, predicted, atol=2e-3)
        flat = sol.coefficients.reshape(*sol.coefficients.shape[:2], -1)
        assert np.all(flat[..., 0] == 1)  # mass, exactly


def test_noise_drift_equals_the_push_forward_of_one_layer():
    # Independent of the engine's integration by parts: the Itô drift of ⟨μ, φ⟩ is
    # g'(0) + (ε²/2) g''(0) with g(ξ) = ∫ φ(normalize(x + ξ A[μ](x))) dμ(x), the push-
    # forward of one layer with A frozen (seed 003 eq. 7 expanded to second order), A by
    # quadrature of the density. Checked on S¹ at an O(1) nonlinear density, φ = e^{−ikθ}.
    beta, eps = 3.0, 0.7
    for kind in ("softmax", "unnormalized"):
        flow = ad.MeanFieldFlow(beta, kind, 2)
        c = flow.coefficients_from_perturbation({1: 0.3, 2: 0.1 * np.exp(1j), 3: 0.15})
        with jax.enable_x64(True):
            basis, b, softmax, tables = flow._arguments()
            drift, noise = mf._noisy_parts(basis, jnp.asarray(c), b, softmax, eps, tables)
            drift0, _ = mf._noisy_parts(basis, jnp.asarray(c), b, softmax, 0.0, tables)
            expected = _push_forward_generator(c, beta, kind, eps, flow.n_modes)
        np.testing.assert_allclose(np.asarray(drift)[1:6], expected[0][1:6], atol=1e-10)
        np.testing.assert_allclose(np.asarray(noise)[1:6] / eps, expected[1][1:6], atol=1e-10)
        assert np.abs(np.asarray(drift - drift0)[1:6]).max() > 1e-2  # the ε² terms count


def _push_forward_generator(c, beta, kind, eps, n_modes):
    """(g'(0) + ε² g''(0)/2, g'(0)) for φ_k = e^{−ikθ}, k = 0 … 5, by JAX on a 512-point
    trapezoid rule of the density (spectrally exact for this analytic integrand)."""
    theta = 2 * np.pi * np.arange(512) / 512
    k = np.arange(n_modes + 1)
    density = np.real(np.exp(1j * np.outer(theta, k)) @ (np.where(k > 0, 2.0, 1.0) * c))
    density = density / (2 * np.pi)
    x = np.stack([np.cos(theta), np.sin(theta)], axis=1)
    weight = np.exp(beta * (x @ x.T - 1)) * density[None] * (2 * np.pi / 512)
    a = (
        (weight @ x) / weight.sum(1, keepdims=True)
        if kind == "softmax"
        else (weight @ x) * np.exp(beta)
    )
    x, a, mass = jnp.asarray(x), jnp.asarray(a), jnp.asarray(density * 2 * np.pi / 512)
    k6 = jnp.asarray(np.arange(6.0))[:, None]

    def parts(xi):
        moved = x + xi * a
        moved = moved / jnp.linalg.norm(moved, axis=1, keepdims=True)
        angle = k6 * jnp.arctan2(moved[:, 1], moved[:, 0])[None, :]
        # ∫ e^{−ikθ} dμ: real and imaginary parts
        return jnp.stack([jnp.cos(angle) @ mass, -(jnp.sin(angle) @ mass)])

    first = jax.jacfwd(parts)(0.0)
    second = jax.jacfwd(jax.jacfwd(parts))(0.0)
    first, second = np.asarray(first), np.asarray(second)
    d1 = first[0] + 1j * first[1]
    d2 = second[0] + 1j * second[1]
    return d1 + eps**2 * d2 / 2, d1


@pytest.mark.parametrize(("dim", "beta"), [(2, 8.0), (3, 4.0)])
def test_study_rates_are_twice_lambda(dim, beta):
    # The done-when, at the study level: from the floor of N = 10¹⁶ tokens
    # (amplitudes 1e-8, random phases in every mode), horizon 12, 49 saves, each degree
    # fitted over the saves where its nonlinear part stays below 1e-4 of its linear part:
    # rates/2 = λ_ℓ for ℓ = 1 … 6 (measured within 3e-6; asked: 1e-3).
    points = mean_field_points(dims=[dim], n_tokens=[10**16], betas=[beta])
    ds = mean_field_modes(points, horizon=12.0, saves=49, ell_max=6, n_trajectories=2)
    record = mean_field_summary(ds)[0]
    lam = np.asarray(ad.theory.mode_growth_rate(beta, dim, np.arange(1, 7)))
    rates = np.array([r["rate"] for r in record["rates"]], dtype=float)
    np.testing.assert_allclose(rates / 2, lam, rtol=1e-4)
    assert [r["theory_power_rate"] for r in record["rates"]] == pytest.approx(2 * lam)
    assert all(r["linear"] for r in record["rates"])
    assert record["ell_star"] == record["ell_star_measured"]
    # The modes study's names and dimensions for what both have.
    assert ds["mode_power"].dims == ("point", "time", "ell")
    assert ds["growth_rate"].dims == ("point", "ell")
    assert ds["mode_power"].attrs["long_name"].startswith("mean mode power")
    # 1,000 tokens' empirical measure (a floor of 3 %) is too large to be linear for the
    # slow degrees: they get no rate, never a bad one.
    points = mean_field_points(dims=[dim], n_tokens=[1000], betas=[beta])
    ds = mean_field_modes(
        points, horizon=3.0, saves=49, ell_max=6, n_trajectories=2, start="tokens"
    )
    rates = ds["growth_rate"].values[0, 1:]
    ok = np.isfinite(rates)
    assert not ok.all()
    np.testing.assert_allclose(rates[ok] / 2, lam[ok], rtol=1e-3)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"start": "grid"}, "start"),
        ({"attention": "linear"}, "attention"),
        ({"saves": 2}, "saves"),
        ({"linear_tolerance": 0.0}, "linear_tolerance"),
    ],
)
def test_study_refusals_name_the_parameter(kwargs, name):
    points = mean_field_points(dims=[2], n_tokens=[1000], betas=[1.0])
    args = {"horizon": 1.0, "saves": 9, "ell_max": 4} | kwargs
    with pytest.raises(ad.ParameterError, match=name):
        mean_field_modes(points, **args)
    with pytest.raises(ad.ParameterError, match="dim"):
        mean_field_modes(
            mean_field_points(dims=[4], n_tokens=[10], betas=[1.0]), horizon=1.0, saves=9, ell_max=4
        )


def test_sphere_refusals():
    flow = ad.MeanFieldFlow(1.0, "softmax", 3)
    with pytest.raises(ad.ParameterError, match="negative"):
        flow.coefficients_from_perturbation({(1, 0): 0.9})  # 1 + 3·0.9 z < 0 at z = −1
    with pytest.raises(ad.ParameterError, match="m <= l"):
        flow.coefficients_from_perturbation({(1, 2): 1e-3})
    with pytest.raises(ad.ParameterError, match="real"):
        flow.coefficients_from_perturbation({(2, 0): 1e-3j})
    with pytest.raises(ad.ParameterError, match="x must"):
        flow.coefficients_from_tokens(np.ones((4, 2)))
    with pytest.raises(ad.ParameterError, match="coefficients0"):
        flow.solve(np.zeros(flow.n_modes + 1), ad.SaveAt(1.0))
