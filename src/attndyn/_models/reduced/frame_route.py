"""The frame route: Gaussian-value transformers reduced, exactly in law, to the span of the
tokens.

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
[[1, 0], [cos φ, sin φ]] under Post-LN), i.e. a scalar Markov chain of the overlap, which
:mod:`.chain` writes out scalar by scalar.

Precision near ±1: the state is the coordinates themselves, not the Gram matrix, and the
LQ step subtracts nearly equal vectors before squaring, so ``1 ∓ z = |c_i ∓ c_j|²/2`` keeps
relative precision ~ ε_mach/√(1 ∓ z): pairs 10⁻⁶ (even 10⁻¹⁰) from ±1 stay resolved, where
the full float32 simulation bottoms out near 10⁻⁷ (see :func:`pair_gaps`).
Each reflection of that step reads its rows from memory (:func:`.frame.carried_lq`): a
reflection built from two roundings of one residual is not orthogonal, and inside a
cluster it moved the other tokens by arithmetic alone (issue 42).

:class:`ReducedTransformer` is what :meth:`DiscreteTransformer.reduction` returns where this
applies and no cheaper route does (:func:`.reduction.reduce_discrete`); the estimator only
ever sees an ``AbstractModel``.
"""

import math
from typing import final

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, PRNGKeyArray

from ..._core.attention import Attention
from ..._core.linalg import matmul
from ..._core.random import DRAW_DTYPE, fold_in
from ..._core.schemes import attention_update
from .frame import carried_lq
from .route import AbstractFrameRoute
from .samplers import normals_uniforms, variates

#: Up to this many complement dimensions d − N, Y_⊥ is drawn directly (N·(d − N) Gaussians);
#: beyond it the Bartlett factor is cheaper (measured on CPU: a chi variate costs about
#: as much as 6 Gaussians with the samplers of :mod:`.samplers`).
DIRECT_COMPLEMENT_MAX = 6


@final
class ReducedTransformer(AbstractFrameRoute):
    """The frame route: :class:`DiscreteTransformer` with Gaussian value matrices on the
    N × N token coordinates (see the module docstring), for any N < d (or N = d = 2; under
    Post-LN with a centred LayerNorm, N < d − 1) and any rotation-equivariant scheme.

    Built by ``model.reduction(n_tokens, dim)`` where
    :func:`~attndyn._models.reduced.reduction.reduction_blocker` allows it: Q = K = I with
    one head (any β, softmax or unnormalised, Laplacian or causal), Gaussian full value
    noise (any σ and drift), a rotation-equivariant scheme (the six built-in ones), and
    N < d; for two tokens under Post-LN the reduction is the cheaper two-token chain
    (:class:`~attndyn._models.reduced.chain.TwoTokenChain`) instead, exact in law all the
    same.
    """

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

    def layer(
        self, c: Float[Array, "N N"], n: Array, *, key: PRNGKeyArray, noise: Array | None = None
    ) -> Float[Array, "N N"]:
        """Layer n: the scheme's map on ``[C, 0]`` with the noise ``[B | L_W]`` (drawn
        from ``fold_in(key, n)`` unless given)."""
        n_tokens = c.shape[0]
        model = self.model
        drift, sigma = self.gaussian_matrix()
        if noise is None:
            noise = self._noise(fold_in(key, n), n_tokens, c.dtype)
        width = noise.shape[1]
        x = jnp.pad(c, ((0, 0), (0, width - n_tokens)))
        attention: Attention = model.attention
        depth = model.layers_per_unit
        scale = sigma / math.sqrt(depth)

        def apply(a):
            # z has zero complement coordinates, so A = A_O O and A Mᵀ ≅ A_O [B | L_W].
            return (drift / depth) * a + scale * matmul(a[:, :n_tokens], noise)

        update = attention_update(attention, apply)
        new = model.scheme.layer(x, update, layer=n.astype(c.dtype), depth=depth)
        # The count N, traced through the layer index where that is traced: the loop of
        # reflections stays a loop (see carried_lq).
        steps = jnp.where(jnp.asarray(n) >= 0, n_tokens, 0)
        return carried_lq(new, steps)

    def run(self, c, start, stop, keys):
        """Layers [start, stop) of :meth:`layer`; layer n + 1's noise is drawn while
        layer n runs and carried, so XLA materialises it once instead of fusing (and so
        repeating) the hash into each of its uses (as in the full model's trajectory)."""
        n_tokens = c.shape[1]

        def draw(n):
            return jax.vmap(lambda k: self._noise(fold_in(k, n), n_tokens, c.dtype))(keys)

        step = jax.vmap(
            lambda c, n, k, z: self.layer(c, n, key=k, noise=z), in_axes=(0, None, 0, 0)
        )

        def body(n, carry):
            y, z = carry
            return step(y, n, keys, z), draw(n + 1)

        return jax.lax.fori_loop(start, stop, body, (c, draw(start)))[0]
