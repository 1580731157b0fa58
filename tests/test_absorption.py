"""Early absorption: the gaps keep the scale-function bound, and results do not change."""

import jax
import numpy as np
import pytest

import attndyn as ad
from attndyn._models.reduced.absorption import absorption_gaps, escape_bound
from attndyn.theory import _phase as _theory


@pytest.mark.parametrize(("beta", "dim"), [(3.0, 4), (1.0, 6), (3.0, 10), (4.0, 5)])
def test_gaps_keep_the_exact_scale_function_bound(beta, dim):
    # R₊(δ) = ∫_{1−δ}^1 s / ∫_{1−tol}^1 s by quadrature of the spec's scale density must be
    # below the bound the gap was chosen for (the power law with its safety factor).
    tol, bound = 1e-3, 1e-7
    plus, minus = absorption_gaps(beta, dim, tol, bound)
    assert plus > 0
    one = lambda v: 1.0  # noqa: E731
    near = _theory._weighted_integral(one, beta, dim, lower=1 - plus)
    outer = _theory._weighted_integral(one, beta, dim, lower=1 - tol)
    assert near / outer <= bound
    assert escape_bound(beta, dim, tol, plus, minus) <= bound * (1 + 1e-9)
    # The antipodal end is only weakly absorbing (κ₋ ≤ 1/2): never absorbed at this bound.
    assert minus == 0.0


def _model(beta, dim, tokens):
    del dim, tokens
    return ad.DiscreteTransformer(
        ad.Attention(beta), ad.MatrixValues(1.0), depth=20, saveat=ad.SaveAt(30.0)
    )


def test_early_absorption_changes_no_count():
    # Same keys, same trajectories up to absorption: a count can change only if an absorbed
    # trajectory would later have left its class, each with probability ≤ 1e-7 (diffusion
    # limit), i.e. with probability ≤ 3 points × 1500 × 3 saves × 1e-7 ≈ 1e-3 in all.
    # β = 0.6 < β_c(6) ≈ 1.03: every trajectory clusters and the chunks stop early.
    points = ad.grid(dim=[4, 6], tokens=[2], beta=[0.6, 3.0])
    kw = {
        "key": jax.random.key(3),
        "n_trajectories": 1500,
        "progress": False,
        "chunk_size": 500,
    }

    def model(beta, dim, tokens):
        del dim, tokens
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
            _model, [{"dim": 4, "tokens": 3, "beta": 1.0}], early_absorption=True, **kw
        )
    with pytest.raises(ad.ParameterError, match="early_absorption"):
        ad.estimate_probabilities(
            _model,
            [{"dim": 4, "tokens": 2, "beta": 1.0}],
            early_absorption=True,
            route="full",
            **kw,
        )
    with pytest.raises(ad.ParameterError, match="early_absorption"):
        ad.estimate_probabilities(
            _model, [{"dim": 4, "tokens": 2, "beta": 1.0}], early_absorption=2.0, **kw
        )
