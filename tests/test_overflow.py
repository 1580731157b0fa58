"""No silent wrong answer at large β (issue 29, items 1 and 2).

Unnormalised attention weighs with e^{β⟨q_i, k_j⟩}: float32 squares overflow from β ≈ 44
and the two-token chain's products of four weights from β ≈ 22, where it put the tokens
exactly orthogonal and reported "unclustered" with mean cosine 0. The schemes that
normalise a row with its update now carry the weights' exponent apart and run at any β;
the others are refused before running where the weights could overflow; and a trajectory
whose saves break an invariant of its model (rows off the unit sphere, a cosine outside
[−1, 1]) is counted as non-finite, never as a result.

The tests compare routes layer by layer, with the same random numbers: the two-token
chain (float32) against the general frame layer (float64), and the full route (float32)
against a NumPy float64 layer. The statistical comparison of the routes is ``slow``.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attndyn as ad
from attndyn._estimate.plan import make_plan, to_float64
from attndyn._models.reduced.chain import TwoTokenChain
from attndyn._models.reduced.frame import two_token_frame
from tests.helpers import binomial_se

BETAS = [5.0, 25.0, 30.0, 40.0, 100.0]


def _usa(beta, *, scheme=None, values=None, depth=5, horizon=2.0):
    return ad.DiscreteTransformer(
        ad.Attention(beta, kind="unnormalized"),
        values or ad.MatrixValues(1.0),
        scheme or ad.PostLN(),
        depth=depth,
        saveat=ad.SaveAt(horizon),
    )


def _states(n: int, seed: int):
    """Overlaps z = cos φ over (−1, 1) and the layer's variates (5 Gaussians, 2 chi)."""
    rng = np.random.default_rng(seed)
    cz = rng.uniform(-0.95, 0.95, n)
    z = rng.standard_normal((n, 5))
    chi = np.sqrt(rng.chisquare(2, (n, 2)))  # d − 2 = 2 degrees of freedom at d = 4
    return cz, np.sqrt(1 - cz**2), z, chi


@eqx.filter_jit
def _chain_layer(reduced, cz, sz, z, chi):
    return jax.vmap(reduced._layer_two)(cz, sz, z, chi)


@eqx.filter_jit
def _frame_layer(reduced, frames, noise):
    def one(c, g):
        return reduced.layer(c, jnp.asarray(0), key=jax.random.key(0), noise=g)

    return jax.vmap(one)(frames, noise)


def test_the_two_token_chain_agrees_with_the_frame_layer_in_float64():
    # The chain in float32 against the general frame layer in float64, fed the same
    # noise G = [B | L] (rows (z0, z1, chi0, 0) and (z2, z3, z4, chi1)): one layer from 64
    # overlaps at each β. The chain used to return cos φ = 0 exactly from β ≈ 22. (β is an
    # array leaf: one compilation serves every β.)
    for beta in BETAS:
        reduced = _usa(beta).reduction(2, 4).model
        assert reduced is not None
        assert isinstance(reduced, TwoTokenChain)
        frame = ad.ReducedTransformer(reduced.model, 2, 4)  # the general route, N = 2 too
        cz, sz, z, chi = _states(64, seed=int(beta))
        f32 = jnp.float32
        args = (jnp.asarray(cz, f32), jnp.asarray(sz, f32), jnp.asarray(z, f32))
        new_cz, new_sz = _chain_layer(reduced, *args, jnp.asarray(chi, f32))
        rows = [(z[:, 0], z[:, 1], chi[:, 0], np.zeros(64)), (z[:, 2], z[:, 3], z[:, 4], chi[:, 1])]
        noise = np.stack([np.stack(row, -1) for row in rows], axis=1)
        with jax.enable_x64(True):
            frames = jax.vmap(two_token_frame)(jnp.asarray(cz), jnp.asarray(sz))
            wide = _frame_layer(to_float64(frame), frames, jnp.asarray(noise))
            reference = np.asarray(wide)
        np.testing.assert_allclose(np.asarray(new_cz), reference[:, 1, 0], atol=2e-5)
        np.testing.assert_allclose(np.asarray(new_sz), np.abs(reference[:, 1, 1]), atol=2e-5)
        assert np.all(np.asarray(new_cz) != 0)  # not the orthogonal tokens of the bug


def _numpy_post_ln(x, beta, m, depth):
    """One Post-LN layer of unnormalised attention in float64, written out: x ← norm(θ +
    A(σ M/√L)ᵀ), A = e^{βθθᵀ}θ/N (no drift)."""
    theta = x / np.linalg.norm(x, axis=-1, keepdims=True)
    a = np.exp(beta * theta @ theta.T) @ theta / len(x)
    y = theta + a @ (m / np.sqrt(depth)).T
    return y / np.linalg.norm(y, axis=-1, keepdims=True)


@eqx.filter_jit
def _full_layer(model, x, m):
    return model.layer(x, jnp.asarray(0), key=jax.random.key(0), noise=m)


def test_the_full_route_layer_matches_float64_at_any_beta():
    # N ≥ d: the value noise is the d × d matrix M itself. Float32 took exp(β) whole and
    # overflowed from β ≈ 44; it now carries the exponent apart, and agrees with a NumPy
    # float64 layer (which itself overflows past β ≈ 354: up to 300 here).
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 3))
    m = rng.standard_normal((3, 3))
    for beta in (10.0, 40.0, 100.0, 300.0):
        got = _full_layer(_usa(beta), jnp.asarray(x, jnp.float32), jnp.asarray(m, jnp.float32))
        np.testing.assert_allclose(np.asarray(got), _numpy_post_ln(x, beta, m, 5), atol=2e-5)


def test_the_hybrid_span_chain_matches_float64_at_large_beta():
    # The hybrid model's two-token chain (003 eq. 7, unnormalised attention: the phase
    # diagram's beta-eps) multiplied e^β into its rows: it overflowed from β ≈ 44.
    rng = np.random.default_rng(5)
    cz = rng.uniform(-0.9, 0.9, 32)
    s = 1 / 5 + 0.5 * rng.choice([-1.0, 1.0], 32) / np.sqrt(5)
    args = (jnp.asarray(cz, jnp.float32), jnp.asarray(0.5 * np.log(1 - cz**2), jnp.float32))
    for beta in (5.0, 60.0, 150.0):
        span = _usa(beta, values=ad.ScalarValues(0.5)).reduction(2, 4).model
        new_cz, _ = _span_layer(span, *args, jnp.asarray(s, jnp.float32))
        # float64: rows θ + s·A, A = e^{βZ}Θ/2 with Θ = [(1, 0), (z, √(1 − z²))].
        expected = []
        for z, v in zip(cz, s):
            theta = np.array([[1.0, 0.0], [z, np.sqrt(1 - z**2)]])
            y = theta + v * np.exp(beta * theta @ theta.T) @ theta / 2
            y /= np.linalg.norm(y, axis=-1, keepdims=True)
            expected.append(y[0] @ y[1])
        np.testing.assert_allclose(np.asarray(new_cz), expected, atol=2e-5)


@eqx.filter_jit
def _span_layer(span, cz, log_sz, s):
    return jax.vmap(span.chain_layer)(cz, log_sz, s)


def _plan(model_fn, *, x64=False):
    points = [{"dim": 4, "n_tokens": 3, "beta": 40.0}]
    with jax.enable_x64(x64):
        return make_plan(
            model_fn, points, n_trajectories=8, tol=1e-3, radius=1.0, chunk_size=None,
            route="auto", early_absorption=False, on_nonfinite="raise", x64=x64,
        )  # fmt: skip


def test_a_scheme_that_needs_the_weights_whole_is_refused_before_running():
    # Pre-LN adds the attention output to the token itself: e^{40} squared passes float32
    # (refused, naming --x64) but not float64 (planned). Post-LN runs in float32.
    pre = lambda beta, dim, n_tokens: _usa(beta, scheme=ad.PreLN())  # noqa: E731
    with pytest.raises(ad.ParameterError, match=r"β·‖Q‖‖K‖ = 40 .*--x64"):
        _plan(pre)
    assert _plan(pre, x64=True).x64  # planned: no refusal
    assert _plan(lambda beta, dim, n_tokens: _usa(beta)).points  # Post-LN: planned
    # A diagonal shift c < 0 raises the self-score to β − c: counted.
    shifted = ad.Attention(30.0, kind="unnormalized", diagonal_shift=-10.0)
    model = ad.DiscreteTransformer(shifted, scheme=ad.PreLN(), depth=2)
    with pytest.raises(ad.ParameterError, match=r"β·‖Q‖‖K‖ = 40"):
        _plan(lambda beta, dim, n_tokens: model)


@pytest.mark.slow
def test_the_reduced_route_at_beta_30_is_no_longer_all_unclustered():
    # The audit's command through the API: every trajectory came out "unclustered" with
    # mean cosine exactly 0; the full route gave P(single) ≈ 0.35-0.40.
    ds = ad.estimate_probabilities(
        lambda beta, dim, n_tokens: _usa(beta),
        [{"dim": 4, "n_tokens": 2, "beta": 30.0}],
        key=jax.random.key(0),
        n_trajectories=200,
        progress=False,
    )
    assert ad.provenance(ds)["route"] == "reduced"
    single = float(ds["probability"].sel(outcome="single").isel(point=0, time=-1))
    # The float64 full route gives P(single) = 0.36 ± 0.02 (1,500 trajectories: the slow
    # test below): at n = 200 its SE is 0.034, and 4 SE below it is still far from 0.
    assert single > 0.36 - 4 * binomial_se(0.36, 200), single
    assert abs(float(ds["mean_cosine"].isel(point=0, time=-1))) > 0.01


class _OffTheSphere(ad.AbstractTrajectoryModel):
    """Claims unit rows but returns rows of length ``scale`` after t = 0 (zero rows at
    scale 0). ``scale`` is an array leaf: one compilation serves every case."""

    scale: jax.Array

    @property
    def save_times(self):
        return np.array([0.0, 1.0])

    def keeps_unit_rows(self) -> bool:
        return True

    def trajectory(self, x0, *, key):
        del key
        return jnp.stack([x0, ad.normalize(x0) * self.scale])


def test_a_broken_invariant_is_counted_as_non_finite_not_as_a_result():
    # Rows of length 2 (off the sphere the model keeps) and zero rows (no direction, NaN
    # cosines: the audit's mean cosine of 1.07·10⁷ was NaN cast to integers).
    points = [{"dim": 3, "n_tokens": 2}]
    options = {"key": jax.random.key(0), "n_trajectories": 8, "progress": False}

    def run(scale, **kwargs):
        model = _OffTheSphere(jnp.asarray(scale, jnp.float32))
        return ad.estimate_probabilities(lambda **p: model, points, **options, **kwargs)

    assert int(run(1.0)["n_nonfinite"][0]) == 0
    with pytest.raises(ad.NonFiniteError, match="broke an invariant of the model"):
        run(2.0)
    with pytest.warns(UserWarning, match="excluded"):
        ds = run(0.0, on_nonfinite="exclude")
    assert int(ds["n_nonfinite"][0]) == 8 and int(ds["n_valid"][0]) == 0


@pytest.mark.slow
@pytest.mark.parametrize("beta", [25.0, 30.0, 40.0])
def test_reduced_full_and_float64_routes_agree_at_large_beta(beta):
    # The three routes' P(single), P(antipodal) at T = 2 (L = 5), 4,000 trajectories
    # each: independent samples, so their difference has SE √(p(1−p)(1/n + 1/n)) ≈ 0.011;
    # 4 SE (the merged trajectories of the float32 full route are counted, as the CLI's
    # --on-merged count would).
    def run(route, x64):
        return ad.estimate_probabilities(
            lambda beta, dim, n_tokens: _usa(beta), [{"dim": 4, "n_tokens": 2, "beta": beta}],
            key=jax.random.key(int(beta) + x64 + 2 * (route == "full")), n_trajectories=4000,
            progress=False, route=route, x64=x64, on_merged="count",
        )  # fmt: skip

    reduced, full, wide = run("auto", False), run("full", False), run("full", True)
    for outcome in ("single", "antipodal"):
        values = [
            float(ds["probability"].sel(outcome=outcome).isel(point=0, time=-1))
            for ds in (reduced, full, wide)
        ]
        p = float(np.mean(values))
        tolerance = 4 * np.sqrt(2 * p * (1 - p) / 4000)
        assert max(values) - min(values) < tolerance, (outcome, values)
    assert all(int(ds["n_nonfinite"][0]) == 0 for ds in (reduced, full, wide))
