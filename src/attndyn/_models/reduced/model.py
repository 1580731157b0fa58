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

:class:`ReducedTransformer` is what :meth:`DiscreteTransformer.reduction` returns where this
applies (:func:`reduce_discrete`); the estimator only ever sees an ``AbstractModel``.
"""

import math
from typing import final

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Key, PRNGKeyArray

from ..._core.attention import Attention, matmul
from ..._core.errors import ParameterError, check_int
from ..._core.schemes import PostLN
from ..._core.values import MatrixValues
from ..base import AbstractModel, Reduction
from ..discrete import DiscreteTransformer
from .absorption import absorption_applies, absorption_gaps
from .samplers import LAYER_BLOCK, normals_uniforms, two_token_block, variates

#: Up to this many complement dimensions d − N, Y_⊥ is drawn directly (N·(d − N) Gaussians);
#: beyond it the Bartlett factor is cheaper (measured on CPU: a chi variate costs about
#: as much as 6 Gaussians with the samplers of :mod:`.samplers`).
DIRECT_COMPLEMENT_MAX = 6


def reduction_blocker(model: DiscreteTransformer, n_tokens: int, dim: int) -> str | None:
    """Why the reduced route does not apply to ``model`` at (N, d), or ``None`` if it does."""
    if not n_tokens < dim:
        return f"N = {n_tokens} is not below d = {dim}"
    att = model.attention
    if att.query is not None or att.key_matrix is not None:
        return "Q or K is not the identity"
    if att.n_heads != 1:
        return "multi-head attention acts on coordinate blocks (not rotation-invariant)"
    if not att.rotation_invariant:
        return "W_V or W_O is not the identity (not rotation-invariant)"
    if model.weights is not None:
        return "random weights Q, K, V are not rotation-invariant once drawn"
    if not model.scheme.norm.rotation_invariant:
        return (
            f"the {model.scheme.norm.name} norm centres the tokens (not rotation-invariant; "
            "without gain or bias its law is the RMS model in d − 1 dimensions)"
        )
    values = model.values
    if not isinstance(values, MatrixValues) or values.distribution != "gaussian":
        return "the values are not full Gaussian matrix noise"
    if not model.scheme.rotation_equivariant:
        return f"the scheme {type(model.scheme).__name__} is not known to be rotation-equivariant"
    return None


def reduce_discrete(model: DiscreteTransformer, n_tokens: int, dim: int) -> Reduction:
    """The reduced form of ``model`` at (N, d), or why it has none."""
    blocker = reduction_blocker(model, n_tokens, dim)
    if blocker is not None:
        return Reduction(None, blocker)
    return Reduction(ReducedTransformer(model, n_tokens, dim), "")


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
        tail = tail - (scale * jnp.sum(tail * v[None, :], axis=1))[:, None] * v[None, :]
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


@final
class ReducedTransformer(AbstractModel):
    """The law of :class:`DiscreteTransformer` simulated on the N × N token coordinates.

    Built by ``model.reduction(n_tokens, dim)`` where :func:`reduction_blocker` allows it:
    Q = K = I with one head (any β, softmax or unnormalised, Laplacian or causal), Gaussian
    full value noise (any σ and drift), a rotation-equivariant scheme (the six built-in
    ones), and N < d. :meth:`simulate` takes the same ``(N, d)`` starts as the full model
    and returns, at each save time, the tokens' coordinates ``(N, N)`` in an orthonormal
    frame of their span: the same Gram matrices in law, hence the same clustering classes
    and cosines. It uses other random numbers than the full model (fewer), so trajectories
    agree in law, not path by path.

    Early absorption (N = 2, see :mod:`.absorption`): with ``absorb_gap`` set, the
    simulation of a batch stops once every trajectory's gaps ``1 ∓ z`` are below the given
    (δ₊, δ₋) — checked every ``absorb_every`` layers — and the remaining saves repeat the
    absorbed state.
    """

    model: DiscreteTransformer
    n_tokens: int = eqx.field(static=True)
    dim: int = eqx.field(static=True)
    absorb_gap: Float[Array, "2"] | None = None
    absorb_every: int = eqx.field(static=True, default=50)

    def __check_init__(self):
        check_int("n_tokens", self.n_tokens, lower=1)
        check_int("dim", self.dim, lower=2)
        if self.n_tokens >= self.dim:
            raise ParameterError(
                f"the reduced route needs N < d; got N = {self.n_tokens}, d = {self.dim}."
            )

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
            z, _ = normals_uniforms(key, n_tokens * (n_tokens + width), dtype)
            return z.reshape(n_tokens, n_tokens + width)
        n_low = n_tokens * (n_tokens - 1) // 2
        dofs = tuple(self.dim - n_tokens - i for i in range(n_tokens))
        z, chi = variates(key, n_tokens * n_tokens + n_low, dofs, dtype)
        b = z[: n_tokens * n_tokens].reshape(n_tokens, n_tokens)
        rows, cols = np.tril_indices(n_tokens, -1)
        bartlett = jnp.diag(chi).at[rows, cols].set(z[n_tokens * n_tokens :])
        return jnp.concatenate([b, bartlett], axis=1)

    @property
    def _two_token_post_ln(self) -> bool:
        return self.n_tokens == 2 and isinstance(self.model.scheme, PostLN)

    def layer(self, c: Float[Array, "N N"], n: Array, *, key: PRNGKeyArray) -> Float[Array, "N N"]:
        """Layer n on the frame coordinates ``c``.

        The layer key is ``fold_in(key, n)``; the two-token Post-LN chain instead uses row
        n mod LAYER_BLOCK of the variates of ``fold_in(key, n // LAYER_BLOCK)``.
        """
        if self._two_token_post_ln:
            # The chain's layers draw their numbers by blocks (see LAYER_BLOCK): row
            # n mod LAYER_BLOCK of block n // LAYER_BLOCK, as in :meth:`simulate`.
            block_key = jax.random.fold_in(key, n // LAYER_BLOCK)
            z, chi = two_token_block(block_key[None], self.dim, c.dtype)
            row = n % LAYER_BLOCK
            cz, sz = self._layer_two(c[1, 0], c[1, 1], z[row, :, 0], chi[row, :, 0])
            return _two_token_frame(cz, sz)
        return self._layer_frame(c, n, key=key)

    def _layer_frame(self, c: Float[Array, "N N"], n: Array, *, key: PRNGKeyArray):
        """Any N and scheme: the scheme's map on ``[C, 0]`` with the noise ``[B | L_W]``."""
        n_tokens = c.shape[0]
        model = self.model
        values = model.values
        assert isinstance(values, MatrixValues)
        noise = self._noise(jax.random.fold_in(key, n), n_tokens, c.dtype)
        width = noise.shape[1]
        x = jnp.pad(c, ((0, 0), (0, width - n_tokens)))
        attention: Attention = model.attention
        depth = model.layers_per_unit
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
        depth = model.layers_per_unit
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

    def trajectory(self, x0: Float[Array, "N d"], *, key: PRNGKeyArray) -> Float[Array, "S N N"]:
        """One trajectory (a batch of one of :meth:`simulate`)."""
        return self.simulate(x0[None], key[None])[0]

    def simulate(self, x0, keys):
        """A batch of trajectories (one key each), stopping early once all are absorbed."""
        c0 = jax.vmap(self.reduce)(x0)

        def segment(carry, stop):
            c, start = carry
            if self.absorb_gap is None:
                c = self._run(c, start, stop, keys)
            else:
                c = self._run_absorbing(c, start, stop, keys)
            return (c, stop), c

        _, saves = jax.lax.scan(
            segment, (c0, jnp.asarray(0, jnp.int32)), jnp.asarray(self.model.save_layers)
        )
        return jnp.swapaxes(saves, 0, 1)

    def _run(self, c: Array, start: Array, stop: Array, keys: Key[Array, " batch"]) -> Array:
        """Layers [start, stop) of the whole batch."""
        if not self._two_token_post_ln:
            step = jax.vmap(lambda c, n, k: self.layer(c, n, key=k), in_axes=(0, None, 0))
            return jax.lax.fori_loop(start, stop, lambda n, y: step(y, n, keys), c)
        block = LAYER_BLOCK

        def block_two(b, y):
            # Layers b·LAYER_BLOCK + j from the block key; those outside [start, stop) (a
            # segment that starts or stops inside a block) leave the state as it is.
            cz, sz = y
            block_keys = jax.vmap(jax.random.fold_in, in_axes=(0, None))(keys, b)
            z, chi = two_token_block(block_keys, self.dim, c.dtype)
            for j in range(block):
                n = b * block + j
                new_cz, new_sz = self._layer_two(cz, sz, z[j], chi[j])
                live = (n >= start) & (n < stop)
                cz, sz = jnp.where(live, new_cz, cz), jnp.where(live, new_sz, sz)
            return cz, sz

        # Carry (cos φ, sin φ) only: the loop body is then purely elementwise.
        first, last = start // block, (stop + block - 1) // block
        cz, sz = jax.lax.fori_loop(first, last, block_two, (c[:, 1, 0], c[:, 1, 1]))
        return jax.vmap(_two_token_frame)(cz, sz)

    def _absorbed(self, c: Float[Array, "N N"]) -> Array:
        assert self.absorb_gap is not None
        plus, minus = pair_gaps(c)
        n_tokens = c.shape[0]
        pairs = np.triu(np.ones((n_tokens, n_tokens), dtype=bool), k=1)
        near = (plus <= self.absorb_gap[0]) | (minus <= self.absorb_gap[1])
        return jnp.all(near | ~pairs)

    def _run_absorbing(
        self, c: Array, start: Array, stop: Array, keys: Key[Array, " batch"]
    ) -> Array:
        """Layers [start, stop), ``absorb_every`` at a time, until every trajectory is
        absorbed; an absorbed trajectory keeps its state (its class can no longer change
        beyond the bound of :mod:`.absorption`)."""
        absorbed = jax.vmap(self._absorbed)

        def cond(state):
            c, n = state
            return (n < stop) & ~jnp.all(absorbed(c))

        def body(state):
            c, n = state
            nxt = jnp.minimum(n + self.absorb_every, stop)
            moved = self._run(c, n, nxt, keys)
            return jnp.where(absorbed(c)[:, None, None], c, moved), nxt

        c, _ = jax.lax.while_loop(cond, body, (c, start))
        return c

    def with_absorption(self, *, tol: float, bound: float, dim: int) -> "ReducedTransformer":
        blocker = absorption_applies(self.model, self.n_tokens)
        if blocker is not None:
            raise ParameterError(f"early_absorption does not apply: {blocker}.")
        gaps = absorption_gaps(float(self.model.attention.beta), dim, tol, bound)
        return eqx.tree_at(
            lambda m: m.absorb_gap,
            self,
            jnp.asarray(gaps, jnp.float32),
            is_leaf=lambda x: x is None,
        )

    def absorption_gaps(self) -> tuple[float, float] | None:
        if self.absorb_gap is None:
            return None
        plus, minus = np.asarray(self.absorb_gap, np.float64).tolist()
        return plus, minus


def _two_token_frame(cz: Array, sz: Array) -> Float[Array, "2 2"]:
    one, zero = jnp.ones_like(cz), jnp.zeros_like(cz)
    return jnp.stack([jnp.stack([one, zero]), jnp.stack([cz, sz])])


def _two_token_attention(attention: Attention, z: Array) -> tuple[Array, Array, Array, Array]:
    """The 2 × 2 attention matrix of two unit tokens with overlap z, entry by entry.

    Every rotation-invariant option is here: causal or self mask, the diagonal shift c
    (self-scores β − c) and a Laplacian of either sign.
    """
    beta = attention.beta
    shift = attention.diagonal_shift
    if attention.kind == "softmax":
        # softmax of (β − c, βz): the off-diagonal weight is σ(−β(1 − z) + c), no overflow.
        gap = -beta * (1 - z)
        off = jax.nn.sigmoid(gap if shift is None else gap + shift)
        diag = 1 - off
        first_row = (jnp.ones_like(z), jnp.zeros_like(z))  # causal: token 1 sees itself
    else:
        self_score = beta if shift is None else beta - shift
        diag = jnp.exp(self_score) / 2 * jnp.ones_like(z)
        off = jnp.exp(beta * z) / 2
        first_row = (diag, jnp.zeros_like(z))
    if attention.self_mask:
        diag = jnp.zeros_like(z)
        if attention.kind == "softmax":
            off = jnp.ones_like(z)
    p11, p12, p21, p22 = diag, off, off, diag
    if attention.causal:
        p11, p12 = first_row
    if attention.laplacian_flags[0]:
        p11, p22 = p11 - 1, p22 - 1
        if attention.laplacian_sign == "I-P":
            p11, p12, p21, p22 = -p11, -p12, -p21, -p22
    return p11, p12, p21, p22
