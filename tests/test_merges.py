"""Numerically merged tokens under the default ``on_merged="auto"``: the law of a merged
pair's gap against closed forms and one-layer moments, and per route the default's
estimate against a float64 run of the same study."""

import functools
import warnings

import jax
import numpy as np
import pytest

import attndyn as ad
from attndyn._estimate.merges import merged_pairs, trajectory_bounds
from attndyn._models.merging import MergeLaw, pair_bound, resolution_gap
from tests.helpers import binomial_se

# --- the law of a merged pair's gap ------------------------------------------------------


def _pair(antipodal: bool, dim: int = 4) -> tuple[np.ndarray, np.ndarray]:
    theta = np.zeros((1, 2, dim))
    theta[0, :, 0] = 1.0
    if antipodal:
        theta[0, 1, 0] = -1.0
    return theta, np.full((1, 2, 2), antipodal)


@pytest.mark.parametrize("kind", ["softmax", "unnormalized"])
@pytest.mark.parametrize("dim", [2, 3, 4, 7])
def test_two_tokens_give_back_the_scale_function_exponents(kind, dim):
    # Two tokens alone: κ₊ = (d − 1)/2 and κ₋ = ½ − (d − 2)/(2 cosh 2β) (spec §4, the
    # exponents early absorption uses), for both attention kinds; no bound where −1 does
    # not attract (κ₋ ≤ 0).
    for beta in (0.3, 1.0, 2.5):
        plus = MergeLaw(kind, beta, dim, sigma=1.3).exponents(*_pair(False, dim))[0, 0, 1]
        assert plus == pytest.approx((dim - 1) / 2, rel=1e-12)
        minus = MergeLaw(kind, beta, dim, sigma=1.3).exponents(*_pair(True, dim))[0, 0, 1]
        exact = 0.5 - (dim - 2) / (2 * np.cosh(2 * beta))
        if exact > 0:
            assert minus == pytest.approx(exact, rel=1e-9)
        else:
            assert np.isnan(minus)


def test_two_tokens_under_scalar_noise_give_back_the_hybrid_thresholds():
    # d log g = (−2 + ε²) dt − 2ε dB at +1 for softmax (+1 attracts iff ε² < 2) and
    # (−2e^β + ε²e^{2β}) dt − 2e^β ε dB for unnormalised attention (iff ε < ε_c, Prop. 1):
    # κ = −2μ/ν, and no bound at all where +1 repels. Deterministic values: κ = ∞.
    theta, antipodal = _pair(False)
    for eps in (0.3, 1.0, 1.4, 1.5):
        kappa = MergeLaw("softmax", 2.0, 4, drift=1.0, eps=eps).exponents(theta, antipodal)
        if eps**2 < 2:
            assert kappa[0, 0, 1] == pytest.approx((2 - eps**2) / (2 * eps**2), rel=1e-9)
        else:
            assert np.isnan(kappa[0, 0, 1])
    beta = 2.0
    for eps in (0.3, 0.5, 0.6):
        law = MergeLaw("unnormalized", beta, 4, drift=1.0, eps=eps)
        expected = (2 * np.exp(-beta) - eps**2) / (2 * eps**2)
        got = law.exponents(theta, antipodal)[0, 0, 1]
        assert np.isnan(got) if expected <= 0 else got == pytest.approx(expected, rel=1e-9)
    assert MergeLaw("softmax", 2.0, 4, drift=1.0).exponents(theta, antipodal)[0, 0, 1] == np.inf


def _layer(x, beta, depth, law, noise):
    """One Post-LN layer of N tokens (NumPy, float64), for every draw of ``noise``."""
    gram = x @ x.T
    weights = np.exp(beta * gram - (beta * gram).max(1, keepdims=True))
    a = (weights / weights.sum(1, keepdims=True)) @ x
    if law.sigma > 0:
        y = x + law.drift * a / depth + law.sigma * np.einsum("nd,bed->bne", a, noise) / depth**0.5
    else:
        y = x + (1 / depth + law.eps * noise[:, None, None] / depth**0.5) * a
    return y / np.linalg.norm(y, axis=-1, keepdims=True)


def _exact_moments(x, v, law):
    """μ and ν of log g for the merged pair (0, 1) at gap direction v (module docstring of
    attndyn._models.merging), softmax attention, written out independently."""
    beta, d, y = law.beta, law.dim, x[0]
    w = np.exp(beta * (x @ y) - beta * (x @ y).max())
    w /= w.sum()
    a = w @ x
    k_matrix = beta * ((x.T * w) @ x - np.outer(a, a))
    alpha, p = y @ a, a @ a
    k, m = v @ k_matrix @ v, (k_matrix @ v) @ (k_matrix @ v)
    r = -2 * (alpha - k)
    if law.sigma > 0:
        s2 = law.sigma**2
        return law.drift * r + s2 * (-(d - 1) * p + (d - 3) * m), 4 * s2 * (p + m)
    e2, w_v = law.eps**2, (v @ (a + k_matrix @ y)) ** 2
    return r - e2 * (4 * alpha * k + w_v - m - 4 * alpha**2 + p) - 0.5 * e2 * r**2, e2 * r**2


@pytest.mark.parametrize(
    "law",
    [
        MergeLaw("softmax", 2.0, 4, sigma=1.0),
        MergeLaw("softmax", 2.0, 4, drift=1.0, sigma=0.5),
        MergeLaw("softmax", 2.0, 4, drift=1.0, eps=0.4),
    ],
    ids=["full", "full-drift", "scalar"],
)
def test_a_merged_pair_among_four_tokens_follows_its_law(law):
    # Two independent routes to the drift μ and variance ν of log g of a pair 10⁻⁵ apart
    # among four tokens: the formula, and the moments of one layer at L = 400 over 2·10⁵
    # draws of the value noise (μ ≈ E[Δ log g]·L, ν ≈ Var[Δ log g]·L; SE of μ ≈ 0.05-0.09,
    # tolerance 5 SE plus an O(1/√L) allowance of 3 %). Then the bound's exponent κ, the
    # worst case over the gap's direction, is at most −2μ/ν for any direction.
    rng = np.random.default_rng(0)
    x = rng.normal(size=(4, 4))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    v = rng.normal(size=4)
    v -= (v @ x[0]) * x[0]
    v /= np.linalg.norm(v)
    x[1] = x[0] * np.cos(1e-5) + v * np.sin(1e-5)
    depth, n = 400, 200_000
    noise = rng.normal(size=(n, 4, 4)) if law.sigma > 0 else rng.choice([-1.0, 1.0], size=n)
    y = _layer(x, law.beta, depth, law, noise)
    g0, g1 = 1 - x[0] @ x[1], 0.5 * np.sum((y[:, 0] - y[:, 1]) ** 2, axis=-1)
    step = np.log(g1 / g0)
    mu, nu = _exact_moments(x, v, law)
    se = step.std() / np.sqrt(n) * depth
    assert abs(step.mean() * depth - mu) < 5 * se + 0.03 * abs(mu), (step.mean() * depth, mu)
    assert step.var() * depth == pytest.approx(nu, rel=0.05)
    kappa = law.exponents(x[None], np.zeros((1, 4, 4), bool))[0, 0, 1]
    for _ in range(50):
        u = rng.normal(size=4)
        u -= (u @ x[0]) * x[0]
        u /= np.linalg.norm(u)
        mu_u, nu_u = _exact_moments(x, u, law)
        assert kappa <= -2 * mu_u / nu_u + 1e-12


def test_a_pair_bound_is_the_scale_function_power():
    delta = resolution_gap(np.float32, 4)
    assert delta == pytest.approx(0.5 * 4 * (4 * 2.0**-23) ** 2)
    np.testing.assert_allclose(pair_bound(np.array([1.5]), delta, 1e-3), 2 * (delta / 1e-3) ** 1.5)
    assert pair_bound(np.array([np.inf]), delta, 1e-3)[0] == 0
    assert np.isnan(pair_bound(np.array([np.nan]), delta, 1e-3)[0])
    assert pair_bound(np.array([1e-9]), delta, 1e-3)[0] == 1  # capped


def test_bounds_follow_the_least_exponent_since_the_merge():
    # Three saves of two tokens at +1: not merged, merged, merged. The bound is 0 before
    # the merge and 2(δ/tol)^κ after, κ = 3/2 at d = 4; no law: no bound (NaN).
    saves = np.zeros((1, 3, 2, 4), np.float32)
    saves[0, :, :, 0] = 1
    saves[0, 0, 1] = [0.6, 0.8, 0, 0]
    merged = np.array([[False, True, True]])
    same, opposite = merged_pairs(saves)
    assert same[0, 1:, 0, 1].all() and not same[0, 0, 0, 1] and not opposite.any()
    law = MergeLaw("softmax", 1.0, 4, sigma=1.0)
    bounds = trajectory_bounds(law, saves, merged, 1e-3)
    expected = 2 * (resolution_gap(np.float32, 4) / 1e-3) ** 1.5
    np.testing.assert_allclose(bounds[0], [0, expected, expected])
    assert np.isnan(trajectory_bounds(None, saves, merged, 1e-3)[0, 1:]).all()


# --- per route: the default against a float64 run of the same study ---------------------


def _study(make, points, n, **options):
    return ad.estimate_probabilities(
        make, points, key=jax.random.key(0), n_trajectories=n, progress=False, **options
    )


def _agree(make, points, n, *, route="auto", expect_merges=True):
    """The default (float32, on_merged="auto") against a float64 run of the same study,
    per class, at every save time: within 4 standard errors of their difference (the two
    estimates share their random numbers, so the SE of one bounds it), and in float32 the
    tokens do merge (else the test would test nothing)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ad.NumericalMergeWarning)
        raw = _study(make, points, n, route=route, on_merged="count")
    auto = _study(make, points, n, route=route)
    wide = _study(make, points, n, route=route, x64=True)
    if expect_merges:
        assert int(raw["n_merged"].max()) > 0
    for outcome in ("single", "antipodal", "unclustered"):
        a = auto["probability"].sel(outcome=outcome).values
        b = wide["probability"].sel(outcome=outcome).values
        se = np.sqrt(np.maximum(b * (1 - b), 1 / n) / n)
        assert np.all(np.abs(a - b) <= 4 * se), (outcome, a, b)
    np.testing.assert_array_equal(auto["n_counted"], auto["n_valid"].values[:, None])
    return raw, auto, wide


@pytest.mark.slow
def test_full_route_two_tokens_equal_float64():
    # N = 2, d = 3, β = 2 on the N × d route: float32 merges pairs at +1 and at −1 (both
    # attract above β_c(3) = 0). At −1 the exponent κ₋ = 0.48 leaves a float32 bound
    # above 10⁻⁷: those trajectories are rerun in float64 from the same numbers.
    make = functools.partial(_discrete, values=ad.MatrixValues(), depth=20, horizon=10.0)
    _, auto, _ = _agree(make, [dict(beta=2.0, dim=3, n_tokens=2)], 256, route="full")
    assert int(auto["n_rerun"][0]) > 0


@pytest.mark.slow
def test_frame_route_equals_float64():
    # N = 4, d = 5, β = 3: the frame route's float32 coordinates merge pairs inside
    # clusters (335 of 512 trajectories by T = 40 at L = 20); their bound (κ ≈ 2 at
    # d = 5) is far below 10⁻⁷, so they are counted.
    make = functools.partial(_discrete, values=ad.MatrixValues(), depth=10, horizon=16.0)
    _, auto, _ = _agree(make, [dict(beta=3.0, dim=5, n_tokens=4)], 128)
    assert ad.provenance(auto)["routes"] == ["reduced"]
    assert float(auto["merge_bound"].max()) < 1e-5


@pytest.mark.slow
def test_span_route_equals_float64():
    # Scalar (hybrid) noise ε = 0.5 < √2, N = 3, d = 4: the span route merges pairs at +1
    # in float32 (+1 attracts: bounded, counted); float64 resolves them.
    make = functools.partial(_discrete, values=ad.ScalarValues(0.5), depth=10, horizon=30.0)
    raw, auto, wide = _agree(make, [dict(beta=3.0, dim=4, n_tokens=3)], 128)
    assert ad.provenance(auto)["routes"] == ["reduced"]
    assert int(wide["n_merged"].max()) < int(raw["n_merged"].max())


@pytest.mark.slow
def test_exact_two_token_routes_equal_float64_full_routes():
    # d = 2 and centred LayerNorm, where the N × d route merged (issue 28): the default runs
    # the two-token chain (the angle in relative precision), which never merges; it agrees
    # with the float64 N × d model.
    for norm, dim in (("rms", 2), ("layernorm", 3)):
        make = functools.partial(
            _discrete, values=ad.MatrixValues(), depth=20, horizon=10.0, norm=norm
        )
        points = [dict(beta=1.0, dim=dim, n_tokens=2)]
        auto = _study(make, points, 256)
        wide = _study(make, points, 256, route="full", x64=True)
        assert ad.provenance(auto)["routes"] == ["reduced"] and int(auto["n_merged"].max()) == 0
        for outcome in ("single", "antipodal"):
            a = float(auto["probability"].sel(outcome=outcome)[0, -1])
            b = float(wide["probability"].sel(outcome=outcome)[0, -1])
            assert abs(a - b) <= 4 * np.sqrt(2) * binomial_se(b, 256), (norm, outcome, a, b)


@pytest.mark.slow
def test_sde_route_equals_float64():
    # The SDE's Brownian paths depend on the float type of the times, so a float64 run is
    # another path and no rerun applies: its float32 merges are bounded and counted, and
    # the estimate agrees with float64's in law (√2 of one SE: independent runs).
    def make(beta, dim, n_tokens):
        integrator = ad.SDEIntegrator(dt=0.1)
        return ad.TransformerSDE(ad.Attention(beta), saveat=ad.SaveAt(20.0), integrator=integrator)

    points = [dict(beta=3.0, dim=5, n_tokens=4)]
    auto = _study(make, points, 128)
    wide = _study(make, points, 128, x64=True)
    assert int(auto["n_merged"].max()) > 0 and int(auto["n_rerun"][0]) == 0
    for outcome in ("single", "antipodal"):
        a = float(auto["probability"].sel(outcome=outcome)[0, -1])
        b = float(wide["probability"].sel(outcome=outcome)[0, -1])
        assert abs(a - b) <= 4 * np.sqrt(2) * binomial_se(b, 128), (outcome, a, b)


@pytest.mark.slow  # two compilations, ~10 s of CPU
def test_reruns_give_the_same_numbers_whatever_the_chunk_size(tile, monkeypatch):
    # Two tokens at d = 3, β = 4 on the N × d route: float32 merges at −1 are rerun in
    # float64, in batches of each device tile's merged trajectories in index order, so
    # every number (counts, means, n_merged, n_rerun, merge_bound) is the same bit for bit
    # for any chunk size (and device count: tiles never depend on it), and whatever the
    # blocks of steps the tiles and the reruns run in (issue 29): the first run takes one
    # layer a block, the second blocks sized by time.
    from attndyn._estimate import runner

    tile(16)
    make = functools.partial(_discrete, values=ad.MatrixValues(), depth=5, horizon=30.0)
    point = [dict(beta=4.0, dim=3, n_tokens=2)]
    with monkeypatch.context() as one_layer:
        one_layer.setattr(runner, "FIRST_BLOCK", 1)
        one_layer.setattr(runner, "BLOCK_SECONDS", 0.0)
        runs = [_study(make, point, 64, route="full", chunk_size=16)]
    runs.append(_study(make, point, 64, route="full"))
    assert int(runs[0]["n_rerun"][0]) > 0
    for name in runs[0].data_vars:
        np.testing.assert_array_equal(runs[0][name].values, runs[1][name].values, name)


def _discrete(beta, dim, n_tokens, *, values, depth, horizon, norm="rms"):
    del dim, n_tokens
    return ad.DiscreteTransformer(
        ad.Attention(beta), values, ad.PostLN(norm=norm), depth=depth, saveat=ad.SaveAt(horizon)
    )


class _Opaque(ad.AbstractModel):
    """A custom model (a Post-LN transformer inside): no merge law, and no promise that a
    float64 run is the same path."""

    inner: ad.DiscreteTransformer

    @property
    def save_times(self):
        return self.inner.save_times

    def simulate(self, x0, keys):
        return self.inner.simulate(x0, keys)


def test_a_merge_that_nothing_bounds_is_refused_with_the_way_out():
    # Deterministic Post-LN merges its clusters in float32; wrapped in a custom model the
    # estimator knows no law for the gap and may not rerun: the default stops, in one
    # message naming what to pass; count then runs.
    def make(beta, dim, n_tokens):
        del dim, n_tokens
        inner = ad.DiscreteTransformer(
            ad.Attention(beta), ad.DeterministicValues(), depth=5, saveat=ad.SaveAt(30.0)
        )
        return _Opaque(inner)

    points = [dict(beta=4.0, dim=3, n_tokens=5)]
    with pytest.raises(ad.NumericalMergeError, match="no law of a merged pair") as error:
        _study(make, points, 40)
    assert "on_merged='count'" in str(error.value) and "\n" not in str(error.value)
    with pytest.warns(ad.NumericalMergeWarning):
        counted = _study(make, points, 40, on_merged="count")
    assert int(counted["n_merged"].max()) > 0
