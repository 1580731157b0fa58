"""The reduced (N × N frame) route against the full simulation: equal in law, exact algebra."""

import logging

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attndyn as ad
from attndyn._models.reduced.chain import TwoTokenChain
from attndyn._models.reduced.frame import lq, pair_gaps
from attndyn._models.reduced.reduction import reduction_blocker
from attndyn._models.reduced.samplers import (
    LAYER_BLOCK,
    mt_candidate,
    two_token_block,
    variates,
)
from tests.helpers import noise_keys, two_sample_ks_pvalue


def _reduce(model, n_tokens, dim):
    """The reduced form of ``model`` at (N, d), which must exist."""
    reduced = model.reduction(n_tokens, dim).model
    assert reduced is not None
    return reduced


def _terminal_overlaps(model, n, n_tokens, dim, seed):
    """Terminal pairwise overlaps (N ≥ 2) or magnitudes (N = 1), one row per trajectory."""
    # Uniform starts, any: drawn in NumPy (attndyn's sampler compiled a program per shape).
    x0 = np.random.default_rng(seed).standard_normal((n, n_tokens, dim)).astype(np.float32)
    x0 /= np.linalg.norm(x0, axis=-1, keepdims=True)
    simulate = eqx.filter_jit(lambda m, x, k: m.simulate(x, k)[:, -1])
    saves = simulate(model, jax.device_put(x0), noise_keys(seed, n))
    # In float64 NumPy: a JAX einsum at default precision rounds to TF32 on a GPU, which
    # quantised overlaps near 1 into a few values and broke the KS test there.
    last = np.asarray(saves, np.float64)
    if n_tokens == 1:
        # One token: its magnitude is the only invariant (it moves under Pre-LN).
        return np.linalg.norm(last, axis=-1)
    theta = last / np.linalg.norm(last, axis=-1, keepdims=True)
    gram = np.einsum("bik,bjk->bij", theta, theta)
    i, j = np.triu_indices(n_tokens, 1)
    return gram[:, i, j]


CASES = [
    # (β, d, N, scheme, kind, T): d = 2 … d ≫ N, both complement samplers (direct for
    # d − N ≤ 6, Bartlett with small-dof and Marsaglia–Tsang chi variates beyond), the
    # two-token chain and the general frame, and a scheme that keeps magnitudes (Pre-LN,
    # the only invariant of N = 1 at d = 2). Horizons keep the overlaps away from float32's
    # resolution limit near ±1 while giving the dimension-dependent drift time to act.
    (3.0, 4, 2, ad.PostLN(), "softmax", 2.0),
    (1.0, 3, 2, ad.PostLN(), "unnormalized", 0.5),  # USA moves fast: T = 1 saturates
    (2.0, 40, 2, ad.PostLN(), "softmax", 0.5),
    (1.0, 10, 3, ad.PreLN(), "softmax", 1.0),
    (0.5, 24, 3, ad.PostLN(), "softmax", 0.5),
    (1.0, 2, 1, ad.PreLN(), "softmax", 1.0),
    (1.0, 2, 2, ad.PostLN(), "softmax", 0.5),  # N = d = 2: the chain without complement
]


@pytest.mark.default_case("1.0-2-1-scheme5-softmax-1.0")
@pytest.mark.parametrize(("beta", "dim", "n_tokens", "scheme", "kind", "horizon"), CASES)
def test_reduced_and_full_routes_agree_in_law(beta, dim, n_tokens, scheme, kind, horizon):
    # KS on 3000 vs 3000 terminal overlaps (L = 20): under equal laws the p-value is
    # uniform, so p < 1e-3 fails a correct route once in a thousand (seeds are fixed). The
    # test has power: a Wishart part with one degree of freedom too many gives p ≈ 1e-16
    # at (β, d) = (3, 4), and four too many p ≈ 1e-22 at (2, 40) (checked by hand).
    model = ad.DiscreteTransformer(
        ad.Attention(beta, kind=kind),
        ad.MatrixValues(1.0),
        scheme=scheme,
        depth=20,
        saveat=ad.SaveAt(horizon),
    )
    full = _terminal_overlaps(model, 3000, n_tokens, dim, seed=1)
    reduced = _terminal_overlaps(_reduce(model, n_tokens, dim), 3000, n_tokens, dim, seed=2)
    for k in range(full.shape[1] if full.ndim > 1 else 1):
        a = full[:, k] if full.ndim > 1 else full
        b = reduced[:, k] if reduced.ndim > 1 else reduced
        assert two_sample_ks_pvalue(a, b) > 1e-3


def test_d2_has_no_complement():
    # Two tokens in the plane reduce with an empty complement (the chain of their angle,
    # tested in law above); three tokens of R^2 or R^3 do not (N < d fails, N = d > 2).
    model = ad.DiscreteTransformer(ad.Attention(1.0), depth=5, saveat=ad.SaveAt(1.0))
    assert reduction_blocker(model, 2, 2) is None
    assert reduction_blocker(model, 1, 2) is None
    assert reduction_blocker(model, 3, 2) is not None
    assert reduction_blocker(model, 3, 3) is not None


@pytest.mark.slow
@pytest.mark.parametrize(("beta", "dim"), [(0.5, 3), (2.0, 4), (3.0, 10), (1.5, 64)])
def test_terminal_overlap_in_law_at_depth(beta, dim):
    # L = 50, T = 4, 10,000 vs 10,000: same KS criterion as above, a 3× finer resolution.
    # By T = 4 most pairs sit within 1e-6 of ±1. There the full route's float32 coordinates
    # cannot represent the gap (1 − z ≈ 1e-7 comes out as 1.0 or 1.0000001), while the
    # reduced route carries the gap itself: compared raw, KS sees that rounding, not the
    # law. So both are compared at a 1e-5 resolution, still 100× finer than the clustering
    # tolerance. (Diagnosed at β = 2, d = 4 with 80,000 vs 80,000: mean overlap differs by
    # 0.85 SE, and the fractions within 1e-3 of ±1 by 0.1 and 0.3 SE.)
    model = ad.DiscreteTransformer(
        ad.Attention(beta), ad.MatrixValues(1.0), depth=50, saveat=ad.SaveAt(4.0)
    )
    full = _terminal_overlaps(model, 10000, 2, dim, seed=3)
    reduced = _terminal_overlaps(_reduce(model, 2, dim), 10000, 2, dim, seed=4)

    def resolved(z):
        return np.round(np.clip(np.asarray(z, np.float64), -1.0, 1.0), 5)

    assert two_sample_ks_pvalue(resolved(full), resolved(reduced)) > 1e-3


def test_lq_factorises_and_resolves_near_parallel_rows():
    x = np.asarray([[1.0, 0.0, 0.0], [1.0, 1e-6, 0.0], [-1.0, 2e-6, 1e-6]], np.float32)

    # One program: eagerly lq and pair_gaps compiled each of their operations. The
    # products are checked in float64 NumPy.
    @jax.jit
    def factorise(x):
        c = lq(x)
        return c, pair_gaps(c)

    c, (plus, minus) = factorise(x)
    c, x = np.asarray(c, np.float64), x.astype(np.float64)
    np.testing.assert_allclose(c @ c.T, x @ x.T, atol=1e-6)
    assert np.all(np.triu(c, 1) == 0)
    plus, minus = np.asarray(plus), np.asarray(minus)
    # 1 − z of rows 0, 1 is 5e-13 and 1 + z of rows 0, 2 is 2.5e-12: a Gram matrix in
    # float32 would give 0 for both.
    np.testing.assert_allclose(float(plus[0, 1]), 0.5e-12, rtol=1e-2)
    np.testing.assert_allclose(float(minus[0, 2]), 2.5e-12, rtol=1e-2)


@pytest.mark.slow
def test_chi_variates_have_the_right_moments():
    # 40,000 draws: the mean of χ²_k has SE √(2k/40000); 5 SE bounds (stated per entry).
    keys = jax.random.split(jax.random.key(0), 40000)
    dofs = (1, 2, 5, 8, 9, 62)
    z, chi = jax.jit(jax.vmap(lambda k: variates(k, 2, dofs, jnp.float32)))(keys)
    chi2 = np.asarray(chi, np.float64) ** 2
    for i, k in enumerate(dofs):
        assert abs(chi2[:, i].mean() - k) < 5 * np.sqrt(2 * k / 40000)
        assert abs(chi2[:, i].var() / (2 * k) - 1) < 0.05
    assert abs(float(np.mean(z))) < 5 / np.sqrt(80000)


def test_reduction_is_refused_where_it_is_not_exact():
    att = ad.Attention(1.0)
    ok = ad.DiscreteTransformer(att)
    assert reduction_blocker(ok, 2, 4) is None
    assert "N = 4" in str(reduction_blocker(ok, 4, 4))
    assert reduction_blocker(
        ad.DiscreteTransformer(att, ad.MatrixValues(distribution="uniform")), 2, 4
    )
    assert reduction_blocker(ad.DiscreteTransformer(ad.Attention(1.0, n_heads=2)), 2, 4)
    assert reduction_blocker(
        ad.DiscreteTransformer(
            ad.Attention(1.0, query=jax.device_put(np.eye(4, dtype=np.float32)))
        ),
        2,
        4,
    )
    with pytest.raises(ad.ParameterError, match="route"):
        ad.select_route(
            ad.DiscreteTransformer(ad.Attention(1.0, n_heads=2)),
            n_tokens=2,
            dim=4,
            route="reduced",
        )


@pytest.mark.slow
def test_estimator_picks_the_route_and_says_so():
    def make(beta, dim, n_tokens):
        del dim, n_tokens
        return ad.DiscreteTransformer(ad.Attention(beta), depth=5, saveat=ad.SaveAt(1.0))

    points = [{"dim": 4, "n_tokens": 2, "beta": 1.0}, {"dim": 3, "n_tokens": 3, "beta": 1.0}]
    kw = {"key": jax.random.key(0), "n_trajectories": 20, "progress": False}
    ds = ad.estimate_probabilities(make, points, **kw)
    prov = ad.provenance(ds)
    assert prov["routes"] == ["reduced", "full"]
    assert prov["route"] == "mixed"
    assert (
        ad.provenance(ad.estimate_probabilities(make, points, route="full", **kw))["route"]
        == "full"
    )
    with pytest.raises(ad.ParameterError, match="route"):
        ad.estimate_probabilities(make, points, route="reduced", **kw)
    with pytest.raises(ad.ParameterError, match="route"):
        ad.estimate_probabilities(make, points, route="fast", **kw)  # type: ignore[arg-type]


@pytest.mark.default_case("4")
@pytest.mark.parametrize("dim", [4, 7, 10, 64])
def test_two_token_block_variates_are_exact(dim):
    # 8,000 keys × LAYER_BLOCK layers = 80,000 draws of each variate (fixed seed). Under
    # the right law the KS p-value is uniform, so p < 1e-4 fails a correct sampler once in
    # 10⁴; the mean of χ²_k has SE √(2k/80000) and is held to 5 SE (variance to 5 % ≈ 5 SE
    # of the sample variance, SE ≈ √(8/80000) relative for large k, larger for k = 1).
    # dim = 7 and 10 take the one-word Marsaglia–Tsang with its fix-up loop at small
    # shapes (α = 2.5 … 4, where ~1 % of candidates reject), dim = 64 at α ≈ 31; dim = 4
    # the sums of logarithms. A Gamma sampler that kept a rejected candidate, or dropped
    # the undecided ones (q ≤ g < q + 1), shifts the law near the mode by ~1e-3 … 1e-2.
    from scipy import stats

    # The keys are split inside the sampler's program (the same keys): split eagerly,
    # they compiled a program of their own.
    z, chi = jax.jit(
        lambda: two_token_block(jax.random.split(jax.random.key(7), 8000), dim, jnp.float32)
    )()
    z = np.asarray(z, np.float64).ravel()
    chi2 = np.moveaxis(np.asarray(chi, np.float64), 1, 0).reshape(2, -1) ** 2
    n = chi2.shape[1]
    assert n == 8000 * LAYER_BLOCK
    for i, k in enumerate((dim - 2, dim - 3)):
        assert abs(chi2[i].mean() - k) < 5 * np.sqrt(2 * k / n)
        assert abs(chi2[i].var() / (2 * k) - 1) < (0.05 if k > 1 else 0.08)
        assert stats.kstest(chi2[i], stats.chi2(k).cdf).pvalue > 1e-4
    assert stats.kstest(z, stats.norm.cdf).pvalue > 1e-4
    assert abs(z.mean()) < 5 / np.sqrt(z.size)


def test_one_word_marsaglia_tsang_takes_every_branch():
    # The exactness test above only covers the fix-up loop if first candidates are
    # rejected or undecided often enough: check that all three statuses occur at α = 2.5.
    # The same words and candidates as one program: eagerly every operation compiled.
    @jax.jit
    def statuses():
        words = jax.random.bits(jax.random.key(3), (200000,), jnp.uint32)
        return mt_candidate(words, jnp.float32(2.5 - 1 / 3))[1]

    status = statuses()
    counts = np.bincount(np.asarray(status), minlength=3)
    assert counts[1] > 50 and counts[2] > 500, counts


@pytest.mark.slow
@pytest.mark.parametrize("dim", [64])
def test_chain_numbers_depend_on_the_key_only(dim):
    # The chain draws LAYER_BLOCK layers per key (and, at d = 64, runs a batch-wide fix-up
    # loop): a trajectory's numbers must not depend on the batch around it, on where the
    # save times cut the layers (segments starting and stopping inside blocks), or on
    # whether layers are stepped one by one with ``layer``.
    def make(save_at):
        model = ad.DiscreteTransformer(
            ad.Attention(2.0), ad.MatrixValues(1.0), depth=10, saveat=ad.SaveAt(2.3, save_at)
        )
        return _reduce(model, 2, dim)

    keys = jax.random.split(jax.random.key(5), 6)
    x0 = jax.vmap(lambda k: ad.uniform_sphere(key=k, n_tokens=2, dim=dim))(keys)
    whole = make(None)
    assert isinstance(whole, TwoTokenChain)
    cut = make((0.3, 0.7, 1.0, 1.45, 2.3))
    a = np.asarray(whole.simulate(x0, keys)[:, -1])
    b = np.asarray(cut.simulate(x0, keys)[:, -1])
    np.testing.assert_array_equal(a, b)
    # Other batch shapes compile to other (vectorised or scalar) code: equal to rounding.
    # Other random numbers would differ at O(1) after 23 layers of noise σ/√10.
    alone = np.asarray(whole.simulate(x0[4:5], keys[4:5])[0, -1])
    np.testing.assert_allclose(a[4], alone, atol=1e-5)
    step = eqx.filter_jit(lambda m, c, n, k: m.layer(c, n, key=k))
    c = whole.reduce(x0[2])
    for n in range(23):
        c = step(whole, c, jnp.asarray(n), keys[2])
    np.testing.assert_allclose(np.asarray(c), a[2], atol=1e-5)


@pytest.mark.slow
def test_sweeping_beta_and_sigma_compiles_once_on_the_reduced_route(caplog):
    # The reduced route is the default for two tokens: a (β, σ) sweep must reuse one
    # compilation of the chunk kernel, as on the full route.
    def make(beta, dim, n_tokens, sigma):
        del dim, n_tokens
        return ad.DiscreteTransformer(
            ad.Attention(beta), ad.MatrixValues(sigma), depth=5, saveat=ad.SaveAt(1.0)
        )

    points = ad.grid(dim=[5], n_tokens=[2], beta=[0.5, 1.0, 2.0], sigma=[0.5, 1.0])
    with jax.log_compiles(True), caplog.at_level(logging.WARNING, logger="jax"):
        ds = ad.estimate_probabilities(
            make, points, key=jax.random.key(0), n_trajectories=10, progress=False
        )
    # The tile's three programs (starts, blocks of layers, observables): each compiled once.
    compiled = [r.getMessage() for r in caplog.records if "Compiling" in r.getMessage()]
    assert ad.provenance(ds)["route"] == "reduced"
    for program in ("_begin", "_advance", "_finish"):
        assert sum(f"Compiling jit({program})" in m for m in compiled) == 1, (program, compiled)
