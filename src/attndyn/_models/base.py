"""The one interface every simulated model offers to the estimator.

The estimator knows models only through :class:`AbstractModel`: a batch of starts and keys
in, the states at the save times out, plus two optional transformations that a model may
or may not support (a reduced form that is exact in law, and early absorption). It never
asks which concrete class it runs, so a new model plugs in by implementing
:meth:`AbstractModel.simulate` and :attr:`AbstractModel.save_times`.

Following equinox's abstract/final pattern, every class here is abstract and every
concrete model is final (``typing.final``): behaviour is never inherited from a concrete
class, only from these abstract ones.
"""

import abc
import math
from typing import TYPE_CHECKING, ClassVar, NamedTuple

import equinox as eqx
import jax
import numpy as np
from jaxtyping import Array, Float, Key, PRNGKeyArray

from .._core.errors import ParameterError

if TYPE_CHECKING:
    from .merging import MergeLaw

States = Float[Array, "batch n_saves N k"]

#: An overflow threshold counts as reached this factor early (exp(β)·1000, |x|·1000): the
#: formulas around it multiply by moderate constants.
OVERFLOW_MARGIN = 1e3


def exp_square_threshold(dtype: np.dtype) -> float:
    """½·ln(max ``dtype``): where (e^x)² overflows (44.4 in float32, 354.9 in float64)."""
    return 0.5 * math.log(float(np.finfo(dtype).max))


class Reduction(NamedTuple):
    """A model's reduced form at (N, d), or why it has none (``model is None``)."""

    model: "AbstractModel | None"
    reason: str


class AbstractModel(eqx.Module):
    """A model of N tokens in R^d that the estimator can simulate in batches.

    :meth:`simulate` returns, for each trajectory, the tokens at every save time as rows of
    coordinates in *some* orthonormal frame: ``k = d`` for the models that simulate
    R^d itself, ``k ≤ d`` for reduced forms (the frame of the tokens' span). Only
    rotation-invariant observables (overlaps, classes, cosines) may be read from them.
    """

    #: Whether each device may run its own slice of a batch in its own loops
    #: (``shard_map``): true for the layer maps and exact chains; diffrax solves are left
    #: to the compiler's partitioner instead.
    per_device: ClassVar[bool] = True
    #: Whether the model's own map can send two distinct tokens onto one point (or onto
    #: antipodes) in finite time. False for every built-in model (distinct tokens only
    #: approach each other): coinciding tokens in the saves are then a numerical merge,
    #: which the estimator counts in ``n_merged`` and treats as ``on_merged`` says. A model
    #: whose map makes tokens meet (a jump, a projection) sets it True: its coincidences
    #: are dynamics, and are not counted.
    tokens_can_meet: ClassVar[bool] = False
    #: Whether a float64 run of this model computes the same paths as its float32 run of
    #: the same keys, with less rounding (every random number drawn in float32 from keys
    #: that do not depend on the precision, :mod:`attndyn._core.random`): only then may
    #: the estimator rerun a trajectory that float32 merged in float64 *as that
    #: trajectory* (an independent float64 path, chosen because float32 merged it, would
    #: bias the estimate). False unless a model says so: diffrax's Brownian paths key
    #: their increments by the float bits of the times, so the SDEs say no.
    same_path_in_float64: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs):
        # The abstract/final pattern, enforced: a subclass of a concrete model could change
        # its dynamics while keeping its reduced form (an exact-in-law shortcut for the
        # parent only), so concrete models cannot be subclassed. Wrap one instead.
        for base in cls.__mro__[1:]:
            if getattr(base, "__final__", False):
                raise TypeError(
                    f"{base.__name__} is final; to change it, write a new model that subclasses "
                    "attndyn.AbstractModel (it may hold a "
                    f"{base.__name__} and delegate to it)."
                )
        super().__init_subclass__(**kwargs)

    @property
    @abc.abstractmethod
    def save_times(self) -> np.ndarray:
        """The times at which :meth:`simulate` records the state (float64)."""

    @abc.abstractmethod
    def simulate(self, x0: Float[Array, "batch N d"], keys: Key[Array, " batch"]) -> States:
        """The states at :attr:`save_times` of a batch of trajectories, one key each."""

    def reduction(self, n_tokens: int, dim: int) -> Reduction:
        """The cheaper model with the same law of every rotation-invariant observable, if
        one exists at (N, d). The default: none."""
        del n_tokens, dim
        return Reduction(None, f"{type(self).__name__} has no reduced form")

    def with_absorption(self, *, tol: float, bound: float, dim: int) -> "AbstractModel":
        """This model, stopping trajectories whose class can no longer change except with
        probability ≤ ``bound`` (see :mod:`attndyn._models.reduced.absorption`)."""
        del tol, bound, dim
        raise ParameterError(f"early_absorption does not apply to {type(self).__name__}.")

    def absorption_gaps(self) -> tuple[float, float] | None:
        """(δ₊, δ₋) when absorbing, for provenance; ``None`` otherwise."""
        return None

    def merge_law(self, dim: int) -> "MergeLaw | None":
        """The diffusion law of a numerically merged pair's gap in this model at
        dimension ``dim`` (:mod:`attndyn._models.merging`), from which the estimator bounds
        the chance that the pair would have come apart; ``None`` where none is derived
        (the default): merged pairs are then rerun in float64 where
        :attr:`same_path_in_float64`, and refused where they stay merged."""
        del dim
        return None

    def batched_lapack(self) -> bool:
        """Whether :meth:`simulate` calls LAPACK kernels on batches (an implicit solver's LU
        factorisations). jaxlib 0.10's batched kernels split their batch over the intra-op
        thread pool and wait for it; with several CPU devices inside such calls at once,
        every pool thread waits and the run deadlocks, so the estimator runs these models
        on one CPU device. The default: no."""
        return False

    def undefined_maps(self) -> list[str]:
        """Parameters at which the model's own map is undefined somewhere it can reach (a
        normalisation of a zero vector, ...), each as a sentence naming them: what the
        estimator reports when trajectories turn NaN. The default: none known."""
        return []

    def overflow_causes(self, dtype: np.dtype) -> list[str]:
        """Parameters at which the model's own formulas overflow ``dtype``, beyond what the
        estimator finds in its components (unnormalised :class:`Attention`, scalars whose
        square overflows), each as a sentence naming them. The default: none."""
        del dtype
        return []


class AbstractTrajectoryModel(AbstractModel):
    """A model written for one trajectory, batched with ``jax.vmap``."""

    @abc.abstractmethod
    def trajectory(self, x0: Float[Array, "N d"], *, key: PRNGKeyArray) -> Float[Array, "S N k"]:
        """The state at each of :attr:`save_times`, starting from ``x0`` at t = 0."""

    @eqx.filter_jit
    def simulate(self, x0, keys):
        # Compiled whole where a user calls it outside jit (inside the estimator's program
        # the call is inlined).
        return jax.vmap(lambda x, k: self.trajectory(x, key=k))(x0, keys)


ROUTES = ("auto", "full", "reduced")


class Route(NamedTuple):
    """The model to simulate, its route name and, on the full route, why it is not reduced."""

    model: AbstractModel
    name: str
    reason: str


def select_route(model: AbstractModel, *, n_tokens: int, dim: int, route: str = "auto") -> Route:
    """The model to simulate: its reduced form (route ``"reduced"``) or itself (``"full"``).

    ``route="auto"`` takes the model's reduced form where it has one (exact in law),
    ``"full"`` never does, and ``"reduced"`` insists (a ParameterError says why not).
    """
    if route == "full":
        return Route(model, "full", "route='full' was asked for")
    reduced, reason = model.reduction(n_tokens, dim)
    if reduced is not None:
        return Route(reduced, "reduced", "")
    if route == "reduced":
        raise ParameterError(f"route='reduced' does not apply ({reason}); use 'auto' or 'full'.")
    return Route(model, "full", reason)
