"""``jax.random.fold_in``, ``split`` and ``normal``, bit for bit, with the hash unrolled.

JAX lowers its Threefry-2x32 hash on CPU as a rolled loop of 5 iterations (to keep compile
times short). Inside a layer loop that loop cannot fuse with its neighbours: every
iteration is a separate kernel over the whole batch, and the per-layer draw of a few
Gaussians costs more than the layer's arithmetic (262 ns of a 620 ns layer at N = 2,
d = 4). :func:`threefry2x32` is the same hash written out (20 rounds), so XLA fuses it with
the key derivation before and the Gaussian transform after. The functions here return
exactly what JAX's do (the tests compare them bit for bit), so the numbers of a seed do not
change; keys of another implementation (``rbg``, ``unsafe_rbg``) and
``jax_threefry_partitionable=False`` fall back to ``jax.random`` itself.

Random numbers are float32 numbers whatever the working precision: asked for float64,
these functions draw float32 and cast (:data:`DRAW_DTYPE`). A float64 run (``x64``) thus
computes the same paths as a float32 run of the same seed, with less rounding, which is
what lets the estimator rerun a trajectory that float32 merged as *that* trajectory in
float64 (``on_merged="auto"``); an independent float64 path, selected because float32
merged it, would bias the estimate.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Key, PRNGKeyArray

_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_PARITY = np.uint32(0x1BD11BDA)
#: The largest float32 above −1: ``jax.random.normal`` draws its uniform on [this, 1).
_LOW = np.nextafter(np.float32(-1), np.float32(0))
#: The precision of every random number (see the module docstring).
DRAW_DTYPE = jnp.float32


def wider(dtype) -> bool:
    """Whether ``dtype`` is a float other than :data:`DRAW_DTYPE`: numbers for it are drawn
    as float32 and cast."""
    dtype = jnp.dtype(dtype)
    return bool(jnp.issubdtype(dtype, jnp.floating)) and dtype != jnp.dtype(DRAW_DTYPE)


def _rotate_left(v: Array, r: int) -> Array:
    return (v << np.uint32(r)) | (v >> np.uint32(32 - r))


def threefry2x32(k1: Array, k2: Array, x1: Array, x2: Array) -> tuple[Array, Array]:
    """Threefry-2x32 (20 rounds) of the counter pair (x1, x2) under the key (k1, k2), all
    uint32 and broadcast together: the function of ``jax.extend.random.threefry2x32_p``."""
    ks = (k1, k2, k1 ^ k2 ^ _PARITY)
    x1, x2 = x1 + ks[0], x2 + ks[1]
    for i in range(5):
        for r in _ROTATIONS[i % 2]:
            x1 = x1 + x2
            x2 = x1 ^ _rotate_left(x2, r)
        x1 = x1 + ks[(i + 1) % 3]
        x2 = x2 + ks[(i + 2) % 3] + np.uint32(i + 1)
    return x1, x2


def _is_threefry(key: PRNGKeyArray) -> bool:
    """Whether ``key`` is a typed Threefry key under the partitionable bit layout (the
    only case the unrolled functions reproduce)."""
    return (
        jnp.issubdtype(key.dtype, jax.dtypes.prng_key)
        and str(jax.random.key_impl(key)) == "threefry2x32"
        and bool(jax.config.jax_threefry_partitionable)  # pyright: ignore[reportAttributeAccessIssue]
    )


def fold_in(key: PRNGKeyArray, data: Array | int) -> PRNGKeyArray:
    """``jax.random.fold_in(key, data)`` for one key and a 32-bit ``data``."""
    if not _is_threefry(key) or jnp.ndim(key):
        return jax.random.fold_in(key, data)
    k = jax.random.key_data(key)
    # fold_in hashes the counter pair (high, low) = (0, data) of a 32-bit datum.
    # A Python int may exceed int32 (stream constants up to 2³² − 1): take it as uint32.
    word = (
        jnp.asarray(np.uint32(data))
        if isinstance(data, int)
        else jnp.asarray(data).astype(jnp.uint32)
    )
    a, b = threefry2x32(k[0], k[1], jnp.zeros((), jnp.uint32), word)
    return jax.random.wrap_key_data(jnp.stack([a, b]), impl="threefry2x32")


def split(key: PRNGKeyArray, num: int = 2) -> Key[Array, " num"]:
    """``jax.random.split(key, num)`` for one key: key i hashes the counter pair (0, i),
    as ``fold_in(key, i)`` does, all in one unrolled hash."""
    if not _is_threefry(key) or jnp.ndim(key):
        return jax.random.split(key, num)
    k = jax.random.key_data(key)
    count = jnp.arange(num, dtype=jnp.uint32)
    a, b = threefry2x32(k[0], k[1], jnp.zeros_like(count), count)
    return jax.random.wrap_key_data(jnp.stack([a, b], axis=-1), impl="threefry2x32")


def bits(key: PRNGKeyArray, shape: tuple[int, ...]) -> Array:
    """``jax.random.bits(key, shape)`` (uint32) of a Threefry key: word i (row-major) is
    the xor of both outputs of the block with counters (0, i)."""
    k = jax.random.key_data(key)
    count = jnp.arange(math.prod(shape), dtype=jnp.uint32).reshape(shape)
    b1, b2 = threefry2x32(k[0], k[1], jnp.zeros_like(count), count)
    return b1 ^ b2


def uniform(
    key: PRNGKeyArray, shape: tuple[int, ...], dtype=jnp.float32, minval=0.0, maxval=1.0
) -> Array:
    """``jax.random.uniform(key, shape, dtype, minval, maxval)`` (Python-number bounds)."""
    if wider(dtype):
        return uniform(key, shape, DRAW_DTYPE, minval, maxval).astype(dtype)
    if not _fast(key, dtype):
        return jax.random.uniform(key, shape, dtype, minval=minval, maxval=maxval)
    return uniform_from_words(bits(key, shape), minval, maxval)


def symmetric_uniform(key: PRNGKeyArray, shape: tuple[int, ...], dtype=jnp.float32) -> Array:
    """``jax.random.uniform(key, shape, dtype, minval=−1 + ulp, maxval=1)``: the uniform
    that ``jax.random.normal`` transforms."""
    return uniform(key, shape, dtype, _LOW, 1.0)


def rademacher(key: PRNGKeyArray, shape: tuple[int, ...], dtype=jnp.float32) -> Array:
    """``jax.random.rademacher(key, shape, dtype)``: ±1 from ``uniform < ½``."""
    if wider(dtype):
        return rademacher(key, shape, DRAW_DTYPE).astype(dtype)
    if not _fast(key, dtype):
        return jax.random.rademacher(key, shape, dtype)
    heads = uniform(key, shape) < np.float32(0.5)
    return (2 * heads.astype(dtype) - 1).astype(dtype)


def unit_from_words(words: Array) -> Array:
    """``jax.random.uniform`` on [0, 1) (float32) of these uint32 words (their top 23 bits)."""
    mantissa = (words >> np.uint32(32 - 23)) | np.uint32(0x3F800000)
    return jax.lax.bitcast_convert_type(mantissa, jnp.float32) - np.float32(1)


def uniform_from_words(
    words: Array, minval: float | np.floating, maxval: float | np.floating
) -> Array:
    """``jax.random.uniform(minval=, maxval=)`` (float32) of these uint32 words."""
    low, high = np.float32(minval), np.float32(maxval)
    return jnp.maximum(low, unit_from_words(words) * (high - low) + low)


def symmetric_from_words(words: Array) -> Array:
    """``jax.random.uniform(minval=−1 + ulp, maxval=1)`` (float32) of these uint32 words."""
    return uniform_from_words(words, _LOW, 1.0)


def normal(key: PRNGKeyArray, shape: tuple[int, ...], dtype=jnp.float32) -> Array:
    """``jax.random.normal(key, shape, dtype)``: √2·erfinv of :func:`symmetric_uniform`."""
    if wider(dtype):
        return normal(key, shape, DRAW_DTYPE).astype(dtype)
    if not _fast(key, dtype):
        return jax.random.normal(key, shape, dtype)
    return np.float32(math.sqrt(2)) * jax.lax.erf_inv(symmetric_uniform(key, shape, dtype))


def _fast(key: PRNGKeyArray, dtype) -> bool:
    """Whether the unrolled route reproduces ``jax.random`` here: one Threefry key
    (vmap for batches) and float32."""
    return _is_threefry(key) and not jnp.ndim(key) and jnp.dtype(dtype) == jnp.float32
