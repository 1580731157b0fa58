"""The first stage: check every argument and build, route and absorb every point's model,
before anything is compiled or written."""

import dataclasses
import itertools
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._core import defaults
from .._core.attention import Attention
from .._core.errors import (
    ParameterError,
    check_bound,
    check_choice,
    check_int,
    check_sequence,
)
from .._core.renamed import deprecation
from .._models.base import ROUTES, AbstractModel, route_of
from .diagnose import overflow_refusal
from .keys import Point, numeric_identity, point_id, point_text

NONFINITE_POLICIES = ("raise", "exclude")
#: What to do with trajectories whose tokens merged numerically (see ``on_merged``; the
#: first is the default).
MERGE_POLICIES = ("auto", "raise", "exclude", "count")
#: Trajectories per point: their indices (plus one chunk of padding) stay in int32.
MAX_TRAJECTORIES = 2**30
#: Largest token dimension d and token count N (far beyond any device's memory already).
MAX_DIM = 2**16
MAX_TOKENS = 2**16


def grid(**axes: Sequence[Any]) -> list[dict[str, Any]]:
    """The Cartesian product of parameter axes, the last axis varying fastest.

    >>> grid(dim=[4, 6], beta=[1.0, 2.0])  # doctest: +NORMALIZE_WHITESPACE
    [{'dim': 4, 'beta': 1.0}, {'dim': 4, 'beta': 2.0},
     {'dim': 6, 'beta': 1.0}, {'dim': 6, 'beta': 2.0}]
    """
    for name, values in axes.items():
        check_sequence(name, values)
        if len(values) == 0:
            raise ParameterError(f"the range for {name!r} is empty; give at least one value.")
    names = list(axes)
    return [dict(zip(names, combo)) for combo in itertools.product(*axes.values())]


@dataclasses.dataclass(frozen=True)
class PointPlan:
    """One grid point: its parameters and the model that will run it."""

    point: dict[str, Any]
    n_tokens: int
    dim: int
    model: AbstractModel  # routed (and absorbing, if asked)
    route: str
    user_model: AbstractModel  # as ``model_fn`` built it (provenance)


@dataclasses.dataclass(frozen=True)
class Plan:
    """Everything the estimator will do, fixed before it starts."""

    points: list[PointPlan]
    n_trajectories: int
    tol: float
    radius: float
    chunk_size: int | None
    route: str
    absorption_bound: float | None
    on_nonfinite: str
    save_times: np.ndarray
    x64: bool = False
    on_merged: str = "auto"

    @property
    def routes(self) -> list[str]:
        return [p.route for p in self.points]


def absorption_bound_of(
    early_absorption: bool | float | str, *, name: str = "early_absorption"
) -> float | None:
    """``True`` or ``"auto"`` → the default bound, ``False`` → none, a float → itself
    (checked)."""
    if isinstance(early_absorption, str):
        if early_absorption != "auto":  # the message lists every allowed value, not 'auto' alone
            raise ParameterError(
                f"{name}={early_absorption!r} is not allowed; choose True, False, 'auto' or a "
                "bound in (0, 1]."
            )
        return defaults.CLASS_CHANGE_BOUND
    if isinstance(early_absorption, bool):
        return defaults.CLASS_CHANGE_BOUND if early_absorption else None
    check_bound(name, early_absorption, lower=0.0, upper=1.0, lower_open=True)
    return float(early_absorption)


def check_options(
    *,
    n_trajectories,
    tol,
    radius,
    on_nonfinite,
    chunk_size,
    route,
    on_merged="auto",
    early_absorption: bool | float | str = False,
    names: Mapping[str, str] | None = None,
) -> None:
    """The estimator's own arguments, checked where they enter: by
    :func:`attndyn.estimate_probabilities`, or by :class:`attndyn.studies.MonteCarlo` for
    a study (whose messages name its fields: ``names`` maps an argument to the name the
    user gave it); :func:`make_plan` trusts them."""

    def name(argument: str) -> str:
        return (names or {}).get(argument, argument)

    check_int(name("n_trajectories"), n_trajectories, lower=1, upper=MAX_TRAJECTORIES)
    check_bound(name("tol"), tol, lower=0.0, upper=1.0, lower_open=True, upper_open=True)
    if chunk_size is not None:
        check_int(name("chunk_size"), chunk_size, lower=1, upper=MAX_TRAJECTORIES)
    absorption_bound_of(early_absorption, name=name("early_absorption"))
    check_bound(name("radius"), radius, lower=0.0, lower_open=True)
    check_choice(name("on_nonfinite"), on_nonfinite, NONFINITE_POLICIES)
    check_choice(name("route"), route, ROUTES)
    check_choice(name("on_merged"), on_merged, MERGE_POLICIES)


class CheckedPoints(list):
    """Points checked where they entered, which the estimator's entry then trusts (as it
    trusts the options :class:`attndyn.studies.MonteCarlo` checked): each a dict naming an
    integer ``dim`` in [2, :data:`MAX_DIM`] and ``n_tokens`` in [1, :data:`MAX_TOKENS`],
    with an identity (:func:`.keys.point_id`), no point twice. Made by
    :func:`check_points`, or by a study function that checks as much itself
    (:func:`attndyn.studies.phase_points`); a plain list is checked by the estimator.

    Read-only (a point added or replaced would not have been checked): build a list from
    it to change it, and that list is checked again."""

    def _read_only(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(
            "checked points are read-only; build a new list (list(points)) to change them, "
            "which is then checked again."
        )

    def __reduce__(self) -> tuple[Any, ...]:
        # Copied and pickled whole (list's own reduction appends to an empty one).
        return (type(self), ([dict(p) for p in self],))

    # Typed as list's methods are not (they return None or an item): each only raises.
    append = extend = insert = pop = remove = clear = _read_only
    sort = reverse = __setitem__ = __delitem__ = __iadd__ = __imul__ = _read_only  # pyright: ignore[reportAssignmentType]


def check_points(points: Sequence[Point]) -> list[dict[str, Any]]:
    """The points as dicts; each names an integer ``dim`` ≥ 2 and ``n_tokens`` ≥ 1, and each
    has an identity (:func:`.keys.point_id`), checked before any point runs. Points already
    checked (:class:`CheckedPoints`) are not checked again (a copy of each is returned, as
    for any points)."""
    if isinstance(points, CheckedPoints):
        return CheckedPoints(dict(p) for p in points)
    if not isinstance(points, Sequence) or not all(isinstance(p, Mapping) for p in points):
        raise ParameterError(
            "points must be a list of dicts, one per parameter point (e.g. from attndyn.grid)."
        )
    points = [dict(p) for p in points]
    if not points:
        raise ParameterError("points is empty; give at least one parameter point.")
    for p in points:
        if "tokens" in p:
            # 0.4's name: kept (model_fn may take it), hashed as n_tokens is (keys.HASHED_AS).
            if "n_tokens" in p:
                raise ParameterError(f"point {p} gives n_tokens twice (tokens is its old name).")
            warnings.warn(
                deprecation("tokens", "n_tokens", "a point's key"), DeprecationWarning, stacklevel=4
            )
        for name, lower, upper in (("dim", 2, MAX_DIM), ("n_tokens", 1, MAX_TOKENS)):
            value = p.get(name, p.get("tokens")) if name == "n_tokens" else p.get(name)
            if value is None:
                raise ParameterError(f"every point must give {name!r}; got {p}.")
            check_int(name, value, lower=lower, upper=upper)
        try:
            point_id(p)
        except (TypeError, ValueError):
            raise ParameterError(
                f"point {p} holds a value that is not a number, string or list of them: "
                "give Python or NumPy scalars (a 0-d JAX array is accepted too)."
            ) from None
    check_distinct(points)
    return CheckedPoints(points)


def check_distinct(points: Sequence[Point]) -> None:
    """Refuse a point given twice. Its two rows would hold the same trajectories (the same
    key), not twice the statistics; written ``1`` once and ``1.0`` once, they would hold
    different trajectories under one coordinate value, the numbers of neither matching a
    run of the other spelling alone."""
    seen: dict[str, int] = {}
    for i, p in enumerate(points):
        first = seen.setdefault(numeric_identity(p), i)
        if first != i:
            other = points[first]
            spelled = (
                ""
                if point_id(other) == point_id(p)
                else (
                    " (an integer and a float of equal value also draw different random numbers:"
                    " write real parameters as floats)"
                )
            )
            raise ParameterError(
                f"points {first} and {i} are the same point ({other} and {p}); give each "
                f"point once{spelled}."
            )


class BuiltModels:
    """``model_fn(**point)`` answered from models built once per point: a study builds
    every point's model here (in float64 with ``x64``, as the estimator would), to refuse
    a bad value before anything runs, and hands this to the estimator and to whatever else
    reads the models, which then build none again. A point it did not build (looked up by
    :func:`.keys.point_text`, the point as written, whose hash keys its random numbers)
    goes to ``model_fn``."""

    def __init__(
        self,
        model_fn: Callable[..., AbstractModel],
        points: Sequence[Point],
        *,
        x64: bool = False,
    ):
        self.model_fn = model_fn
        # Under x64 the model's leaves are made float64 from the values as given, as the
        # estimator makes them (a float32 leaf cast up would change the numbers).
        with jax.enable_x64(bool(x64)):
            models = [model_fn(**p) for p in points]
        self._by_point: dict[str, AbstractModel] = {}
        for p, model in zip(points, models, strict=True):
            try:
                self._by_point[point_text(p)] = model
            except (TypeError, ValueError):  # not a point the estimator accepts
                pass

    def __call__(self, **point: Any) -> AbstractModel:
        try:
            return self._by_point[point_text(point)]
        except (TypeError, ValueError, KeyError):
            return self.model_fn(**point)


def plan_point(
    model_fn: Callable[..., AbstractModel],
    point: dict[str, Any],
    *,
    route: str,
    tol: float,
    absorption_bound: float | None,
    absorption_required: bool = True,
) -> PointPlan:
    """Build the point's model, take its reduced form where allowed, make it absorbing
    (where it can be, when ``absorption_required`` is false)."""
    n_tokens, dim = (
        int(point["n_tokens"] if "n_tokens" in point else point["tokens"]),
        int(point["dim"]),
    )
    user_model = model_fn(**point)
    if not isinstance(user_model, AbstractModel):
        raise ParameterError(
            f"model_fn must return an attndyn model (an AbstractModel); got "
            f"{type(user_model).__name__} at {point}."
        )
    check_dimension(user_model, point, dim)
    model, route_name, reason = route_of(user_model, n_tokens, dim, route)
    if absorption_bound is not None:
        try:
            model = model.with_absorption(tol=tol, bound=absorption_bound, dim=dim)
        except ParameterError as error:
            if absorption_required:
                why = f" It runs on the full route: {reason}." if route_name == "full" else ""
                raise ParameterError(f"at {point}: {error}{why}") from None
    return PointPlan(point, n_tokens, dim, model, route_name, user_model)


def warn_undefined(planned: Sequence[PointPlan]) -> None:
    """Warn, before anything runs, of points whose map is undefined somewhere trajectories
    can reach: those that reach it turn NaN (then reported, never averaged in)."""
    undefined = [(p.point, p.user_model.undefined_maps()) for p in planned]
    undefined = [(point, causes) for point, causes in undefined if causes]
    if undefined:
        point, causes = undefined[0]
        warnings.warn(
            f"at {len(undefined)} of {len(planned)} points the model's map is undefined where "
            f"trajectories can go, e.g. at {point}: {causes[0]}. Trajectories that reach it "
            "turn NaN and are reported.",
            stacklevel=4,
        )


def check_overflow(planned: Sequence[PointPlan], dtype: np.dtype) -> None:
    """Refuse, before anything runs, a point whose model would overflow ``dtype`` wherever
    its trajectories go (:func:`.diagnose.overflow_refusal`): its numbers could not be
    trusted, and every trajectory would be lost."""
    for p in planned:
        refusal = overflow_refusal(p.model, dtype, p.dim)
        if refusal is not None:
            raise ParameterError(f"at {p.point}: {refusal}.")


def check_dimension(model: AbstractModel, point: dict[str, Any], dim: int) -> None:
    """Every attention core in the model must fit the point's dimension d (heads, Q, K):
    refused here, naming the point, rather than as a shape error while tracing."""
    cores = jax.tree_util.tree_leaves(model, is_leaf=lambda x: isinstance(x, Attention))
    for core in cores:
        if isinstance(core, Attention):
            try:
                core.check_dim(dim)
            except ParameterError as error:
                raise ParameterError(f"at {point}: {error}") from None


def make_plan(
    model_fn: Callable[..., AbstractModel],
    points: Sequence[Point],
    *,
    n_trajectories: int,
    tol: float,
    radius: float,
    chunk_size: int | None,
    route: str,
    early_absorption: bool | float | str,
    on_nonfinite: str,
    x64: bool = False,
    on_merged: str = "auto",
) -> Plan:
    """Check the points and build every point's model; refuse anything inconsistent. The
    estimator's options were checked where they entered (:func:`check_options`)."""
    # NumPy scalars pass the checks; the plan keeps Python numbers (JSON provenance).
    n_trajectories, tol, radius = int(n_trajectories), float(tol), float(radius)
    chunk_size = None if chunk_size is None else int(chunk_size)
    bound = absorption_bound_of(early_absorption)
    planned = [
        plan_point(
            model_fn,
            p,
            route=route,
            tol=tol,
            absorption_bound=bound,
            absorption_required=early_absorption != "auto",
        )
        for p in check_points(points)
    ]
    warn_undefined(planned)
    save_times = np.asarray(planned[0].model.save_times, dtype=np.float64)
    for p in planned:
        if not np.array_equal(np.asarray(p.model.save_times, dtype=np.float64), save_times):
            raise ParameterError(f"all points must share save times; {p.point} differs.")
    if x64:
        planned = [dataclasses.replace(p, model=to_float64(p.model)) for p in planned]
    check_overflow(planned, np.dtype(np.float64 if x64 else np.float32))
    return Plan(
        planned,
        n_trajectories,
        tol,
        radius,
        chunk_size,
        route,
        bound,
        on_nonfinite,
        save_times,
        x64,
        on_merged,
    )


def to_float64(model: AbstractModel) -> AbstractModel:
    """The model with every floating-point array leaf in float64 (inside ``enable_x64``)."""

    def cast(leaf):
        if eqx.is_array(leaf) and jnp.issubdtype(leaf.dtype, jnp.floating):
            return leaf.astype(jnp.float64)
        return leaf

    return jax.tree.map(cast, model)
