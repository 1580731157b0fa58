"""Small dense linear algebra on one configuration, written for vmap."""

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

#: Sums over an axis at most this long are written as a tree of adds of its slices. Under
#: ``vmap`` the trajectory axis comes first, so a reduction over a tiny minor axis (d = 4
#: coordinates, N = 2 keys) is a loop XLA's CPU backend runs a few elements at a time;
#: adds of slices are elementwise over the whole batch and fuse with their neighbours
#: (the attention of N = 2, d = 4 runs 2x faster). Longer axes keep ``jnp.sum``.
SMALL_AXIS = 8


def _small_reduce(x: Array, axis: int, keepdims: bool, combine, reduce) -> Array:
    """``reduce(x, axis)``, as a pairwise tree of ``combine`` over the slices when the axis
    is at most :data:`SMALL_AXIS` long."""
    axis = axis % x.ndim
    n = x.shape[axis]
    if n == 0 or n > SMALL_AXIS:
        return reduce(x, axis=axis, keepdims=keepdims)
    parts = [jax.lax.index_in_dim(x, i, axis, keepdims=keepdims) for i in range(n)]
    while len(parts) > 1:
        pairs = [combine(a, b) for a, b in zip(parts[::2], parts[1::2], strict=False)]
        parts = pairs + parts[len(pairs) * 2 :]
    return parts[0]


def small_sum(x: Array, axis: int = -1, *, keepdims: bool = False) -> Array:
    """``jnp.sum(x, axis, keepdims=keepdims)``, unrolled (pairwise) for short axes."""
    return _small_reduce(x, axis, keepdims, jnp.add, jnp.sum)


def small_max(x: Array, axis: int = -1, *, keepdims: bool = False) -> Array:
    """``jnp.max``, unrolled for short axes like :func:`small_sum`."""
    return _small_reduce(x, axis, keepdims, jnp.maximum, jnp.max)


#: Below this many multiply-adds per product, contractions are written as broadcast-and-sum.
#: Under ``vmap`` a tiny matmul becomes a batched dot that XLA's CPU backend runs one small
#: matrix at a time; the elementwise form fuses and vectorises over the batch (2-3× faster
#: for N = 2, d = 4). Large products keep the dot, which is better on every backend.
SMALL_PRODUCT = 512

#: Contractions over at most this many terms are broadcast-and-sum at any size. A dot
#: contracting over d ≤ 4 coordinates keeps XLA's CPU backend on a poor path as N grows
#: (N = 50 tokens in d = 4: 2.1× faster as sums; d = 3: 1.6×; N = 20, d = 4: 1.13×;
#: d = 8 unchanged or slower, 2026-11-23, full route in the estimator).
SMALL_CONTRACTION = 4


def dot(a: Float[Array, "*b m k"], b: Float[Array, "*b k n"]) -> Float[Array, "*b m n"]:
    """``a @ b`` in the operands' full precision.

    JAX's default precision lets a GPU's matrix units round float32 operands to TF32 (a
    10-bit mantissa): on an H100 that moved cosines near 1 by ~10⁻³ (closed-form slopes
    off by 6·10⁻⁵ relative, the reduced and full routes apart in law). ``HIGHEST`` asks for
    float32 arithmetic; on CPU the two precisions are the same arithmetic."""
    return jnp.matmul(a, b, precision=jax.lax.Precision.HIGHEST)


def matmul(a: Float[Array, "*b m k"], b: Float[Array, "*b k n"]) -> Float[Array, "*b m n"]:
    """``a @ b`` (batched over leading axes), picking the fastest form for the size (a
    sum of products for small products and short contractions); the dot is :func:`dot`
    (full precision)."""
    m, k = a.shape[-2:]
    n = b.shape[-1]
    if m * k * n <= SMALL_PRODUCT or k <= SMALL_CONTRACTION:
        return small_sum(a[..., :, :, None] * b[..., None, :, :], axis=-2)
    return dot(a, b)


def lq(x: Float[Array, "N w"]) -> Float[Array, "N N"]:
    """A lower-triangular C with ``x = C Q`` for some Q with orthonormal rows (Householder).

    Row k is reflected onto its first free coordinate by ``H_k = I − 2 v vᵀ/(vᵀv)``,
    ``v = a + sign(a₀)|a| e₀`` (a: row k beyond column k), and every later row is hit by the
    same reflection. ``|v| ≥ |a|``, so no reflection divides by a cancelled quantity: each
    H_k is orthogonal to working precision whatever its rows hold, and C is the exact
    factor of an ``x + E`` with ``|E| ≤ c·ε_mach·|x|`` (Householder's backward stability).
    A later row close to an earlier one (or to its antipode) keeps its offset with absolute
    error ε_mach·|x|: the gaps ``1 ∓ z = |c_i ∓ c_j|²/2`` have relative precision
    ε_mach/√(1 ∓ z), as in the two-token chain.

    Gram–Schmidt, used here before, loses this when a row lies in the span of the earlier
    ones to rounding (tokens clustered to float32 resolution): its residual is then a
    rounding error of the projection coefficient, i.e. parallel to the earlier directions,
    and normalising it gave a "new" direction almost equal to an old one, which broke
    clusters apart (issue 8). The diagonal is made non-negative (a sign flip of each frame
    direction), so a row inside the span of the earlier ones has a zero diagonal.
    """
    n_tokens, width = x.shape
    r = x
    for k in range(n_tokens):
        a = r[k, k:]
        norm = jnp.sqrt(small_sum(a * a))
        sign = jnp.where(a[0] < 0, -1.0, 1.0).astype(x.dtype)
        v = a.at[0].add(sign * norm)
        vv = norm * (norm + jnp.abs(a[0]))  # vᵀv / 2, without cancellation
        # Below the smallest normal float, vᵀv is rounding noise and 1/vᵀv overflows to
        # inf (then NaN): the row lies in the earlier span to working precision and is
        # not reflected, as when vᵀv is exactly 0. XLA's CPU flushes subnormals, so there
        # vᵀv is 0 already; an H100 kept vᵀv = 1.7·10⁻⁴² for a cluster 10⁻⁹ apart
        # (test_lq_resolves_clusters_and_antipodes_at_every_scale[9] gave NaN there).
        usable = vv >= jnp.finfo(x.dtype).tiny
        scale = jnp.where(usable, 1 / jnp.where(usable, vv, 1), 0)
        tail = r[k:, k:]
        tail = tail - (scale * small_sum(tail * v[None, :], axis=1))[:, None] * v[None, :]
        # Row k itself is exactly (−sign·|a|, 0, …, 0) after its reflection.
        pivot = jnp.zeros((width - k,), x.dtype).at[0].set(-sign * norm)
        r = r.at[k:, k:].set(tail.at[0].set(pivot))
    c = r[:, :n_tokens]
    flip = jnp.where(jnp.diagonal(c) < 0, -1.0, 1.0).astype(x.dtype)
    return c * flip[None, :]
