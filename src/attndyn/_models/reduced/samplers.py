"""Exact samplers of the reduced route's random numbers: Gaussians, chi variates, Gamma.

Every variate is exact in law (rejection is never truncated) and a trajectory's numbers
depend on its own key only, whatever the batch around it: the samplers are written for a
batch of keys so that the two-token chain can hash two Threefry words per block.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Key, PRNGKeyArray

from ..._core.random import (
    fold_in,
    symmetric_from_words as symmetric_words,
    symmetric_uniform,
    threefry2x32,
    unit_from_words as unit_uniform,
)

#: Chi-square variates with at most this many degrees of freedom are sums of exponentials
#: (k/2 logarithms, plus one squared Gaussian if k is odd); larger ones use
#: Marsaglia–Tsang, which is exact but rejects (rarely, for large k).
SMALL_DOF_MAX = 8

#: Marsaglia–Tsang candidates drawn up front per gamma variate; the rare variate with all of
#: them rejected draws more in a loop (so the law is exact, never truncated).
GAMMA_CANDIDATES = 3

#: The two-token chain draws the random numbers of this many consecutive layers at once,
#: from the key ``fold_in(trajectory key, block index)`` (layer n is row n mod LAYER_BLOCK
#: of block n // LAYER_BLOCK). A constant of the model, never of the batch: the numbers of
#: a trajectory depend on its key only, whatever the chunk, device count or save times.
LAYER_BLOCK = 10

#: In the two-token chain, chi-square variates with at most this many degrees of freedom
#: are sums of exponentials; larger ones use the one-word Marsaglia–Tsang of
#: :func:`two_token_block` (one Gaussian per candidate; its acceptance uniform starts
#: from the 9 bits the Gaussian leaves unused).
CHAIN_SMALL_DOF_MAX = 4

#: Low bits of a 32-bit word that a float32 uniform leaves unused (it keeps the top 23).
_SPARE_BITS = 9
_SPARE = 2**_SPARE_BITS


def normals_uniforms(key: PRNGKeyArray, n: int, dtype) -> tuple[Array, Array]:
    """n Gaussians and the n uniforms on (0, 1) they were made from (one draw of bits).

    This is ``jax.random.normal``'s own construction (√2·erfinv of a uniform on (−1, 1));
    the matching uniform (v + 1)/2 lies in (0, 1) and is used, for other variates, only
    where the Gaussian is not.
    """
    v = symmetric_uniform(key, (n,), dtype)
    return math.sqrt(2) * jax.lax.erf_inv(v), 0.5 * (v + 1)


def gamma_mt(key: PRNGKeyArray, alpha: float, shape: tuple[int, ...], dtype) -> Array:
    """Gamma(alpha) for alpha ≥ 1 by Marsaglia–Tsang, exact (rejection never truncated)."""
    d = alpha - 1.0 / 3.0
    c = 1.0 / math.sqrt(9.0 * d)
    size = int(np.prod(shape, dtype=np.int64))

    def candidates(k, count):
        x, u = normals_uniforms(k, 2 * count * size, dtype)
        x = x[: count * size].reshape(count, size)
        u = u[count * size :].reshape(count, size)
        v = (1 + c * x) ** 3
        ok = (v > 0) & (jnp.log(u) < 0.5 * x**2 + d - d * v + d * jnp.log(jnp.where(v > 0, v, 1)))
        return ok, d * v

    ok, val = candidates(key, GAMMA_CANDIDATES)
    # The first accepted candidate: i.i.d. candidates make this exact.
    first = jnp.argmax(ok, axis=0)
    accepted = jnp.any(ok, axis=0)
    value = jnp.take_along_axis(val, first[None], axis=0)[0]

    def cond(state):
        _, done, _ = state
        return ~jnp.all(done)

    def body(state):
        i, done, value = state
        ok2, val2 = candidates(fold_in(key, i), 1)
        take = ~done & ok2[0]
        return i + 1, done | take, jnp.where(take, val2[0], value)

    _, _, value = jax.lax.while_loop(cond, body, (jnp.asarray(1, jnp.int32), accepted, value))
    return value.reshape(shape)


def variates(key: PRNGKeyArray, n_normal: int, dofs: tuple[int, ...], dtype) -> tuple[Array, Array]:
    """``n_normal`` Gaussians and independent χ variates with the given degrees of freedom.

    Gaussians and the small-dof chi-squares share one draw of uniforms (one key, no extra
    hashing); large-dof chi-squares come from Marsaglia–Tsang on keys folded from ``key``.
    """
    small = [k for k in dofs if k <= SMALL_DOF_MAX]
    n_log = sum(k // 2 for k in small)
    n_odd = sum(k % 2 for k in small)
    v = jax.random.uniform(
        key, (n_normal + n_odd + n_log,), dtype, minval=np.nextafter(np.float32(-1), 0), maxval=1
    )
    gauss = math.sqrt(2) * jax.lax.erf_inv(v[: n_normal + n_odd])
    logs = jnp.log1p(v[n_normal + n_odd :]) - math.log(2)  # log U, U = (v + 1)/2 in (0, 1)
    normals = gauss[:n_normal]
    chi2 = []
    i_log, i_odd = 0, n_normal
    for i, k in enumerate(dofs):
        if k <= SMALL_DOF_MAX:
            # −2 Σ log U over k//2 uniforms is χ² with 2·(k//2) dof; add Z² when k is odd.
            value = -2 * jnp.sum(logs[i_log : i_log + k // 2]) if k >= 2 else jnp.zeros((), dtype)
            i_log += k // 2
            if k % 2:
                value = value + gauss[i_odd] ** 2
                i_odd += 1
        else:
            value = 2 * gamma_mt(fold_in(key, i + 1), k / 2, (), dtype)
        chi2.append(value)
    return normals, jnp.sqrt(jnp.stack(chi2))


def random_words(keys: Key[Array, " batch"], n: int, stream: int | Array = 0) -> Array:
    """``n`` random 32-bit words per key of the batch ``keys``, shape ``(n, batch)``.

    ``stream`` (an int, or one per key) selects independent streams. For Threefry keys the
    words are both outputs of the blocks ``(i, stream)``, i < ⌈n/2⌉, of Threefry-2x32
    under each key: half the hashing of ``jax.random.bits``, which (with
    ``jax_threefry_partitionable``) spends a block on each word. Other implementations draw
    ``jax.random.bits`` from ``fold_in(key, stream)``. The batch axis is last so that the
    chain's arithmetic runs on contiguous rows.
    """
    batch = keys.shape[0]
    if str(jax.random.key_impl(keys)) == "threefry2x32":
        half = (n + 1) // 2
        shape = (half, batch)
        k = jax.random.key_data(keys)
        streams = jnp.broadcast_to(jnp.asarray(stream, jnp.uint32), (batch,))
        out = threefry2x32(
            jnp.broadcast_to(k[:, 0], shape),
            jnp.broadcast_to(k[:, 1], shape),
            jnp.broadcast_to(jnp.arange(half, dtype=jnp.uint32)[:, None], shape),
            jnp.broadcast_to(streams, shape),
        )
        return jnp.concatenate(out)[:n]
    if isinstance(stream, int) and stream == 0:
        sub = keys
    else:
        streams = jnp.broadcast_to(jnp.asarray(stream, jnp.uint32), (batch,))
        sub = jax.vmap(fold_in)(keys, streams)
    return jax.vmap(lambda k: jax.random.bits(k, (n,), jnp.uint32), out_axes=1)(sub)


def mt_candidate(words: Array, d: Array) -> tuple[Array, Array, Array]:
    """One Marsaglia–Tsang candidate per word: (value d·v, status, g − q).

    The candidate is ``x``, the Gaussian of the word's top 23 bits, and is accepted when
    ``u < h(x) = exp(x²/2 + d − d·v + d·log v)``, v = (1 + c·x)³ (and v > 0). The uniform u
    is ``1 − (q + r)/512`` with q the word's 9 spare low bits (independent of its top 23)
    and r an independent uniform on [0, 1): u < h ⟺ q + r > g, g = 512·(1 − h). Most
    candidates are decided by q alone (q > g: accepted, status 0; q + 1 ≤ g: rejected,
    status 2); the rest (q ≤ g < q + 1, status 1) need r: accepted iff r > g − q.
    """
    c = jax.lax.rsqrt(9 * d)
    x = math.sqrt(2) * jax.lax.erf_inv(symmetric_words(words))
    q = (words & jnp.uint32(_SPARE - 1)).astype(jnp.float32)
    v = (1 + c * x) ** 3
    positive = v > 0
    log_h = 0.5 * x**2 + d - d * v + d * jnp.log(jnp.where(positive, v, 1))
    g = jnp.where(positive, -_SPARE * jnp.expm1(jnp.minimum(log_h, 0)), jnp.inf)
    status = jnp.where(q > g, 0, jnp.where(q + 1 <= g, 2, 1)).astype(jnp.int32)
    return d * v, status, g - q


def gamma_slots(keys: Key[Array, " batch"], words: Array, d: Array) -> Array:
    """Gamma(d + 1/3) by Marsaglia–Tsang, exact; ``words`` (slots, batch) first candidates.

    ``d`` has one entry per slot. Slots whose first candidate is not decided by its own
    word are finished one at a time per trajectory, in slot order, each step hashing one
    fresh Threefry block of that trajectory's key (streams 1, 2, …: two words, used as r
    or as a new candidate and its r). Every slot thus sees i.i.d. candidates and keeps the
    first accepted one: the law is Gamma exactly (no truncation), and which words a
    trajectory uses depends on its own key only. The loop runs while any trajectory of
    the batch has an open slot: a few steps per block of layers, about one word each.
    """
    value, status, gap = mt_candidate(words, d[:, None])
    lanes = jnp.arange(words.shape[1])

    def cond(state):
        return jnp.any(state[1] != 0)

    def body(state):
        value, status, gap, i = state
        open_ = status != 0
        active = jnp.any(open_, axis=0)
        s = jnp.argmax(open_, axis=0)
        w = random_words(keys, 2, i + 1)
        new_value, new_status, new_gap = mt_candidate(w[0], d[s])
        # An undecided slot (status 1) uses the fresh word as r; a rejected one (2) tries a
        # new candidate, and decides it with the second word if its spare bits do not.
        pending = status[s, lanes] == 1
        r = jnp.where(pending, unit_uniform(w[0]), unit_uniform(w[1]))
        gap_s = jnp.where(pending, gap[s, lanes], new_gap)
        cand = jnp.where(pending, 1, new_status)
        decided = jnp.where(cand == 1, jnp.where(r > gap_s, 0, 2), cand)
        new_value = jnp.where(pending, value[s, lanes], new_value)
        value = value.at[s, lanes].set(jnp.where(active, new_value, value[s, lanes]))
        status = status.at[s, lanes].set(jnp.where(active, decided, status[s, lanes]))
        return value, status, gap, i + active.astype(jnp.uint32)

    i0 = jnp.zeros(words.shape[1], jnp.uint32)
    value, *_ = jax.lax.while_loop(cond, body, (value, status, gap, i0))
    return value


def two_token_block(
    keys: Key[Array, " batch"], dim: int, dtype, n_layers: int = LAYER_BLOCK
) -> tuple[Array, Array]:
    """The two-token chain's variates for ``n_layers`` layers, one key per trajectory.

    Per layer: 5 Gaussians (B and the Bartlett entry) and the chi variates χ_{d−2},
    χ_{d−3}, shapes ``(n_layers, 5, batch)`` and ``(n_layers, 2, batch)``. All come from
    one draw of ``n_layers × width`` words per key (:func:`random_words`): Gaussians as in
    ``jax.random.normal``; χ²_k for k ≤ CHAIN_SMALL_DOF_MAX as −2 Σ log U (+ Z² for odd
    k); larger k as twice a Gamma(k/2) from :func:`gamma_slots` (one word per variate,
    plus the rare fix-up). The variates are float32 numbers (cast to ``dtype``).

    At d = 2 the complement is empty (Wishart_2(0) = 0): the Bartlett entry and both chi
    variates are 0, and only B's 4 Gaussians are drawn.
    """
    batch = keys.shape[0]
    if dim == 2:
        words = random_words(keys, n_layers * 4).reshape(n_layers, 4, batch)
        gauss = math.sqrt(2) * jax.lax.erf_inv(symmetric_words(words))
        zeros = jnp.zeros((n_layers, 1, batch), jnp.float32)
        return jnp.concatenate([gauss, zeros], axis=1).astype(dtype), jnp.zeros(
            (n_layers, 2, batch), dtype
        )
    dofs = (dim - 2, dim - 3)
    small = [k for k in dofs if k <= CHAIN_SMALL_DOF_MAX]
    large = [k for k in dofs if k > CHAIN_SMALL_DOF_MAX]
    n_gauss = 5 + sum(k % 2 for k in small)
    n_log = sum(k // 2 for k in small)
    width = n_gauss + len(large) + n_log
    words = random_words(keys, n_layers * width).reshape(n_layers, width, batch)
    gauss = math.sqrt(2) * jax.lax.erf_inv(symmetric_words(words[:, :n_gauss]))
    logs = jnp.log1p(symmetric_words(words[:, n_gauss + len(large) :])) - math.log(2)
    gamma = None
    if large:
        d = np.asarray([k / 2 - 1 / 3 for k in large], np.float32)
        mt = words[:, n_gauss : n_gauss + len(large)].reshape(-1, batch)
        gamma = gamma_slots(keys, mt, jnp.asarray(np.tile(d, n_layers)))
        gamma = gamma.reshape(n_layers, len(large), batch)
    chi2 = []
    i_log, i_odd, i_large = 0, 5, 0
    for k in dofs:
        if k > CHAIN_SMALL_DOF_MAX:
            assert gamma is not None
            chi2.append(2 * gamma[:, i_large])
            i_large += 1
            continue
        value = jnp.zeros((n_layers, batch), jnp.float32)
        if k >= 2:
            value = -2 * jnp.sum(logs[:, i_log : i_log + k // 2], axis=1)
        i_log += k // 2
        if k % 2:
            value = value + gauss[:, i_odd] ** 2
            i_odd += 1
        chi2.append(value)
    chi = jnp.sqrt(jnp.stack(chi2, axis=1))
    return gauss[:, :5].astype(dtype), chi.astype(dtype)
