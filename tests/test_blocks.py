"""Blocks of steps change no number (issue 29).

The estimator runs a tile's layers a block at a time, each block about half a second of
device work (sized from measured time, so the blocks differ from run to run), with a check
for Ctrl-C between them. Each layer must be taken by the same compiled program whatever the
blocks: these tests cut the layers of every layer-map route into random blocks (at the
multiples each model allows) and compare the saves bit for bit with one uncut run.
"""

import dataclasses
import random

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attndyn as ad
from attndyn._models.reduced.frame import lq


@eqx.filter_jit
def _begin(model, x0, keys):
    return model.begin(x0, keys)


@eqx.filter_jit
def _advance(model, state, keys, start, stop):
    return model.advance(state, keys, start, stop)


@eqx.filter_jit
def _finish(model, state):
    return model.finish(state)


def _in_blocks(model, x0, keys, rng: random.Random | None):
    """The saves of ``model`` run in random blocks (the ends at multiples of its step
    multiple, the last at its step count), or in one block (``rng`` None), through the
    same compiled programs as the estimator's."""
    steps, multiple = model.stepping()
    state = _begin(model, x0, keys)
    done = 0
    while done < steps:
        most = max(1, 3 * steps // (10 * multiple))
        stop = steps if rng is None else min(steps, done + multiple * rng.randint(1, most))
        state = _advance(model, state, keys, jnp.int32(done), jnp.int32(stop))
        done = stop
    return _finish(model, state)


def _post_ln(values, *, scheme=None, kind="softmax", beta=2.0):
    return ad.DiscreteTransformer(
        ad.Attention(beta, kind=kind),
        values,
        scheme or ad.PostLN(),
        depth=7,
        saveat=ad.SaveAt(6.0, (0.0, 1.0, 2.5, 6.0)),
    )


_LN = ad.PostLN(norm="layernorm")


def _reduced(model, n_tokens, dim):
    """The reduced route's model at (N, d), which these cases know exists."""
    reduced = model.reduction(n_tokens, dim).model
    assert reduced is not None
    return reduced


MODELS = {
    # (model, N, d): the full route, the reduced frame route (N = 3), the two-token chain
    # with early absorption (checks at multiples of absorb_every: blocks end there), the
    # span route's chain (hybrid values) and its layer maps (N = 3).
    "full": (_post_ln(ad.MatrixValues(1.0), scheme=ad.PreLN()), 3, 4),
    "frame": (_post_ln(ad.MatrixValues(1.0)).reduction(3, 5).model, 3, 5),
    "chain absorbing": (
        _reduced(_post_ln(ad.MatrixValues(1.0), beta=3.0), 2, 4).with_absorption(
            tol=1e-3, bound=0.5, dim=4
        ),
        2,
        4,
    ),
    "span chain": (_post_ln(ad.ScalarValues(1.5), kind="unnormalized").reduction(2, 4).model, 2, 4),
    "span layers": (_post_ln(ad.ScalarValues(0.5)).reduction(3, 4).model, 3, 4),
    # Centred LayerNorm runs as the RMS model in d − 1 on both reduced routes, its save at
    # t = 0 the start itself (issue 28): kept apart from the route's state on the span route.
    "frame layernorm": (_post_ln(ad.MatrixValues(1.0), scheme=_LN).reduction(3, 5).model, 3, 5),
    "span layers layernorm": (
        _post_ln(ad.ScalarValues(0.5), scheme=_LN).reduction(3, 5).model,
        3,
        5,
    ),
}


#: The default run keeps the route whose blocks must end at its absorption checks (about 5 s
#: of compilation); the others, whose every layer is alike, are slow.
DEFAULT = ("chain absorbing",)


@pytest.mark.parametrize(
    "name", [n if n in DEFAULT else pytest.param(n, marks=pytest.mark.slow) for n in MODELS]
)
def test_blocks_change_no_number(name):
    model, n_tokens, dim = MODELS[name]
    if name == "chain absorbing":  # several absorption checks in the 42 layers
        model = dataclasses.replace(model, absorb_every=5)
    keys = jax.random.split(jax.random.key(1), 16)
    # Starts drawn in NumPy: the JAX sampler compiles a random program for every shape.
    y = np.random.default_rng(1).standard_normal((16, n_tokens, dim))
    x0 = jnp.asarray((y / np.linalg.norm(y, axis=-1, keepdims=True)).astype(np.float32))
    whole = np.asarray(_in_blocks(model, x0, keys, None))
    rng = random.Random(name)
    for _ in range(3):
        np.testing.assert_array_equal(np.asarray(_in_blocks(model, x0, keys, rng)), whole)
    assert np.all(np.isfinite(whole))
    if "layernorm" in name:  # the save at t = 0 is the start's own frame
        np.testing.assert_allclose(whole[:, 0], np.asarray(jax.vmap(lq)(x0)), atol=1e-6)
    if name == "chain absorbing":  # some trajectories were absorbed (their saves repeat)
        assert np.any(np.all(whole[:, -1] == whole[:, -2], axis=(-2, -1)))
