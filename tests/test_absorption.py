"""Early absorption: the gaps keep the scale-function bound, and results do not change."""

import dataclasses
import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import integrate

import attndyn as ad
from attndyn._models.reduced.absorbing import AbsorbingRoute
from attndyn._models.reduced.absorption import (
    MIN_GAP,
    absorption_exponents,
    absorption_gaps,
    escape_bound,
)
from attndyn._models.reduced.chain import TwoTokenChain
from attndyn.theory import _phase as _theory


def _near_minus_one(beta, dim, delta):
    """∫_{−1}^{−1+δ} s by quadrature in t = 1 + x with the algebraic weight t^{a₋} exact (a
    float64 x = −1 + δ would round to −1 for the δ used here)."""
    a_plus, a_minus = _theory._exponents(beta, dim)

    def smooth(t):
        x = -1.0 + t
        return math.exp(_theory._log_smooth_scale(x, beta, dim)) * (2 - t) ** a_plus

    value, _ = integrate.quad(smooth, 0.0, delta, weight="alg", wvar=(a_minus, 0.0))
    return value


@pytest.mark.parametrize(("beta", "dim"), [(3.0, 4), (1.0, 6), (3.0, 10), (4.0, 5)])
def test_gaps_keep_the_exact_scale_function_bound(beta, dim):
    # R±(δ) = ∫ s near the end / ∫ s within tol of it, by quadrature of the spec's scale
    # density, must be below the bound the gap was chosen for (the power law with its
    # safety factor), at +1 and, where it is absorbed, at −1.
    tol, bound = 1e-3, 1e-7
    plus, minus = absorption_gaps(beta, dim, tol, bound)
    assert plus > 0
    one = lambda v: 1.0  # noqa: E731
    near = _theory._weighted_integral(one, beta, dim, lower=1 - plus)
    outer = _theory._weighted_integral(one, beta, dim, lower=1 - tol)
    assert near / outer <= bound
    assert escape_bound(beta, dim, tol, plus, minus) <= bound * (1 + 1e-9)
    kappa_minus = absorption_exponents(beta, dim)[1]
    if kappa_minus <= 0:  # −1 does not attract (β ≤ β_c(d)): never absorbed there
        assert minus == 0.0
        return
    # The antipodal end is weakly absorbing (κ₋ ≤ 1/2): δ₋ = tol·(ε/2)^{1/κ₋} is tiny, and
    # the relative-precision chain resolves it (above MIN_GAP) or it is left alone.
    if minus > 0:
        assert minus >= MIN_GAP
        ratio = _near_minus_one(beta, dim, minus) / _near_minus_one(beta, dim, tol)
        assert ratio <= bound


def _model(beta, dim, n_tokens):
    del dim, n_tokens
    return ad.DiscreteTransformer(
        ad.Attention(beta), ad.MatrixValues(1.0), depth=20, saveat=ad.SaveAt(30.0)
    )


@pytest.mark.slow
def test_early_absorption_changes_no_count():
    # Same keys, same trajectories up to absorption: a count can change only if an absorbed
    # trajectory would later have left its class, each with probability ≤ 1e-7 (diffusion
    # limit), i.e. with probability ≤ 2 points × 600 × 3 saves × 1e-7 ≈ 4e-4 in all.
    # β = 0.6 < β_c(6) ≈ 1.03: every trajectory clusters and the chunks stop early.
    points = ad.grid(dim=[6], n_tokens=[2], beta=[0.6, 3.0])
    kw = {
        "key": jax.random.key(3),
        "n_trajectories": 600,
        "progress": False,
        "chunk_size": 200,
    }

    def model(beta, dim, n_tokens):
        del dim, n_tokens
        return ad.DiscreteTransformer(
            ad.Attention(beta), depth=20, saveat=ad.SaveAt(30.0, (10.0, 20.0, 30.0))
        )

    plain = ad.estimate_probabilities(model, points, **kw)
    early = ad.estimate_probabilities(model, points, early_absorption=True, **kw)
    np.testing.assert_array_equal(plain["count"].values, early["count"].values)
    prov = ad.provenance(early)
    assert prov["early_absorption"]["bound"] == 1e-7
    assert all(g[0] > 0 for g in prov["early_absorption"]["gaps"])
    # Frozen states differ from the full run by at most δ₊ per trajectory in the cosine.
    worst = max(g[0] for g in prov["early_absorption"]["gaps"])
    np.testing.assert_allclose(
        early["mean_cosine"].values, plain["mean_cosine"].values, atol=2 * worst + 1e-6
    )


def test_early_absorption_is_refused_where_it_is_not_quantified():
    kw = {"key": jax.random.key(0), "n_trajectories": 10, "progress": False}
    with pytest.raises(ad.ParameterError, match="early_absorption"):
        ad.estimate_probabilities(
            _model, [{"dim": 4, "n_tokens": 3, "beta": 1.0}], early_absorption=True, **kw
        )
    with pytest.raises(ad.ParameterError, match="early_absorption"):
        ad.estimate_probabilities(
            _model,
            [{"dim": 4, "n_tokens": 2, "beta": 1.0}],
            early_absorption=True,
            route="full",
            **kw,
        )
    with pytest.raises(ad.ParameterError, match="early_absorption"):
        ad.estimate_probabilities(
            _model, [{"dim": 4, "n_tokens": 2, "beta": 1.0}], early_absorption=2.0, **kw
        )


@pytest.mark.slow
def test_compaction_runs_only_the_live_trajectories_and_changes_nothing():
    # 600 trajectories in tiles of 64 (10 tiles, the last one partial) against one tile of
    # 600: each trajectory's numbers come from its key and the absolute layer index, so
    # the order and grouping in which they run may change rounding (other vector widths),
    # not the path. Both ends absorb at β = 3, d = 4 (δ₋ > 0 with the relative-precision
    # chain).
    model = ad.DiscreteTransformer(
        ad.Attention(3.0), ad.MatrixValues(1.0), depth=20, saveat=ad.SaveAt(20.0, (5.0, 20.0))
    )
    reduced = model.reduction(2, 4).model
    assert reduced is not None
    absorbing = reduced.with_absorption(tol=1e-3, bound=1e-7, dim=4)
    assert isinstance(absorbing, AbsorbingRoute)
    assert isinstance(absorbing.route, TwoTokenChain)
    gaps = absorbing.absorption_gaps()
    assert gaps is not None and gaps[0] > 0 and gaps[1] > 0
    keys = jax.random.split(jax.random.key(4), 600)
    x0 = jax.vmap(lambda k: ad.uniform_sphere(key=k, n_tokens=2, dim=4))(keys)
    run = eqx.filter_jit(lambda m, x, k: m.simulate(x, k))
    tiled = run(dataclasses.replace(absorbing, absorb_tile=64), x0, keys)
    whole = run(dataclasses.replace(absorbing, absorb_tile=600), x0, keys)
    np.testing.assert_allclose(np.asarray(tiled), np.asarray(whole), atol=1e-6)
    classes = jax.vmap(jax.vmap(ad.cluster_classes))
    np.testing.assert_array_equal(np.asarray(classes(tiled)), np.asarray(classes(whole)))
    # Absorbed trajectories exist at both ends by T = 20.
    final = np.asarray(classes(tiled))[:, -1]
    assert final[:, 0].sum() > 100 and final[:, 1].sum() > 100


@pytest.mark.slow
def test_the_two_token_chain_holds_its_gap_instead_of_merging():
    # Without early absorption, 40 % of trajectories at β = 2, d = 4 reach 1 ∓ z < 10⁻⁷⁶ by
    # T = 60 (L = 100): sin φ underflowed to 0 there, a merge the arithmetic never leaves,
    # which the estimator reported (NumericalMergeError by default). It is now held at the
    # smallest normal number: no merge, and the classes are those of the bound.
    def post_ln(beta, dim, n_tokens):
        del dim, n_tokens
        return ad.DiscreteTransformer(
            ad.Attention(beta), ad.MatrixValues(1.0), depth=100, saveat=ad.SaveAt(60.0)
        )

    ds = ad.estimate_probabilities(
        post_ln, [{"dim": 4, "n_tokens": 2, "beta": 2.0}], key=jax.random.key(12),
        n_trajectories=512, progress=False,
    )  # fmt: skip
    assert ad.provenance(ds)["simulated"] == ["TwoTokenChain"]
    assert int(ds["n_merged"].max()) == 0
    tiny = float(np.finfo(np.float32).tiny)
    reduced = ad.DiscreteTransformer(ad.Attention(2.0), ad.MatrixValues(1.0)).reduction(2, 4)
    layer = reduced.model._layer_two  # pyright: ignore[reportOptionalMemberAccess, reportAttributeAccessIssue]
    z, chi = jnp.zeros(5, jnp.float32), jnp.full(2, 1.5, jnp.float32)
    _, sz = layer(jnp.float32(1.0), jnp.float32(tiny), z, chi)
    assert float(sz) == tiny
