"""Normalization schemes as layer maps (seed 004, Table 1; spec §2).

Each scheme maps the state ``X`` (rows = tokens, shape ``(N, d)``) of layer ``n`` to layer
``n + 1``. ``update(Z)`` returns the rows ``V_n A_i(Z)``: the attention output computed on
``Z`` and hit by this layer's value operator, so that the same ``V_n`` (and the same
random draw) is used whichever input a scheme feeds to attention.

The state holds magnitudes where a scheme needs them: Pre-LN, Mix-LN (after τ) and Peri-LN
carry un-normalised rows whose norms are the radii r_i; the other schemes keep rows on
the sphere. Attention always sees the directions Θ (rows normalised): for the sphere
schemes this only matters in the first layer of a start off the sphere, whose magnitude
they discard anyway (Post-LN, nGPT and sqrt-scaling act on directions only).

Each scheme also gives the speed factors of the normalized-attention ODE (seed 004 eq. NA,
Table 2; spec §3.1): ``dθ_i/dt = P_{θ_i}(A_i(Θ)) / s_i(t)`` and ``dr_i/dt = ρ_i(t)``, with
``A`` computed on the directions and V = I. :meth:`AbstractScheme.speed` returns s_i and
:meth:`AbstractScheme.radial_rate` returns ρ_i, both from ``radial = ⟨θ_i, A_i⟩`` and
``attn_norm = |A_i|``. With deterministic values ``V_n = I/L`` the layer maps are Euler
steps (step 1/L) of these ODEs.

"normalize" in the tables is the scheme's :attr:`AbstractScheme.norm`: RMS (y/|y|, the
default) or centred LayerNorm ((y − ȳ)/|y − ȳ|, tokens on the unit sphere of the mean-zero
hyperplane; see :mod:`attndyn._core.norms`), e.g. ``PostLN(norm="layernorm")``. ``depth``
is L = 1/η and may be a float (a real-valued step η, t = nη).
"""

import abc
import dataclasses
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, ClassVar, final

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from . import defaults
from .attention import float_leaf
from .errors import check_bound, check_scalar
from .names import SCHEME_NAMES as SCHEME_NAMES
from .norms import AbstractNorm, RMSNorm, as_norm

Update = Callable[[Float[Array, "N d"]], Float[Array, "N d"]]
Scaled = tuple[Float[Array, "N d"], Float[Array, "N 1"] | None]


@dataclasses.dataclass(frozen=True)
class LayerUpdate:
    """A layer's update ``Z ↦ V_n A(Z)``, and the same update with its exponent apart.

    ``scaled(Z)`` is ``(Ũ, m)`` with ``V_n A_i(Z) = e^{m_i}·Ũ_i`` (``m`` is ``None`` when
    nothing was taken out): unnormalised attention's weights e^{β⟨q_i, k_j⟩} overflow at
    large β, but the schemes whose layer map ignores a positive factor shared by a row and
    its update never need them whole (:attr:`AbstractScheme.scale_free`). A plain callable
    is an update too; :func:`split_update` reads both."""

    plain: Update
    scaled: Callable[[Float[Array, "N d"]], Scaled]

    def __call__(self, z: Float[Array, "N d"]) -> Float[Array, "N d"]:
        return self.plain(z)


def attention_update(attention, apply: Update) -> LayerUpdate:
    """The update ``apply(attention(Z))`` of a value operator ``apply``, which acts row by
    row and linearly (``V_n A_i``), so that a factor e^{m_i} taken out of A_i is taken out
    of the update too."""

    def scaled(z):
        out, exponent = attention.scaled(z)
        return apply(out), exponent

    return LayerUpdate(lambda z: apply(attention(z)), scaled)


def split_update(update: Update, z: Float[Array, "N d"]) -> Scaled:
    """``(Ũ, m)`` with ``update(z) = e^m·Ũ`` row by row (``m`` is ``None`` for a plain
    callable, which gives the update whole)."""
    if isinstance(update, LayerUpdate):
        return update.scaled(z)
    return update(z), None


def shrink(x: Float[Array, "N d"], exponent: Float[Array, "N 1"] | None) -> Float[Array, "N d"]:
    """``e^{−m_i}·x_i``: the rows a scale-free scheme adds to an update ``Ũ``."""
    return x if exponent is None else x * jnp.exp(-exponent).astype(x.dtype)


def unscale(u: Float[Array, "N d"], exponent: Float[Array, "N 1"] | None) -> Float[Array, "N d"]:
    """``e^{m_i}·Ũ_i``: the update whole (it may overflow; see :attr:`scale_free`)."""
    return u if exponent is None else u * jnp.exp(exponent).astype(u.dtype)


#: Multipliers within this many float32 ulp of a singular value count as equal to it.
_ULPS = 4


def _near(value: float, target: float, *, scale: float = 1.0) -> bool:
    return abs(value - target) <= _ULPS * float(np.finfo(np.float32).eps) * scale


@dataclasses.dataclass(frozen=True)
class SpeedLaw:
    """A scheme's speed factors in closed form over a stretch of time, for formulas that
    need them in float64 (the symmetric start's theory, :mod:`attndyn.theory`)::

        s = √(t + 1)^sqrt_time · r^radius · |A|^attention / alpha,
        dr/dt = r⟨θ, A⟩/s where ``radius`` (the rows move as r·A/s), r = 1 otherwise,

    the factors that :meth:`AbstractScheme.speed` and :meth:`AbstractScheme.radial_rate`
    compute (tests/test_schemes.py checks that the two agree). ``alpha`` is its value at the
    start of the stretch; ``constant`` is False where it changes in time (nGPT's α(t)).
    """

    radius: bool = False
    attention: bool = False
    sqrt_time: bool = False
    alpha: float = 1.0
    constant: bool = True


class AbstractScheme(eqx.Module):
    """A normalization scheme: a layer map and (for the ODEs) its speed factors."""

    if TYPE_CHECKING:  # pyright does not know equinox's AbstractClassVar
        name: ClassVar[str]
        keeps_radius: ClassVar[bool]
    else:
        name: eqx.AbstractClassVar[str]
        #: Whether the state keeps magnitudes (rows off the unit sphere).
        keeps_radius: eqx.AbstractClassVar[bool]

    #: Whether the layer map acts row by row through norms and linear combinations of x_i
    #: and V_n A_i, so that it commutes with rotations (what the reduced route needs) when
    #: its :attr:`norm` does. The six built-in schemes do; a user-defined scheme is not
    #: assumed to.
    rotation_equivariant: ClassVar[bool] = False

    #: Whether the layer map is unchanged when the update of a row and the row it adds to
    #: are multiplied by one positive factor (it normalises their sum, or normalises the
    #: update alone). Such a scheme takes unnormalised attention's output as e^{m}·Ũ
    #: (:class:`LayerUpdate`) and runs at any β; the others need the update whole, which
    #: overflows once β·max score passes ½·ln(max) of the float type (refused before a
    #: study runs).
    scale_free: ClassVar[bool] = False

    #: Whether every layer is Post-LN's map ``x_i ← norm(x_i + V_n A_i(X))`` (003 eq. 4 and
    #: eq. 7; in the ODE, speed 1: the attention flow itself): the map whose two-token
    #: overlap chain the reduced routes write out scalar by scalar, and whose overlap
    #: diffusion (spec §4) early absorption and the merge law of a merged pair are derived
    #: from.
    post_ln_map: ClassVar[bool] = False

    #: The token normalisation of every normalising step of the scheme: :class:`RMSNorm`
    #: (the unit sphere, the default) or :class:`LayerNorm` (centred: the unit sphere of the
    #: mean-zero hyperplane); a name (``"rms"``, ``"layernorm"``) is accepted.
    norm: AbstractNorm = eqx.field(default=RMSNorm(), converter=as_norm, kw_only=True)

    def vanishes_at(self, multiplier: float, *, depth: int | float, n_layers: int) -> bool:
        """Whether some layer of the stack, with ``V_n = multiplier·I``, normalises a zero
        vector for a token whose attention output is the token itself (a lone token, or a
        cluster merged to the float's resolution): there the layer map is undefined. Within
        a few float32 ulp counts (the multiplier is computed in float32). Default: never
        (the schemes that normalise ``V_n A_i`` itself guard its zero)."""
        del multiplier, depth, n_layers
        return False

    @property
    def parameters(self) -> dict[str, float]:
        """The scheme's own numbers beside its norm, by name (``{"alpha": α}`` for nGPT,
        ``{"tau": τ}`` for Mix-LN; none for the others): what a summary or a message shows,
        and what ``dataclasses.replace(scheme, **{name: value})`` changes."""
        return {}

    def scale_switch(self, factor: int | float) -> "AbstractScheme":
        """This scheme with the time of its switch multiplied by ``factor`` (Mix-LN's τ,
        read as a fraction of the depth by a stack run at L = 1); the scheme itself where
        nothing switches."""
        del factor
        return self

    def speed_laws(self) -> tuple[tuple[float, SpeedLaw], ...] | None:
        """:meth:`speed` and :meth:`radial_rate` in closed form, stretch by stretch:
        ``((0.0, law_0), (t_1, law_1), …)``, each law in force from its time on (the
        factors jump between stretches: Mix-LN's τ). What the closed forms of the symmetric
        start read (:func:`attndyn.theory.initial_slope`,
        :func:`attndyn.theory.terminal_rate_theory`). ``None`` (the default): no closed
        form is known (a user-defined scheme)."""
        return None

    #: Whether each layer starts from the directions θ = norm(x) and returns normalised
    #: rows (Post-LN, nGPT, sqrt-scaling): a layer's output is then, to rounding, already
    #: what the next layer's first norm would make of it (see :meth:`step`).
    starts_from_directions: ClassVar[bool] = False

    @abc.abstractmethod
    def layer(
        self, x: Float[Array, "N d"], update: Update, *, layer: Array, depth: int | float
    ) -> Float[Array, "N d"]:
        """One layer. ``layer`` is the index n (time ``t = n/L``), ``depth`` is L."""

    def layer_on_directions(
        self, theta: Float[Array, "N d"], update: Update, *, layer: Array, depth: int | float
    ) -> Float[Array, "N d"]:
        """:meth:`layer` of rows that are already directions (``norm(θ) = θ``), without its
        first norm: what a scheme with :attr:`starts_from_directions` implements."""
        raise NotImplementedError(f"{type(self).__name__} does not start from directions.")

    @property
    def carries_directions(self) -> bool:
        """Whether a layer loop may carry the directions and skip each layer's first norm:
        the scheme starts from directions and its norm is idempotent (a gain or bias makes
        ``g ⊙ u + b`` something the norm moves)."""
        return self.starts_from_directions and not self.norm.affine

    def enter(self, x: Float[Array, "N d"]) -> Float[Array, "N d"]:
        """The state a layer loop carries for the start ``x``: its directions when
        :attr:`carries_directions`, ``x`` itself otherwise."""
        return self.norm(x) if self.carries_directions else x

    def step(
        self, x: Float[Array, "N d"], update: Update, *, layer: Array, depth: int | float
    ) -> Float[Array, "N d"]:
        """:meth:`layer` of a state the loop carries (from :meth:`enter` or :meth:`step`).

        ``step(enter(x))`` is ``layer(x)`` bit for bit. Later layers skip the first norm
        of rows that are already normalised: the same map, rounded once less (Post-LN at
        N = 32, d = 16 runs 5-7 % faster; the norm of a unit row moves it by an ulp or
        two, which is within the map's own rounding)."""
        if self.carries_directions:
            return self.layer_on_directions(x, update, layer=layer, depth=depth)
        return self.layer(x, update, layer=layer, depth=depth)

    @abc.abstractmethod
    def speed(
        self, t: Array, r: Float[Array, " N"], attn_norm: Float[Array, " N"]
    ) -> Float[Array, " N"]:
        """The speed-regulation factor s_i(t): the angular velocity is P_θ(A)/s_i."""

    def radial_rate(
        self,
        t: Array,
        r: Float[Array, " N"],
        radial: Float[Array, " N"],
        attn_norm: Float[Array, " N"],
    ) -> Float[Array, " N"]:
        """ρ_i = dr_i/dt; zero for the schemes that keep the rows on the sphere."""
        del t, r, attn_norm
        return jnp.zeros_like(radial)

    @property
    def switch_time(self) -> Float[Array, ""] | None:
        """A time where :meth:`speed` and :meth:`radial_rate` jump (Mix-LN's τ), which an
        ODE solver must not step across; ``None`` (the default) where they are continuous.
        The factors at the switch time itself are those after it."""
        return None

    def phases(self) -> tuple["AbstractScheme", ...]:
        """The schemes in force before and after :attr:`switch_time` (each with continuous
        factors, which the ODE solves on its own side of the switch); ``(self,)`` for a
        scheme without one."""
        return (self,)

    def start_radius(self, r0: Float[Array, "*N"]) -> Float[Array, "*N"]:
        """The magnitudes the ODE starts from, given the start's ``r0``: ``r0`` for the
        schemes that keep magnitudes, 1 for those whose first layer normalises them away."""
        return r0 if self.keeps_radius else jnp.ones_like(r0)


@final
class PostLN(AbstractScheme):
    """``x_i ← normalize(x_i + V_n A_i(X))``: 003 eq. 4 / eq. 7 with noisy values."""

    name: ClassVar[str] = "post-ln"
    keeps_radius: ClassVar[bool] = False
    rotation_equivariant: ClassVar[bool] = True
    starts_from_directions: ClassVar[bool] = True
    scale_free: ClassVar[bool] = True
    post_ln_map: ClassVar[bool] = True

    def layer(self, x, update, *, layer, depth):
        return self.layer_on_directions(self.norm(x), update, layer=layer, depth=depth)

    def layer_on_directions(self, theta, update, *, layer, depth):
        # norm(θ + e^m Ũ) = norm(e^{−m}θ + Ũ): the update's exponent never enters.
        u, exponent = split_update(update, theta)
        return self.norm(shrink(theta, exponent) + u)

    def vanishes_at(self, multiplier, *, depth, n_layers):
        # θ + s·θ = 0 at s = −1, in every layer.
        return _near(multiplier, -1.0)

    def speed(self, t, r, attn_norm):
        """s = 1."""
        return jnp.ones_like(r)

    def speed_laws(self):
        """s = 1 throughout."""
        return ((0.0, SpeedLaw()),)


@final
class PreLN(AbstractScheme):
    """``x_i ← x_i + V_n A_i(Θ)`` with Θ the normalised rows; radii grow."""

    name: ClassVar[str] = "pre-ln"
    keeps_radius: ClassVar[bool] = True
    rotation_equivariant: ClassVar[bool] = True

    def layer(self, x, update, *, layer, depth):
        return x + update(self.norm(x))

    def speed(self, t, r, attn_norm):
        """s = r: the growing magnitude damps the angular velocity."""
        return r

    def radial_rate(self, t, r, radial, attn_norm):
        """ρ = ⟨θ, A⟩."""
        return radial

    def speed_laws(self):
        """s = r throughout."""
        return ((0.0, SpeedLaw(radius=True)),)


@final
class MixLN(AbstractScheme):
    """Post-LN for the first ⌈τL⌉ layers, Pre-LN after (``tau`` is an array leaf).

    The Post-LN phase leaves unit rows, so the Pre-LN phase starts from r = 1 (for τ > 0;
    τ = 0 is plain Pre-LN from the start radius). The speed factors jump at τ
    (:attr:`switch_time`): the ODE is solved up to τ with Post-LN's factors and on from τ
    with Pre-LN's (:meth:`phases`; see :class:`attndyn.NormalizedAttentionODE`).
    """

    tau: Float[Array, ""] = eqx.field(converter=float_leaf("tau"), default=defaults.TAU)
    name: ClassVar[str] = "mix-ln"
    keeps_radius: ClassVar[bool] = True
    rotation_equivariant: ClassVar[bool] = True

    def __check_init__(self):
        check_scalar("tau", self.tau)
        check_bound("tau", self.tau, lower=0.0)

    def layer(self, x, update, *, layer, depth):
        switch = jnp.ceil(self.tau * depth)
        post = layer < switch
        # One attention evaluation: both branches feed attention the normalised rows
        # (Post-LN's rows are already on the sphere while it is active).
        theta = self.norm(x)
        u, exponent = split_update(update, theta)
        return jnp.where(post, self.norm(shrink(theta, exponent) + u), x + unscale(u, exponent))

    def vanishes_at(self, multiplier, *, depth, n_layers):
        # As Post-LN, in the layers before the switch to Pre-LN.
        return math.ceil(float(self.tau) * depth) > 0 and _near(multiplier, -1.0)

    @property
    def parameters(self):
        return {"tau": float(self.tau)}

    def scale_switch(self, factor):
        return MixLN(tau=self.tau * factor, norm=self.norm)

    def speed_laws(self):
        """Its :meth:`phases`' laws: Post-LN's s = 1 up to τ, Pre-LN's s = r from τ on (from
        r = 1, which the Post-LN stretch leaves); Pre-LN's alone for τ = 0."""
        tau = float(self.tau)
        post, pre = (phase.speed_laws()[0][1] for phase in self.phases())  # type: ignore[index]
        return ((0.0, pre),) if tau == 0 else ((0.0, post), (tau, pre))

    def speed(self, t, r, attn_norm):
        """s = 1 for t < τ, r after."""
        return jnp.where(t < self.tau, jnp.ones_like(r), r)

    def radial_rate(self, t, r, radial, attn_norm):
        """ρ = 0 for t < τ, ⟨θ, A⟩ after."""
        return jnp.where(t < self.tau, jnp.zeros_like(radial), radial)

    @property
    def switch_time(self) -> Float[Array, ""]:
        """τ: Post-LN's factors before it, Pre-LN's from it on."""
        return self.tau

    def phases(self) -> tuple[AbstractScheme, ...]:
        """Post-LN, then Pre-LN (with this scheme's norm)."""
        return (PostLN(norm=self.norm), PreLN(norm=self.norm))

    def start_radius(self, r0):
        """1 when a Post-LN phase comes first (τ > 0), ``r0`` for plain Pre-LN (τ = 0)."""
        return jnp.where(self.tau > 0, jnp.ones_like(r0), r0)


@final
class PeriLN(AbstractScheme):
    """``x_i ← x_i + (1/L)·normalize(L·V_n A_i(Θ))``: unit-length steps of size 1/L.

    Where ``V_n A_i = 0`` (two antipodal tokens at β = 0, Laplacian attention on coincident
    tokens) the step has no direction: the token does not move (in the ODE, dθ_i/dt = 0
    and dr_i/dt = 0 there).
    """

    name: ClassVar[str] = "peri-ln"
    keeps_radius: ClassVar[bool] = True
    rotation_equivariant: ClassVar[bool] = True
    scale_free: ClassVar[bool] = True

    def layer(self, x, update, *, layer, depth):
        u, _ = split_update(update, self.norm(x))  # normalised alone: its factor drops out
        return x + self.norm.safe(depth * u) / depth

    def speed(self, t, r, attn_norm):
        """s = r·|A|: unit-speed steps in the ambient space (∞ where A = 0: no move)."""
        s = r * attn_norm
        return jnp.where(attn_norm == 0, jnp.full_like(s, jnp.inf), s)

    def radial_rate(self, t, r, radial, attn_norm):
        """ρ = ⟨θ, A⟩/|A| (0 where A = 0: no move)."""
        rate = radial / attn_norm
        return jnp.where(attn_norm == 0, jnp.zeros_like(rate), rate)

    def speed_laws(self):
        """s = r·|A| throughout."""
        return ((0.0, SpeedLaw(radius=True, attention=True)),)


@final
class NGPT(AbstractScheme):
    """``x_i ← normalize(x_i + α(t)(1/L)(normalize(L·V_n A_i(X)) − x_i))``.

    ``alpha`` is the constant α (array leaf); pass ``alpha_schedule`` (a function of
    t = n/L returning an array) for a time-dependent α(t), which then replaces it. Where
    ``V_n A_i = 0`` the inner normalisation has no direction and the token does not move.
    """

    alpha: Float[Array, ""] = eqx.field(converter=float_leaf("alpha"), default=defaults.ALPHA)
    alpha_schedule: Callable[[Array], Array] | None = eqx.field(static=True, default=None)
    name: ClassVar[str] = "ngpt"
    keeps_radius: ClassVar[bool] = False
    rotation_equivariant: ClassVar[bool] = True
    starts_from_directions: ClassVar[bool] = True
    scale_free: ClassVar[bool] = True

    def __check_init__(self):
        check_scalar("alpha", self.alpha)
        check_bound("alpha", self.alpha, lower=0.0, lower_open=True)

    def alpha_at(self, t: Array) -> Array:
        return self.alpha if self.alpha_schedule is None else self.alpha_schedule(t)

    @property
    def parameters(self):
        return {"alpha": float(self.alpha)}

    def speed_laws(self):
        """s = |A|/α(t) throughout (α(0) given; not constant under a schedule)."""
        alpha = float(self.alpha_at(jnp.zeros(())))
        law = SpeedLaw(attention=True, alpha=alpha, constant=self.alpha_schedule is None)
        return ((0.0, law),)

    def layer(self, x, update, *, layer, depth):
        return self.layer_on_directions(self.norm(x), update, layer=layer, depth=depth)

    def layer_on_directions(self, theta, update, *, layer, depth):
        alpha = self.alpha_at(layer / depth)
        u, _ = split_update(update, theta)  # normalised alone: its factor drops out
        step = depth * u
        out = self.norm(theta + alpha / depth * (self.norm(step) - theta))
        # V_n A_i = 0 has no direction: no move (the NaN of 0/0 is replaced, nothing else).
        still = jnp.all(self.norm.centre(step) == 0, axis=-1, keepdims=True)
        return jnp.where(still, theta, out)

    def speed(self, t, r, attn_norm):
        """s = |A|/α(t) (∞ where A = 0: no move)."""
        still = jnp.where(attn_norm == 0, jnp.inf, 0.0).astype(attn_norm.dtype)
        return attn_norm / self.alpha_at(t) + still


@final
class SqrtScaling(AbstractScheme):
    """``x_i ← normalize(x_i + V_n A_i(X)/√(t+1))`` with t = n/L."""

    name: ClassVar[str] = "sqrt-scaling"
    keeps_radius: ClassVar[bool] = False
    rotation_equivariant: ClassVar[bool] = True
    starts_from_directions: ClassVar[bool] = True
    scale_free: ClassVar[bool] = True

    def layer(self, x, update, *, layer, depth):
        return self.layer_on_directions(self.norm(x), update, layer=layer, depth=depth)

    def layer_on_directions(self, theta, update, *, layer, depth):
        u, exponent = split_update(update, theta)
        return self.norm(shrink(theta, exponent) + u / jnp.sqrt(layer / depth + 1.0))

    def vanishes_at(self, multiplier, *, depth, n_layers):
        # θ + sθ/√(t + 1) = 0 at t = s² − 1: vanishes if that time is a layer's.
        if multiplier >= 0:
            return False
        layer = round((multiplier**2 - 1.0) * depth)
        singular = -math.sqrt(layer / depth + 1.0)
        return 0 <= layer < n_layers and _near(multiplier, singular, scale=-singular)

    def speed(self, t, r, attn_norm):
        """s = √(t + 1)."""
        return jnp.broadcast_to(jnp.sqrt(t + 1.0), r.shape).astype(r.dtype)

    def speed_laws(self):
        """s = √(t + 1) throughout."""
        return ((0.0, SpeedLaw(sqrt_time=True)),)


def scheme_from_name(
    name: str,
    *,
    tau: float = defaults.TAU,
    alpha: float = defaults.ALPHA,
    norm: "AbstractNorm | str" = defaults.NORM,
) -> AbstractScheme:
    """The scheme called ``name`` (one of :data:`SCHEME_NAMES`) with the given ``norm``."""
    from .errors import check_choice

    check_choice("scheme", name, SCHEME_NAMES)
    norm = as_norm(norm)
    return {
        "post-ln": lambda: PostLN(norm=norm),
        "pre-ln": lambda: PreLN(norm=norm),
        "mix-ln": lambda: MixLN(tau=tau, norm=norm),
        "peri-ln": lambda: PeriLN(norm=norm),
        "ngpt": lambda: NGPT(alpha=alpha, norm=norm),
        "sqrt-scaling": lambda: SqrtScaling(norm=norm),
    }[name]()
