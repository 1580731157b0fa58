"""How the continuous-time models are integrated, apart from their equations (as diffrax).

An integrator holds the solver, the step (or the adaptive tolerances) and whether each step
is projected back onto the sphere; a model holds its equation and its :class:`SaveAt`. The
one call to ``diffrax.diffeqsolve`` of each family is here, and so is the solve split at a
switch time that Mix-LN needs (:func:`solve_with_switch`).
"""

import math
from collections.abc import Callable
from typing import Any, final

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, PRNGKeyArray, PyTree

from .._core.errors import INT32_MAX, ParameterError, check_bound, check_choice, check_int
from .._core.schemes import AbstractScheme, MixLN, PostLN, PreLN
from .._core.sphere import normalize

#: Solvers offered for the SDEs (Itô Euler–Maruyama; Heun and SPaRK on the Stratonovich form).
SDE_SOLVERS = ("euler", "heun", "spark")
#: diffrax solvers that assume additive noise: refused with an explanation.
ADDITIVE_NOISE_SOLVERS = ("sra1", "shark", "sea")
BROWNIAN_KINDS = ("unsafe", "virtual")


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


@final
class ODEIntegrator(eqx.Module):
    """Any diffrax ODE solver, adaptive (PID controller) or with constant steps.

    Args:
        solver: a diffrax ODE solver (default ``Tsit5``).
        rtol, atol: tolerances of the adaptive PID step controller.
        dt0: initial step (``None`` lets diffrax choose; required when ``adaptive=False``).
        adaptive: ``False`` takes constant steps ``dt0``.
        max_steps: the solver's step budget per solve (per segment when split). A solve
            that fails (budget used up, step size driven to zero) returns NaN states: the
            estimator reports them like any non-finite trajectory.
    """

    solver: dfx.AbstractSolver = dfx.Tsit5()
    rtol: float = eqx.field(static=True, default=1e-6)
    atol: float = eqx.field(static=True, default=1e-8)
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
        if not self.adaptive and self.dt0 is None:
            raise ParameterError("dt0 must be given (> 0) when adaptive=False.")
        if self.dt0 is not None:
            check_bound("dt0", self.dt0, lower=0.0, lower_open=True)

    @property
    def implicit(self) -> bool:
        """Whether the solver is implicit (its Newton steps factorise matrices: LAPACK)."""
        return isinstance(self.solver, dfx.AbstractImplicitSolver)

    def solve(self, field: Callable, t0, t1, y0: PyTree, args: Any, ts: Array):
        """``(ys at ts, accepted steps)`` of ``dy/dt = field(t, y, args)`` on [t0, t1]."""
        controller = (
            dfx.PIDController(rtol=self.rtol, atol=self.atol)
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


@final
class SDEIntegrator(eqx.Module):
    """Fixed-step stochastic integration: the solver, the step and the sphere projection.

    Args:
        solver: ``"euler"`` (Euler–Maruyama on the Itô form, the default), ``"heun"`` or
            ``"spark"`` (on the Stratonovich form). Additive-noise solvers and Milstein are
            refused by the models, which know their noise.
        dt: the step, in (0, T]; the step actually taken is ``T / ceil(T / dt)``.
        project: renormalise the rows after each step (default True; a retraction that
            keeps the weak order).
        brownian: ``"unsafe"`` (fast, one increment per step) or ``"virtual"`` (a
            ``VirtualBrownianTree``: the same path at every step size).
    """

    solver: str = eqx.field(static=True, default="euler")
    dt: float = eqx.field(static=True, default=0.01)
    project: bool = eqx.field(static=True, default=True)
    brownian: str = eqx.field(static=True, default="unsafe")

    def __check_init__(self):
        check_bound("dt", self.dt, lower=0.0, lower_open=True)
        check_choice("brownian", self.brownian, BROWNIAN_KINDS)

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
        inner: dfx.AbstractSolver = {
            "euler": dfx.Euler(),
            "heun": dfx.Heun(scan_kind="lax"),
            "spark": dfx.SPaRK(scan_kind="lax"),
        }[self.solver]
        return ProjectedSolver(inner) if self.project and project else inner

    def brownian_path(
        self, key: PRNGKeyArray, shape: jax.ShapeDtypeStruct, horizon: float
    ) -> dfx.AbstractBrownianPath:
        levy = dfx.SpaceTimeLevyArea if self.solver == "spark" else dfx.BrownianIncrement
        if self.brownian == "virtual":
            tol = self.step_size(horizon) / 8
            return dfx.VirtualBrownianTree(
                0.0, horizon, tol=tol, shape=shape, key=key, levy_area=levy
            )
        return dfx.UnsafeBrownianPath(shape=shape, key=key, levy_area=levy)

    def solve(
        self, terms, y0: PyTree, args: Any, ts: Array, horizon: float, *, project: bool = True
    ):
        """``(ys at ts, successful)`` of the SDE ``terms`` on [0, horizon]."""
        dtype = ts.dtype
        sol = dfx.diffeqsolve(
            terms,
            self.diffrax_solver(project),
            jnp.zeros((), dtype),
            jnp.asarray(horizon, dtype),
            jnp.asarray(self.step_size(horizon), dtype),
            y0,
            args,
            saveat=dfx.SaveAt(ts=ts),
            stepsize_controller=dfx.ConstantStepSize(),
            max_steps=self.n_steps(horizon) + 2,
            throw=False,
            # Forward-mode only: no backpropagation through the Brownian path is needed.
            adjoint=dfx.ForwardMode(),
        )
        assert sol.ys is not None
        return sol.ys, sol.result == dfx.RESULTS.successful


def solve_with_switch(
    segment: Callable[[AbstractScheme, Array, Array, Any, Array], tuple[Any, Array]],
    scheme: AbstractScheme,
    t_end: Array,
    y0: tuple[Array, Array],
    ts: Array,
) -> tuple[tuple[Array, Array], Array]:
    """Solve ``(state, radius)`` on [0, T] with ``segment``, split at Mix-LN's switch τ.

    ``segment(scheme, t0, t1, y0, ts)`` returns ``((state, radius) at ts, steps)``. For
    Mix-LN the speed factors jump at τ: Post-LN factors on [0, τ] (from r = 1, which
    Post-LN's normalisation leaves, when τ > 0), Pre-LN factors on [τ, T], so an adaptive
    stepper never integrates across the jump. τ stays an array leaf (both segments always
    run; one may be empty). Other schemes are one segment.
    """
    t0 = jnp.zeros((), ts.dtype)
    if not isinstance(scheme, MixLN):
        return segment(scheme, t0, t_end, y0, ts)
    tau = jnp.clip(scheme.tau.astype(ts.dtype), 0.0, t_end)
    state0, r0 = y0
    y0 = (state0, jnp.where(tau > 0, jnp.ones_like(r0), r0))
    ts1 = jnp.concatenate([jnp.minimum(ts, tau), tau[None]])
    (s1, r1), n1 = segment(PostLN(norm=scheme.norm), t0, tau, y0, ts1)
    (s2, r2), n2 = segment(
        PreLN(norm=scheme.norm), tau, t_end, (s1[-1], r1[-1]), jnp.maximum(ts, tau)
    )
    first = ts <= tau

    def pick(a, b):
        mask = first.reshape(first.shape + (1,) * (a.ndim - 1))
        return jnp.where(mask, a[:-1], b)

    return (pick(s1, s2), pick(r1, r2)), n1 + n2
