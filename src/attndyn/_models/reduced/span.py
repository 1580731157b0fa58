"""The span route: transformers whose value operators are multiples of the identity.

With ``V_n = s_n·I`` (deterministic values, or the scalar noise of 003 eq. 7) and Q = K = I,
every layer map moves each token within the span of the tokens: the state is the N × N
coordinates of the tokens in one fixed orthonormal frame of their initial span, and the
layer map is the same map on fewer coordinates. The layer's multiplier s_n is drawn from
the same key as on the full route, so the two agree path by path, up to rounding.

For two tokens under Post-LN (003 eq. 7 itself) the state is (cos φ, sin φ) of the angle
between them. The new tokens are the rows of (I + s_n P) Θ, Θ = [θ₁; θ₂], so the area of
their parallelogram is |det(I + s_n P)|·sin φ: the new sin φ is a product of O(1) factors
and sin φ, never a difference of nearly equal numbers. It keeps its relative precision as
sin φ → 0, near +1 and near −1 alike, so the gaps 1 ∓ z = sin²φ/(1 ± cos φ) are resolved
down to float32's smallest normal numbers: two tokens never merge numerically, where N × d
float32 coordinates merge once they agree to ~10⁻⁷ (the numerical coalescence of issue 10).
"""

from typing import ClassVar, final

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Key

from ..._core.errors import ParameterError
from ..._core.norms import AbstractNorm, RMSNorm
from ..._core.random import fold_in
from ..._core.values import AbstractScalarValues
from ..base import AbstractModel, LayerMaps, States, advance_saves, begin_saves, simulate_in_blocks
from .frame import (
    check_fits_frame,
    held_sine,
    lq,
    start_frame,
    two_token_attention,
    two_token_frame,
)


@final
class SpanTransformer(AbstractModel):
    """:class:`DiscreteTransformer` with scalar or deterministic values, simulated on the
    N × N coordinates of the tokens' span (see the module docstring). Built by
    ``model.reduction(n_tokens, dim)``."""

    model: LayerMaps
    n_tokens: int = eqx.field(static=True)
    dim: int = eqx.field(static=True)
    #: The norm of the model the route stands for (see ``ReducedTransformer.start``).
    start: AbstractNorm = eqx.field(default_factory=RMSNorm, kw_only=True)

    same_path_in_float64: ClassVar[bool] = True

    def merge_law(self, dim: int):
        """The law of the model it stands for, in the route's own dimension (d − 1 for a
        LayerNorm model, whose noise acts in the hyperplane)."""
        del dim
        return self.model.merge_law(self.dim)

    def __check_init__(self):
        check_fits_frame("span", self.n_tokens, self.dim)
        if not self.model.values.multiple_of_identity:
            raise ParameterError("the span route needs values that are multiples of I.")

    @property
    def save_times(self) -> np.ndarray:
        return self.model.save_times

    @property
    def _chain(self) -> bool:
        return self.n_tokens == 2 and self.model.scheme.post_ln_map

    def attention_scale_free(self) -> bool:
        return self.model.attention_scale_free()

    def keeps_unit_rows(self) -> bool:
        return self.model.keeps_unit_rows()

    @eqx.filter_jit
    def simulate(self, x0: Float[Array, "batch N d"], keys: Key[Array, " batch"]) -> States:
        return simulate_in_blocks(self, x0, keys)

    def stepping(self) -> tuple[int, int]:
        return self.model.stepping()

    def begin(self, x0, keys):
        """The route's state and, under a centred LayerNorm, the start's own frame
        coordinates: a save before the first layer is the start itself (as on the full
        route), not the frame of its centred rows that the route runs from."""
        c0 = jax.vmap(lambda x: start_frame(x, self.start))(x0)
        if not self._chain:
            # The layer maps themselves, on the frame coordinates (same keys, same s_n).
            inner = self.model.begin(c0, keys)
        else:
            inner = self._chain_state(c0[:, 1, 0], jnp.log(c0[:, 1, 1]))
        raw = None if self.start.codimension == 0 else jax.vmap(lq)(x0)
        return inner, raw

    def _chain_state(self, cz: Array, log_sz: Array):
        """The two-token chain's state at (cos φ, log sin φ), before its first layer."""
        saves = begin_saves(self.model.save_layers, jax.vmap(_frame_view)(cz, log_sz))
        return (cz, log_sz), saves

    def _simulate_chain(self, cz: Array, log_sz: Array, keys: Key[Array, " batch"]):
        """The two-token chain from (cos φ, log sin φ) themselves: a start closer to ±1 than
        float32 coordinates can hold (sin φ = 10⁻²⁰)."""
        stop = jnp.asarray(self.stepping()[0], jnp.int32)
        state = self._chain_state(cz, log_sz)
        return self._finish(self._advance(state, keys, jnp.zeros((), jnp.int32), stop))

    def advance(self, state, keys, start, stop):
        inner, raw = state
        return self._advance(inner, keys, start, stop), raw

    def finish(self, state):
        inner, raw = state
        saves = self._finish(inner)
        if raw is None:
            return saves
        first = np.asarray(self.model.save_layers) == 0
        return jnp.where(first[None, :, None, None], raw[:, None], saves)

    def _advance(self, state, keys, start, stop):
        if not self._chain:
            return self.model.advance(state, keys, start, stop)

        def run(y, lo, hi, anchor):
            del anchor

            def layer(n, y):
                cz, log_sz = y
                return self.chain_layer(cz, log_sz, self._scales(keys, n, cz.dtype))

            return jax.lax.fori_loop(lo, hi, layer, y)

        chain, saves = state
        view = lambda y: jax.vmap(_frame_view)(*y)  # noqa: E731
        return advance_saves(self.model.save_layers, chain, saves, start, stop, run, view)

    def _finish(self, state):
        if not self._chain:
            return self.model.finish(state)
        return jnp.swapaxes(state[1], 0, 1)

    def _scales(self, keys: Key[Array, " batch"], n: Array, dtype) -> Float[Array, " batch"]:
        values = self.model.values
        assert isinstance(values, AbstractScalarValues)
        layer_keys = jax.vmap(fold_in, in_axes=(0, None))(keys, n)
        depth = self.model.layers_per_unit
        return jax.vmap(lambda k: values.scale(key=k, depth=depth, dtype=dtype))(layer_keys)

    def chain_layer(self, cz: Array, log_sz: Array, s: Array) -> tuple[Array, Array]:
        """One Post-LN layer of the two-token chain with multiplier s (elementwise) on
        (cos φ, log sin φ): sin φ is multiplied by |det(I + sP)|/(|x₁||x₂|), so its
        logarithm is carried exactly and never underflows."""
        sz = jnp.exp(log_sz)
        # The attention matrix is e^m·P and the new angle ignores a factor common to both
        # rows: a = e^{−m}I + sP, which never overflows (e^m would from β ≈ 44).
        (p11, p12, p21, p22), exponent = two_token_attention(self.model.attention, cz)
        lead = 1 if exponent is None else jnp.exp(-exponent)
        a11, a12, a21, a22 = lead + s * p11, s * p12, s * p21, lead + s * p22
        x1 = (a11 + a12 * cz, a12 * sz)
        x2 = (a21 + a22 * cz, a22 * sz)
        n1 = jnp.sqrt(x1[0] ** 2 + x1[1] ** 2)
        n2 = jnp.sqrt(x2[0] ** 2 + x2[1] ** 2)
        new_cz = (x1[0] * x2[0] + x1[1] * x2[1]) / (n1 * n2)
        new_log_sz = jnp.log(jnp.abs(a11 * a22 - a12 * a21)) + log_sz - jnp.log(n1 * n2)
        # Rounding must not move θ₂ off the unit circle over 10⁵ layers.
        norm_sq = new_cz**2 + jnp.exp(2 * new_log_sz)
        return new_cz * jax.lax.rsqrt(norm_sq), new_log_sz - 0.5 * jnp.log(norm_sq)


def _frame_view(cz: Array, log_sz: Array) -> Float[Array, "2 2"]:
    """The frame rows (1, 0), (cos φ, sin φ), sin φ :func:`held_sine` (the state keeps
    log sin φ); 0 only for tokens that started merged (log sin φ = −∞)."""
    sz = jnp.where(jnp.isneginf(log_sz), 0.0, held_sine(jnp.exp(log_sz).astype(cz.dtype)))
    return two_token_frame(cz, sz)
