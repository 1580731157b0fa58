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
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple, Protocol, runtime_checkable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Key, PRNGKeyArray, PyTree

from .._core.errors import ParameterError, check_choice, check_start

if TYPE_CHECKING:
    from .._core.attention import Attention
    from .._core.schemes import AbstractScheme
    from .._core.values import AbstractValues
    from .._core.weights import RandomWeights
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
    R^d itself, another k for reduced forms (the frame of the tokens' span; the symmetric
    ODE's n × (n + 1) frame). Only
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

    # --- Simulation a block of steps at a time (optional) ---------------------------------
    # The estimator runs a batch as begin → advance over blocks of steps → finish, with a
    # host check between blocks, so that Ctrl-C stops a run within about a second whatever
    # its depth. A model that has no steps to split (the default) does all its work in
    # ``begin``. ``advance`` must give the same numbers however [0, steps) is cut into
    # blocks (at multiples of ``stepping()[1]``): each step is a function of the state, its
    # absolute index and the keys alone.

    def stepping(self) -> tuple[int, int]:
        """``(steps, multiple)``: the steps :meth:`advance` takes in all, and the multiple
        of which the end of every block but the last must be. ``(0, 1)`` (the default):
        no steps, :meth:`begin` runs the whole simulation."""
        return 0, 1

    def begin(self, x0: Float[Array, "batch N d"], keys: Key[Array, " batch"]) -> PyTree:
        """The state of a batch before its first step (the default: the finished saves)."""
        return self.simulate(x0, keys)

    def advance(
        self, state: PyTree, keys: Key[Array, " batch"], start: Array, stop: Array
    ) -> PyTree:
        """The state after steps ``[start, stop)`` (int32 scalars, traced: one compiled
        program serves every block), given the state after the steps before ``start``."""
        del keys, start, stop
        return state

    def finish(self, state: PyTree) -> States:
        """The saves of a batch whose steps are all done."""
        return state

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

    def attention_scale_free(self) -> bool:
        """Whether the model computes unnormalised attention with its exponent apart
        (:meth:`attndyn.Attention.scaled`), so that no β overflows it: a layer map that
        ignores a positive factor shared by a row and its update. The estimator refuses,
        before running, a β at which the weights of a model without it would overflow.
        The default: no."""
        return False

    def keeps_unit_rows(self) -> bool:
        """Whether every saved row after t = 0 is a unit vector (up to rounding): the
        estimator then counts a trajectory with a row off the unit sphere as broken, never
        as a result. The default: unknown (not checked)."""
        return False

    def provenance(self) -> dict[str, Any]:
        """The model's fields that a dataset records beside its description, for its
        readers and figures (a layer map's grid: ``depth`` or ``step``), so that nothing
        is parsed out of a repr. The default: none."""
        return {}

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

    def simulate(self, x0: Float[Array, "batch N d"], keys: Key[Array, " batch"]) -> States:
        check_start("x0", x0, ndim=3)  # before tracing: jit refuses some types first
        return self._simulate(x0, keys)

    @eqx.filter_jit
    def _simulate(self, x0: Float[Array, "batch N d"], keys: Key[Array, " batch"]) -> States:
        # Compiled whole where a user calls it outside jit (inside the estimator's program
        # the call is inlined).
        return jax.vmap(lambda x, k: self.trajectory(x, key=k))(x0, keys)


@runtime_checkable  # the tests' run-time type checks (beartype) ask isinstance of it
class LayerMaps(Protocol):
    """The reduced routes' view of the model they stand for
    (:class:`attndyn.DiscreteTransformer`): its parts (attention, value operator, scheme,
    frozen weights), its layer grid and saves, and the model methods a route delegates to.

    A protocol, so that ``_models/reduced`` needs no import of ``_models/discrete.py``
    (which imports the routes to build them): the dependency runs one way, type-only
    imports included (tests/test_architecture.py)."""

    @property
    def attention(self) -> "Attention": ...
    @property
    def values(self) -> "AbstractValues": ...
    @property
    def scheme(self) -> "AbstractScheme": ...
    @property
    def weights(self) -> "RandomWeights | None": ...
    @property
    def layers_per_unit(self) -> int | float:
        """L = 1/η, the layers per unit time."""
        ...

    @property
    def save_layers(self) -> np.ndarray:
        """The layer index of each save."""
        ...

    @property
    def save_times(self) -> np.ndarray: ...
    def merge_law(self, dim: int) -> "MergeLaw | None": ...
    def attention_scale_free(self) -> bool: ...
    def keeps_unit_rows(self) -> bool: ...
    def stepping(self) -> tuple[int, int]: ...
    def begin(self, x0: Float[Array, "batch N d"], keys: Key[Array, " batch"]) -> PyTree: ...
    def advance(
        self, state: PyTree, keys: Key[Array, " batch"], start: Array, stop: Array
    ) -> PyTree: ...
    def finish(self, state: PyTree) -> States: ...


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
    check_choice("route", route, ROUTES)
    return route_of(model, n_tokens, dim, route)


def route_of(model: AbstractModel, n_tokens: int, dim: int, route: str) -> Route:
    """:func:`select_route` for a route already checked (the estimator's, in
    ``plan.check_options``, before any point is built)."""
    if route == "full":
        return Route(model, "full", "route='full' was asked for")
    reduced, reason = model.reduction(n_tokens, dim)
    if reduced is not None:
        return Route(reduced, "reduced", "")
    if route == "reduced":
        raise ParameterError(f"route='reduced' does not apply ({reason}); use 'auto' or 'full'.")
    return Route(model, "full", reason)


def begin_saves(save_steps: np.ndarray, first: Array) -> Array:
    """The save buffer of a blocked simulation, ``(S, *first.shape)``: ``first`` (the start)
    at the saves of step 0, zeros elsewhere until :func:`advance_saves` reaches them."""
    at_start = jnp.asarray(np.asarray(save_steps) == 0)
    at_start = at_start.reshape(at_start.shape + (1,) * first.ndim)
    return jnp.where(at_start, first[None], jnp.zeros((len(save_steps), *first.shape), first.dtype))


def advance_saves(
    save_steps: np.ndarray,
    state: PyTree,
    saves: Array,
    start: Array,
    stop: Array,
    run: Callable[[PyTree, Array, Array, Array], PyTree],
    view: Callable[[PyTree], Array],
) -> tuple[PyTree, Array]:
    """Steps ``[start, stop)`` of a simulation saved after each of ``save_steps``
    (increasing): between consecutive saves ``run(state, lo, hi, anchor)`` takes steps
    ``[lo, hi)`` of the segment that starts at step ``anchor`` (the previous save), and the
    save of step s is ``view(state)`` once a block ends at or after s. Each segment is cut
    to ``[start, stop)``, so a step is taken once, by the same code, however the steps
    are cut into blocks."""
    steps = np.asarray(save_steps, dtype=np.int64)
    anchors = jnp.asarray(np.concatenate([[0], steps[:-1]]), jnp.int32)

    def segment(carry, xs):
        state, saves = carry
        k, anchor, last = xs
        lo, hi = jnp.clip(anchor, start, stop), jnp.clip(last, start, stop)
        state = run(state, lo, hi, anchor)
        reached = (last > start) & (last <= stop)
        saves = saves.at[k].set(jnp.where(reached, view(state), saves[k]))
        return (state, saves), None

    xs = (jnp.arange(len(steps), dtype=jnp.int32), anchors, jnp.asarray(steps, jnp.int32))
    (state, saves), _ = jax.lax.scan(segment, (state, saves), xs)
    return state, saves


def simulate_in_blocks(model: AbstractModel, x0: Array, keys: Array) -> Array:
    """``begin`` → ``advance`` over all of ``model.stepping()`` → ``finish``: a whole
    simulation in one call, by the code the estimator runs block by block."""
    stop = jnp.asarray(model.stepping()[0], jnp.int32)
    state = model.advance(model.begin(x0, keys), keys, jnp.zeros((), jnp.int32), stop)
    return model.finish(state)
