"""The unrolled Threefry functions return exactly what ``jax.random`` returns, and the
layer loop that carries each layer's noise runs the same map as drawing it in the layer."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from jax.extend.random import threefry2x32_p

import attndyn as ad
from attndyn._core import random as core_random
from attndyn._core.linalg import small_max, small_sum
from tests.helpers import sphere_points

words = st.integers(min_value=0, max_value=2**32 - 1)


@settings(max_examples=30, deadline=None)
@given(words, words, words, words)
def test_hash_is_jaxs_threefry(k1, k2, x1, x2):
    args = [jnp.asarray([v], jnp.uint32) for v in (k1, k2, x1, x2)]
    ours = jax.jit(core_random.threefry2x32)(*args)
    theirs = threefry2x32_p.bind(*args)
    for a, b in zip(ours, theirs, strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("data", [0, 1, 77, 2**31 + 5, 2**32 - 1])
def test_fold_in_is_bit_exact(data):
    key = jax.random.key(12345)
    ours = jax.jit(core_random.fold_in)(key, jnp.asarray(data, jnp.uint32))
    theirs = jax.random.fold_in(key, jnp.asarray(data, jnp.uint32))
    np.testing.assert_array_equal(jax.random.key_data(ours), jax.random.key_data(theirs))
    # A Python int, as the stream constants are (up to 2³² − 1).
    plain = core_random.fold_in(key, data)
    np.testing.assert_array_equal(jax.random.key_data(plain), jax.random.key_data(theirs))


@pytest.mark.parametrize("num", [1, 2, 3, 7])
def test_split_is_bit_exact(num):
    # The estimator's starts split each trajectory's key with it (one unrolled hash).
    for key in (jax.random.key(12345), jax.random.fold_in(jax.random.key(0), 2**31 + 3)):
        ours = jax.jit(core_random.split, static_argnums=1)(key, num)
        theirs = jax.random.split(key, num)
        np.testing.assert_array_equal(jax.random.key_data(ours), jax.random.key_data(theirs))
    raw = jax.random.key(3, impl="rbg")  # another implementation: jax.random itself
    np.testing.assert_array_equal(
        jax.random.key_data(core_random.split(raw, num)),
        jax.random.key_data(jax.random.split(raw, num)),
    )


@pytest.mark.default_case("shape1")
@pytest.mark.parametrize("shape", [(1,), (3,), (2, 4), (16, 16), (3, 5, 7)])
def test_samplers_are_bit_exact(shape):
    keys = jax.random.split(jax.random.key(7), 5)
    low = np.nextafter(np.float32(-1), np.float32(0))
    pairs = [
        (lambda k: core_random.bits(k, shape), lambda k: jax.random.bits(k, shape)),
        (
            lambda k: core_random.symmetric_uniform(k, shape),
            lambda k: jax.random.uniform(k, shape, minval=low, maxval=1),
        ),
        (lambda k: core_random.normal(k, shape), lambda k: jax.random.normal(k, shape)),
        (
            lambda k: core_random.uniform(k, shape, minval=-1.7, maxval=1.7),
            lambda k: jax.random.uniform(k, shape, minval=-1.7, maxval=1.7),
        ),
        (lambda k: core_random.rademacher(k, shape), lambda k: jax.random.rademacher(k, shape)),
    ]
    # Each side in one compiled program (JAX's own samplers compile a rolled hash each).
    ours = jax.jit(lambda k: [jax.vmap(f)(k) for f, _ in pairs])(keys)
    theirs = jax.jit(lambda k: [jax.vmap(f)(k) for _, f in pairs])(keys)
    for a, b in zip(ours, theirs, strict=True):
        np.testing.assert_array_equal(a, b)


def test_other_implementations_fall_back_to_jax():
    key = jax.random.key(3, impl="rbg")
    np.testing.assert_array_equal(core_random.normal(key, (2, 4)), jax.random.normal(key, (2, 4)))
    folded = core_random.fold_in(key, 5)
    np.testing.assert_array_equal(
        jax.random.key_data(folded), jax.random.key_data(jax.random.fold_in(key, 5))
    )
    # Raw uint32 keys (the legacy form) are not typed keys: jax.random handles them.
    raw = jax.random.PRNGKey(3)
    np.testing.assert_array_equal(core_random.normal(raw, (3,)), jax.random.normal(raw, (3,)))


@pytest.mark.default_case("1")
@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 9, 33])
def test_small_reductions_match_jnp(n):
    # Any fixed Gaussian entries (NumPy: JAX's sampler compiles per shape); both sides in
    # one program (small_sum unrolls into slices and adds, each compiled on its own eagerly).
    x = np.random.default_rng(n).standard_normal((4, n, 3)).astype(np.float32)
    sums, sums_kept, maxima = jax.jit(
        lambda x: (
            (small_sum(x, 1), jnp.sum(x, 1)),
            (small_sum(x, -2, keepdims=True), jnp.sum(x, -2, keepdims=True)),
            (small_max(x, 1), jnp.max(x, 1)),
        )
    )(x)
    np.testing.assert_allclose(*sums, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(*sums_kept, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(*maxima)


@pytest.mark.default_case("2-scalar")
@pytest.mark.parametrize(
    "values",
    [ad.MatrixValues(1.0), ad.MatrixValues(0.5, "rademacher"), ad.ScalarValues(0.7)],
    ids=["gaussian-span", "rademacher-matrix", "scalar"],
)
@pytest.mark.parametrize("n_tokens", [2, 6])
def test_carried_noise_is_the_layer_drawn_noise(values, n_tokens):
    """The trajectory draws layer n + 1's noise while running layer n; running the layers
    one by one (each drawing its own from fold_in(key, n)) gives the same path."""
    model = ad.DiscreteTransformer(
        ad.Attention(2.0), values, depth=10, saveat=ad.SaveAt(3.0, ts=(0.0, 1.0, 2.5, 3.0))
    )
    key = jax.random.key(11)
    x = sphere_points(2, n_tokens, 4)
    saves = jax.jit(lambda x: model.trajectory(x, key=key))(x)
    layer = jax.jit(lambda x, n: model.layer(x, n, key=key))
    manual, done = [], 0
    for stop in model.save_layers:
        for n in range(done, int(stop)):
            x = layer(x, np.int32(n))
        done = int(stop)
        manual.append(x)
    # Same numbers, possibly fused differently by XLA: equal to float32 rounding.
    np.testing.assert_allclose(saves, np.stack(manual), rtol=0, atol=2e-5)


def test_values_apply_is_draw_then_apply():
    key = jax.random.key(4)
    a = np.random.default_rng(5).standard_normal((3, 5)).astype(np.float32)
    for values in (ad.MatrixValues(1.3, drift=0.2), ad.ScalarValues(0.4), ad.DeterministicValues()):
        # Both sides in one compiled program (as in the layer loop; eagerly every operation
        # of the hash would compile on its own).
        @eqx.filter_jit
        def both(values, a, key):
            noise = values.draw_noise(key, 3, 5, a.dtype)
            return values.apply(a, key=key, depth=7), values.apply_noise(a, noise, depth=7)

        np.testing.assert_array_equal(*both(values, a, key))


class _HalfValues(ad.AbstractValues):
    """A user's value operator that implements ``apply`` only: V_n = I/(2L)."""

    def apply(self, attention_out, *, key, depth):
        del key
        return attention_out / (2 * depth)

    @property
    def noise(self) -> str:
        return "none"


class _NoValues(ad.AbstractValues):
    @property
    def noise(self) -> str:
        return "none"


def test_a_value_operator_with_apply_only_runs_in_the_layer_loop():
    x = sphere_points(2, 3, 4)
    custom = ad.DiscreteTransformer(ad.Attention(1.0), _HalfValues(), depth=20)
    # I/(2L) at depth L is I/L' at depth L' = 2L over half the horizon per layer: compare
    # with the deterministic model's layer at depth 2L, applied the same number of times.
    reference = ad.DiscreteTransformer(ad.Attention(1.0), ad.DeterministicValues(), depth=40)
    key = jax.random.key(0)
    a = np.asarray(jax.jit(lambda x: custom.trajectory(x, key=key))(x))[-1]
    # The reference layer as one program (op by op, each op compiles), the same for every n.
    layer = jax.jit(lambda x, n: reference.layer(x, n, key=key))
    b = x
    for n in range(custom.n_layers):
        b = layer(b, np.int32(n))
    np.testing.assert_allclose(a, b, atol=2e-6)


def test_a_value_operator_without_apply_is_refused():
    with pytest.raises(NotImplementedError, match="must implement apply"):
        _NoValues().apply(jnp.ones((2, 3)), key=jax.random.key(0), depth=10)
