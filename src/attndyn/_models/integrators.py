"""How the continuous-time models are integrated, apart from their equations (as diffrax).

An integrator holds the solver, the step (or the adaptive tolerances) and whether each step
is projected back onto the sphere; a model holds its equation and its :class:`SaveAt`. The
one call to ``diffrax.diffeqsolve`` of each family is here.

- The solver carries its calculus, as in diffrax: an SDE model states its equation once, in
  Itô form (:class:`AbstractItoSDE`), and :class:`SDEIntegrator` asks its solver's type
  (``diffrax.AbstractItoSolver`` or ``diffrax.AbstractStratonovichSolver``) whether to
  solve that drift or its Stratonovich form (:func:`stratonovich_drift`). Either way the
  solution converges to the same Itô solution; no model asks which solver runs it.
- A field with a known discontinuity in time (Mix-LN's switch τ) is solved by
  :meth:`ODEIntegrator.solve` with ``jump_ts``, piece by piece between the jumps, so that
  no step straddles one.
"""

import abc
import dataclasses
import functools
import math
import warnings
from collections.abc import Callable
from typing import Any, final

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import lineax as lx
import numpy as np
from jaxtyping import Array, Float, PRNGKeyArray, PyTree

from .._core.errors import (
    INT32_MAX,
    ParameterError,
    check_bool,
    check_bound,
    check_choice,
    check_int,
    check_real_in,
    user_stacklevel,
)
from .._core.names import SDE_SOLVER_NAMES
from .._core.schemes import AbstractScheme
from .._core.sphere import normalize

#: The SDE solvers offered by name (the CLI's ``--solver``): see :func:`sde_solver`.
SDE_SOLVERS = SDE_SOLVER_NAMES
BROWNIAN_KINDS = ("unsafe", "virtual")
#: How a deprecated solver name is now spelled (the objects of :func:`sde_solver`).
_SPELLED = {
    "euler": "diffrax.Euler()",
    "heun": "diffrax.Heun()",
    "spark": "diffrax.SPaRK()",
}
#: What to pass instead, named in every refusal of an SDE solver.
_OFFERED = "e.g. diffrax.Euler() (Itô), diffrax.Heun() or diffrax.SPaRK() (Stratonovich)"


def _project_rows(y: Array) -> Array:
    return normalize(y)


class ProjectedSolver(dfx.AbstractWrappedSolver):
    """Wraps a diffrax solver and applies ``project`` to the state after every step.

    With ``project`` the row normalisation this is a retraction onto the product of
    spheres: the step of the wrapped solver is taken in the ambient space and mapped back.
    The projection changes a consistent step by O(dt) in the radial direction only, so the
    weak order of the wrapped scheme is kept (checked numerically in
    ``experiments/limit_convergence.py`` and ``tests/test_sde.py``). The dense output is
    re-anchored at the projected state, so saves at step times are on the sphere.
    """

    solver: dfx.AbstractSolver  # pyright: ignore[reportIncompatibleVariableOverride]
    project: Callable[[Array], Array] = eqx.field(static=True, default=_project_rows)

    @property
    def term_structure(self):  # pyright: ignore[reportIncompatibleVariableOverride]
        return self.solver.term_structure

    @property
    def interpolation_cls(self):  # pyright: ignore
        return self.solver.interpolation_cls

    @property
    def term_compatible_contr_kwargs(self):  # pyright: ignore[reportIncompatibleVariableOverride]
        return self.solver.term_compatible_contr_kwargs

    @property
    def scan_kind(self):
        # isinstance checks see the wrapped solver, so diffrax may ask for its scan kind.
        return getattr(self.solver, "scan_kind", None) or "lax"

    def order(self, terms):
        return self.solver.order(terms)

    def strong_order(self, terms):
        return self.solver.strong_order(terms)

    def init(self, terms, t0, t1, y0, args):
        return self.solver.init(terms, t0, t1, y0, args)

    def step(self, terms, t0, t1, y0, args, solver_state, made_jump):
        y1, y_error, dense_info, solver_state, result = self.solver.step(
            terms, t0, t1, y0, args, solver_state, made_jump
        )
        y1 = self.project(y1)
        dense_info = {**dense_info, "y1": y1}
        return y1, y_error, dense_info, solver_state, result

    def func(self, terms, t0, y0, args):
        return self.solver.func(terms, t0, y0, args)


def _tolerance(name: str) -> Callable[[Any], np.ndarray]:
    """Converter of a step-size tolerance: a float64 0-d NumPy array, exact whatever JAX's
    x64 setting when it is built; anything but one real number is refused, naming it."""

    def convert(value) -> np.ndarray:
        refused = isinstance(value, str | bytes | bool | np.bool_) or value is None
        try:
            array = None if refused else np.asarray(value, dtype=np.float64)
        except (TypeError, ValueError):
            array = None
        if array is None or array.ndim != 0:
            raise ParameterError(f"{name}={value!r:.40} must be one real number > 0.")
        return array

    return convert


@final
class ODEIntegrator(eqx.Module):
    """Any diffrax ODE solver, adaptive (PID controller) or with constant steps.

    Args:
        solver: a diffrax ODE solver (default ``Tsit5``).
        rtol, atol: tolerances of the adaptive PID step controller (array leaves: solves
            that differ only in them are one compiled program).
        dt0: initial step (``None`` lets diffrax choose; required when ``adaptive=False``).
        adaptive: ``False`` takes constant steps ``dt0``.
        max_steps: the solver's step budget per solve. A solve that fails (budget used up,
            step size driven to zero) returns NaN states: the estimator reports them like
            any non-finite trajectory.
    """

    solver: dfx.AbstractSolver = dfx.Tsit5()
    # Array leaves, not static: solves that differ only in their tolerances (the schemes
    # study's fits at two of them) are one compiled program. Kept in float64 here, and cast
    # to the state's dtype in the solve, as a Python float would be.
    rtol: Float[np.ndarray, ""] = eqx.field(converter=_tolerance("rtol"), default=1e-6)
    atol: Float[np.ndarray, ""] = eqx.field(converter=_tolerance("atol"), default=1e-8)
    dt0: float | None = eqx.field(static=True, default=None)
    adaptive: bool = eqx.field(static=True, default=True)
    max_steps: int = eqx.field(static=True, default=100_000)

    def __check_init__(self):
        if not isinstance(self.solver, dfx.AbstractSolver) or isinstance(
            self.solver, dfx.AbstractSRK
        ):
            raise ParameterError(
                f"solver must be a diffrax ODE solver instance, e.g. diffrax.Tsit5(); got "
                f"{self.solver!r:.60}."
            )
        check_bound("rtol", self.rtol, lower=0.0, lower_open=True)
        check_bound("atol", self.atol, lower=0.0, lower_open=True)
        check_int("max_steps", self.max_steps, lower=1)
        check_bool("adaptive", self.adaptive)
        if not self.adaptive and self.dt0 is None:
            raise ParameterError("dt0 must be given (> 0) when adaptive=False.")
        if self.dt0 is not None:
            check_real_in("dt0", self.dt0, lower=0.0, lower_open=True)

    @property
    def implicit(self) -> bool:
        """Whether the solver is implicit (its Newton steps factorise matrices: LAPACK)."""
        return isinstance(self.solver, dfx.AbstractImplicitSolver)

    def solve(
        self,
        field: Callable,
        t0: Array,
        t1: Array,
        y0: PyTree,
        args: Any,
        ts: Array,
        *,
        jump_ts: Float[Array, " jumps"] | None = None,
    ) -> tuple[PyTree, Array]:
        """``(ys at ts, accepted steps)`` of ``dy/dt = field(t, y, args)`` on [t0, t1].

        ``jump_ts``: non-decreasing times where the field jumps (array leaves: a sweep over
        them does not recompile). ``args`` is then a sequence of ``len(jump_ts) + 1``
        arguments, the field's on each piece between them, and no step straddles a jump
        (:meth:`_solve_pieces`).
        """
        if jump_ts is not None:
            return self._solve_pieces(field, t0, t1, y0, args, ts, jump_ts)
        dtype = jnp.result_type(*jax.tree.leaves(y0))
        controller = (
            dfx.PIDController(
                rtol=jnp.asarray(self.rtol, dtype), atol=jnp.asarray(self.atol, dtype)
            )
            if self.adaptive
            else dfx.ConstantStepSize()
        )
        sol = dfx.diffeqsolve(
            # ``field`` is a module-level function with the model in ``args``: diffeqsolve's
            # compiled code is then reused across calls whose static structure agrees.
            dfx.ODETerm(field),
            self.solver,
            t0,
            t1,
            self.dt0,
            y0,
            args,
            saveat=dfx.SaveAt(ts=ts),
            stepsize_controller=controller,
            max_steps=self.max_steps,
            # A failed solve (max_steps reached, a step size driven to zero by an
            # overflowing field) returns NaN states instead of raising inside the batch:
            # the estimator then reports it like any non-finite trajectory (or excludes it
            # with on_nonfinite="exclude") instead of aborting the whole study.
            throw=False,
        )
        assert sol.ys is not None and sol.stats is not None
        failed = sol.result != dfx.RESULTS.successful
        ys = jax.tree.map(lambda y: jnp.where(failed, jnp.nan, y), sol.ys)
        return ys, sol.stats["num_accepted_steps"]

    def solve_scheme(
        self, field: Callable, model: Any, t0: Array, t1: Array, y0: PyTree, ts: Array
    ) -> tuple[PyTree, Array]:
        """:meth:`solve` of ``field(t, y, (model, scheme))`` for ``model.scheme``: where the
        scheme switches (Mix-LN's τ, :attr:`AbstractScheme.switch_time`), each of its
        :meth:`~AbstractScheme.phases` on its own side of the switch."""
        scheme: AbstractScheme = model.scheme
        switch = scheme.switch_time
        if switch is None:
            return self.solve(field, t0, t1, y0, (model, scheme), ts)
        phases = [(model, phase) for phase in scheme.phases()]
        return self.solve(field, t0, t1, y0, phases, ts, jump_ts=switch[None])

    def _solve_pieces(self, field, t0, t1, y0, pieces, ts, jump_ts):
        """One solve per piece [t0, j₁], [j₁, j₂], …, [j_k, t1] between the jumps (clipped
        to [t0, t1]; a piece may be empty), each with its own ``args`` and from the state
        where the last one ended: the state is continuous, its field is not.

        Why not diffrax's ``ClipStepSizeController(jump_ts=…)``, which does this in one
        solve (one compiled loop instead of one per piece): it ends the step before a jump
        at the float below it and carries the step size across, so every number after the
        first jump moves by rounding (up to 3e-6 in float32, within the tolerances;
        measured in benchmarks/README.md), where attndyn keeps its numbers bit-identical
        from one release to the next; and it does not wrap constant steps.
        """
        if len(pieces) != jump_ts.shape[0] + 1:
            raise ValueError(f"{jump_ts.shape[0]} jumps need {jump_ts.shape[0] + 1} args.")
        jumps = jnp.clip(jump_ts.astype(ts.dtype), t0, t1)
        starts = jnp.concatenate([t0[None], jumps])
        ends = jnp.concatenate([jumps, t1[None]])
        # A save at a jump is read where the piece before it ends.
        piece = jnp.searchsorted(jumps, ts, side="left")
        y, saved, steps = y0, None, jnp.zeros((), jnp.int32)
        for i, args in enumerate(pieces):
            # The piece's own saves, then its end: where the next piece starts.
            grid = jnp.concatenate([jnp.clip(ts, starts[i], ends[i]), ends[i][None]])
            ys, n = self.solve(field, starts[i], ends[i], y, args, grid)
            y = jax.tree.map(lambda a: a[-1], ys)
            here = jax.tree.map(lambda a: a[:-1], ys)
            saved = (
                here
                if saved is None
                else jax.tree.map(functools.partial(_where_rows, piece == i), here, saved)
            )
            steps = steps + n
        return saved, steps


def _where_rows(mask: Array, a: Array, b: Array) -> Array:
    """``a`` where ``mask`` (one entry per leading row), ``b`` elsewhere."""
    return jnp.where(mask.reshape(mask.shape + (1,) * (a.ndim - 1)), a, b)


class AbstractItoSDE(eqx.Module):
    """An SDE ``dy = b(y) dt + g(y) dW`` in Itô form, as :class:`SDEIntegrator` solves it.

    A model gives the Itô drift ``b``, the diffusion ``g`` applied to an increment of
    ``W`` (linear in it) and the shape of ``W``; it never asks which solver runs it. The
    integrator hands a Stratonovich solver the drift :func:`stratonovich_drift` instead,
    so every solver converges to the same (Itô) solution.
    """

    @abc.abstractmethod
    def ito_drift(self, y: PyTree) -> PyTree:
        """The Itô drift ``b(y)``."""

    @abc.abstractmethod
    def diffusion_apply(self, y: PyTree, dw: Array) -> PyTree:
        """``g(y) dw``: the diffusion applied to one Brownian increment ``dw``."""

    @abc.abstractmethod
    def brownian_shape(self, y: PyTree) -> tuple[int, ...]:
        """The shape of one trajectory's Brownian motion ``W`` for the state ``y``."""

    def diffusion_vf(self, y: PyTree) -> lx.AbstractLinearOperator | PyTree:
        """The diffusion as the vector field of diffrax's ``ControlTerm``: by default a
        ``lineax.FunctionLinearOperator`` of :meth:`diffusion_apply` (the increment's
        image, never the ``(state, noise)`` tensor). A model may return an array that
        diffrax contracts with the increment instead (scalar noise)."""
        dtype = jax.tree.leaves(y)[0].dtype
        return lx.FunctionLinearOperator(
            lambda dw: self.diffusion_apply(y, dw),
            jax.ShapeDtypeStruct(self.brownian_shape(y), dtype),
        )


# Compiled (as the models' ``solve`` are): called outside jit, the autodiff correction ran
# as ~180 separate operations, 3.5 s the first time against 0.3 s. Inlined inside a solve.
@eqx.filter_jit
def stratonovich_drift(sde: AbstractItoSDE, y: PyTree) -> PyTree:
    """``b_S = b − ½ Σ_c Dg_c(y)[g_c(y)]`` over the unit Brownian channels ``c``: the drift
    whose Stratonovich solution is the Itô solution of ``sde`` (forward-mode autodiff of
    the diffusion, one JVP per channel)."""
    shape = sde.brownian_shape(y)
    size = math.prod(shape)
    dtype = jax.tree.leaves(y)[0].dtype
    basis = jnp.eye(size, dtype=dtype).reshape((size, *shape))

    def channel(e):
        def g(z):
            return sde.diffusion_apply(z, e)

        _, dg = jax.jvp(g, (y,), (g(y),))
        return dg

    correction = jax.tree.map(lambda c: jnp.sum(c, axis=0), jax.vmap(channel)(basis))
    return jax.tree.map(lambda b, c: b - 0.5 * c, sde.ito_drift(y), correction)


def _ito_drift(t, y, sde: AbstractItoSDE):
    del t
    return sde.ito_drift(y)


def _stratonovich_drift(t, y, sde: AbstractItoSDE):
    del t
    return stratonovich_drift(sde, y)


def _diffusion(t, y, sde: AbstractItoSDE):
    del t
    return sde.diffusion_vf(y)


def sde_solver(name: str) -> dfx.AbstractSolver:
    """The diffrax solver that the name ``name`` stands for (one of :data:`SDE_SOLVERS`):
    ``"euler"`` is ``diffrax.Euler()``, ``"heun"`` ``diffrax.Heun()``, ``"spark"``
    ``diffrax.SPaRK()``. The one place that maps the CLI's and the studies' names to
    solvers."""
    check_choice("solver", name, SDE_SOLVERS)
    solvers: dict[str, Callable[[], dfx.AbstractSolver]] = {
        "euler": dfx.Euler,
        "heun": dfx.Heun,
        "spark": dfx.SPaRK,
    }
    return solvers[name]()


def _as_sde_solver(solver: Any) -> Any:
    """Converter of :attr:`SDEIntegrator.solver`: a name (deprecated in 0.5.0, removed in
    0.6) becomes its solver object, with a DeprecationWarning; a Runge–Kutta solver left
    to diffrax's default stage loop (``scan_kind=None``: checkpointed, for reverse-mode
    gradients) runs a plain one (``"lax"``), which the forward-mode solves here need."""
    if isinstance(solver, str):
        if solver not in _SPELLED:
            raise ParameterError(
                f"solver={solver!r} is not a solver; pass a diffrax SDE solver, {_OFFERED} "
                f"(the names {', '.join(map(repr, SDE_SOLVERS))} still work until 0.6)."
            )
        warnings.warn(
            f"SDEIntegrator(solver={solver!r}) is deprecated and will be removed in attndyn "
            f"0.6; pass the diffrax solver instead: solver={_SPELLED[solver]}.",
            DeprecationWarning,
            stacklevel=user_stacklevel(),
        )
        solver = sde_solver(solver)
    if isinstance(solver, eqx.Module) and getattr(solver, "scan_kind", "") is None:
        solver = dataclasses.replace(solver, scan_kind="lax")
    return solver


#: The Brownian increments diffrax's paths give: plain, or with space-time (-time) Lévy area.
LevyArea = (
    type[dfx.BrownianIncrement] | type[dfx.SpaceTimeLevyArea] | type[dfx.SpaceTimeTimeLevyArea]
)


def _levy_area(solver: dfx.AbstractSolver) -> LevyArea:
    """The cheapest Brownian increment the solver accepts: plain increments, or the
    space-time (-time) Lévy area an SRK asks for (``minimal_levy_area``)."""
    needed = getattr(solver, "minimal_levy_area", dfx.AbstractBrownianIncrement)
    for kind in (dfx.BrownianIncrement, dfx.SpaceTimeLevyArea, dfx.SpaceTimeTimeLevyArea):
        if issubclass(kind, needed):
            return kind
    raise ParameterError(f"no Brownian path of attndyn gives the {needed.__name__} it needs.")


@final
class SDEIntegrator(eqx.Module):
    """Fixed-step stochastic integration: the solver, the step and the sphere projection.

    Args:
        solver: a diffrax SDE solver object: an Itô solver (``diffrax.Euler()``,
            Euler–Maruyama, the default) solves the model's Itô drift, a Stratonovich one
            (``diffrax.Heun()``, ``diffrax.SPaRK()``, ``diffrax.EulerHeun()``, …) its
            Stratonovich form (:func:`stratonovich_drift`): the solver's type decides,
            and every one converges to the same solution. Additive-noise solvers (SRA1,
            ShARK, SEA) and Milstein are refused by the models, which know their noise.
            The names ``"euler"``, ``"heun"``, ``"spark"`` are deprecated (a
            DeprecationWarning; removed in 0.6). A Runge–Kutta solver left to diffrax's
            default stage loop runs a plain one (``scan_kind="lax"``; these solves are
            forward-mode and need no checkpoints).
        dt: the step, in (0, T]; the step actually taken is ``T / ceil(T / dt)``.
        project: renormalise the rows after each step (default True; a retraction that
            keeps the weak order).
        brownian: ``"unsafe"`` (fast, one increment per step) or ``"virtual"`` (a
            ``VirtualBrownianTree``: the same path at every step size). Either gives the
            Lévy area the solver needs (``minimal_levy_area``).
    """

    solver: dfx.AbstractSolver = eqx.field(default=dfx.Euler(), converter=_as_sde_solver)
    dt: float = eqx.field(static=True, default=0.01)
    project: bool = eqx.field(static=True, default=True)
    brownian: str = eqx.field(static=True, default="unsafe")

    def __check_init__(self):
        if not isinstance(self.solver, dfx.AbstractSolver) or not isinstance(
            self.solver, dfx.AbstractItoSolver | dfx.AbstractStratonovichSolver
        ):
            raise ParameterError(
                "solver must be a diffrax SDE solver (an AbstractItoSolver or "
                f"AbstractStratonovichSolver), {_OFFERED}; got {self.solver!r:.60}."
            )
        _levy_area(self.solver)  # refuses a solver that needs Lévy area no path gives
        # One real number (a string such as "0.1" would reach NumPy's checks as a TypeError).
        check_real_in("dt", self.dt, lower=0.0, lower_open=True)
        check_bool("project", self.project)
        check_choice("brownian", self.brownian, BROWNIAN_KINDS)

    @property
    def stratonovich(self) -> bool:
        """Whether the solver converges to the Stratonovich solution (so it is given the
        Stratonovich drift): asked of the solver's type, as diffrax does."""
        return isinstance(self.solver, dfx.AbstractStratonovichSolver)

    @property
    def levy_area(self) -> LevyArea:
        """What the Brownian path gives the solver on each step."""
        return _levy_area(self.solver)

    def check_noise(self, *, commutative: bool) -> None:
        """Refuse a solver that cannot solve the model's multiplicative noise: an SRK built
        for additive noise, or Milstein (for commutative noise only, and not offered for
        it either: Heun has the same strong order 1 there)."""
        name = f"diffrax.{type(self.solver).__name__}()"
        if isinstance(self.solver, dfx.AbstractSRK) and self.solver.tableau.is_additive_noise():
            raise ParameterError(
                f"solver={name} handles additive noise only, but this SDE's noise is "
                f"multiplicative; use {_OFFERED}."
            )
        if isinstance(self.solver, dfx.ItoMilstein | dfx.StratonovichMilstein):
            why = (
                "is not offered: for this SDE's commutative noise Heun has the same strong order 1"
                if commutative
                else "needs commutative noise, and this SDE's noise is not commutative"
            )
            raise ParameterError(f"solver={name} {why}; use {_OFFERED}.")

    def n_steps(self, horizon: float) -> int:
        return max(1, math.ceil(horizon / self.dt - 1e-9))

    def step_size(self, horizon: float) -> float:
        """The step actually taken to reach ``horizon`` (at most ``dt``)."""
        return horizon / self.n_steps(horizon)

    def check_horizon(self, horizon: float) -> None:
        if self.dt > horizon:
            raise ParameterError(
                f"dt={self.dt} is larger than the horizon={horizon}; the step must lie "
                "in (0, horizon]."
            )
        if not horizon / self.dt < INT32_MAX - 2:
            raise ParameterError(
                f"horizon/dt = {horizon:g}/{self.dt:g} steps is more than the {INT32_MAX - 2} "
                "that the solver's int32 step counter holds; raise dt or lower the horizon."
            )

    def diffrax_solver(self, project: bool = True) -> dfx.AbstractSolver:
        """The diffrax solver, wrapped in the projection when ``self.project`` and
        ``project`` (a state that is not rows on spheres, like an overlap, passes False)."""
        return ProjectedSolver(self.solver) if self.project and project else self.solver

    def brownian_path(
        self, key: PRNGKeyArray, shape: jax.ShapeDtypeStruct, horizon: float
    ) -> dfx.AbstractBrownianPath:
        levy = self.levy_area
        if self.brownian == "virtual":
            tol = self.step_size(horizon) / 8
            return dfx.VirtualBrownianTree(
                0.0, horizon, tol=tol, shape=shape, key=key, levy_area=levy
            )
        return dfx.UnsafeBrownianPath(shape=shape, key=key, levy_area=levy)

    def solve(
        self,
        sde: AbstractItoSDE,
        y0: PyTree,
        ts: Array,
        horizon: float,
        *,
        key: PRNGKeyArray,
        project: bool = True,
    ) -> tuple[PyTree, Array]:
        """``(ys at ts, successful)`` of ``sde`` on [0, horizon] from ``y0``, its Brownian
        motion built from ``key``; the drift is the one the solver's calculus needs."""
        dtype = ts.dtype
        shape = jax.ShapeDtypeStruct(sde.brownian_shape(y0), dtype)
        path = self.brownian_path(key, shape, horizon)
        drift = _stratonovich_drift if self.stratonovich else _ito_drift
        terms = dfx.MultiTerm(dfx.ODETerm(drift), dfx.ControlTerm(_diffusion, path))
        sol = dfx.diffeqsolve(
            terms,
            self.diffrax_solver(project),
            jnp.zeros((), dtype),
            jnp.asarray(horizon, dtype),
            jnp.asarray(self.step_size(horizon), dtype),
            y0,
            sde,
            saveat=dfx.SaveAt(ts=ts),
            stepsize_controller=dfx.ConstantStepSize(),
            max_steps=self.n_steps(horizon) + 2,
            throw=False,
            # Forward-mode only: no backpropagation through the Brownian path is needed.
            adjoint=dfx.ForwardMode(),
        )
        assert sol.ys is not None
        return sol.ys, sol.result == dfx.RESULTS.successful
