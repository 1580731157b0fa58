"""Frozen random weights: the laws' moments, frozen / redrawn / shared draws, and the layer
map against the peers' algorithm written out in NumPy."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attndyn as ad
from tests.helpers import sphere_rows

DIM = 160  # 25,600 entries a matrix: a variance is estimated to ≈ 0.009 (1 SE)


def _form(drawn):
    """B = QᵀK with identity where omitted."""
    q = np.eye(DIM) if drawn.query is None else np.asarray(drawn.query, np.float64)
    k = np.eye(DIM) if drawn.key_matrix is None else np.asarray(drawn.key_matrix, np.float64)
    return q.T @ k


def _draw(bilinear, value="identity", seed=0):
    return ad.RandomWeights(bilinear, value).sample(jax.random.key(seed), DIM)


# Entry variances: a sample variance of n = d² unit-variance Gaussian products has SE
# ≈ √(2/n)·var (Gaussian) and somewhat more for products; 6 SE ≈ 0.06·var covers both.
@pytest.mark.parametrize(
    ("law", "off_var", "diag_var", "symmetric"),
    [
        ("gaussian-product", 1.0, 1.0, False),
        ("goe", 1.0, 2.0, True),
        ("wigner", 1.0, 1.0, True),
        ("kaiming", 1.0 / DIM, 1.0 / DIM, False),
        ("gpt2", 0.02**2, 0.02**2, False),
    ],
)
def test_bilinear_laws_have_their_moments(law, off_var, diag_var, symmetric):
    b = _form(_draw(law))
    off = b[~np.eye(DIM, dtype=bool)]
    assert abs(off.mean()) < 6 * np.sqrt(off_var / off.size)
    assert off.var() == pytest.approx(off_var, rel=0.06)
    assert np.diagonal(b).var() == pytest.approx(diag_var, rel=0.3)  # 160 entries only
    assert np.allclose(b, b.T) == symmetric
    if law == "kaiming":  # Q and K themselves have N(0, 1/d) entries
        drawn = _draw(law)
        assert drawn.key_matrix is not None
        assert np.asarray(drawn.key_matrix).var() == pytest.approx(1 / DIM, rel=0.06)


def test_value_laws():
    g = _draw("identity", "gaussian").value
    assert g is not None and np.asarray(g).var() == pytest.approx(1 / DIM, rel=0.06)
    w = np.asarray(_draw("identity", "wishart").value)
    # G Gᵀ/√d: symmetric, positive semi-definite, mean diagonal √d.
    assert np.allclose(w, w.T, atol=1e-3) and np.linalg.eigvalsh(w).min() > -1e-2
    assert np.diagonal(w).mean() == pytest.approx(np.sqrt(DIM), rel=0.03)
    for law, nu in (("gaussian-product", np.sqrt(DIM)), ("goe", np.sqrt(DIM + 1))):
        plus = ad.RandomWeights(law, "plus-bilinear").sample(jax.random.key(1), DIM)
        minus = ad.RandomWeights(law, "minus-bilinear").sample(jax.random.key(1), DIM)
        np.testing.assert_allclose(np.asarray(plus.value), _form(plus) / nu, atol=1e-5)
        np.testing.assert_allclose(np.asarray(minus.value), -_form(minus) / nu, atol=1e-5)
    assert np.asarray(_draw("identity", "gpt2").value).std() == pytest.approx(0.02, rel=0.03)
    assert _draw("identity").value is None and _draw("identity").query is None


def test_frozen_redrawn_and_shared_draws():
    frozen = ad.RandomWeights("goe", "gaussian")
    every2 = ad.RandomWeights("goe", "gaussian", redraw_every=2)
    shared = ad.RandomWeights("goe", "gaussian", key=jax.random.key(7))
    k1, k2 = jax.random.key(1), jax.random.key(2)

    def q(w, key, n):
        return np.asarray(w.at_layer(key, jnp.asarray(n), 4, jnp.float32).query)

    np.testing.assert_array_equal(q(frozen, k1, 0), q(frozen, k1, 57))
    assert not np.array_equal(q(frozen, k1, 0), q(frozen, k2, 0))  # per trajectory
    np.testing.assert_array_equal(q(every2, k1, 2), q(every2, k1, 3))
    assert not np.array_equal(q(every2, k1, 1), q(every2, k1, 2))
    np.testing.assert_array_equal(q(shared, k1, 5), q(shared, k2, 0))  # shared by the batch
    assert frozen.frozen and not every2.frozen and shared.shared and not frozen.shared


def test_layer_map_is_the_peers_algorithm():
    """x ← normalize(x + η·softmax(β X B Xᵀ) X Vᵀ) with the drawn B and V, in NumPy
    (float64), for frozen weights over 6 layers."""
    weights = ad.RandomWeights("gaussian-product", "wishart", key=jax.random.key(3))
    eta, beta, dim = 0.1, 0.8, 6
    model = ad.DiscreteTransformer(
        ad.Attention(beta), ad.DeterministicValues(), step=eta, saveat=ad.SaveAt(0.6),
        weights=weights,
    )  # fmt: skip
    x0 = sphere_rows(4, 5, dim)
    out = np.asarray(model.trajectory(jnp.asarray(x0), key=jax.random.key(9)))[-1]
    drawn = weights.sample(jax.random.fold_in(jax.random.key(3), 0), dim)
    b = np.asarray(drawn.query, np.float64).T
    v = np.asarray(drawn.value, np.float64)
    x = np.asarray(x0, np.float64)
    for _ in range(6):
        s = beta * x @ b @ x.T
        p = np.exp(s - s.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        y = x + eta * (p @ x) @ v.T
        x = y / np.linalg.norm(y, axis=1, keepdims=True)
    np.testing.assert_allclose(out, x, atol=2e-5)


@pytest.mark.default_case("pre-ln")
@pytest.mark.parametrize("scheme", ad.SCHEME_NAMES)
def test_every_scheme_runs_with_frozen_weights(scheme):
    model = ad.DiscreteTransformer(
        ad.Attention(1.0), ad.DeterministicValues(), ad.scheme_from_name(scheme), depth=4,
        saveat=ad.SaveAt(1.0), weights=ad.RandomWeights("wigner", "minus-bilinear"),
    )  # fmt: skip
    x0 = jnp.asarray(sphere_rows(0, 4, 5))
    assert np.all(np.isfinite(np.asarray(model.trajectory(x0, key=jax.random.key(1)))))


def test_weights_are_refused_where_they_do_not_fit():
    with pytest.raises(ad.ParameterError, match="bilinear"):
        ad.RandomWeights("cauchy")
    with pytest.raises(ad.ParameterError, match="redraw_every"):
        ad.RandomWeights(redraw_every=0)
    with pytest.raises(ad.ParameterError, match="one head"):
        ad.DiscreteTransformer(ad.Attention(1.0, n_heads=2), weights=ad.RandomWeights())
    model = ad.DiscreteTransformer(ad.Attention(1.0), weights=ad.RandomWeights("goe"))
    assert "random weights" in ad.select_route(model, n_tokens=2, dim=4).reason


@pytest.mark.slow
def test_random_weights_cosine_default_is_redrawn_kaiming():
    """The default keeps seed 004 Fig. 4's fresh Kaiming weights per layer; frozen weights
    give other numbers; shared weights make two runs differ only by their starts."""
    kw = {"n_tokens": 6, "dim": 8, "beta": 2.0, "n_layers": 4, "key": jax.random.key(2)}
    scheme = ad.PostLN()
    default = ad.studies.random_weights_cosine(scheme, **kw)
    frozen = ad.studies.random_weights_cosine(
        scheme, **kw, weights=ad.RandomWeights("kaiming", "gaussian")
    )
    np.testing.assert_array_equal(frozen[:2], default[:2])  # layer 0 uses the same draw
    assert not np.allclose(frozen[2:], default[2:])
