import equinox as eqx
import jax
import numpy as np
import pytest

import attndyn as ad
from tests.helpers import sphere_points

# Attention as one program per configuration (op by op, each op compiles); beta is an
# array leaf, so configurations that differ in beta only share it.
_apply = eqx.filter_jit(lambda att, x: att(x))


def _naive(x, beta, kind, q=None, k=None, causal=False, laplacian=False):
    x = np.asarray(x, np.float64)
    n = len(x)
    q = np.eye(x.shape[1]) if q is None else np.asarray(q, np.float64)
    k = np.eye(x.shape[1]) if k is None else np.asarray(k, np.float64)
    out = np.zeros_like(x)
    for i in range(n):
        js = range(i + 1) if causal else range(n)
        s = np.array([beta * (q @ x[i]) @ (k @ x[j]) for j in js])
        w = np.exp(s - s.max()) / np.exp(s - s.max()).sum() if kind == "softmax" else np.exp(s) / n
        out[i] = sum(wj * x[j] for wj, j in zip(w, js))
        if laplacian:
            out[i] -= x[i]
    return out


@pytest.mark.default_case("True-True-unnormalized")
@pytest.mark.parametrize("kind", ["softmax", "unnormalized"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("laplacian", [False, True])
def test_attention_matches_naive_loop(kind, causal, laplacian):
    x = sphere_points(0, 5, 6)
    # Some fixed Gaussian matrices, drawn in NumPy (JAX's sampler compiles per shape).
    rng = np.random.default_rng(1)
    q, k = (jax.device_put(rng.standard_normal((6, 6)).astype(np.float32)) for _ in range(2))
    att = ad.Attention(1.7, kind=kind, query=q, key_matrix=k, causal=causal, laplacian=laplacian)
    np.testing.assert_allclose(
        _apply(att, x), _naive(x, 1.7, kind, q, k, causal, laplacian), rtol=2e-4, atol=2e-5
    )


def test_softmax_is_stable_at_huge_beta():
    x = sphere_points(3, 4, 3)
    out = np.asarray(_apply(ad.Attention(1e4), x))
    assert bool(np.all(np.isfinite(out)))
    # At huge β each token attends to the most similar token, which is itself.
    np.testing.assert_allclose(out, x, atol=1e-5)


def test_unnormalized_overflow_is_visible_not_hidden():
    x = sphere_points(3, 4, 3)
    assert not bool(np.all(np.isfinite(_apply(ad.Attention(200.0, kind="unnormalized"), x))))


def test_multihead_acts_on_coordinate_blocks():
    x = np.asarray(sphere_points(4, 3, 4))
    out = np.asarray(_apply(ad.Attention(2.0, n_heads=2), x))
    for h in range(2):
        block = x[:, 2 * h : 2 * h + 2]
        np.testing.assert_allclose(
            out[:, 2 * h : 2 * h + 2], _naive(block, 2.0, "softmax"), rtol=1e-5, atol=1e-6
        )


def test_mixed_laplacian_heads():
    x = np.asarray(sphere_points(5, 3, 4))
    plain = np.asarray(_apply(ad.Attention(1.0, n_heads=2), x))
    mixed = np.asarray(_apply(ad.Attention(1.0, n_heads=2, n_laplacian_heads=1), x))
    np.testing.assert_allclose(mixed[:, :2], plain[:, :2] - x[:, :2], atol=1e-6)
    np.testing.assert_allclose(mixed[:, 2:], plain[:, 2:], atol=1e-6)


def test_vmappable_over_beta_and_tokens():
    xs = np.asarray(sphere_points(6, 4, 3, 3))
    betas = np.array([0.0, 1.0, 2.0, 3.0], np.float32)
    # Jitted: one program instead of the batched ops one by one.
    out = np.asarray(jax.jit(jax.vmap(lambda b, x: ad.Attention(b)(x)))(betas, xs))
    for i in range(4):
        np.testing.assert_allclose(
            out[i], _naive(xs[i], float(betas[i]), "softmax"), rtol=1e-5, atol=1e-6
        )


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"beta": -1.0}, "beta"),
        ({"beta": 1.0, "kind": "linear"}, "attention kind"),
        ({"beta": 1.0, "n_heads": 0}, "n_heads"),
    ],
)
def test_bad_input_is_named(kwargs, match):
    with pytest.raises(ad.ParameterError, match=match):
        ad.Attention(**kwargs)
