"""Discrete layer maps: deep transformers at initialization (spec §2), run with ``lax.scan``."""

from typing import final

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, PRNGKeyArray

from .._core.attention import Attention
from .._core.errors import INT32_MAX, ParameterError, check_int
from .._core.saveat import SaveAt
from .._core.schemes import AbstractScheme, PostLN
from .._core.values import AbstractValues, MatrixValues
from .base import AbstractTrajectoryModel, Reduction


@final
class DiscreteTransformer(AbstractTrajectoryModel):
    """A depth-``L·T`` transformer whose layer n acts at time t = n/L.

    Each layer draws its value operator from ``values`` with the key
    ``fold_in(key, n)``, so one trajectory's randomness does not depend on how many
    trajectories run beside it; the scheme turns ``V_n A`` into the layer map.

    Memory stays bounded: only the states at the save times are kept. Between saves the
    layers run in a ``lax.fori_loop``.

    Args:
        attention: the attention core (β, kind, Q, K, options).
        values: the value operator; default full Gaussian matrix noise with σ = 1
            (003 eq. 4).
        scheme: the normalization scheme; default Post-LN.
        depth: L, the number of layers per unit time (the step is 1/L).
        saveat: the horizon T (the stack has ``round(L·T)`` layers) and the save times,
            rounded to layers.
    """

    attention: Attention
    # A factory: a default instance would create arrays, and so start the XLA backend, at
    # import time, which jax.distributed.initialize forbids.
    values: AbstractValues = eqx.field(default_factory=MatrixValues)
    scheme: AbstractScheme = PostLN()
    depth: int = eqx.field(static=True, default=100)
    saveat: SaveAt = SaveAt(1.0)

    def __check_init__(self):
        check_int("depth", self.depth, lower=1, upper=INT32_MAX)
        check_layer_count(self.depth, self.saveat.horizon)

    @property
    def n_layers(self) -> int:
        return round(self.depth * self.saveat.horizon)

    @property
    def save_layers(self) -> np.ndarray:
        return self.saveat.steps(1 / self.depth).astype(np.int32)

    @property
    def save_times(self) -> np.ndarray:
        return self.save_layers / self.depth

    def layer(self, x: Float[Array, "N d"], n: Array, *, key: PRNGKeyArray) -> Float[Array, "N d"]:
        """Layer n (0-based): the state after it, given the state before it."""
        layer_key = jax.random.fold_in(key, n)

        def update(z):
            return self.values.apply(self.attention(z), key=layer_key, depth=self.depth)

        return self.scheme.layer(x, update, layer=n.astype(x.dtype), depth=self.depth)

    def trajectory(self, x0, *, key):
        def segment(carry, stop):
            x, start = carry
            x = jax.lax.fori_loop(start, stop, lambda n, y: self.layer(y, n, key=key), x)
            return (x, stop), x

        _, saves = jax.lax.scan(
            segment, (x0, jnp.asarray(0, jnp.int32)), jnp.asarray(self.save_layers)
        )
        return saves

    def reduction(self, n_tokens: int, dim: int) -> Reduction:
        # Imported here: the reduced route is built on this model, not the other way round.
        from .reduced.model import reduce_discrete

        return reduce_discrete(self, n_tokens, dim)


def check_layer_count(depth: int, horizon: float) -> None:
    """L·T must round to at least one layer and fit the int32 layer index."""
    layers = depth * horizon
    product = f"depth·horizon = {depth}·{horizon:g} = {layers:.6g}"
    if not layers < INT32_MAX + 0.5:
        raise ParameterError(
            f"{product} layers is more than the {INT32_MAX} that int32 layer indices hold; "
            "lower the depth or the horizon."
        )
    if round(layers) < 1:
        raise ParameterError(
            f"{product} rounds to 0 layers; the stack needs at least one: raise the depth or "
            "the horizon."
        )
