"""Exact-in-law reduction of Gaussian-value transformers to the span of the tokens.

With Q = K = I (one head) the attention matrix depends on the Gram matrix of the tokens
only, every scheme of spec §2 acts row by row through norms and linear combinations, and
a Gaussian value matrix M (i.i.d. N(0, 1) entries) is invariant in law under rotations. Write
the (normalised) tokens as Θ = C O with O (N × d) orthonormal rows and C (N × N) their
coordinates in that frame. The attention output is A = A_O O, and the noise term

    A Mᵀ = A_O (O Mᵀ) = A_O Y,   Y = O Mᵀ  (N × d, i.i.d. N(0, 1): O has orthonormal rows).

Split Y along O and its orthogonal complement: ``Y = B O + Y_⊥`` with B = Y Oᵀ (N × N,
i.i.d. N(0, 1)) independent of Y_⊥, whose Gram ``Y_⊥ Y_⊥ᵀ`` is Wishart_N(d − N, I). Writing
``Y_⊥ = L_W Q_H`` (Q_H orthonormal rows in the complement, L_W lower triangular), the rows
of the new state have coordinates ``[C + …A_O B…, …A_O L_W…]`` in the frame [O; Q_H]:
N × 2N numbers. One LQ decomposition brings them back to an N × N lower-triangular C'
in a new frame. Nothing here depends on the frame, and the next layer's M is independent of
everything so far, so the sequence of Gram matrices has exactly the law of the full
simulation; every rotation-invariant observable (overlaps, clustering classes, cosines)
does too.

Per layer this draws N² Gaussians for B plus, for L_W, either the N × (d − N) Gaussians of
Y_⊥ itself (when d − N is small) or a Bartlett factor (N(N−1)/2 Gaussians and N chi
variates): a few numbers instead of d². For N = 2 the state is one angle in effect (C is
[[1, 0], [cos φ, sin φ]] under Post-LN), i.e. a scalar Markov chain of the overlap.

Precision near ±1: the state is the coordinates themselves, not the Gram matrix, and the
LQ step subtracts nearly equal vectors before squaring, so ``1 ∓ z = |c_i ∓ c_j|²/2`` keeps
relative precision ~ ε_mach/√(1 ∓ z): pairs 10⁻⁶ (even 10⁻¹⁰) from ±1 stay resolved, where
the full float32 simulation bottoms out near 10⁻⁷ (see :func:`pair_gaps`).
"""

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.random import threefry2x32_p
from jaxtyping import Array, Float, PRNGKeyArray

from ._attention import Attention, matmul
from ._discrete import DiscreteTransformer
from ._dynamics import AbstractDynamics
from ._errors import ParameterError
from ._schemes import NGPT, MixLN, PeriLN, PostLN, PreLN, SqrtScaling
from ._values import MatrixValues

#: Schemes known to act row by row through norms and linear combinations of x_i and
#: V_n A_i (so that they commute with rotations). A user-defined scheme is not assumed to.
EQUIVARIANT_SCHEMES = (PostLN, PreLN, MixLN, PeriLN, NGPT, SqrtScaling)

#: Up to this many complement dimensions d − N, Y_⊥ is drawn directly (N·(d − N) Gaussians);
#: beyond it the Bartlett factor is cheaper (measured on CPU: a chi variate costs about
#: as much as 6 Gaussians with the samplers below).
DIRECT_COMPLEMENT_MAX = 6

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
#: :func:`_two_token_block` (one Gaussian per candidate; its acceptance uniform starts
#: from the 9 bits the Gaussian leaves unused).
CHAIN_SMALL_DOF_MAX = 4

#: Low bits of a 32-bit word that a float32 uniform leaves unused (it keeps the top 23).
_SPARE_BITS = 9
_SPARE = 2**_SPARE_BITS
_LOW = np.nextafter(np.float32(-1), np.float32(0))


def reduction_blocker(model: AbstractDynamics, n_tokens: int, dim: int) -> str | None:
    """Why the reduced route does not apply to ``model`` at (N, d), or ``None`` if it does."""
    if type(model) is not DiscreteTransformer:
        # A subclass may override trajectory/layer with anything.
        return "the model is not a plain DiscreteTransformer"
    if not n_tokens < dim:
        return f"N = {n_tokens} is not below d = {dim}"
    att = model.attention
    if att.query is not None or att.key_matrix is not None:
        return "Q or K is not the identity"
    if att.n_heads != 1:
        return "multi-head attention acts on coordinate blocks (not rotation-invariant)"
    values = model.values
    if type(values) is not MatrixValues or values.distribution != "gaussian":
        return "the values are not full Gaussian matrix noise"
    if type(model.scheme) not in EQUIVARIANT_SCHEMES:
        return f"the scheme {type(model.scheme).__name__} is not known to be rotation-equivariant"
    return None


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
        norm = jnp.sqrt(jnp.sum(a * a))
        sign = jnp.where(a[0] < 0, -1.0, 1.0).astype(x.dtype)
        v = a.at[0].add(sign * norm)
        vv = norm * (norm + jnp.abs(a[0]))  # vᵀv / 2, without cancellation
        scale = jnp.where(vv > 0, 1 / jnp.where(vv > 0, vv, 1), 0)
        tail = r[k:, k:]
        tail = tail - (scale * jnp.sum(tail * v, axis=1))[:, None] * v[None, :]
        # Row k itself is exactly (−sign·|a|, 0, …, 0) after its reflection.
        pivot = jnp.zeros((width - k,), x.dtype).at[0].set(-sign * norm)
        r = r.at[k:, k:].set(tail.at[0].set(pivot))
    c = r[:, :n_tokens]
    flip = jnp.where(jnp.diagonal(c) < 0, -1.0, 1.0).astype(x.dtype)
    return c * flip[None, :]


def pair_gaps(c: Float[Array, "N k"]) -> tuple[Float[Array, "N N"], Float[Array, "N N"]]:
    """``1 − ⟨θ_i, θ_j⟩`` and ``1 + ⟨θ_i, θ_j⟩`` without cancellation: |θ_i ∓ θ_j|²/2."""
    theta = c / jnp.linalg.norm(c, axis=-1, keepdims=True)
    diff = theta[:, None, :] - theta[None, :, :]
    summ = theta[:, None, :] + theta[None, :, :]
    return 0.5 * jnp.sum(diff**2, axis=-1), 0.5 * jnp.sum(summ**2, axis=-1)


def _normals_uniforms(key: PRNGKeyArray, n: int, dtype) -> tuple[Array, Array]:
    """n Gaussians and the n uniforms on (0, 1) they were made from (one draw of bits).

    This is ``jax.random.normal``'s own construction (√2·erfinv of a uniform on (−1, 1));
    the matching uniform (v + 1)/2 lies in (0, 1) and is used, for other variates, only
    where the Gaussian is not.
    """
    v = jax.random.uniform(key, (n,), dtype, minval=np.nextafter(np.float32(-1), 0), maxval=1)
    return math.sqrt(2) * jax.lax.erf_inv(v), 0.5 * (v + 1)


def _gamma_mt(key: PRNGKeyArray, alpha: float, shape: tuple[int, ...], dtype) -> Array:
    """Gamma(alpha) for alpha ≥ 1 by Marsaglia–Tsang, exact (rejection never truncated)."""
    d = alpha - 1.0 / 3.0
    c = 1.0 / math.sqrt(9.0 * d)
    size = int(np.prod(shape, dtype=np.int64))

    def candidates(k, count):
        x, u = _normals_uniforms(k, 2 * count * size, dtype)
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
        ok2, val2 = candidates(jax.random.fold_in(key, i), 1)
        take = ~done & ok2[0]
        return i + 1, done | take, jnp.where(take, val2[0], value)

    _, _, value = jax.lax.while_loop(cond, body, (jnp.asarray(1, jnp.int32), accepted, value))
    return value.reshape(shape)


def _variates(
    key: PRNGKeyArray, n_normal: int, dofs: tuple[int, ...], dtype
) -> tuple[Array, Array]:
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
            value = 2 * _gamma_mt(jax.random.fold_in(key, i + 1), k / 2, (), dtype)
        chi2.append(value)
    return normals, jnp.sqrt(jnp.stack(chi2))


def _words(keys: PRNGKeyArray, n: int, stream: int | Array = 0) -> Array:
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
        out = threefry2x32_p.bind(
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
        sub = jax.vmap(jax.random.fold_in)(keys, streams)
    return jax.vmap(lambda k: jax.random.bits(k, (n,), jnp.uint32), out_axes=1)(sub)


def _symmetric_uniform(words: Array) -> Array:
    """``jax.random.uniform(minval=nextafter(−1, 0), maxval=1)`` (float32) of these words."""
    mantissa = jnp.right_shift(words, jnp.uint32(32 - 23)) | jnp.uint32(0x3F800000)
    floats = jax.lax.bitcast_convert_type(mantissa, jnp.float32) - np.float32(1)
    return jnp.maximum(_LOW, floats * (np.float32(1) - _LOW) + _LOW)


def _unit_uniform(words: Array) -> Array:
    """``jax.random.uniform`` on [0, 1) (float32) of these words."""
    mantissa = jnp.right_shift(words, jnp.uint32(32 - 23)) | jnp.uint32(0x3F800000)
    return jax.lax.bitcast_convert_type(mantissa, jnp.float32) - np.float32(1)


def _mt_candidate(words: Array, d: Array) -> tuple[Array, Array, Array]:
    """One Marsaglia–Tsang candidate per word: (value d·v, status, g − q).

    The candidate is ``x``, the Gaussian of the word's top 23 bits, and is accepted when
    ``u < h(x) = exp(x²/2 + d − d·v + d·log v)``, v = (1 + c·x)³ (and v > 0). The uniform u
    is ``1 − (q + r)/512`` with q the word's 9 spare low bits (independent of its top 23)
    and r an independent uniform on [0, 1): u < h ⟺ q + r > g, g = 512·(1 − h). Most
    candidates are decided by q alone (q > g: accepted, status 0; q + 1 ≤ g: rejected,
    status 2); the rest (q ≤ g < q + 1, status 1) need r: accepted iff r > g − q.
    """
    c = jax.lax.rsqrt(9 * d)
    x = math.sqrt(2) * jax.lax.erf_inv(_symmetric_uniform(words))
    q = (words & jnp.uint32(_SPARE - 1)).astype(jnp.float32)
    v = (1 + c * x) ** 3
    positive = v > 0
    log_h = 0.5 * x**2 + d - d * v + d * jnp.log(jnp.where(positive, v, 1))
    g = jnp.where(positive, -_SPARE * jnp.expm1(jnp.minimum(log_h, 0)), jnp.inf)
    status = jnp.where(q > g, 0, jnp.where(q + 1 <= g, 2, 1)).astype(jnp.int32)
    return d * v, status, g - q


def _gamma_slots(keys: PRNGKeyArray, words: Array, d: Array) -> Array:
    """Gamma(d + 1/3) by Marsaglia–Tsang, exact; ``words`` (slots, batch) first candidates.

    ``d`` has one entry per slot. Slots whose first candidate is not decided by its own
    word are finished one at a time per trajectory, in slot order, each step hashing one
    fresh Threefry block of that trajectory's key (streams 1, 2, …: two words, used as r
    or as a new candidate and its r). Every slot thus sees i.i.d. candidates and keeps the
    first accepted one: the law is Gamma exactly (no truncation), and which words a
    trajectory uses depends on its own key only. The loop runs while any trajectory of
    the batch has an open slot: a few steps per block of layers, about one word each.
    """
    value, status, gap = _mt_candidate(words, d[:, None])
    lanes = jnp.arange(words.shape[1])

    def cond(state):
        return jnp.any(state[1] != 0)

    def body(state):
        value, status, gap, i = state
        open_ = status != 0
        active = jnp.any(open_, axis=0)
        s = jnp.argmax(open_, axis=0)
        w = _words(keys, 2, i + 1)
        new_value, new_status, new_gap = _mt_candidate(w[0], d[s])
        # An undecided slot (status 1) uses the fresh word as r; a rejected one (2) tries a
        # new candidate, and decides it with the second word if its spare bits do not.
        pending = status[s, lanes] == 1
        r = jnp.where(pending, _unit_uniform(w[0]), _unit_uniform(w[1]))
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


def _two_token_block(
    keys: PRNGKeyArray, dim: int, dtype, n_layers: int = LAYER_BLOCK
) -> tuple[Array, Array]:
    """The two-token chain's variates for ``n_layers`` layers, one key per trajectory.

    Per layer: 5 Gaussians (B and the Bartlett entry) and the chi variates χ_{d−2},
    χ_{d−3}, shapes ``(n_layers, 5, batch)`` and ``(n_layers, 2, batch)``. All come from
    one draw of ``n_layers × width`` words per key (:func:`_words`): Gaussians as in
    ``jax.random.normal``; χ²_k for k ≤ CHAIN_SMALL_DOF_MAX as −2 Σ log U (+ Z² for odd
    k); larger k as twice a Gamma(k/2) from :func:`_gamma_slots` (one word per variate,
    plus the rare fix-up). The variates are float32 numbers (cast to ``dtype``).
    """
    dofs = (dim - 2, dim - 3)
    small = [k for k in dofs if k <= CHAIN_SMALL_DOF_MAX]
    large = [k for k in dofs if k > CHAIN_SMALL_DOF_MAX]
    n_gauss = 5 + sum(k % 2 for k in small)
    n_log = sum(k // 2 for k in small)
    width = n_gauss + len(large) + n_log
    batch = keys.shape[0]
    words = _words(keys, n_layers * width).reshape(n_layers, width, batch)
    gauss = math.sqrt(2) * jax.lax.erf_inv(_symmetric_uniform(words[:, :n_gauss]))
    logs = jnp.log1p(_symmetric_uniform(words[:, n_gauss + len(large) :])) - math.log(2)
    gamma = None
    if large:
        d = np.asarray([k / 2 - 1 / 3 for k in large], np.float32)
        mt = words[:, n_gauss : n_gauss + len(large)].reshape(-1, batch)
        gamma = _gamma_slots(keys, mt, jnp.asarray(np.tile(d, n_layers)))
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


class ReducedTransformer(AbstractDynamics):
    """The law of :class:`DiscreteTransformer` simulated on the N × N token coordinates.

    Valid when :func:`reduction_blocker` returns ``None``: Q = K = I with one head (any β,
    softmax or unnormalised, Laplacian or causal), Gaussian full value noise (any σ and
    drift), any of the six built-in schemes, and N < d. :meth:`trajectory` takes the same
    ``(N, d)`` start as the full model and returns, at each save time, the tokens'
    coordinates ``(N, N)`` in an orthonormal frame of their span: the same Gram matrices
    in law, hence the same clustering classes and cosines. It uses other random numbers
    than the full model (fewer), so trajectories agree in law, not path by path.

    Early absorption (N = 2, see :mod:`attndyn._absorption`): with ``absorb_gap`` set, the
    simulation of a batch stops once every trajectory's gaps ``1 ∓ z`` are below the given
    (δ₊, δ₋) — checked every ``absorb_every`` layers — and the remaining saves repeat the
    absorbed state.
    """

    model: DiscreteTransformer
    dim: int = eqx.field(static=True)
    absorb_gap: Float[Array, "2"] | None = None
    absorb_every: int = eqx.field(static=True, default=50)

    def __check_init__(self):
        if self.dim < 2:
            raise ParameterError(f"dim={self.dim} must be an integer >= 2.")

    @property
    def save_times(self) -> np.ndarray:
        return self.model.save_times

    def _complement_width(self, n_tokens: int) -> tuple[int, bool]:
        extra = self.dim - n_tokens
        if extra <= DIRECT_COMPLEMENT_MAX or extra < n_tokens:
            return extra, True
        return n_tokens, False

    def _noise(self, key: PRNGKeyArray, n_tokens: int, dtype) -> Float[Array, "N w"]:
        """``[B | L_W]``: the layer's value noise seen from the tokens' frame (N × (N + m))."""
        width, direct = self._complement_width(n_tokens)
        if direct:
            z, _ = _normals_uniforms(key, n_tokens * (n_tokens + width), dtype)
            return z.reshape(n_tokens, n_tokens + width)
        n_low = n_tokens * (n_tokens - 1) // 2
        dofs = tuple(self.dim - n_tokens - i for i in range(n_tokens))
        z, chi = _variates(key, n_tokens * n_tokens + n_low, dofs, dtype)
        b = z[: n_tokens * n_tokens].reshape(n_tokens, n_tokens)
        rows, cols = np.tril_indices(n_tokens, -1)
        bartlett = jnp.diag(chi).at[rows, cols].set(z[n_tokens * n_tokens :])
        return jnp.concatenate([b, bartlett], axis=1)

    @property
    def _two_token_post_ln(self) -> bool:
        return type(self.model.scheme) is PostLN

    def layer(self, c: Float[Array, "N N"], n: Array, *, key: PRNGKeyArray) -> Float[Array, "N N"]:
        """Layer n on the frame coordinates ``c``.

        The layer key is ``fold_in(key, n)``; the two-token Post-LN chain instead uses row
        n mod LAYER_BLOCK of the variates of ``fold_in(key, n // LAYER_BLOCK)``.
        """
        n_tokens = c.shape[0]
        if n_tokens == 2 and self._two_token_post_ln:
            # The chain's layers draw their numbers by blocks (see LAYER_BLOCK): row
            # n mod LAYER_BLOCK of block n // LAYER_BLOCK, as in :meth:`trajectories`.
            block_key = jax.random.fold_in(key, n // LAYER_BLOCK)
            z, chi = _two_token_block(block_key[None], self.dim, c.dtype)
            row = n % LAYER_BLOCK
            cz, sz = self._layer_two(c[1, 0], c[1, 1], z[row, :, 0], chi[row, :, 0])
            return _two_token_frame(cz, sz)
        model = self.model
        values = model.values
        assert isinstance(values, MatrixValues)
        noise = self._noise(jax.random.fold_in(key, n), n_tokens, c.dtype)
        width = noise.shape[1]
        x = jnp.pad(c, ((0, 0), (0, width - n_tokens)))
        attention: Attention = model.attention
        depth = model.depth
        scale = values.sigma / math.sqrt(depth)

        def update(z):
            # z has zero complement coordinates, so A = A_O O and A Mᵀ ≅ A_O [B | L_W].
            a = attention(z)
            return (values.drift / depth) * a + scale * matmul(a[:, :n_tokens], noise)

        new = model.scheme.layer(x, update, layer=n.astype(c.dtype), depth=depth)
        return lq(new)

    def _layer_two(self, cz: Array, sz: Array, z: Array, chi: Array):
        """Post-LN, N = 2: the overlap chain on (cos φ, sin φ), written out scalar by scalar.

        The tokens are θ₁ = (1, 0), θ₂ = (cos φ, sin φ) in their frame; the noise is
        B (2 × 2) and the 2 × 2 Bartlett factor L of Wishart_2(d − 2) (one Gaussian, two
        chi variates). Everything is elementwise over the batch, so XLA fuses the layer into
        a few loops (``z``, ``chi``: the layer's 5 Gaussians and 2 chi variates, on the
        leading axis); the new sin φ is the norm of a difference of nearly (anti)parallel
        vectors, taken before any squaring, so it keeps relative precision near φ = 0, π.
        """
        model = self.model
        values = model.values
        assert isinstance(values, MatrixValues)
        dtype = cz.dtype
        depth = model.depth
        # Row i of G = [B | L]: the value noise acting on frame direction i.
        g1 = (z[0], z[1], chi[0], jnp.zeros((), dtype))
        g2 = (z[2], z[3], z[4], chi[1])
        p11, p12, p21, p22 = _two_token_attention(model.attention, cz)
        k1 = (p11 + p12 * cz, p12 * sz)
        k2 = (p21 + p22 * cz, p22 * sz)
        drift = values.drift / depth
        scale = values.sigma / math.sqrt(depth)
        base1 = (1 + drift * k1[0], drift * k1[1], 0, 0)
        base2 = (cz + drift * k2[0], sz + drift * k2[1], 0, 0)
        x1 = [b + scale * (k1[0] * u + k1[1] * v) for b, u, v in zip(base1, g1, g2)]
        x2 = [b + scale * (k2[0] * u + k2[1] * v) for b, u, v in zip(base2, g1, g2)]
        n1 = sum(a * a for a in x1)
        d12 = sum(a * b for a, b in zip(x1, x2))
        ratio = d12 / n1
        r2 = sum((b - ratio * a) ** 2 for a, b in zip(x1, x2))
        n2 = sum(b * b for b in x2)
        new_cz = d12 / jnp.sqrt(n1 * n2)
        new_sz = jnp.sqrt(r2 / n2)
        # Rounding must not move θ₂ off the unit circle over 10⁵ layers.
        norm = jax.lax.rsqrt(new_cz**2 + new_sz**2)
        return new_cz * norm, new_sz * norm

    def reduce(self, x0: Float[Array, "N d"]) -> Float[Array, "N N"]:
        """The start's coordinates in an orthonormal frame of its span."""
        return lq(x0)

    def _absorbed(self, c: Float[Array, "N N"]) -> Array:
        assert self.absorb_gap is not None
        plus, minus = pair_gaps(c)
        n_tokens = c.shape[0]
        pairs = np.triu(np.ones((n_tokens, n_tokens), dtype=bool), k=1)
        near = (plus <= self.absorb_gap[0]) | (minus <= self.absorb_gap[1])
        return jnp.all(near | ~pairs)

    def trajectory(self, x0, *, key):
        return self.trajectories(x0[None], key[None])[0]

    def trajectories(
        self, x0: Float[Array, "batch N d"], keys: PRNGKeyArray
    ) -> Float[Array, "batch n_saves N N"]:
        """A batch of trajectories (one key each), stopping early once all are absorbed."""
        c0 = jax.vmap(self.reduce)(x0)
        two = c0.shape[1] == 2 and self._two_token_post_ln
        step = jax.vmap(lambda c, n, k: self.layer(c, n, key=k), in_axes=(0, None, 0))
        dtype = c0.dtype
        block = LAYER_BLOCK

        def block_two(b, y, start, stop):
            # Layers b·LAYER_BLOCK + j from the block key; those outside [start, stop) (a
            # segment that starts or stops inside a block) leave the state as it is.
            cz, sz = y
            block_keys = jax.vmap(jax.random.fold_in, in_axes=(0, None))(keys, b)
            z, chi = _two_token_block(block_keys, self.dim, dtype)
            for j in range(block):
                n = b * block + j
                new_cz, new_sz = self._layer_two(cz, sz, z[j], chi[j])
                live = (n >= start) & (n < stop)
                cz, sz = jnp.where(live, new_cz, cz), jnp.where(live, new_sz, sz)
            return cz, sz

        def run(c, start, stop):
            if two:
                # Carry (cos φ, sin φ) only: the loop body is then purely elementwise.
                cz, sz = jax.lax.fori_loop(
                    start // block,
                    (stop + block - 1) // block,
                    lambda b, y: block_two(b, y, start, stop),
                    (c[:, 1, 0], c[:, 1, 1]),
                )
                return jax.vmap(_two_token_frame)(cz, sz)
            return jax.lax.fori_loop(start, stop, lambda n, y: step(y, n, keys), c)

        absorbed_fn = jax.vmap(self._absorbed)
        every = self.absorb_every

        def segment(carry, stop):
            c, start = carry
            if self.absorb_gap is None:
                c = run(c, start, stop)
                return (c, stop), c

            def cond(state):
                c, n = state
                return (n < stop) & ~jnp.all(absorbed_fn(c))

            def body(state):
                c, n = state
                nxt = jnp.minimum(n + every, stop)
                moved = run(c, n, nxt)
                # An absorbed trajectory keeps its state: its class can no longer change
                # (beyond the bound of attndyn._absorption).
                frozen = absorbed_fn(c)[:, None, None]
                return jnp.where(frozen, c, moved), nxt

            c, _ = jax.lax.while_loop(cond, body, (c, start))
            return (c, stop), c

        _, saves = jax.lax.scan(
            segment, (c0, jnp.asarray(0, jnp.int32)), jnp.asarray(self.model.save_layers)
        )
        return jnp.swapaxes(saves, 0, 1)


def _two_token_frame(cz: Array, sz: Array) -> Float[Array, "2 2"]:
    one, zero = jnp.ones_like(cz), jnp.zeros_like(cz)
    return jnp.stack([jnp.stack([one, zero]), jnp.stack([cz, sz])])


def _two_token_attention(attention: Attention, z: Array) -> tuple[Array, Array, Array, Array]:
    """The 2 × 2 attention matrix of two unit tokens with overlap z, entry by entry."""
    beta = attention.beta
    if attention.kind == "softmax":
        # softmax of (β, βz): the off-diagonal weight is σ(−β(1 − z)), with no overflow.
        off = jax.nn.sigmoid(-beta * (1 - z))
        diag = 1 - off
        first_row = (jnp.ones_like(z), jnp.zeros_like(z))  # causal: token 1 sees itself
    else:
        diag = jnp.exp(beta) / 2 * jnp.ones_like(z)
        off = jnp.exp(beta * z) / 2
        first_row = (diag, jnp.zeros_like(z))
    p11, p12, p21, p22 = diag, off, off, diag
    if attention.causal:
        p11, p12 = first_row
    laplacian = attention.laplacian
    if attention.n_laplacian_heads is not None:
        laplacian = attention.n_laplacian_heads >= 1
    if laplacian:
        p11, p22 = p11 - 1, p22 - 1
    return p11, p12, p21, p22


def reduce_model(model: AbstractDynamics, n_tokens: int, dim: int) -> ReducedTransformer:
    """The reduced form of ``model`` at (N, d); a ParameterError says why when it has none."""
    blocker = reduction_blocker(model, n_tokens, dim)
    if blocker is not None:
        raise ParameterError(f"route='reduced' does not apply: {blocker}; use route='full'.")
    assert isinstance(model, DiscreteTransformer)
    return ReducedTransformer(model, dim)
