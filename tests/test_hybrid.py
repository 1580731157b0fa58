"""Hybrid (scalar) value noise, two tokens: exact routes, no numerical coalescence, theory.

Issue 10: the (β, ε) diagram of seed 003 Fig. 4 must not be biased by float32 merging
tokens, by an unbounded law of v_n, or by a missing reference.
"""

import math
import warnings

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import integrate

import attndyn as ad
from attndyn._models.reduced.span import SpanTransformer
from attndyn.theory import _hybrid
from tests.helpers import binomial_se


def _starts(n, n_tokens, dim, seed):
    keys = jax.random.split(jax.random.key(seed), n)
    x0 = jax.vmap(lambda k: ad.uniform_sphere(key=k, n_tokens=n_tokens, dim=dim))(keys)
    return x0, jax.vmap(lambda k: jax.random.fold_in(k, 1))(keys)


#: The overlaps inside the program: vmapped op by op, each op compiled.
_simulate_overlaps = eqx.filter_jit(
    lambda m, x, k: jax.vmap(jax.vmap(ad.overlaps))(m.simulate(x, k))
)


@pytest.mark.default_case("values2-2-4-softmax")
@pytest.mark.parametrize("kind", ["unnormalized", "softmax"])
@pytest.mark.parametrize(
    ("values", "n_tokens", "dim"),
    [
        (ad.ScalarValues(0.5), 2, 3),
        (ad.ScalarValues(0.5, distribution="gaussian"), 3, 5),
        (ad.DeterministicValues(), 2, 4),
    ],
)
def test_span_route_follows_the_full_route_path_by_path(kind, values, n_tokens, dim):
    # V_n = s_n I keeps the tokens in their span, and the span route draws s_n from the
    # same key: the overlaps agree to float32 rounding (not just in law) after 100 layers.
    # A different draw would differ by O(ε e^β/√L) ≈ 0.2 per layer.
    model = ad.DiscreteTransformer(
        ad.Attention(2.0, kind=kind), values, depth=100, saveat=ad.SaveAt(1.0, (0.5, 1.0))
    )
    reduced = model.reduction(n_tokens, dim).model
    assert type(reduced).__name__ == "SpanTransformer"
    x0, keys = _starts(300, n_tokens, dim, seed=0)
    a = _simulate_overlaps(reduced, x0, keys)
    b = _simulate_overlaps(model, x0, keys)
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=2e-5)


def _chain(eps, beta=1.0, kind="unnormalized") -> SpanTransformer:
    model = ad.DiscreteTransformer(
        ad.Attention(beta, kind=kind), ad.ScalarValues(eps), depth=100, saveat=ad.SaveAt(10.0)
    )
    chain = model.reduction(2, 3).model
    assert isinstance(chain, SpanTransformer)
    return chain


def test_span_chain_keeps_relative_precision_at_tiny_gaps():
    # sin φ = 1e-20 (1 − z = 5e-41, far below float32's resolution of z itself): 1,000
    # layers of the float32 chain against the same chain in float64, with the same
    # multipliers s_n. The log-gap must agree to 1e-4 (it moves by O(10) over the run);
    # a chain that took 1 − z from z, or sin φ from a difference of O(1) numbers, would
    # lose it at the first layer.
    chain = _chain(0.3)
    s = 0.01 + 0.3 * 0.1 * np.where(np.arange(1000) % 3 == 0, 1.0, -1.0)

    # One compiled layer, as the route runs it inside its loop (op by op, the 2,000 layers
    # spent ~5 s of CPU dispatching).
    layer = eqx.filter_jit(chain.chain_layer)

    # Inputs made and read in NumPy: jnp.asarray of a float64 list compiles a conversion.
    def run(dtype):
        cz = jnp.asarray(np.ones((1,), dtype))
        log_sz = jnp.asarray(np.full((1,), math.log(1e-20), dtype))
        for value in s:
            cz, log_sz = layer(cz, log_sz, jnp.asarray(np.asarray([value], dtype)))
        return float(np.asarray(log_sz)[0])

    single = run(jnp.float32)
    with jax.enable_x64(True):
        double = run(jnp.float64)
    assert abs(single - double) < 1e-4 * abs(double - math.log(1e-20)) + 1e-3
    assert abs(double - math.log(1e-20)) > 1.0  # the gap did move


@pytest.mark.slow
def test_span_chain_escapes_where_plus_one_repels():
    # USA, β = 1, ε = 2 ε_c: +1 repels (003 Prop. 1), so 200 pairs started at sin φ = 1e-20
    # (1 − z = 5e-41) must all leave +1 by T = 10 (the log-gap grows at rate
    # 2e^β(ε²e^β/2 − 1) = 16 per unit time, against 90 needed), none merging on the way.
    chain = _chain(2 * ad.theory.eps_critical(1.0))
    n = 200
    cz, log_sz = jnp.ones((n,)), jnp.full((n,), math.log(1e-20))
    keys = jax.random.split(jax.random.key(3), n)
    states = eqx.filter_jit(lambda c, a, b, k: c._simulate_chain(a, b, k))(chain, cz, log_sz, keys)
    last = states[:, -1]
    assert int(jnp.sum(jax.vmap(ad.cluster_classes)(last)[:, 0])) == 0
    assert int(jnp.sum(jax.vmap(ad.numerically_merged)(last))) == 0


def test_the_sdes_reduce_to_the_overlap_diffusion_for_two_tokens():
    att = ad.Attention(1.0, kind="unnormalized")
    for sde in (ad.TransformerSDE(att), ad.HybridSDE(att, eps=0.5)):
        assert isinstance(sde.reduction(2, 4).model, ad.OverlapSDE)
        assert sde.reduction(3, 4).model is None
    spark = ad.HybridSDE(att, eps=0.5, integrator=ad.SDEIntegrator(diffrax.SPaRK()))
    assert "SPaRK" in spark.reduction(2, 4).reason
    causal = ad.HybridSDE(ad.Attention(1.0, causal=True), eps=0.5)
    assert causal.reduction(2, 4).model is None


@pytest.mark.slow  # 2 × 500 trajectories of 5,000 steps; the auto-route smoke follows
def test_overlap_route_beats_full_route_coalescence():
    # Issue 10's example: HybridSDE, USA, β = 2, ε = 1.1 ε_c, d = 3, T = 50, dt = 0.01.
    # +1 repels, so every "single" is a pair the float32 N × d route merged (1.6 % in the
    # issue; here 500 trajectories, where 0 merges would have probability ≈ e^{-8}). The
    # overlap route carries artanh Z: no merge and no single.
    eps = 1.1 * ad.theory.eps_critical(2.0)

    def make(beta, dim, n_tokens):
        del dim, n_tokens
        return ad.HybridSDE(
            ad.Attention(beta, kind="unnormalized"), eps=eps, saveat=ad.SaveAt(50.0)
        )

    kw = {"key": jax.random.key(0), "n_trajectories": 500, "progress": False}
    points = [{"beta": 2.0, "dim": 3, "n_tokens": 2}]
    auto = ad.estimate_probabilities(make, points, **kw)
    full = ad.estimate_probabilities(make, points, route="full", on_merged="count", **kw)
    assert ad.provenance(auto)["simulated"] == ["OverlapSDE"]
    last_auto, last_full = auto.isel(time=-1, point=0), full.isel(time=-1, point=0)
    assert int(last_auto["n_merged"]) == 0
    assert int(last_auto["count"].sel(outcome="single")) == 0
    merged = int(last_full["n_merged"])
    assert merged > 0
    assert int(last_full["count"].sel(outcome="single")) <= merged


@pytest.mark.slow
def test_overlap_route_has_no_coalescence_smoke():
    # Smoke of the test above (slow): the same model and automatic route on 64 trajectories
    # (the full route's merges need the 500: too rare to show in 64).
    eps = 1.1 * ad.theory.eps_critical(2.0)

    def make(beta, dim, n_tokens):
        del dim, n_tokens
        return ad.HybridSDE(
            ad.Attention(beta, kind="unnormalized"), eps=eps, saveat=ad.SaveAt(50.0)
        )

    auto = ad.estimate_probabilities(
        make, [{"beta": 2.0, "dim": 3, "n_tokens": 2}], key=jax.random.key(0),
        n_trajectories=64, progress=False,
    )  # fmt: skip
    assert ad.provenance(auto)["simulated"] == ["OverlapSDE"]
    last = auto.isel(time=-1, point=0)
    assert int(last["n_merged"]) == 0
    assert int(last["count"].sel(outcome="single")) == 0


@pytest.mark.slow
def test_float64_is_offered_and_recorded():
    def make(beta, dim, n_tokens):
        del dim, n_tokens
        return ad.DiscreteTransformer(ad.Attention(beta), ad.ScalarValues(0.3), depth=10)

    ds = ad.estimate_probabilities(
        make,
        [{"beta": 1.0, "dim": 3, "n_tokens": 3}],
        key=jax.random.key(0),
        n_trajectories=20,
        progress=False,
        route="full",
        x64=True,
    )
    assert ad.provenance(ds)["dtype"] == "float64"
    assert int(ds["n_valid"][0]) == 20
    assert jnp.zeros(()).dtype == jnp.float32  # x64 does not leak out of the call


def test_eq7_defaults_to_bounded_noise_and_warns_of_coarse_steps():
    assert ad.ScalarValues(1.0).distribution == "rademacher"
    model = ad.studies.phase_model(beta=2.0, dim=3, n_tokens=2, eps=0.5, noise="hybrid")
    assert model.values.distribution == "rademacher"  # type: ignore[attr-defined]
    spec = ad.studies.ModelSpec(noise="hybrid", attention="unnormalized", depth=100)
    points = ad.studies.phase_points("beta-eps", betas=[3.0], dims=[3], n_tokens=[2], eps=[1.0])
    depth = math.ceil((1.0 * math.exp(3.0) / 2 / 0.1) ** 2)  # step ε e^β/(2√L) = 0.1
    with pytest.warns(UserWarning, match=rf"largest 1(\.\d+)? at .*depth ≥ {depth} "):
        ad.studies.phase.warn_hybrid_step(points, spec)
    small = ad.studies.phase_points("beta-eps", betas=[0.0], dims=[3], n_tokens=[2], eps=[0.5])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ad.studies.phase.warn_hybrid_step(small, spec)


# --- theory -----------------------------------------------------------------------


@pytest.mark.parametrize("beta", [0.0, 0.5, 1.0, 2.0, 4.0])
def test_usa_probability_is_zero_or_one_by_prop_1(beta):
    eps_c = ad.theory.eps_critical(beta)
    for r in (0.3, 0.9, 0.99, 1.01, 1.2, 3.0):
        p = ad.theory.p_antipodal_hybrid_uniform(beta, r * eps_c, 3, "unnormalized")
        assert p == (1.0 if r > 1 else 0.0)


@pytest.mark.parametrize("beta", [0.0, 0.7, 2.0, 5.0])
def test_softmax_boundaries(beta):
    plus, minus = ad.theory.sa_hybrid_boundaries(beta)
    assert plus == pytest.approx(math.sqrt(2))
    assert minus == pytest.approx(math.sqrt(1 + math.exp(-2 * beta)))
    assert ad.theory.hybrid_attracts(beta, 0.9 * minus, "softmax") == (True, False)
    assert ad.theory.hybrid_attracts(beta, 1.1 * plus, "softmax") == (False, True)
    if beta == 0.0:
        assert minus == pytest.approx(plus)  # the band where both attract is empty
        return
    middle = (minus + plus) / 2
    assert ad.theory.hybrid_attracts(beta, middle, "softmax") == (True, True)
    assert 0.0 < ad.theory.p_antipodal_hybrid_uniform(beta, middle, 3, "softmax") < 1.0


def _direct_p_antipodal(z0, beta, eps, attention):
    """The scale-function answer by brute quadrature of the drift ratio of spec §3.4 (no
    exponential integrals): an independent route."""
    a = math.exp(beta)

    def ratio(u):  # 2μ/σ² per unit of u = artanh z: (1 − ε²c(a + 2bz))/(c b ε²)
        z = math.tanh(u)
        b = math.exp(beta * z)
        c = 0.5 if attention == "unnormalized" else 1 / (a + b)
        return (1 - eps**2 * c * (a + 2 * b * z)) / (c * b * eps**2)

    def log_s(u):
        # log of s(z) dz / du = s(z)·(1 − z²): the scale density and the Jacobian of u.
        jacobian = 2 * math.log(2) - 2 * abs(u) - 2 * math.log1p(math.exp(-2 * abs(u)))
        return -integrate.quad(ratio, 0.0, u, epsabs=1e-12, limit=200)[0] + jacobian

    lam_plus, lam_minus = _hybrid.hybrid_end_rates(beta, eps, attention)
    lo, hi = -60.0 / lam_minus - 5, 60.0 / lam_plus + 5
    peak = max(np.linspace(lo, hi, 401), key=log_s)
    top = log_s(peak)

    def mass(a_, b_):
        return integrate.quad(
            lambda u: math.exp(log_s(u) - top), a_, b_, epsabs=0, epsrel=1e-9, limit=200,
            points=[peak] if a_ < peak < b_ else None,
        )[0]  # fmt: skip

    return mass(math.atanh(z0), hi) / mass(lo, hi)


@pytest.mark.parametrize(
    ("beta", "eps", "z0"), [(0.5, 1.25, 0.0), (1.0, 1.2, -0.5), (2.0, 1.1, 0.6)]
)
def test_closed_form_scale_function_matches_direct_quadrature(beta, eps, z0):
    exact = ad.theory.p_antipodal_hybrid_given_overlap(z0, beta, eps, "softmax")
    assert 0.01 < exact < 0.99
    assert exact == pytest.approx(_direct_p_antipodal(z0, beta, eps, "softmax"), abs=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("beta", "eps", "n"),
    [
        (1.0, 1.24, 300),  # the default run's smoke: SE ≤ 0.029, the same 4.5 SE
        pytest.param(1.0, 1.24, 1500, marks=pytest.mark.slow),
        pytest.param(0.5, 1.29, 6000, marks=pytest.mark.slow),
    ],
)
def test_softmax_probability_matches_long_monte_carlo(beta, eps, n):
    # The overlap diffusion at T = 200 (dt = 0.01) against the exact t = ∞ value: with
    # n = 1500 the SE is ≤ 0.013; 4.5 SE covers equal laws (p ≈ 7e-6 of a false alarm),
    # plus the fraction still unclustered at T (0.03 % measured at β = 1) and an Euler bias
    # measured below 0.01 (0.7915 ± 0.0064 against 0.7972 with 4,000 paths).
    exact = ad.theory.p_antipodal_hybrid_uniform(beta, eps, 3, "softmax")

    def make(beta, dim, n_tokens):
        del n_tokens
        return ad.OverlapSDE(
            beta, attention="softmax", noise="hybrid", eps=eps, dim=dim,
            saveat=ad.SaveAt(200.0),
        )  # fmt: skip

    ds = ad.estimate_probabilities(
        make, [{"beta": beta, "dim": 3, "n_tokens": 2}], key=jax.random.key(1),
        n_trajectories=n, progress=False,
    )  # fmt: skip
    last = ds["probability"].isel(time=-1, point=0)
    p = float(last.sel(outcome="antipodal"))
    slack = float(last.sel(outcome="unclustered")) + 0.01
    assert abs(p - exact) < 4.5 * binomial_se(exact, n) + slack
