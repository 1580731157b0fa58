"""Normalization schemes as layer maps (seed 004, Table 1; spec §2).

Each scheme maps the state ``X`` (rows = tokens, shape ``(N, d)``) of layer ``n`` to layer
``n + 1``. ``update(Z)`` returns the rows ``V_n A_i(Z)``: the attention output computed on
``Z`` and hit by this layer's value operator, so that the same ``V_n`` (and the same
random draw) is used whichever input a scheme feeds to attention.

The state holds magnitudes where a scheme needs them: Pre-LN, Mix-LN (after τ) and Peri-LN
carry un-normalised rows whose norms are the radii r_i; the other schemes keep rows on
the sphere.
"""

import abc
from collections.abc import Callable

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Float

from ._attention import as_float
from ._errors import check_bound
from ._sphere import normalize

Update = Callable[[Float[Array, "N d"]], Float[Array, "N d"]]

SCHEME_NAMES = ("post-ln", "pre-ln", "mix-ln", "peri-ln", "ngpt", "sqrt-scaling")


class AbstractScheme(eqx.Module):
    """A normalization scheme: a layer map and (for the ODEs) its speed factors."""

    name: eqx.AbstractClassVar[str]
    #: Whether the state keeps magnitudes (rows off the unit sphere).
    keeps_radius: eqx.AbstractClassVar[bool]

    @abc.abstractmethod
    def layer(
        self, x: Float[Array, "N d"], update: Update, *, layer: Array, depth: int
    ) -> Float[Array, "N d"]:
        """One layer. ``layer`` is the index n (time ``t = n/L``), ``depth`` is L."""


class PostLN(AbstractScheme):
    """``x_i ← normalize(x_i + V_n A_i(X))``: 003 eq. 4 / eq. 7 with noisy values."""

    name = "post-ln"
    keeps_radius = False

    def layer(self, x, update, *, layer, depth):
        return normalize(x + update(x))


class PreLN(AbstractScheme):
    """``x_i ← x_i + V_n A_i(Θ)`` with Θ the normalised rows; radii grow."""

    name = "pre-ln"
    keeps_radius = True

    def layer(self, x, update, *, layer, depth):
        return x + update(normalize(x))


class MixLN(AbstractScheme):
    """Post-LN for the first ⌈τL⌉ layers, Pre-LN after (``tau`` is an array leaf)."""

    tau: Float[Array, ""] = eqx.field(converter=as_float, default=0.5)
    name = "mix-ln"
    keeps_radius = True

    def __check_init__(self):
        check_bound("tau", self.tau, lower=0.0)

    def layer(self, x, update, *, layer, depth):
        switch = jnp.ceil(self.tau * depth)
        post = layer < switch
        # One attention evaluation: both branches feed attention the normalised rows
        # (Post-LN's rows are already on the sphere while it is active).
        theta = normalize(x)
        step = update(theta)
        return jnp.where(post, normalize(x + step), x + step)


class PeriLN(AbstractScheme):
    """``x_i ← x_i + (1/L)·normalize(L·V_n A_i(Θ))``: unit-length steps of size 1/L."""

    name = "peri-ln"
    keeps_radius = True

    def layer(self, x, update, *, layer, depth):
        return x + normalize(depth * update(normalize(x))) / depth


class NGPT(AbstractScheme):
    """``x_i ← normalize(x_i + α(t)(1/L)(normalize(L·V_n A_i(X)) − x_i))``.

    ``alpha`` is the constant α (array leaf); pass ``alpha_schedule`` (a function of
    t = n/L returning an array) for a time-dependent α(t), which then replaces it.
    """

    alpha: Float[Array, ""] = eqx.field(converter=as_float, default=1.0)
    alpha_schedule: Callable[[Array], Array] | None = eqx.field(static=True, default=None)
    name = "ngpt"
    keeps_radius = False

    def __check_init__(self):
        check_bound("alpha", self.alpha, lower=0.0, lower_open=True)

    def alpha_at(self, t: Array) -> Array:
        return self.alpha if self.alpha_schedule is None else self.alpha_schedule(t)

    def layer(self, x, update, *, layer, depth):
        alpha = self.alpha_at(layer / depth)
        return normalize(x + alpha / depth * (normalize(depth * update(x)) - x))


class SqrtScaling(AbstractScheme):
    """``x_i ← normalize(x_i + V_n A_i(X)/√(t+1))`` with t = n/L."""

    name = "sqrt-scaling"
    keeps_radius = False

    def layer(self, x, update, *, layer, depth):
        return normalize(x + update(x) / jnp.sqrt(layer / depth + 1.0))


def scheme_from_name(name: str, *, tau: float = 0.5, alpha: float = 1.0) -> AbstractScheme:
    """The scheme called ``name`` (one of :data:`SCHEME_NAMES`)."""
    from ._errors import check_choice

    check_choice("scheme", name, SCHEME_NAMES)
    return {
        "post-ln": lambda: PostLN(),
        "pre-ln": lambda: PreLN(),
        "mix-ln": lambda: MixLN(tau=tau),
        "peri-ln": lambda: PeriLN(),
        "ngpt": lambda: NGPT(alpha=alpha),
        "sqrt-scaling": lambda: SqrtScaling(),
    }[name]()


