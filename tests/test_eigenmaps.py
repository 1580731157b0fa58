"""Seed 002's finite step X ← X + 2η(softmax(κXXᵀ − βI − M) − I)X and its claims, and the
two signs of seed 000's Laplacian under Post-LN."""

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attndyn as ad
from tests.helpers import sphere_points

KAPPA, SHIFT = 3.0, 0.8
#: One compilation per mask: η, κ and the shift are array leaves.
_apply = eqx.filter_jit(lambda step, x: step(x))


def _centred(n, d, seed, scale=1.0):
    """Some fixed unit rows of the mean-zero hyperplane (times ``scale``), drawn and
    normalised in NumPy: eager JAX would compile a random program and each op."""
    y = np.random.default_rng(seed).standard_normal((n, d))
    y -= y.mean(-1, keepdims=True)
    # Cast in NumPy: jnp.asarray(..., jnp.float32) of float64 compiles a conversion.
    return jnp.asarray((scale * y / np.linalg.norm(y, axis=-1, keepdims=True)).astype(np.float32))


@jax.jit
def _reverse_by_hand(x, eta):
    """Three layers of normalize(x − η/(1 + η)·A(x)) as one program (op by op, each op of
    the attention and of its sums would compile)."""
    for _ in range(3):
        x = ad.normalize(x - eta / (1 + eta) * ad.Attention(1.5)(x))
    return x


#: One program for the three mean cosines of equal shape.
_mean_cosine = jax.jit(ad.mean_cosine)


@functools.partial(jax.jit, static_argnames="mask")
def _laplacian(x, kappa=KAPPA, shift=SHIFT, mask=False):
    """L̃ = I − softmax(κXXᵀ − βI − M), written out."""
    n = x.shape[0]
    s = kappa * x @ x.T - shift * jnp.eye(n)
    if mask:
        s = jnp.where(jnp.eye(n, dtype=bool), -jnp.inf, s)
    return jnp.eye(n) - jax.nn.softmax(s, axis=-1)


def test_step_is_the_formula_and_a_convex_combination():
    x = _centred(6, 5, 0)
    for mask in (False, True):
        step = ad.EigenmapsStep(0.3, KAPPA, shift=SHIFT, self_mask=mask)
        # The references in NumPy: each eager JAX op would compile.
        lap = np.asarray(_laplacian(x, mask=mask))
        out, xn = np.asarray(_apply(step, x)), np.asarray(x)
        np.testing.assert_allclose(out, xn - 0.6 * lap @ xn, atol=1e-6)
        # (1 − 2η)X + 2η·P X with P row-stochastic.
        p = np.eye(6) - lap
        np.testing.assert_allclose(out, 0.4 * xn + 0.6 * p @ xn, atol=1e-6)


def test_step_is_gradient_descent_exactly_when_the_laplacian_is_symmetric():
    """Seed 002: dL_data/dX = 2L̃X with L_data = tr(L̃(XXᵀ + βI)), L̃ held fixed. In general
    the gradient is (L̃ + L̃ᵀ)X; the two agree when L̃ is symmetric (two unit tokens)."""

    def loss(x, lap):
        return jnp.trace(jax.lax.stop_gradient(lap) @ (x @ x.T + SHIFT * jnp.eye(x.shape[0])))

    eta = 0.2
    # Six tokens in five dimensions as in the test above: the same compiled step and L̃.
    for n, symmetric in ((2, True), (6, False)):
        x = _centred(n, 5, n)
        lap = _laplacian(x, mask=False)
        # The reference gradient in full float32 products, as the step's own (a GPU's default
        # rounds dot operands to TF32: 5·10⁻⁴ off the NumPy product on an H200).
        with jax.default_matmul_precision("highest"):
            grad = np.asarray(jax.jit(jax.grad(loss))(x, lap))
        lap, xn = np.asarray(lap), np.asarray(x)
        np.testing.assert_allclose(grad, (lap + lap.T) @ xn, atol=1e-5)
        step = np.asarray(_apply(ad.EigenmapsStep(eta, KAPPA, shift=SHIFT), x))
        descent = xn - eta * grad
        assert np.allclose(step, descent, atol=1e-5) == symmetric


def test_eta_at_most_one_half_never_grows_a_row():
    x = _centred(8, 6, 3, scale=1.7)
    for eta in (0.05, 0.25, 0.5):
        for mask in (False, True):
            out = np.asarray(_apply(ad.EigenmapsStep(eta, KAPPA, self_mask=mask), x))
            assert float(np.max(np.linalg.norm(out, axis=-1))) <= 1.7 * (1 + 1e-6)
    # η > ½ is refused; what it would do: two antipodal tokens, self-masked, map to
    # (1 − 4η)·x, longer than x.
    with pytest.raises(ad.ParameterError, match="eta"):
        ad.EigenmapsStep(0.6, KAPPA)
    anti = np.array([[1.0, -1.0, 0.0], [-1.0, 1.0, 0.0]]) / np.sqrt(2)
    p = np.array([[0.0, 1.0], [1.0, 0.0]])  # the self-masked softmax of two tokens
    eta = 0.6
    grown = anti + 2 * eta * (p - np.eye(2)) @ anti
    np.testing.assert_allclose(np.linalg.norm(grown, axis=-1), abs(1 - 4 * eta), rtol=1e-6)


@pytest.mark.slow
def test_step_keeps_the_mean_zero_hyperplane_and_the_layernorm_only_rescales():
    x = _centred(7, 6, 4)
    out = _apply(ad.EigenmapsStep(0.4, KAPPA, shift=SHIFT, self_mask=True), x)
    np.testing.assert_allclose(out.sum(-1), 0.0, atol=1e-6)
    np.testing.assert_allclose(ad.LayerNorm()(out), ad.normalize(out), atol=1e-6)
    # The regulariser step X ← X − 2η/(β + d_q)·X is undone by the LayerNorm.
    shrink = 1 - 2 * 0.4 / (SHIFT + 6)
    np.testing.assert_allclose(ad.LayerNorm()(shrink * out), ad.LayerNorm()(out), atol=1e-6)
    # Self-mask: no self-adjacency, rows still sum to one.
    p = ad.EigenmapsStep(0.4, KAPPA, self_mask=True).attention().matrix(x)[0] + jnp.eye(7)
    np.testing.assert_allclose(np.diagonal(p), 0.0, atol=1e-7)
    np.testing.assert_allclose(p.sum(-1), 1.0, atol=1e-6)


@pytest.mark.slow
def test_the_transformer_is_the_iterated_step_and_layernorm():
    """Independent routes: eigenmaps_transformer (Laplacian attention, deterministic values,
    centred Post-LN, step 2η) against iterating LayerNorm(step(X)) by hand."""
    step = ad.EigenmapsStep(0.4, KAPPA, shift=SHIFT, self_mask=True)
    model = ad.eigenmaps_transformer(step, saveat=ad.SaveAt(0.8 * 5, (0.8, 0.8 * 5)))
    np.testing.assert_allclose(model.save_times, [0.8, 4.0], rtol=1e-6)
    x0 = ad.uniform_sphere(key=jax.random.key(5), n_tokens=6, dim=5)
    out = model.trajectory(x0, key=jax.random.key(0))
    x = ad.LayerNorm()(x0)
    by_hand = []
    for _ in range(5):
        x = ad.LayerNorm()(step(x))
        by_hand.append(x)
    np.testing.assert_allclose(out[0], by_hand[0], atol=1e-5)
    np.testing.assert_allclose(out[1], by_hand[4], atol=1e-5)


def test_laplacian_post_ln_is_plain_post_ln_at_another_step():
    """Post-LN, deterministic values, step η: normalize(x + η(A − x)) = normalize(x + η'A)
    with η' = η/(1 − η) for P − I, and η' = −η/(1 + η) for I − P (seed 000 eq. 3: the
    time-reversed flow). A closed form for each sign."""
    x0 = sphere_points(6, 5, 4)
    eta = 0.1
    saveat = ad.SaveAt(0.3)  # three layers
    lap = ad.DiscreteTransformer(
        ad.Attention(1.5, laplacian=True), ad.DeterministicValues(), step=eta, saveat=saveat
    )
    plain = ad.DiscreteTransformer(
        ad.Attention(1.5), ad.DeterministicValues(), step=eta / (1 - eta), saveat=ad.SaveAt(
            3 * eta / (1 - eta))
    )  # fmt: skip
    key = jax.random.key(0)
    np.testing.assert_allclose(
        lap.trajectory(x0, key=key), plain.trajectory(x0, key=key), atol=2e-6
    )
    reverse = ad.DiscreteTransformer(
        ad.Attention(1.5, laplacian=True, laplacian_sign="I-P"), ad.DeterministicValues(),
        step=eta, saveat=saveat,
    )  # fmt: skip
    x = _reverse_by_hand(x0, eta)
    np.testing.assert_allclose(np.asarray(reverse.trajectory(x0, key=key))[-1], x, atol=2e-6)
    # The two signs move the mean cosine in opposite directions.
    start = float(_mean_cosine(x0))
    assert float(_mean_cosine(np.asarray(lap.trajectory(x0, key=key))[-1])) > start
    assert float(_mean_cosine(x)) < start
