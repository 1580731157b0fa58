"""Discrete layer maps: deep transformers at initialization (spec §2), run with ``lax.scan``."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, PRNGKeyArray

from ._attention import Attention
from ._dynamics import AbstractDynamics
from ._errors import ParameterError, check_bound, check_int
from ._schemes import AbstractScheme, PostLN
from ._values import AbstractValues, MatrixValues


class DiscreteTransformer(AbstractDynamics):
    """A depth-``L·T`` transformer whose layer n acts at time t = n/L.

    Each layer draws its value operator from ``values`` with the key
    ``fold_in(key, n)``, so one trajectory's randomness does not depend on how many
    trajectories run beside it; the scheme turns ``V_n A`` into the layer map.

    Memory stays bounded: only the states at ``save_times`` (default: the horizon) are
    kept. Between saves the layers run in a ``lax.fori_loop``.

    Args:
        attention: the attention core (β, kind, Q, K, options).
        values: the value operator; default full Gaussian matrix noise with σ = 1
            (003 eq. 4).
        scheme: the normalization scheme; default Post-LN.
        depth: L, the number of layers per unit time (the step is 1/L).
        horizon: T; the stack has ``round(L·T)`` layers.
        save_times: times in [0, T] at which to record the state (rounded to layers).
    """

    attention: Attention
    # A factory: a default instance would create arrays, and so start the XLA backend, at
    # import time, which jax.distributed.initialize forbids.
    values: AbstractValues = eqx.field(default_factory=MatrixValues)
    scheme: AbstractScheme = PostLN()
    depth: int = eqx.field(static=True, default=100)
    horizon: float = eqx.field(static=True, default=1.0)
    save_at: tuple[float, ...] | None = eqx.field(static=True, default=None)

    def __check_init__(self):
        check_int("depth", self.depth, lower=1)
        check_bound("horizon", self.horizon, lower=0.0, lower_open=True)
        if self.save_at is not None:
            if len(self.save_at) == 0:
                raise ParameterError("save_at must name at least one time in [0, horizon].")
            check_bound("save_at", np.asarray(self.save_at), lower=0.0, upper=self.horizon)

    @property
    def n_layers(self) -> int:
        return round(self.depth * self.horizon)

    @property
    def save_layers(self) -> np.ndarray:
        times = (self.horizon,) if self.save_at is None else self.save_at
        layers = np.rint(np.asarray(times, dtype=np.float64) * self.depth).astype(np.int32)
        if np.any(np.diff(layers) < 0):
            raise ParameterError("save_at must be non-decreasing.")
        return layers

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
