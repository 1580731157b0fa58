"""Discrete layer maps: deep transformers at initialization (spec §2), run with ``lax.scan``."""

import math
import warnings
from typing import Any, ClassVar, final

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, PRNGKeyArray, PyTree

from .._core import defaults
from .._core.attention import Attention
from .._core.eigenmaps import EigenmapsStep
from .._core.errors import (
    INT32_MAX,
    ParameterError,
    check_bound,
    check_int,
    check_single_key,
    check_start,
    user_stacklevel,
)
from .._core.linalg import matmul
from .._core.norms import AbstractNorm
from .._core.random import fold_in
from .._core.saveat import SaveAt
from .._core.schemes import AbstractScheme, PostLN, attention_update
from .._core.values import AbstractValues, DeterministicValues, MatrixValues
from .._core.weights import DrawnWeights, RandomWeights
from .base import AbstractTrajectoryModel, Reduction, advance_saves, begin_saves
from .reduced.reduction import reduce_discrete


def _optional_python_float(value) -> float | None:
    """Converter for static numbers: a Python float (hashable), or ``None``."""
    return None if value is None else float(value)


@final
class DiscreteTransformer(AbstractTrajectoryModel):
    """A transformer whose layer n acts at time t = n/L (or t = nη with a real step η).

    Each layer draws its value operator from ``values`` with the key
    ``fold_in(key, n)``, so one trajectory's randomness does not depend on how many
    trajectories run beside it; the scheme turns ``V_n A`` into the layer map.

    Memory stays bounded: only the states at the save times are kept. Between saves the
    layers run in a ``lax.fori_loop``.

    Args:
        attention: the attention core (β, kind, Q, K, options).
        values: the value operator; default full Gaussian matrix noise with σ = 1
            (003 eq. 4).
        scheme: the normalization scheme (and its norm); default Post-LN.
        depth: L, the number of layers per unit time (the step is 1/L; default 100).
        saveat: the horizon T (the stack has ``round(T/η)`` layers) and the save times,
            rounded to layers. A horizon off the layer grid is rounded with a warning that
            names the layer count; one shorter than half a layer is refused.
        step: a real step η > 0 instead of ``depth`` (t = nη; L = 1/η in the layer maps
            and the value operators, e.g. the peers' η = 0.1·e^{−β}).
        weights: frozen random Q, K, V (:class:`RandomWeights`), drawn per trajectory or
            shared, kept across depth or redrawn every k layers: scores β x_iᵀ B x_j and
            attention output V A_i, on which ``values`` then acts (use
            ``DeterministicValues()`` for the peers' x ← norm(x + η V A)). Needs one head
            and no matrices of its own in ``attention``.
    """

    attention: Attention
    # A factory: a default instance would create arrays, and so start the XLA backend, at
    # import time, which jax.distributed.initialize forbids.
    values: AbstractValues = eqx.field(default_factory=MatrixValues)
    scheme: AbstractScheme = PostLN()
    depth: int | None = eqx.field(static=True, default=None)
    saveat: SaveAt = SaveAt(1.0)
    step: float | None = eqx.field(
        static=True, default=None, kw_only=True, converter=_optional_python_float
    )
    weights: RandomWeights | None = eqx.field(default=None, kw_only=True)

    def __check_init__(self):
        _check_types(self)
        if self.depth is not None and self.step is not None:
            raise ParameterError("give depth (layers per unit time) or step (η), not both.")
        if self.depth is not None:
            check_int("depth", self.depth, lower=1, upper=INT32_MAX)
        if self.step is not None:
            check_bound("step", self.step, lower=0.0, lower_open=True)
        self._check_weights()
        self._check_horizon()

    def _check_weights(self) -> None:
        att = self.attention
        if self.weights is not None and not att.rotation_invariant:
            raise ParameterError(
                "weights= draws Q, K and V itself: it needs one head and no query, key_matrix, "
                "value or output in the attention."
            )

    def _check_horizon(self) -> None:
        # Rounded as the save times are (SaveAt.steps: the nearest grid point of t/η), so
        # that the layer count the warning names is the one the saves record.
        exact = self.saveat.horizon / self.step_size
        if not exact < INT32_MAX + 0.5:
            raise ParameterError(
                f"horizon/step = {exact:.6g} layers is more than the {INT32_MAX} that int32 "
                "layer indices hold; lower the depth or the horizon."
            )
        # Saves that round to one layer are refused here, where the model enters, not at
        # the first read of save_layers (a property a runtime type check may read first).
        self.saveat.steps(self.step_size)
        layers = self.n_layers
        if layers == 0:
            raise ParameterError(
                f"horizon={self.saveat.horizon:g} is shorter than half a layer (step "
                f"{self.step_size:g}): it would run 0 layers; give a horizon of at least one "
                "step or a smaller step."
            )
        # Within float32 rounding of the grid (a step given as a float32 array) is on it.
        if not math.isclose(exact, layers, rel_tol=1e-6, abs_tol=1e-6):
            warnings.warn(
                f"horizon={self.saveat.horizon:g} is not a multiple of the layer step "
                f"{self.step_size:g}: running {layers} layer{'s' if layers != 1 else ''}, to t = "
                f"{layers * self.step_size:g}.",
                stacklevel=user_stacklevel(),
            )

    @property
    def layers_per_unit(self) -> int | float:
        """L = 1/η: ``depth`` (an int), or ``1/step`` (a float)."""
        if self.step is not None:
            return 1.0 / self.step
        return defaults.DEPTH if self.depth is None else self.depth

    def provenance(self) -> dict[str, Any]:
        # L where the model steps by 1/L (depth=None: the default L), else the real step.
        return {"depth": self.layers_per_unit} if self.step is None else {"step": self.step}

    @property
    def step_size(self) -> float:
        """η = 1/L, the time between layers."""
        return self.step if self.step is not None else 1 / self.layers_per_unit

    @property
    def n_layers(self) -> int:
        """The layers to the horizon: T/η rounded to the nearest integer, as the save
        times are (:meth:`SaveAt.steps`)."""
        return int(self.saveat.steps(self.step_size, self.saveat.horizon)[-1])

    @property
    def save_layers(self) -> np.ndarray:
        return self.saveat.steps(self.step_size).astype(np.int32)

    @property
    def save_times(self) -> np.ndarray:
        if self.step is not None:
            return self.save_layers * self.step
        return self.save_layers / self.layers_per_unit

    def layer(
        self,
        x: Float[Array, "N d"],
        n: Array,
        *,
        key: PRNGKeyArray,
        drawn: DrawnWeights | None = None,
        noise: PyTree = None,
        carried: bool = False,
    ) -> Float[Array, "N d"]:
        """Layer n (0-based): the state after it, given the state before it.

        ``drawn``: this layer's random weights when already drawn (frozen weights are
        drawn once per trajectory); drawn here from ``key`` when omitted. ``noise``: the
        value operator's numbers for this layer (:meth:`layer_noise`) when already drawn.
        ``carried``: ``x`` is a state of the layer loop (``scheme.enter`` of a start, or a
        layer's output), which the scheme's :meth:`~AbstractScheme.step` may use as is.
        """
        depth = self.layers_per_unit
        if noise is None:
            noise = self.layer_noise(x, n, key=key)
        attention, value = self.attention, None
        if self.weights is not None:
            if drawn is None:
                drawn = self.weights.at_layer(key, n, x.shape[-1], x.dtype)
            attention, value = with_weights(attention, drawn), drawn.value

        def apply(a):
            if value is not None:
                a = matmul(a, value.T)
            return self.values.apply_noise(a, noise, depth=depth)

        scheme_map = self.scheme.step if carried else self.scheme.layer
        update = attention_update(attention, apply)
        return scheme_map(x, update, layer=n.astype(x.dtype), depth=depth)

    def layer_noise(self, x: Float[Array, "N d"], n: Array, *, key: PRNGKeyArray) -> PyTree:
        """Layer n's value-operator numbers, from the key ``fold_in(key, n)``."""
        n_tokens, dim = x.shape[-2:]
        return self.values.draw_noise(fold_in(key, n), n_tokens, dim, x.dtype)

    def trajectory(self, x0, *, key):
        # Checked before tracing: jit refuses some wrong types (a NumPy string array) with
        # its own error first.
        check_start("x0", x0)
        check_single_key("key", key)
        return self._trajectory(x0, key)

    @eqx.filter_jit
    def _trajectory(self, x0, key):
        state = self._begin(x0, key)
        stop = jnp.asarray(self.stepping()[0], jnp.int32)
        return self._advance(state, key, jnp.zeros((), jnp.int32), stop)[2]

    def stepping(self) -> tuple[int, int]:
        return int(self.save_layers[-1]), 1

    def begin(self, x0, keys):
        return jax.vmap(self._begin)(x0, keys)

    def advance(self, state, keys, start, stop):
        return jax.vmap(self._advance, in_axes=(0, 0, None, None))(state, keys, start, stop)

    def finish(self, state):
        return state[2]

    def _begin(self, x0: Float[Array, "N d"], key: PRNGKeyArray):
        """One trajectory's state before layer 0: the loop's carry and the save buffer."""
        first = self.layer_noise(x0, jnp.asarray(0, jnp.int32), key=key)
        # The loop carries the scheme's state (its directions, for the schemes that start
        # every layer by normalising): each layer's first norm is then done once, here. A
        # save before the first layer is the start itself, not the loop's state.
        return self.scheme.enter(x0), first, begin_saves(self.save_layers, x0)

    def _advance(self, state, key: PRNGKeyArray, start: Array, stop: Array):
        """Layers [start, stop) of one trajectory (see :func:`.base.advance_saves`)."""
        x, noise, saves = state
        drawn = None
        if self.weights is not None and self.weights.frozen:
            # Frozen: one draw for the whole trajectory (the same numbers as drawing it in
            # every layer from the same key).
            drawn = self.weights.at_layer(key, jnp.zeros((), jnp.int32), x.shape[-1], x.dtype)

        def step(n, carry):
            # Layer n + 1's numbers are drawn while layer n runs and carried: a loop-carried
            # array is materialised once, where a draw inside the layer would be fused, and
            # so recomputed, into each of its uses (XLA duplicates the integer hash into
            # every consumer: 2-3x the cost of the draw at N = 2, d = 4).
            x, noise = carry
            new = self.layer(x, n, key=key, drawn=drawn, noise=noise, carried=True)
            return new, self.layer_noise(x, n + 1, key=key)

        def run(carry, lo, hi, anchor):
            del anchor
            return jax.lax.fori_loop(lo, hi, step, carry)

        (x, noise), saves = advance_saves(
            self.save_layers, (x, noise), saves, start, stop, run, lambda carry: carry[0]
        )
        return x, noise, saves

    def attention_scale_free(self) -> bool:
        return self.scheme.scale_free

    def keeps_unit_rows(self) -> bool:
        # A gain or bias moves the normalised rows off the unit sphere.
        return not self.scheme.keeps_radius and not self.scheme.norm.affine

    def undefined_maps(self) -> list[str]:
        depth, n_layers = self.layers_per_unit, self.n_layers
        singular = [
            s
            for s in self.values.multiplier_atoms(depth)
            if self.scheme.vanishes_at(s, depth=depth, n_layers=n_layers)
        ]
        return [
            f"the value operator is V_n = {s:.6g}·I with positive probability (depth L = "
            f"{depth:g}), and with it the {self.scheme.name} layer normalises a zero vector "
            "for every token whose attention output is itself (a lone token, or a cluster "
            "merged to float32 resolution): the layer map is undefined there; change ε or "
            "L (Rademacher v_n = −1 with ε = (L + 1)/√L gives V_n = −I) or use a continuous "
            "law for v_n"
            for s in singular
        ]

    same_path_in_float64: ClassVar[bool] = True

    def merge_law(self, dim: int):
        """The law of a merged pair's gap (:mod:`.merging`): Post-LN with an RMS norm or a
        centred LayerNorm without gain or bias (noise in d − 1 dimensions), plain attention,
        no random weights, values with a known diffusion limit; ``None`` otherwise."""
        from .merging import law_of

        norm = self.scheme.norm
        coefficients = self.values.limit_coefficients()
        if not self.scheme.post_ln_map or norm.affine or self.weights is not None:
            return None
        if coefficients is None:
            return None
        drift, sigma, eps = coefficients
        space = norm.effective_dim(dim)
        return law_of(self.attention, space, drift=drift, sigma=sigma, eps=eps)

    def reduction(self, n_tokens: int, dim: int) -> Reduction:
        return reduce_discrete(self, n_tokens, dim)


def _check_types(model: "DiscreteTransformer") -> None:
    """Refuse components of the wrong kind by name (they failed later with an
    AttributeError deep inside a layer)."""
    expected = (
        ("attention", Attention, "an attndyn.Attention, e.g. Attention(beta)"),
        ("values", AbstractValues, "a value operator, e.g. MatrixValues(sigma)"),
        ("scheme", AbstractScheme, "a normalization scheme, e.g. PostLN()"),
    )
    for name, kind, example in expected:
        value = getattr(model, name)
        if not isinstance(value, kind):
            raise ParameterError(f"{name} must be {example}; got {value!r:.60}.")


def with_weights(attention: Attention, drawn: DrawnWeights) -> Attention:
    """``attention`` with the drawn query and key matrices (identity where ``None``)."""
    if drawn.query is None and drawn.key_matrix is None:
        return attention
    return eqx.tree_at(
        lambda a: (a.query, a.key_matrix),
        attention,
        (drawn.query, drawn.key_matrix),
        is_leaf=lambda v: v is None,
    )


def eigenmaps_transformer(
    step: EigenmapsStep, *, saveat: SaveAt, norm: "AbstractNorm | str" = "layernorm"
) -> DiscreteTransformer:
    """Seed 002's iteration ``X ← LayerNorm(X + 2η(softmax(κXXᵀ − βI − M) − I)X)`` as a
    :class:`DiscreteTransformer`: Laplacian attention, deterministic values and Post-LN with
    ``norm`` (centred LayerNorm by default) at step 2η, so that t = 2ηn."""
    return DiscreteTransformer(
        step.attention(),
        DeterministicValues(),
        PostLN(norm=norm),
        saveat=saveat,
        step=step.layer_step,
    )
