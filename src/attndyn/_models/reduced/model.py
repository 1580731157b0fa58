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

import dataclasses
import math
from typing import ClassVar, final

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Key, PRNGKeyArray

from ..._core.attention import Attention
from ..._core.errors import ParameterError, check_int, check_single_key, check_start
from ..._core.linalg import matmul
from ..._core.norms import AbstractNorm, RMSNorm
from ..._core.random import DRAW_DTYPE, fold_in
from ..._core.schemes import PostLN, attention_update
from ..._core.values import AbstractScalarValues, MatrixValues
from ..base import AbstractModel, Reduction, advance_saves, begin_saves
from ..discrete import DiscreteTransformer
from .absorption import absorb_tile, absorption_applies, absorption_gaps
from .frame import (
    fits_frame,
    held_sine,
    lq,
    pair_gaps,
    start_frame,
    two_token_attention,
    two_token_frame,
)
from .samplers import LAYER_BLOCK, normals_uniforms, two_token_block, variates

#: Up to this many complement dimensions d − N, Y_⊥ is drawn directly (N·(d − N) Gaussians);
#: beyond it the Bartlett factor is cheaper (measured on CPU: a chi variate costs about
#: as much as 6 Gaussians with the samplers of :mod:`.samplers`).
DIRECT_COMPLEMENT_MAX = 6


def reduction_blocker(model: DiscreteTransformer, n_tokens: int, dim: int) -> str | None:
    """Why no reduced route applies to ``model`` at (N, d), or ``None`` if one does."""
    norm = model.scheme.norm
    if not (norm.rotation_invariant or centred_post_ln(model)):
        return (
            f"the {norm.name} norm centres the tokens (not rotation-invariant; under Post-LN "
            "without gain or bias its law is the RMS model in d − 1 dimensions, which the "
            "reduced route then simulates)"
        )
    space = norm.effective_dim(dim)
    if not fits_frame(n_tokens, space):
        where = f"d = {dim}" if space == dim else f"d − 1 = {space} (LayerNorm's hyperplane)"
        return f"N = {n_tokens} is not below {where}"
    att = model.attention
    if att.query is not None or att.key_matrix is not None:
        return "Q or K is not the identity"
    if att.n_heads != 1:
        return "multi-head attention acts on coordinate blocks (not rotation-invariant)"
    if not att.rotation_invariant:
        return "W_V or W_O is not the identity (not rotation-invariant)"
    if model.weights is not None:
        return "random weights Q, K, V are not rotation-invariant once drawn"
    values = model.values
    gaussian = isinstance(values, MatrixValues) and values.distribution == "gaussian"
    if not (gaussian or isinstance(values, AbstractScalarValues)):
        return "the value matrices are not Gaussian (nor multiples of the identity)"
    if not model.scheme.rotation_equivariant:
        return f"the scheme {type(model.scheme).__name__} is not known to be rotation-equivariant"
    return None


def centred_post_ln(model: DiscreteTransformer) -> bool:
    """Post-LN with a centred LayerNorm without gain or bias: *(derived, spec §0)* in law
    for Gaussian value matrices (exactly for multiples of I) the RMS model in d − 1
    dimensions, the tokens being unit vectors of the mean-zero hyperplane."""
    norm = model.scheme.norm
    return isinstance(model.scheme, PostLN) and norm.codimension == 1 and not norm.affine


def reduce_discrete(model: DiscreteTransformer, n_tokens: int, dim: int) -> Reduction:
    """The reduced form of ``model`` at (N, d), or why it has none: the span route for
    values that are multiples of I, the frame route for Gaussian value matrices.

    Centred LayerNorm (Post-LN) runs as the RMS model in d − 1 dimensions, its start
    centred and normalised first (as the model's first layer does): a uniform start on
    S^{d−1} becomes uniform on the unit sphere of the hyperplane, whose law is the RMS
    model's start in d − 1 dimensions."""
    blocker = reduction_blocker(model, n_tokens, dim)
    if blocker is not None:
        return Reduction(None, blocker)
    start = model.scheme.norm
    space = start.effective_dim(dim)
    if space != dim:
        model = eqx.tree_at(lambda m: m.scheme.norm, model, RMSNorm())
    if isinstance(model.values, AbstractScalarValues):
        from .span import SpanTransformer

        return Reduction(SpanTransformer(model, n_tokens, space, start=start), "")
    return Reduction(ReducedTransformer(model, n_tokens, space, start=start), "")


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
    absorb_tile: int = eqx.field(static=True, default=512)
    #: The norm of the model the route stands for, which maps its starts in R^d to the
    #: tokens' space (:func:`.frame.start_frame`): RMS, or a centred LayerNorm whose model
    #: this route runs as the RMS model in ``dim`` = d − 1 dimensions.
    start: AbstractNorm = eqx.field(default_factory=RMSNorm, kw_only=True)

    same_path_in_float64: ClassVar[bool] = True

    def merge_law(self, dim: int):
        """The law of the model it stands for, in the route's own dimension (d − 1 for a
        LayerNorm model, whose noise acts in the hyperplane)."""
        del dim
        return self.model.merge_law(self.dim)

    def __check_init__(self):
        check_int("n_tokens", self.n_tokens, lower=1)
        check_int("dim", self.dim, lower=2)
        if not fits_frame(self.n_tokens, self.dim):
            raise ParameterError(
                f"the reduced route needs N < d (or N = d = 2); got N = {self.n_tokens}, "
                f"d = {self.dim}."
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
        """``[B | L_W]``: the layer's value noise seen from the tokens' frame (N × (N + m)),
        drawn in float32 whatever ``dtype`` and cast (x64 keeps the path: see
        :mod:`attndyn._core.random`)."""
        width, direct = self._complement_width(n_tokens)
        if direct:
            z, _ = normals_uniforms(key, n_tokens * (n_tokens + width), DRAW_DTYPE)
            return z.reshape(n_tokens, n_tokens + width).astype(dtype)
        n_low = n_tokens * (n_tokens - 1) // 2
        dofs = tuple(self.dim - n_tokens - i for i in range(n_tokens))
        z, chi = variates(key, n_tokens * n_tokens + n_low, dofs, DRAW_DTYPE)
        b = z[: n_tokens * n_tokens].reshape(n_tokens, n_tokens)
        rows, cols = np.tril_indices(n_tokens, -1)
        bartlett = jnp.diag(chi).at[rows, cols].set(z[n_tokens * n_tokens :])
        return jnp.concatenate([b, bartlett], axis=1).astype(dtype)

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
            block_key = fold_in(key, n // LAYER_BLOCK)
            z, chi = two_token_block(block_key[None], self.dim, c.dtype)
            row = n % LAYER_BLOCK
            cz, sz = self._layer_two(c[1, 0], c[1, 1], z[row, :, 0], chi[row, :, 0])
            return two_token_frame(cz, sz)
        return self._layer_frame(c, n, key=key)

    def _layer_frame(
        self, c: Float[Array, "N N"], n: Array, *, key: PRNGKeyArray, noise: Array | None = None
    ):
        """Any N and scheme: the scheme's map on ``[C, 0]`` with the noise ``[B | L_W]``
        (drawn from ``fold_in(key, n)`` unless given)."""
        n_tokens = c.shape[0]
        model = self.model
        values = model.values
        assert isinstance(values, MatrixValues)
        if noise is None:
            noise = self._noise(fold_in(key, n), n_tokens, c.dtype)
        width = noise.shape[1]
        x = jnp.pad(c, ((0, 0), (0, width - n_tokens)))
        attention: Attention = model.attention
        depth = model.layers_per_unit
        scale = values.sigma / math.sqrt(depth)

        def apply(a):
            # z has zero complement coordinates, so A = A_O O and A Mᵀ ≅ A_O [B | L_W].
            return (values.drift / depth) * a + scale * matmul(a[:, :n_tokens], noise)

        update = attention_update(attention, apply)
        new = model.scheme.layer(x, update, layer=n.astype(c.dtype), depth=depth)
        return lq(new)

    def _layer_two(self, cz: Array, sz: Array, z: Array, chi: Array):
        """Post-LN, N = 2: the overlap chain on (cos φ, sin φ), written out scalar by scalar.

        The tokens are θ₁ = (1, 0), θ₂ = (cos φ, sin φ) in their frame; the noise is
        B (2 × 2) and the 2 × 2 Bartlett factor L of Wishart_2(d − 2) (one Gaussian, two
        chi variates). Everything is elementwise over the batch, so XLA fuses the layer into
        a few loops (``z``, ``chi``: the layer's 5 Gaussians and 2 chi variates, on the
        leading axis).

        Relative precision at any gap: with σ = sign(cos φ) (the nearer of ±θ₁), the new
        rows are x₁ and x₂ = σx₁ + δ, and δ is computed from small quantities only —
        1 − σ cos φ = sin²φ/(1 + |cos φ|), sin φ, and the attention differences, which vanish
        exactly for symmetric attention — so it carries relative precision however close
        θ₂ is to ±θ₁. The new sin φ is |δ⊥|/|x₂|, δ⊥ = δ minus its projection on x₁: a
        projection of the small vector, never a difference of O(1) numbers. Gaps down to
        float32's smallest normal numbers stay resolved (what early absorption at −1 needs).
        """
        model = self.model
        values = model.values
        assert isinstance(values, MatrixValues)
        dtype = cz.dtype
        depth = model.layers_per_unit
        # Row i of G = [B | L]: the value noise acting on frame direction i.
        g1 = (z[0], z[1], chi[0], jnp.zeros((), dtype))
        g2 = (z[2], z[3], z[4], chi[1])
        # The attention matrix is e^m·P: the new rows are e^m·(e^{−m}θ + P-terms), and
        # the new angle ignores the common factor e^m, which would overflow at large β.
        (p11, p12, p21, p22), exponent = two_token_attention(model.attention, cz)
        lead = jnp.ones_like(cz) if exponent is None else jnp.exp(-exponent)
        sigma = jnp.where(cz >= 0, 1.0, -1.0).astype(dtype)
        w = sz**2 / (1 + jnp.abs(cz))  # 1 − σ cos φ, without cancellation
        k1 = (p11 + p12 * cz, p12 * sz)
        # k₂ − σk₁ with cos φ = σ(1 − w): exact zeros where the attention is symmetric.
        dk = (
            (p21 - p12) + sigma * (p22 - p11) - sigma * (p22 - sigma * p12) * w,
            (p22 - sigma * p12) * sz,
        )
        drift = values.drift / depth
        scale = values.sigma / math.sqrt(depth)
        base1 = (lead + drift * k1[0], drift * k1[1], 0, 0)
        base_d = (-sigma * w * lead + drift * dk[0], sz * lead + drift * dk[1], 0, 0)
        x1 = [b + scale * (k1[0] * u + k1[1] * v) for b, u, v in zip(base1, g1, g2)]
        delta = [b + scale * (dk[0] * u + dk[1] * v) for b, u, v in zip(base_d, g1, g2)]
        x2 = [sigma * a + d for a, d in zip(x1, delta)]
        n1 = sum(a * a for a in x1)
        n2 = sum(b * b for b in x2)
        ratio = sum(a * d for a, d in zip(x1, delta)) / n1
        perp = [d - ratio * a for a, d in zip(x1, delta)]
        # |δ⊥| scaled by its largest component: squaring 1e-25 would underflow float32.
        big = jnp.maximum(jnp.max(jnp.stack([jnp.abs(q) for q in perp]), axis=0), 1e-37)
        new_sz = big * jnp.sqrt(sum((q / big) ** 2 for q in perp) / n2)
        new_cz = sum(a * b for a, b in zip(x1, x2)) / jnp.sqrt(n1 * n2)
        # Rounding must not move θ₂ off the unit circle over 10⁵ layers; the rescaling is
        # multiplicative, so sin φ keeps its relative precision. Below float32's smallest
        # normal number sin φ is held there instead of underflowing to a merge the
        # arithmetic could never leave: from a gap 1 ∓ z ≈ sin²φ/2 < 10⁻⁷⁶ the class changes
        # with probability ≤ 2(gap/tol)^κ± (the scale-function bound of early absorption),
        # which a held trajectory inherits.
        norm = jax.lax.rsqrt(new_cz**2 + new_sz**2)
        return new_cz * norm, held_sine(new_sz * norm)

    def attention_scale_free(self) -> bool:
        return self.model.attention_scale_free()

    def keeps_unit_rows(self) -> bool:
        return self.model.keeps_unit_rows()

    def reduce(self, x0: Float[Array, "N d"]) -> Float[Array, "N N"]:
        """The start's coordinates in an orthonormal frame of its span (centred and
        normalised first for a LayerNorm model)."""
        return start_frame(x0, self.start)

    def trajectory(self, x0: Float[Array, "N d"], *, key: PRNGKeyArray) -> Float[Array, "S N N"]:
        """One trajectory (a batch of one of :meth:`simulate`)."""
        check_start("x0", x0)
        check_single_key("key", key)
        return self.simulate(x0[None], key[None])[0]

    @eqx.filter_jit
    def simulate(self, x0, keys):
        """A batch of trajectories (one key each), stopping early once all are absorbed."""
        stop = jnp.asarray(self.stepping()[0], jnp.int32)
        state = self.advance(self.begin(x0, keys), keys, jnp.zeros((), jnp.int32), stop)
        return self.finish(state)

    def stepping(self) -> tuple[int, int]:
        # Absorption is checked at multiples of absorb_every (and at each save): blocks end
        # there, so that they check where an uncut run does.
        return int(self.model.save_layers[-1]), (
            1 if self.absorb_gap is None else self.absorb_every
        )

    def begin(self, x0, keys):
        c0 = jax.vmap(self.reduce)(x0)
        # A save before the first layer is the start itself (as on the full route).
        raw = c0 if self.start.codimension == 0 else jax.vmap(lq)(x0)
        return c0, begin_saves(self.model.save_layers, raw)

    def advance(self, state, keys, start, stop):
        def run(c, lo, hi, anchor):
            if self.absorb_gap is None:
                return self._run(c, lo, hi, keys)
            return self._run_absorbing(c, lo, hi, keys)

        c, saves = state
        return advance_saves(self.model.save_layers, c, saves, start, stop, run, lambda c: c)

    def finish(self, state):
        return jnp.swapaxes(state[1], 0, 1)

    def _run_frame(self, c: Array, start: Array, stop: Array, keys: Key[Array, " batch"]) -> Array:
        """Layers [start, stop) of :meth:`_layer_frame`; layer n + 1's noise is drawn while
        layer n runs and carried, so XLA materialises it once instead of fusing (and so
        repeating) the hash into each of its uses (as in the full model's trajectory)."""
        n_tokens = c.shape[1]

        def draw(n):
            return jax.vmap(lambda k: self._noise(fold_in(k, n), n_tokens, c.dtype))(keys)

        step = jax.vmap(
            lambda c, n, k, z: self._layer_frame(c, n, key=k, noise=z), in_axes=(0, None, 0, 0)
        )

        def body(n, carry):
            y, z = carry
            return step(y, n, keys, z), draw(n + 1)

        return jax.lax.fori_loop(start, stop, body, (c, draw(start)))[0]

    def _run(self, c: Array, start: Array, stop: Array, keys: Key[Array, " batch"]) -> Array:
        """Layers [start, stop) of the whole batch."""
        if not self._two_token_post_ln:
            return self._run_frame(c, start, stop, keys)
        block = LAYER_BLOCK

        def block_two(b, y):
            # Layers b·LAYER_BLOCK + j from the block key; those outside [start, stop) (a
            # segment that starts or stops inside a block) leave the state as it is.
            cz, sz = y
            block_keys = jax.vmap(fold_in, in_axes=(0, None))(keys, b)
            z, chi = two_token_block(block_keys, self.dim, c.dtype)

            def layer(j, y):
                cz, sz = y
                n = b * block + j
                new_cz, new_sz = self._layer_two(cz, sz, z[j], chi[j])
                live = (n >= start) & (n < stop)
                return jnp.where(live, new_cz, cz), jnp.where(live, new_sz, sz)

            # A loop unrolled by two, not a block of ten: XLA compiles two layers instead of
            # ten (first-call compilation about half), at the speed of the full unrolling
            # within noise (measured 7.5 against 8.0·10⁶ steps/s; one layer: 6.0·10⁶).
            return jax.lax.fori_loop(0, block, layer, (cz, sz), unroll=2)

        # Carry (cos φ, sin φ) only: the loop body is then purely elementwise.
        first, last = start // block, (stop + block - 1) // block
        cz, sz = jax.lax.fori_loop(first, last, block_two, (c[:, 1, 0], c[:, 1, 1]))
        return jax.vmap(two_token_frame)(cz, sz)

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
        beyond the bound of :mod:`.absorption`).

        Compaction: before each block the live trajectories are moved to the front and only
        they run, in tiles of ``absorb_tile`` (one compiled shape), so the cost follows the
        trajectories still moving. Each trajectory's numbers come from its own key and the
        absolute layer index, so the order in which they run changes nothing.
        """
        absorbed = jax.vmap(self._absorbed)
        batch = c.shape[0]
        tile = min(self.absorb_tile, batch)
        padded = -(-batch // tile) * tile
        # Padding rows copy row 0 and are marked absorbed: they never run, never count.
        c = jnp.concatenate([c, jnp.broadcast_to(c[:1], (padded - batch, *c.shape[1:]))])
        keys = jnp.concatenate([keys, jnp.broadcast_to(keys[:1], (padded - batch,))])
        pad = jnp.arange(padded) >= batch

        def cond(state):
            c, n = state
            return (n < stop) & ~jnp.all(absorbed(c) | pad)

        def body(state):
            c, n = state
            # Checks at the multiples of absorb_every (and where a segment starts): the same
            # layers however the run is cut into blocks (see :meth:`stepping`).
            nxt = jnp.minimum((n // self.absorb_every + 1) * self.absorb_every, stop)
            frozen = absorbed(c) | pad
            order = jnp.argsort(frozen, stable=True)  # live trajectories first
            live = jnp.sum(~frozen)
            moved = self._run_tiles(c[order], keys[order], frozen[order], n, nxt, live, tile)
            return c.at[order].set(moved), nxt

        c, _ = jax.lax.while_loop(cond, body, (c, start))
        return c[:batch]

    def _run_tiles(self, c, keys, frozen, n, nxt, live, tile: int) -> Array:
        """Layers [n, nxt) for the first ``live`` rows, ``tile`` rows at a time."""

        def one(i, c):
            first = i * tile
            rows = jax.lax.dynamic_slice_in_dim(c, first, tile)
            ks = jax.lax.dynamic_slice_in_dim(keys, first, tile)
            still = jax.lax.dynamic_slice_in_dim(frozen, first, tile)
            moved = self._run(rows, n, nxt, ks)
            rows = jnp.where(still[:, None, None], rows, moved)
            return jax.lax.dynamic_update_slice_in_dim(c, rows, first, 0)

        return jax.lax.fori_loop(0, (live + tile - 1) // tile, one, c)

    def with_absorption(self, *, tol: float, bound: float, dim: int) -> "ReducedTransformer":
        blocker = absorption_applies(self.model, self.n_tokens)
        if blocker is not None:
            raise ParameterError(f"early_absorption does not apply: {blocker}.")
        # The route's own dimension: d − 1 for a LayerNorm model (its RMS law).
        del dim
        gaps = absorption_gaps(float(self.model.attention.beta), self.dim, tol, bound)
        # The order in which live trajectories run changes no number, so the compaction
        # tile may follow the backend.
        return dataclasses.replace(
            self, absorb_gap=jnp.asarray(gaps, jnp.float32), absorb_tile=absorb_tile()
        )

    def absorption_gaps(self) -> tuple[float, float] | None:
        if self.absorb_gap is None:
            return None
        plus, minus = np.asarray(self.absorb_gap, np.float64).tolist()
        return plus, minus
