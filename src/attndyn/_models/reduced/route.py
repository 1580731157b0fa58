"""What the reduced routes of Gaussian value matrices share: the tokens as N × N
coordinates in an orthonormal frame of their span.

A route holds the :class:`~attndyn.DiscreteTransformer` it stands for and implements two
things, :meth:`AbstractFrameRoute.layer` (one layer of one trajectory) and
:meth:`AbstractFrameRoute.run` (layers ``[start, stop)`` of a batch); everything else
(starts, saves, blocks of layers, the estimator's questions) is here:

- the frame route (:mod:`.frame_route`, :class:`~attndyn.ReducedTransformer`): any N and
  scheme, the layer map on the frame coordinates with the value noise seen from the frame;
- the two-token chain (:mod:`.chain`, :class:`.chain.TwoTokenChain`): N = 2 under Post-LN,
  the overlap chain on (cos φ, sin φ) written out scalar by scalar;
- early absorption (:mod:`.absorbing`, :class:`.absorbing.AbsorbingRoute`) wraps a route
  and runs only the trajectories whose class can still change.
"""

import abc
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Key, PRNGKeyArray

from ..._core.errors import ParameterError, check_single_key, check_start
from ..._core.norms import AbstractNorm, RMSNorm
from ..base import AbstractModel, LayerMaps, States, advance_saves, begin_saves, simulate_in_blocks
from .absorbing import AbsorbingRoute
from .absorption import absorb_tile, absorption_applies, absorption_gaps
from .frame import check_fits_frame, lq, start_frame


class AbstractFrameRoute(AbstractModel):
    """The law of :class:`~attndyn.DiscreteTransformer` with Gaussian value matrices,
    simulated on the tokens' N × N coordinates in an orthonormal frame of their span.

    :meth:`simulate` takes the same ``(N, d)`` starts as the full model and returns, at
    each save time, the tokens' coordinates ``(N, N)``: the same Gram matrices in law,
    hence the same clustering classes and cosines. A route uses other random numbers than
    the full model (fewer), so trajectories agree in law, not path by path.
    """

    model: LayerMaps
    n_tokens: int = eqx.field(static=True)
    dim: int = eqx.field(static=True)
    #: The norm of the model the route stands for, which maps its starts in R^d to the
    #: tokens' space (:func:`.frame.start_frame`): RMS, or a centred LayerNorm whose model
    #: this route runs as the RMS model in ``dim`` = d − 1 dimensions.
    start: AbstractNorm = eqx.field(default_factory=RMSNorm, kw_only=True)

    same_path_in_float64: ClassVar[bool] = True

    @abc.abstractmethod
    def layer(self, c: Float[Array, "N N"], n: Array, *, key: PRNGKeyArray) -> Float[Array, "N N"]:
        """Layer n of one trajectory on its frame coordinates ``c``, with the numbers the
        route draws for that layer from the trajectory's ``key``."""

    @abc.abstractmethod
    def run(
        self, c: Float[Array, "batch N N"], start: Array, stop: Array, keys: Key[Array, " batch"]
    ) -> Float[Array, "batch N N"]:
        """Layers ``[start, stop)`` of a batch (its states ``c`` after the layers before
        ``start``): the same numbers however a run is cut, each trajectory's from its own
        key and the absolute layer index."""

    def __check_init__(self):
        check_fits_frame("reduced", self.n_tokens, self.dim)

    def merge_law(self, dim: int):
        """The law of the model it stands for, in the route's own dimension (d − 1 for a
        LayerNorm model, whose noise acts in the hyperplane)."""
        del dim
        return self.model.merge_law(self.dim)

    @property
    def save_times(self) -> np.ndarray:
        return self.model.save_times

    def attention_scale_free(self) -> bool:
        return self.model.attention_scale_free()

    def keeps_unit_rows(self) -> bool:
        return self.model.keeps_unit_rows()

    def gaussian_matrix(self) -> tuple[Array, Array]:
        """(a, σ) of the model's value matrices ``V_n = a·I/L + σ M_n/√L`` (a route is
        built only for Gaussian ones)."""
        matrix = self.model.values.gaussian_matrix()
        assert matrix is not None
        return matrix

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
    def simulate(self, x0: Float[Array, "batch N d"], keys: Key[Array, " batch"]) -> States:
        """A batch of trajectories, one key each."""
        return simulate_in_blocks(self, x0, keys)

    def stepping(self) -> tuple[int, int]:
        return int(self.model.save_layers[-1]), 1

    def begin(self, x0, keys):
        c0 = jax.vmap(self.reduce)(x0)
        # A save before the first layer is the start itself (as on the full route).
        raw = c0 if self.start.codimension == 0 else jax.vmap(lq)(x0)
        return c0, begin_saves(self.model.save_layers, raw)

    def advance(self, state, keys, start, stop):
        def run(c, lo, hi, anchor):
            del anchor
            return self.run(c, lo, hi, keys)

        c, saves = state
        return advance_saves(self.model.save_layers, c, saves, start, stop, run, lambda c: c)

    def finish(self, state):
        return jnp.swapaxes(state[1], 0, 1)

    def with_absorption(self, *, tol: float, bound: float, dim: int) -> "AbsorbingRoute":
        blocker = absorption_applies(self.model, self.n_tokens)
        if blocker is not None:
            raise ParameterError(f"early_absorption does not apply: {blocker}.")
        # The route's own dimension: d − 1 for a LayerNorm model (its RMS law).
        del dim
        gaps = absorption_gaps(float(self.model.attention.beta), self.dim, tol, bound)
        # The order in which live trajectories run changes no number, so the compaction
        # tile may follow the backend.
        return AbsorbingRoute(self, jnp.asarray(gaps, jnp.float32), absorb_tile=absorb_tile())
