"""Two exact clusters of k and m tokens (attndyn.theory._clusters): the closed forms against
the paper's two-token equations, the scale density, and the SDE itself."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attndyn as ad
from attndyn import theory

Z = np.linspace(-0.99, 0.99, 23)


def _eq21(z, beta, dim):
    """003 eq. 21 (SA, two tokens, σ = 1): drift and squared diffusion, with the √2 the
    printed diffusion coefficient lacks (spec §3.4's correction; eq. 20 and the general
    identity both carry it, and the scale density of spec §4 needs it)."""
    den = np.exp(beta) + np.exp(beta * z)
    bracket = 2 * (dim - 2) * np.exp(beta * (1 + z)) - z * (np.exp(2 * beta) + np.exp(2 * beta * z))
    drift = (1 - z * z) / den**2 * bracket
    variance = 2 * ((1 - z * z) / den) ** 2 * (np.exp(2 * beta) + np.exp(2 * beta * z))
    return drift, variance


def _eq20(z, beta, dim):
    """003 eq. 20 (USA, two tokens, σ = 1)."""
    bracket = 2 * (dim - 2) * np.exp(beta * (1 + z)) - z * (np.exp(2 * beta) + np.exp(2 * beta * z))
    drift = 0.25 * (1 - z * z) * bracket
    variance = 0.5 * (1 - z * z) ** 2 * (np.exp(2 * beta) + np.exp(2 * beta * z))
    return drift, variance


@pytest.mark.parametrize(("beta", "dim"), [(0.0, 3), (0.7, 4), (2.5, 8)])
@pytest.mark.parametrize(("attention", "paper"), [("softmax", _eq21), ("unnormalized", _eq20)])
def test_one_token_a_side_is_the_papers_two_token_diffusion(beta, dim, attention, paper):
    drift, variance = theory.two_cluster_overlap_coefficients(Z, beta, dim, attention=attention)
    expected_drift, expected_variance = paper(Z, beta, dim)
    np.testing.assert_allclose(drift, expected_drift, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(variance, expected_variance, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize(("beta", "dim"), [(0.5, 4), (1.5, 6)])
def test_the_ratio_of_the_coefficients_is_the_scale_densitys_log_slope(beta, dim):
    # An independent route: s(x) = exp(−∫ 2μ/σ²) is attndyn.theory.scale_density (spec §4),
    # built from its own closed form; its log-derivative by central differences (h = 10⁻⁵,
    # error ~h² ≈ 10⁻¹⁰ relative) must be −2μ/σ².
    drift, variance = theory.two_cluster_overlap_coefficients(Z, beta, dim)
    h = 1e-5
    log_slope = (
        np.log(theory.scale_density(Z + h, beta, dim))
        - np.log(theory.scale_density(Z - h, beta, dim))
    ) / (2 * h)
    np.testing.assert_allclose(-2 * drift / variance, log_slope, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("sizes", [(2, 1), (3, 2), (4, 1), (7, 3)])
@pytest.mark.parametrize("attention", ["softmax", "unnormalized"])
def test_the_expanded_coefficients_are_003s_general_identity(sizes, attention):
    # The module evaluates the coefficients expanded about −1 (no cancellation there);
    # here they are 003 App. C's identity written directly from the attention outputs
    # A₁ = (k e^β θ₁ + m e^{βz} θ₂)/D₁, A₂ = (m e^β θ₂ + k e^{βz} θ₁)/D₂ (SA; D = N for
    # USA), in coordinates: θ₁ = e₁, θ₂ = z e₁ + √(1 − z²) e₂. Away from −1 the two agree
    # to rounding.
    beta, dim, (k, m) = 1.3, 5, sizes
    z = np.linspace(-0.9, 0.9, 19)
    theta1 = np.stack([np.ones_like(z), np.zeros_like(z)], -1)
    theta2 = np.stack([z, np.sqrt(1 - z * z)], -1)
    w_self, w_other = np.exp(beta), np.exp(beta * z)[:, None]
    if attention == "softmax":
        first, second = k * w_self + m * w_other, m * w_self + k * w_other
    else:
        first = second = np.full_like(w_other, k + m)
    a1 = (k * w_self * theta1 + m * w_other * theta2) / first
    a2 = (m * w_self * theta2 + k * w_other * theta1) / second
    n1, n2, inner = (a1 * a1).sum(-1), (a2 * a2).sum(-1), (a1 * a2).sum(-1)
    drift = 0.5 * (1 - dim) * z * (n1 + n2) + (z * z + dim - 2) * inner
    variance = (1 - z * z) * (n1 + n2 - 2 * z * inner)
    got = theory.two_cluster_overlap_coefficients(z, beta, dim, sizes, attention=attention)
    scale = np.exp(2 * beta) if attention == "unnormalized" else 1.0
    np.testing.assert_allclose(got[0], drift, rtol=1e-9, atol=1e-12 * scale)
    np.testing.assert_allclose(got[1], variance, rtol=1e-9, atol=1e-12 * scale)


@pytest.mark.parametrize("k", [2, 3, 5])
def test_an_even_split_has_the_law_of_two_tokens(k):
    # Under SA the k's cancel from the attention weights: the same diffusion as N = 2.
    pair = theory.two_cluster_overlap_coefficients(Z, 1.3, 5)
    split = theory.two_cluster_overlap_coefficients(Z, 1.3, 5, (k, k))
    np.testing.assert_allclose(split, pair, rtol=1e-12)
    assert theory.antipodal_split_drift(1.3, 5, (k, k)) == 0.0


@pytest.mark.parametrize("sizes", [(2, 1), (1, 2), (3, 1), (3, 2), (7, 3)])
@pytest.mark.parametrize("attention", ["softmax", "unnormalized"])
def test_an_uneven_split_is_pushed_off_the_antipodal_end(sizes, attention):
    drift, variance = theory.two_cluster_overlap_coefficients(
        -1.0, 0.8, 4, sizes, attention=attention
    )
    rate = theory.antipodal_split_drift(0.8, 4, sizes, attention=attention)
    assert rate > 0 and float(drift) == pytest.approx(rate, rel=1e-12)
    assert float(variance) == 0.0  # −1 is still a fixed point of the noise, but not of the drift


@pytest.mark.parametrize("sizes", [(2, 1), (3, 2), (4, 1)])
def test_the_push_decays_like_exp_minus_four_beta(sizes):
    k, m = sizes
    for beta in (6.0, 8.0, 10.0):
        asymptote = 2 * 3 * (k / m - m / k) ** 2 * np.exp(-4 * beta)
        assert theory.antipodal_split_drift(beta, 4, sizes) == pytest.approx(asymptote, rel=1e-4)


def test_bad_sizes_are_refused():
    with pytest.raises(ad.ParameterError, match="sizes"):
        theory.antipodal_split_drift(1.0, 4, (0, 1))
    with pytest.raises(ad.ParameterError, match="attention"):
        theory.antipodal_split_drift(1.0, 4, (2, 1), attention="linear")


def _overlaps_from_split(model, sizes, n, seed):
    """1 + Z at the model's saves for k tokens at u and m at −u (Z: first token, last)."""
    k, m = sizes
    u = np.eye(4, dtype=np.float32)[0]
    x0 = np.stack([u] * k + [-u] * m)

    # Keys, trajectories and overlaps in one program (the same keys): eagerly, the
    # split and every operation on the saves compiled a program of their own.
    @jax.jit
    def overlaps(x0):
        keys = jax.random.split(jax.random.key(seed), n)
        saves = jax.vmap(lambda key: model.trajectory(x0, key=key))(keys)
        theta = saves / jnp.linalg.norm(saves, axis=-1, keepdims=True)
        return jnp.sum(theta[:, :, 0] * theta[:, :, -1], -1)

    return 1.0 + np.asarray(overlaps(x0), np.float64)


def _split_overlaps(sizes, beta, attention, n, t_end):
    """1 + Z at t_end/2 and t_end from an exact split, SDE by Euler (dt = 10⁻⁴)."""
    model = ad.TransformerSDE(
        ad.Attention(beta, kind=attention),
        sigma=1.0,
        saveat=ad.SaveAt(t_end, (t_end / 2, t_end)),
        integrator=ad.SDEIntegrator(dt=1e-4),
    )
    return _overlaps_from_split(model, sizes, n, seed=7)


@pytest.mark.default_case("sizes2-unnormalized")
@pytest.mark.parametrize(
    ("sizes", "attention"), [((2, 1), "softmax"), ((3, 1), "softmax"), ((2, 1), "unnormalized")]
)
def test_the_sde_leaves_an_uneven_antipodal_split_at_the_predicted_rate(sizes, attention):
    # E[1 + Z_t] = μ(−1) t + O(t²): the Richardson combination 2·y(t/2)/(t/2) − y(t)/t of
    # each trajectory removes the t² term, so its mean is μ(−1) up to O(t²) ≈ 10⁻³ relative
    # and Euler's O(dt) = 10⁻⁴ bias. 4,000 trajectories (seed fixed); tolerance 4 SE of that
    # mean plus 2 % for the neglected orders.
    t_end = 0.02
    y = _split_overlaps(sizes, 0.5, attention, 4000, t_end)
    slope = 2 * y[:, 0] / (t_end / 2) - y[:, 1] / t_end
    rate = theory.antipodal_split_drift(0.5, 4, sizes, attention=attention)
    se = slope.std(ddof=1) / np.sqrt(len(slope))
    assert abs(slope.mean() - rate) < 4 * se + 0.02 * rate, (slope.mean(), rate, se)


@pytest.mark.slow
@pytest.mark.default_case("sizes1")
@pytest.mark.parametrize("sizes", [(1, 1), (2, 2)])
def test_the_sde_keeps_an_even_antipodal_split_antipodal(sizes):
    # Drift and noise both vanish at −1 for an even split: 1 + Z stays at float32 rounding
    # (it moved by 0.43 · t = 0.009 for the 2 : 1 split in the same time).
    y = _split_overlaps(sizes, 0.5, "softmax", 500, 0.02)
    assert np.max(np.abs(y)) < 1e-6


@pytest.mark.default_case("sizes1")
@pytest.mark.parametrize("sizes", [(2, 1), (2, 2)])
def test_the_layer_map_of_fig_6_pushes_the_same_way(sizes):
    # Fig. 6 runs the discrete Post-LN map (L = 100, Gaussian value matrices), not the SDE:
    # from an exact split its first layers move 1 + Z at the SDE's rate, up to O(1/L).
    # The same Richardson slope over 2 and 4 layers; 8,000 trajectories, 4 SE + 3 %; an
    # even split stays at float32 rounding.
    t = 0.02
    model = ad.DiscreteTransformer(
        ad.Attention(0.5), ad.MatrixValues(1.0), depth=100, saveat=ad.SaveAt(2 * t, (t, 2 * t))
    )
    y = _overlaps_from_split(model, sizes, 8000, seed=3)
    rate = theory.antipodal_split_drift(0.5, 4, sizes)
    if rate == 0.0:
        assert np.max(np.abs(y)) < 1e-6
        return
    slope = 2 * y[:, 0] / t - y[:, 1] / (2 * t)
    se = slope.std(ddof=1) / np.sqrt(len(slope))
    assert abs(slope.mean() - rate) < 4 * se + 0.03 * rate, (slope.mean(), rate, se)


@pytest.mark.parametrize(
    ("sizes", "exponent"),
    [((1, 1), 0.5 + 3 / (2 * np.cosh(2.0))), ((2, 1), 2.0), ((3, 2), 2.0)],
)
def test_the_scale_density_exponent_at_the_antipodal_end(sizes, exponent):
    # s(−1 + ε) ~ ε^{−κ} with κ = lim (1 + z)·2μ/σ²: two tokens give 003 Lemma 5's
    # ½ + (d − 2)/(2 cosh 2β) (< 1 here: −1 attracts); an uneven split gives (d − 1)/2 ≥ 1
    # for d ≥ 3 (−1 never attracts). d = 5, β = 1, at 1 + z = 10⁻⁷.
    z = -1 + 1e-7
    drift, variance = theory.two_cluster_overlap_coefficients(z, 1.0, 5, sizes)
    assert float(2 * drift / variance * (1 + z)) == pytest.approx(exponent, abs=1e-4)


@pytest.mark.parametrize("attention", ["softmax", "unnormalized"])
@pytest.mark.parametrize(("beta", "dim"), [(0.4, 4), (1.0, 4), (2.0, 6)])
def test_the_contraction_rate_is_the_two_token_log_drift_at_minus_one(beta, dim, attention):
    # λ = B/2 − A from the two-token coefficients at 1 + z = 10⁻⁶ (μ ≈ A ε, σ² ≈ B ε²,
    # corrections O(ε)), against the closed form; its sign is 003 Thm 2's threshold.
    eps = 1e-6
    drift, variance = theory.two_cluster_overlap_coefficients(
        -1 + eps, beta, dim, attention=attention
    )
    numeric = float(variance) / eps**2 / 2 - float(drift) / eps
    rate = theory.antipodal_contraction_rate(beta, dim, attention=attention)
    assert rate == pytest.approx(numeric, rel=1e-4, abs=1e-5)
    assert (rate > 0) == (beta > theory.beta_critical(dim))


def test_the_split_level_balances_push_and_contraction():
    push = theory.antipodal_split_drift(2.5, 4, (2, 1))
    rate = theory.antipodal_contraction_rate(2.5, 4)
    assert theory.antipodal_split_level(2.5, 4, (2, 1)) == pytest.approx(push / rate)
    assert theory.antipodal_split_level(2.5, 4, (2, 2)) == 0.0
    assert theory.antipodal_split_level(0.3, 4, (2, 1)) == float("inf")  # β < β_c(4)
    # Large β: (d − 1)(k/m − m/k)² e^{−4β}, independent of σ.
    assert theory.antipodal_split_level(9.0, 4, (2, 1)) == pytest.approx(
        3 * 1.5**2 * np.exp(-36.0), rel=1e-4
    )


# The split's lifetime and the time it spends classified antipodal (first-passage formulas).


@pytest.mark.parametrize(
    ("beta", "dim", "sizes"),
    [
        (0.3, 4, (2, 1)),
        (1.0, 4, (2, 1)),
        (3.0, 4, (2, 1)),
        (6.0, 4, (3, 2)),
        (2.0, 3, (4, 1)),
        (0.5, 64, (2, 1)),
    ],
)
@pytest.mark.parametrize("attention", ["softmax", "unnormalized"])
def test_the_lifetime_quadrature_has_converged(monkeypatch, beta, dim, sizes, attention):
    # The quadrature in w = artanh z is second order: halving its step moves the lifetime
    # and the fraction by ≤ 10⁻⁴ (grid ends on b exactly: an overshooting grid gave 10⁻³,
    # first order; panels exact for exponentials: the plain trapezoid was 3 % off at
    # d = 64, where log s falls by d − 1 per unit w).
    from attndyn.theory import _clusters

    def both():
        return (
            theory.antipodal_split_lifetime(beta, dim, sizes, attention=attention),
            theory.antipodal_split_hover_fraction(beta, dim, sizes, attention=attention),
        )

    coarse = both()
    monkeypatch.setattr(_clusters, "_STEP", _clusters._STEP / 2)
    fine = both()
    assert coarse == pytest.approx(fine, rel=2e-4)


def test_the_lifetime_scales_as_one_over_sigma_squared():
    # Time changes with σ²: every coefficient of the overlap diffusion carries σ².
    one = theory.antipodal_split_lifetime(1.5, 4, (2, 1))
    assert theory.antipodal_split_lifetime(1.5, 4, (2, 1), sigma=2.0) == pytest.approx(one / 4)


@pytest.mark.parametrize(("dim", "sizes"), [(3, (2, 1)), (4, (2, 1)), (6, (3, 1))])
def test_the_lifetime_grows_like_e_to_the_two_beta(dim, sizes):
    # Deep well (SA, large β): log ε = log(1 + Z) hovers at log(level), level ∝ e^{−4β},
    # with drift −λ → −2 and variance B → 8 per unit time (two tokens near −1: Q ≈ 4ε,
    # σ² ≈ 8ε²), so an escape over log(1/level) costs level^{−2λ/B} = e^{2β} up to
    # polynomial factors: d log τ / dβ → 2, independent of d and the sizes. From β = 9
    # to 10 the slope is 2.008 at d = 4 (the polynomial prefactor's share).
    tau = [theory.antipodal_split_lifetime(beta, dim, sizes) for beta in (9.0, 10.0)]
    assert np.log(tau[1] / tau[0]) == pytest.approx(2.0, rel=0.01)


def test_the_hover_fraction_is_the_smooth_form_of_the_level_onset():
    # Level ≫ tol: almost never classified antipodal; level ≪ tol: almost always; in
    # between it rises with β through the onset where the level crosses tol (2.21 for
    # 2 : 1 at d = 4).
    betas = np.linspace(1.0, 4.0, 13)
    fractions = [theory.antipodal_split_hover_fraction(b, 4, (2, 1)) for b in betas]
    assert np.all(np.diff(fractions) > 0)
    assert fractions[0] < 0.01 and fractions[-1] > 0.97
    assert theory.antipodal_split_level(betas[0], 4, (2, 1)) > 100 * 1e-3
    assert theory.antipodal_split_level(betas[-1], 4, (2, 1)) < 1e-3 / 1000


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"sizes": (2, 2)}, "even split"),
        ({"sizes": (2, 1), "tol": 0.0}, "tol"),
        ({"sizes": (2, 1), "tol": 1.0}, "tol"),
        ({"sizes": (2, 1), "attention": "linear"}, "attention"),
        ({"sizes": (2, 1), "beta": 200.0}, "beta"),  # the level e^{−4β} underflows float64
        ({"sizes": (2, 2), "beta": 200.0}, "even split"),
    ],
)
def test_the_lifetime_refuses_what_it_cannot_answer(kwargs, match):
    kwargs = {"beta": 1.0, **kwargs}
    for function in (theory.antipodal_split_lifetime, theory.antipodal_split_hover_fraction):
        with pytest.raises(ad.ParameterError, match=match):
            function(dim=4, **kwargs)


def _first_passages(model, dim, sizes, tol, n, dt, seed):
    """Per trajectory from an exact k : m split: the first time 1 − Z ≤ tol (the model's
    step, minus half a step: the crossing lies inside it) and the time spent with
    1 + Z ≤ tol before it. ``model`` saves every step over a unit horizon; it is rerun
    from its last state (fresh keys by fold_in) until every trajectory has merged."""
    k, m = sizes
    u = jnp.zeros(dim).at[0].set(1.0)
    x = jnp.broadcast_to(jnp.stack([u] * k + [-u] * m), (n, k + m, dim))
    run = jax.jit(jax.vmap(lambda x0, key: model.trajectory(x0, key=key)))
    first, occupied = np.full(n, np.inf), np.zeros(n)
    for segment in range(1000):
        keys = jax.random.split(jax.random.fold_in(jax.random.key(seed), segment), n)
        saves = run(x, keys)
        x = saves[:, -1]
        theta = np.asarray(saves, np.float64)
        theta /= np.linalg.norm(theta, axis=-1, keepdims=True)
        z = np.sum(theta[:, :, 0] * theta[:, :, -1], -1)
        merged = (1 - z) <= tol
        alive = np.isinf(first)[:, None] & (np.cumsum(merged, 1) == 0)
        occupied += dt * np.sum(alive & (1 + z <= tol), 1)
        new = np.isinf(first) & merged.any(1)
        first[new] = segment + (merged.argmax(1)[new] + 1) * dt - dt / 2
        if np.isfinite(first).all():
            return first, occupied
    raise AssertionError("some trajectories never merged")


def _sde_every_step(beta, dt):
    steps = tuple(np.arange(1, round(1 / dt) + 1) * dt)
    return ad.TransformerSDE(
        ad.Attention(beta),
        sigma=1.0,
        saveat=ad.SaveAt(1.0, steps),
        integrator=ad.SDEIntegrator(dt=dt),
    )


def _assert_mean(samples, expected, relative):
    se = samples.std(ddof=1) / np.sqrt(len(samples))
    assert abs(samples.mean() - expected) < 4 * se + relative * expected, (
        samples.mean(),
        expected,
        se,
    )


def _layers_every_step(beta, dt):
    """Fig. 6's own model (Post-LN layer map, Gaussian value matrices), L = 1/dt."""
    steps = tuple(np.arange(1, round(1 / dt) + 1) * dt)
    return ad.DiscreteTransformer(
        ad.Attention(beta), ad.MatrixValues(1.0), depth=round(1 / dt), saveat=ad.SaveAt(1.0, steps)
    )


def _check_split_life(make_model, beta, tol, n, dt):
    """Lifetime and time classified antipodal of a 2 : 1 split (d = 4), model against the
    first-passage formulas; tolerance 4 SE plus 3 % (argued by the callers)."""
    first, occupied = _first_passages(make_model(beta, dt), 4, (2, 1), tol, n, dt, seed=5)
    lifetime = theory.antipodal_split_lifetime(beta, 4, (2, 1), tol=tol)
    fraction = theory.antipodal_split_hover_fraction(beta, 4, (2, 1), tol=tol)
    _assert_mean(first, lifetime, 0.03)
    _assert_mean(occupied, fraction * lifetime, 0.03)


@pytest.mark.slow
@pytest.mark.parametrize(
    "make_model",
    [pytest.param(_sde_every_step, marks=pytest.mark.slow), _layers_every_step],
)
def test_a_split_lives_and_hovers_as_the_first_passage_formulas_say(make_model):
    # d = 4, β = 1 (above β_c = 0.66), 2 : 1, tol = 0.1: lifetime 4.12, 41 % of it within
    # tol of −1. 2,000 trajectories, seed fixed, every step observed. Tolerance 4 SE plus
    # 3 % for the O(dt) bias at dt = 1/L = 0.01 (Euler and the layer map; measured at
    # β = 1.5, tol = 10⁻²: −3 % and −6 % for Euler, +3 % for the layer map, all within
    # 0.4 SE of the formulas at dt = 0.005). Fig. 6's layer map runs by default (2.5 s),
    # the SDE (6.5 s) with the slow tests.
    _check_split_life(make_model, 1.0, 0.1, 2000, 0.01)


@pytest.mark.slow
@pytest.mark.parametrize("make_model", [_sde_every_step, _layers_every_step])
def test_a_hovering_split_lives_as_the_first_passage_formulas_say(make_model):
    # β = 1.5, tol = 10⁻²: the split hovers at 1 + Z ≈ 0.018 (λ = 1.46), lifetime 11.2,
    # 29 % of it classified antipodal. dt = 1/L = 0.005, where the O(dt) biases measured
    # ≤ 0.7 % (they are 3-6 % at 0.01); 4,000 trajectories, 4 SE plus 3 %.
    _check_split_life(make_model, 1.5, 1e-2, 4000, 0.005)


@pytest.mark.slow
def test_three_tokens_follow_the_split_survival_with_no_free_parameter():
    # Fig. 6's model (Post-LN layer map, L = 100, d = 4), N = 3 at β = 3, T = 200, where a
    # 2 : 1 split lives τ = 320 and spends F = 0.85 of it within 10⁻³ of −1. Settled, three
    # tokens are one cluster or a 2 : 1 split (two antipodal pairs), so P(split) = 3/2 ·
    # P(a pair is antipodal) ≈ 3/2 · P₂ (each pair read as two tokens; exact P₂). The split
    # is seen with an antipodal pair while it hovers within tol, unclustered while above:
    # P(has pair) ≈ 3/2·P₂·F·e^{−T/τ} = 0.234, P(unclustered) ≈ 3/2·P₂·(1 − F)·e^{−T/τ}
    # = 0.040 (measured 0.225 and 0.041). 4,000 trajectories, seed fixed; 4 SE plus 8 % for
    # the reading (≤ 3 % against Fig. 6 at the paper's scale) and the formation time.
    def model(**point):
        return ad.studies.phase_model(
            noise="full", engine="discrete", attention="softmax", depth=100, horizon=200.0,
            **point,
        )  # fmt: skip

    ds = ad.estimate_probabilities(
        model, ad.grid(dim=[4], n_tokens=[3], beta=[3.0]), key=jax.random.key(3),
        n_trajectories=4000, progress=False, on_merged="count",
    )  # fmt: skip
    split = 1.5 * theory.p_antipodal_uniform(3.0, 4)
    survival = np.exp(-200.0 / theory.antipodal_split_lifetime(3.0, 4, (2, 1)))
    hover = theory.antipodal_split_hover_fraction(3.0, 4, (2, 1))
    for outcome, expected in (
        ("has_antipodal_pair", split * hover * survival),
        ("unclustered", split * (1 - hover) * survival),
    ):
        p = float(ds["probability"].sel(outcome=outcome).squeeze())
        se = np.sqrt(p * (1 - p) / 4000)
        assert abs(p - expected) < 4 * se + 0.08 * expected, (outcome, p, expected, se)


def test_the_beta_n_study_carries_the_three_token_reading_where_it_was_derived():
    # studies.phase.three_token_curve: (3/2)·P₂·F·e^{−T/τ} for N = 3 (composed here from
    # the public theory functions), the classifier's tol and σ passed on; NaN where the
    # reading was not derived (N ≠ 3, USA, LayerNorm, non-Gaussian values, d < 3); past
    # β = 150 the survival is 1 in float64.
    from attndyn.studies import phase as study

    spec = study.ModelSpec(noise="full", horizon=200.0, sigma=1.5)
    points = [
        {"beta": 3.0, "dim": 4, "n_tokens": 3},
        {"beta": 3.0, "dim": 4, "n_tokens": 2},
        {"beta": 3.0, "dim": 2, "n_tokens": 3},
        {"beta": 200.0, "dim": 4, "n_tokens": 3},
    ]
    curve = study.three_token_curve(points, spec, tol=1e-2)
    lifetime = theory.antipodal_split_lifetime(3.0, 4, (2, 1), tol=1e-2, sigma=1.5)
    hover = theory.antipodal_split_hover_fraction(3.0, 4, (2, 1), tol=1e-2)
    expected = 1.5 * theory.p_antipodal_uniform(3.0, 4) * hover * np.exp(-200.0 / lifetime)
    assert curve[0] == pytest.approx(expected, rel=1e-12)
    assert np.isnan(curve[1]) and np.isnan(curve[2])
    assert curve[3] == pytest.approx(1.5 * theory.p_antipodal_uniform(200.0, 4), rel=1e-12)
    for other in (
        study.ModelSpec(noise="full", attention="unnormalized"),
        study.ModelSpec(noise="full", norm="layernorm"),
        study.ModelSpec(noise="full", values="rademacher"),
    ):
        assert np.isnan(study.three_token_curve(points[:1], other, tol=1e-3)).all()


def test_the_three_token_reading_is_its_three_factors():
    # (3/2)·P₂·F·e^{−T/τ}: at T = 0 the survival is F alone; it falls with T at rate 1/τ;
    # d < 3 (where −1 may absorb an uneven split) and negative horizons are refused.
    p2 = theory.p_antipodal_uniform(3.0, 4)
    hover = theory.antipodal_split_hover_fraction(3.0, 4, (2, 1))
    lifetime = theory.antipodal_split_lifetime(3.0, 4, (2, 1))
    assert theory.p_antipodal_pair_three_tokens(3.0, 4, 0.0) == pytest.approx(1.5 * p2 * hover)
    ratio = theory.p_antipodal_pair_three_tokens(3.0, 4, 500.0) / (1.5 * p2 * hover)
    assert ratio == pytest.approx(np.exp(-500.0 / lifetime))
    for kwargs in ({"dim": 2, "horizon": 10.0}, {"dim": 4, "horizon": -1.0}):
        with pytest.raises(ad.ParameterError):
            theory.p_antipodal_pair_three_tokens(3.0, **kwargs)
