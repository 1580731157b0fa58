"""Attention in blocks of queries (and by jax.nn.dot_product_attention) equals the dense form."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attndyn as ad
from attndyn._core.attention import AUTO_BLOCKWISE_TOKENS
from tests.helpers import on_device

# 37 tokens in blocks of 5: seven full blocks and a ragged last one of 2.
N, D, BLOCK = 37, 8, 5
RNG = np.random.default_rng(0)


# Any fixed tokens on the sphere (NumPy; the tests slice them in NumPy too).
_X = RNG.normal(size=(N, D))
_X = (_X / np.linalg.norm(_X, axis=1, keepdims=True)).astype(np.float32)
X = on_device(_X)
Q2 = on_device(RNG.normal(size=(2, 4, 4)))
K2 = on_device(RNG.normal(size=(2, 4, 4)))
Q = on_device(RNG.normal(size=(D, D)))
K = on_device(RNG.normal(size=(D, D)))
_V = RNG.normal(size=(D, D))
V = on_device(_V)

# Each case is its own compiled program: the masks, signs and head layouts are static.
CASES = {
    "plain": {},
    "self-mask, shift": {"self_mask": True, "diagonal_shift": 0.5},
    "Q, K, V != I": {"query": Q, "key_matrix": K, "value": V, "output": on_device(_V.T)},
    "laplacian I-P, causal": {"laplacian": True, "laplacian_sign": "I-P", "causal": True},
    "two heads, one laplacian": {
        "n_heads": 2,
        "query": Q2,
        "key_matrix": K2,
        "n_laplacian_heads": 1,
    },
}


def _relative_gap(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


# The scores as one program (op by op, each op compiles).
_scores = eqx.filter_jit(lambda att, x: att.scores(x))


@pytest.mark.default_case("self-mask, shift")
@pytest.mark.parametrize("case", list(CASES))
def test_blockwise_equals_dense(case):
    # Both kinds and two β in one compiled function (β is an array leaf): the larger β
    # makes the largest score 20, where e^s spans 9 decades across a row and the row
    # shift matters.
    options = CASES[case]

    @jax.jit
    def forms(beta):
        out = {}
        for kind in ("softmax", "unnormalized"):
            dense = ad.Attention(beta, kind=kind, implementation="dense", **options)(X)
            blocks = ad.Attention(
                beta, kind=kind, implementation="blockwise", block_size=BLOCK, **options
            )(X)
            out[kind] = (dense, blocks)
        return out

    scores = np.abs(np.asarray(_scores(ad.Attention(1.0, **options), X))).max()
    for beta in (1.0, 20.0 / scores):
        # The two forms round the scores s_ij differently by up to ~ε|s| (absolute), which
        # exp turns into relative errors of the weights; sums of 37 terms add a few ε.
        tol = 4 * np.finfo(np.float32).eps * (8 + beta * scores)
        for kind, (dense, blocks) in forms(np.float32(beta)).items():
            assert _relative_gap(blocks, dense) < tol, (case, kind, beta)


@pytest.mark.parametrize("case", ["self-mask, shift", "two heads, one laplacian"])
def test_library_attention_equals_dense(case):
    """jax.nn.dot_product_attention (its XLA form on CPU) against the dense softmax."""
    options = CASES[case]
    dense, library = jax.jit(
        lambda x: tuple(
            ad.Attention(3.0, implementation=i, **options)(x) for i in ("dense", "library")
        )
    )(X)
    assert _relative_gap(library, dense) < 2e-6


def test_blockwise_unnormalised_does_not_overflow_before_its_output():
    """At β = 95 every e^{s_ij} overflows float32 (e^95 > 3.4·10³⁸), but the output,
    (1/N) Σ_j e^{s_ij} v_j with the row shift, does not for tokens whose scores stay below
    88 + log N except the self-score... the self term alone is e^95/N: still inf. So take
    scores that stay in range after the shift: a common offset exp(m) carried in logs."""
    x = on_device(_X[:4])
    beta = 90.0

    @jax.jit
    def both(x):
        att = ad.Attention(beta, kind="unnormalized", implementation="blockwise", block_size=2)
        return att(x), ad.Attention(beta, kind="unnormalized", implementation="dense")(x)

    out, dense = both(x)
    # Exact value in float64: (1/N) Σ_j e^{β⟨x_i,x_j⟩} x_j, finite in float32 because
    # e^{90}/4 ≈ 3.1·10³⁸ < 3.4·10³⁸ and the off-diagonal terms are negligible.
    x64 = np.asarray(x, np.float64)
    exact = (np.exp(beta * x64 @ x64.T) / 4) @ x64
    assert np.all(np.isfinite(np.asarray(out)))
    np.testing.assert_allclose(np.asarray(out), exact, rtol=1e-5)
    assert not np.all(np.isfinite(np.asarray(dense)))  # e^{90} itself overflows there


def test_auto_picks_blocks_above_the_threshold():
    att = ad.Attention(1.0)
    assert att.implementation_for(AUTO_BLOCKWISE_TOKENS) == "dense"
    assert att.implementation_for(AUTO_BLOCKWISE_TOKENS + 1) == "blockwise"
    assert ad.Attention(1.0, implementation="dense").implementation_for(10**6) == "dense"


def _models(implementation):
    att = ad.Attention(2.0, implementation=implementation, block_size=6)
    saveat = ad.SaveAt(0.05)
    return {
        "layers": ad.DiscreteTransformer(att, ad.MatrixValues(1.0), depth=100, saveat=saveat),
        "ode": ad.NormalizedAttentionODE(att, saveat=saveat),
        "sde": ad.TransformerSDE(att, saveat=saveat, integrator=ad.SDEIntegrator(dt=0.01)),
    }


@pytest.mark.parametrize(
    "name",
    [
        "layers",
        pytest.param("ode", marks=pytest.mark.slow),
        pytest.param("sde", marks=pytest.mark.slow),
    ],
)
def test_every_model_can_attend_in_blocks(name):
    """The layer maps, the normalized-attention ODE and the transformer SDE give the same
    states with dense and blockwise attention (they all call the same Attention)."""
    key = jax.random.key(5)
    x = on_device(_X[:20])
    a = _models("dense")[name].trajectory(x, key=key)
    b = _models("blockwise")[name].trajectory(x, key=key)
    np.testing.assert_allclose(np.asarray(b), np.asarray(a), atol=2e-6)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"implementation": "flash"}, "implementation"),
        ({"implementation": "library", "kind": "unnormalized"}, "softmax"),
        ({"block_size": 0}, "block_size"),
    ],
)
def test_bad_implementation_is_named(kwargs, match):
    with pytest.raises(ad.ParameterError, match=match):
        ad.Attention(1.0, **kwargs)


def test_rows_of_unequal_norms_take_their_maximum():
    """Without Q, K or masks a block shifts its scores by the Cauchy–Schwarz bound
    β|q_i| max_j |k_j| instead of their maximum; a row far below it (norm 1 beside a
    token of norm 10 at β = 10: its own score 90 below the bound, e^{−90} underflows
    float32) must take its maximum, or its weights would all be 0 (0/0). Unit tokens use
    the bound; both kinds equal the dense form."""
    x = np.array(_X[:12], np.float32)
    x[3] *= 10.0
    for tokens, beta in ((on_device(x), 10.0), (X, 3.0)):

        @jax.jit
        def forms(t, beta=beta):
            return tuple(
                ad.Attention(beta, implementation=i, block_size=4)(t)
                for i in ("dense", "blockwise")
            )

        dense, blocks = forms(tokens)
        assert np.all(np.isfinite(np.asarray(blocks)))
        assert _relative_gap(blocks, dense) < 1e-5


def test_blocks_are_differentiable_in_reverse_mode():
    """jax.grad through the blocks (their rows' shift is a cond, not a loop) equals the
    dense form's gradient."""
    x = on_device(_X[:20])

    @jax.jit
    def grads(x):
        return tuple(
            jax.grad(
                lambda y, i=i: jnp.sum(ad.Attention(2.0, implementation=i, block_size=8)(y) ** 2)
            )(x)
            for i in ("dense", "blockwise")
        )

    dense, blocks = grads(x)
    assert _relative_gap(blocks, dense) < 1e-5
