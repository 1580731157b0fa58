"""The two-token chain: two tokens under Post-LN with Gaussian value matrices, exactly in
law, on the angle φ between them.

In the frame of :mod:`.frame_route` two tokens are θ₁ = (1, 0) and θ₂ = (cos φ, sin φ), and
a Post-LN layer is a Markov step of (cos φ, sin φ) driven by B (2 × 2, Gaussian) and the
2 × 2 Bartlett factor of Wishart_2(d − 2): 5 Gaussians and 2 chi variates per layer,
whatever d. The layer is written out scalar by scalar (:meth:`TwoTokenChain._layer_two`),
elementwise over the batch, so XLA fuses a block of layers into a few loops, and the gaps
1 ∓ z keep their relative precision down to float32's smallest normal numbers (what early
absorption at −1 needs, :mod:`.absorption`).

The chain draws the numbers of LAYER_BLOCK consecutive layers at once, from
``fold_in(key, n // LAYER_BLOCK)`` (:func:`.samplers.two_token_block`): a trajectory's
numbers depend on its key only, whatever the batch, the save times or the blocks a run is
cut into.
"""

import math
from typing import final

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, PRNGKeyArray

from ..._core.errors import ParameterError
from ..._core.random import fold_in
from .frame import held_sine, two_token_attention, two_token_frame
from .route import AbstractFrameRoute
from .samplers import LAYER_BLOCK, two_token_block


@final
class TwoTokenChain(AbstractFrameRoute):
    """The two-token chain (see the module docstring): what
    ``DiscreteTransformer.reduction(2, dim)`` returns for Post-LN with Gaussian value
    matrices. Its states are the frames ``[[1, 0], [cos φ, sin φ]]``."""

    def __check_init__(self):
        if self.n_tokens != 2 or not self.model.scheme.post_ln_map:
            raise ParameterError(
                "the two-token chain needs N = 2 and the Post-LN map; got N = "
                f"{self.n_tokens} and {self.model.scheme.name} (use ReducedTransformer)."
            )

    def layer(self, c: Float[Array, "N N"], n: Array, *, key: PRNGKeyArray) -> Float[Array, "N N"]:
        """Layer n: row n mod LAYER_BLOCK of the variates of ``fold_in(key, n //
        LAYER_BLOCK)``, as in :meth:`run`."""
        block_key = fold_in(key, n // LAYER_BLOCK)
        z, chi = two_token_block(block_key[None], self.dim, c.dtype)
        row = n % LAYER_BLOCK
        cz, sz = self._layer_two(c[1, 0], c[1, 1], z[row, :, 0], chi[row, :, 0])
        return two_token_frame(cz, sz)

    def run(self, c, start, stop, keys):
        """Layers [start, stop) of the whole batch, a block of LAYER_BLOCK layers per key."""
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
        # Named apart from σ = sign(cos φ) below.
        value_drift, value_sigma = self.gaussian_matrix()
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
        drift = value_drift / depth
        scale = value_sigma / math.sqrt(depth)
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
