"""General multi-head attention (per-head W_Q, W_K, W_V: R^d → R^{d/h}, and W_O), Laplacian
heads of either sign, masks and the diagonal shift, against a NumPy loop written from the
definitions; shapes refused with ParameterErrors; rotation invariance where it holds."""

import equinox as eqx
import numpy as np
import pytest

import attndyn as ad
from tests.helpers import on_device

N, D, H = 5, 6, 3
DH = D // H


def _naive(x, beta, *, wq, wk, wv, wo=None, kind="softmax", lap=(), sign="P-I", mask=None,
           shift=0.0):  # fmt: skip
    """Σ_j P^h_ij W_V^h x_j per head (full-width projections), concatenated, then W_O."""
    x = np.asarray(x, np.float64)
    # The heads are sliced in NumPy (a jax array's slice compiles per shape).
    wq, wk, wv = np.asarray(wq), np.asarray(wk), np.asarray(wv)
    n = len(x)
    heads = []
    for h in range(len(wq)):
        q, k, v = x @ wq[h].T, x @ wk[h].T, x @ wv[h].T
        s = beta * q @ k.T - shift * np.eye(n)
        allowed = np.ones((n, n), bool) if mask is None else mask
        e = np.where(allowed, np.exp(s - s.max(axis=1, keepdims=True)), 0.0)
        p = (
            e / e.sum(1, keepdims=True)
            if kind == "softmax"
            else np.where(allowed, np.exp(s), 0) / n
        )
        if h in lap:
            p = p - np.eye(n) if sign == "P-I" else np.eye(n) - p
        heads.append(p @ v)
    out = np.concatenate(heads, axis=1)
    return out if wo is None else out @ np.asarray(wo).T


def _weights(seed=0):
    """Some fixed Gaussian weights, drawn in NumPy: JAX's sampler compiles per shape."""
    rng = np.random.default_rng(seed)
    wq, wk, wv = (on_device(rng.standard_normal((H, DH, D)) / np.sqrt(D)) for _ in range(3))
    return wq, wk, wv, on_device(rng.standard_normal((D, D)) / np.sqrt(D))


# Any fixed tokens on the sphere, drawn in NumPy (attndyn's sampler compiles per shape).
_x = np.random.default_rng(9).standard_normal((N, D))
X = on_device(_x / np.linalg.norm(_x, axis=1, keepdims=True))
# Attention and its matrix as one program each (op by op, each op compiles).
_apply = eqx.filter_jit(lambda att, x: att(x))
_matrix = eqx.filter_jit(lambda att, x: att.matrix(x))


@pytest.mark.default_case("lap-1-I-P-unnormalized")
@pytest.mark.parametrize("kind", ["softmax", "unnormalized"])
@pytest.mark.parametrize(
    "options",
    [
        {},
        {"laplacian_heads": (0, 2)},
        {"laplacian_heads": (1,), "laplacian_sign": "I-P"},
        {"causal": True},
        {"self_mask": True, "diagonal_shift": 0.7},
    ],
    ids=["plain", "lap-0-2", "lap-1-I-P", "causal", "self-mask-shift"],
)
def test_full_width_heads_match_the_definition(kind, options):
    wq, wk, wv, wo = _weights()
    att = ad.Attention(
        1.3, kind=kind, n_heads=H, query=wq, key_matrix=wk, value=wv, output=wo, **options
    )
    mask = None
    if options.get("causal"):
        mask = np.tril(np.ones((N, N), bool))
    if options.get("self_mask"):
        mask = ~np.eye(N, dtype=bool)
    ref = _naive(
        X, 1.3, wq=wq, wk=wk, wv=wv, wo=wo, kind=kind, lap=options.get("laplacian_heads", ()),
        sign=options.get("laplacian_sign", "P-I"), mask=mask,
        shift=options.get("diagonal_shift", 0.0),
    )  # fmt: skip
    np.testing.assert_allclose(eqx.filter_jit(att)(X), ref, rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_coordinate_blocks_are_the_selection_projections():
    """Today's heads are the special case W^h = the rows selecting block h."""
    select = on_device(np.eye(D).reshape(H, DH, D))
    blocks = ad.Attention(2.0, n_heads=H, n_laplacian_heads=1)
    full = ad.Attention(2.0, n_heads=H, query=select, key_matrix=select, value=select,
                        laplacian_heads=(0,))  # fmt: skip
    np.testing.assert_allclose(full(X), blocks(X), atol=1e-6)
    # A permutation W_O permutes the output coordinates.
    perm = on_device(np.eye(D)[::-1])
    plain = ad.Attention(2.0, n_heads=H)(X)
    np.testing.assert_allclose(ad.Attention(2.0, n_heads=H, output=perm)(X), plain[:, ::-1])


def test_laplacian_signs_are_opposite():
    """I − P = −(P − I): seed 000's eq. 3 and its §6 differ by the sign of the update."""
    plus = np.asarray(_apply(ad.Attention(1.0, laplacian=True), X))
    minus = _apply(ad.Attention(1.0, laplacian=True, laplacian_sign="I-P"), X)
    np.testing.assert_allclose(minus, -plus, atol=1e-6)
    # A Laplacian head moves a token by A_i − x_i: its row sums are zero.
    p = np.asarray(_matrix(ad.Attention(1.0, n_heads=2, laplacian_heads=(1,)), X))
    np.testing.assert_allclose(p[1].sum(-1), 0.0, atol=1e-6)
    np.testing.assert_allclose(p[0].sum(-1), 1.0, atol=1e-6)


def test_self_mask_and_shift():
    p = np.asarray(_matrix(ad.Attention(2.0, self_mask=True), X))[0]
    np.testing.assert_array_equal(np.diagonal(p), 0.0)
    np.testing.assert_allclose(p.sum(-1), 1.0, atol=1e-6)
    # A diagonal shift c is a factor e^{−c} on the self-weight before normalising.
    x = np.asarray(X, np.float64)
    s = 2.0 * x @ x.T
    e = np.exp(s) * np.where(np.eye(N, dtype=bool), np.exp(-1.5), 1.0)
    expected = e / e.sum(1, keepdims=True)
    got = np.asarray(_matrix(ad.Attention(2.0, diagonal_shift=1.5), X))[0]
    np.testing.assert_allclose(got, expected, rtol=1e-5)


def test_rotation_invariance_exactly_where_claimed():
    # Any fixed rotation, and the rotated tokens, in NumPy (eager jax ops compile each).
    rot = np.linalg.qr(np.random.default_rng(3).standard_normal((D, D)))[0].astype(np.float32)
    rotated = on_device(np.asarray(X) @ rot.T)
    for att in (
        ad.Attention(1.7, self_mask=True, diagonal_shift=0.3, laplacian=True),
        ad.Attention(1.7, causal=True, laplacian_sign="I-P", laplacian=True),
    ):
        assert att.rotation_invariant
        np.testing.assert_allclose(
            _apply(att, rotated), np.asarray(_apply(att, X)) @ rot.T, atol=1e-5
        )
    wq = _weights(1)[0]
    for att in (ad.Attention(1.7, n_heads=H), ad.Attention(1.7, n_heads=H, query=wq)):
        assert not att.rotation_invariant
        assert not np.allclose(_apply(att, rotated), np.asarray(_apply(att, X)) @ rot.T, atol=1e-3)


def test_the_reduced_route_refuses_what_is_not_rotation_invariant():
    wq = _weights()[0]
    for att, needle in (
        (ad.Attention(1.0, n_heads=H), "multi-head"),
        (ad.Attention(1.0, n_heads=H, query=wq), "Q or K"),
        (ad.Attention(1.0, value=on_device(np.eye(D))), "W_V or W_O"),
        (ad.Attention(1.0, output=on_device(np.eye(D))), "W_V or W_O"),
    ):
        model = ad.DiscreteTransformer(att, depth=5)
        route = ad.select_route(model, n_tokens=2, dim=D)
        assert route.name == "full" and needle in route.reason
    masked = ad.DiscreteTransformer(ad.Attention(1.0, self_mask=True, diagonal_shift=0.5))
    assert ad.select_route(masked, n_tokens=2, dim=D).name == "reduced"


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"n_heads": 4}, "divisible"),
        ({"query": on_device(np.ones((H, DH, D + 1)))}, "query has shape"),
        ({"key_matrix": on_device(np.ones((H, DH + 1, D)))}, "key_matrix has shape"),
        ({"value": on_device(np.ones((H, D, D)))}, "value has shape"),
        ({"output": on_device(np.ones((D + 1, D + 1)))}, "output"),
    ],
)
def test_shapes_are_refused_with_a_parameter_error_even_under_jit(kwargs, needle):
    att = ad.Attention(1.0, **{"n_heads": H, **kwargs})
    with pytest.raises(ad.ParameterError, match=needle):
        eqx.filter_jit(att)(X)


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"query": on_device(np.ones((2, 2, 3)))}, "query"),
        ({"output": on_device(np.ones((3, 4)))}, "output"),
        ({"laplacian_heads": (0, 3)}, "laplacian_heads"),
        ({"laplacian_heads": (1, 1)}, "laplacian_heads"),
        ({"laplacian_heads": (0,), "n_laplacian_heads": 1}, "not both"),
        ({"laplacian_sign": "P+I"}, "laplacian_sign"),
        ({"self_mask": True, "causal": True}, "self_mask"),
        ({"diagonal_shift": float("nan")}, "diagonal_shift"),
    ],
)
def test_bad_options_are_named_at_construction(kwargs, needle):
    with pytest.raises(ad.ParameterError, match=needle):
        ad.Attention(1.0, **{"n_heads": H, **kwargs})
