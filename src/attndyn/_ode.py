"""The normalized-attention ODE of seed 004 (eq. NA, Table 2; spec §3.1), solved with diffrax.

State (θ, r): directions θ_i on S^{d−1} and magnitudes r_i > 0, with

    dθ_i/dt = P_{θ_i}(A_i(Θ)) / s_i(t),    dr_i/dt = ρ_i(t),

V = I, and the speed factors s_i, ρ_i of the scheme (:meth:`AbstractScheme.speed`,
:meth:`AbstractScheme.radial_rate`).
"""

import diffrax as dfx
import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, PRNGKeyArray

from ._attention import Attention
from ._dynamics import AbstractDynamics
from ._errors import ParameterError, check_bound, check_int
from ._schemes import AbstractScheme, MixLN, PostLN, PreLN
from ._sphere import normalize, tangent_project


def as_times(value) -> tuple[float, ...] | None:
    """Converter: save times as a tuple of Python floats (hashable, never a static array)."""
    if value is None:
        return None
    return tuple(float(v) for v in np.atleast_1d(np.asarray(value, dtype=np.float64)))


State = tuple[Float[Array, "N d"], Float[Array, " N"]]


class ODESolution(eqx.Module):
    """What :meth:`NormalizedAttentionODE.solve` returns for one trajectory.

    ``theta`` is normalised at every save (the solver's own drift off the sphere is in
    ``sphere_drift``, max over tokens of ``| |θ_i| − 1 |`` before normalising); ``r`` are
    the magnitudes; ``num_steps`` counts accepted steps over all solve segments.
    """

    ts: Float[Array, " S"]
    theta: Float[Array, "S N d"]
    r: Float[Array, "S N"]
    sphere_drift: Float[Array, " S"]
    num_steps: Array

    @property
    def x(self) -> Float[Array, "S N d"]:
        """The states r_i θ_i."""
        return self.r[..., None] * self.theta


class NormalizedAttentionODE(AbstractDynamics):
    """The speed-regulated attention ODE for one scheme, solved by ``diffrax.diffeqsolve``.

    The vector field evaluates attention on the normalised rows and moves θ along the
    tangent space of the normalised rows, so the exact flow keeps |θ_i| = 1 and only
    integration error moves θ off the sphere: it is reported (``sphere_drift``), never
    hidden, and θ is renormalised only in the output.

    Schemes that keep rows on the sphere (Post-LN, nGPT, sqrt-scaling) run at r = 1 from
    any start, as their first discrete layer normalises it away.

    Mix-LN's speed factors jump at t = τ. The solve is split there: Post-LN factors on
    [0, τ] and Pre-LN factors on [τ, T] (with r reset to 1, the magnitude that Post-LN's
    normalisation leaves), so the adaptive stepper never integrates across the jump. τ
    stays an array leaf (both segments always run; one of them may be empty), so it can
    be vmapped.

    Args:
        attention: the attention core (β, Q, K, kind); V = I.
        scheme: the normalization scheme (speed factors).
        horizon: T > 0.
        save_at: times in [0, T], non-decreasing (default: T only).
        solver: any diffrax ODE solver (default ``Tsit5``).
        rtol, atol: tolerances of the adaptive PID step controller.
        dt0: initial step (``None`` lets diffrax choose; required when ``adaptive=False``).
        adaptive: ``False`` takes constant steps ``dt0``.
        max_steps: the solver's step budget per segment.
    """

    attention: Attention
    scheme: AbstractScheme = PostLN()
    horizon: float = eqx.field(static=True, default=1.0)
    save_at: tuple[float, ...] | None = eqx.field(static=True, default=None, converter=as_times)
    solver: dfx.AbstractSolver = dfx.Tsit5()
    rtol: float = eqx.field(static=True, default=1e-6)
    atol: float = eqx.field(static=True, default=1e-8)
    dt0: float | None = eqx.field(static=True, default=None)
    adaptive: bool = eqx.field(static=True, default=True)
    max_steps: int = eqx.field(static=True, default=100_000)

    def __check_init__(self):
        check_bound("horizon", self.horizon, lower=0.0, lower_open=True)
        check_bound("rtol", self.rtol, lower=0.0, lower_open=True)
        check_bound("atol", self.atol, lower=0.0, lower_open=True)
        check_int("max_steps", self.max_steps, lower=1)
        if self.save_at is not None:
            _check_save_times(self.save_at, self.horizon)
        if not self.adaptive and self.dt0 is None:
            raise ParameterError("dt0 must be given (> 0) when adaptive=False.")
        if self.dt0 is not None:
            check_bound("dt0", self.dt0, lower=0.0, lower_open=True)

    @property
    def save_times(self) -> np.ndarray:
        return np.asarray((self.horizon,) if self.save_at is None else self.save_at)

    def vector_field(self, t, state: State, scheme: AbstractScheme) -> State:
        """(dθ/dt, dr/dt) for ``scheme`` (Mix-LN is solved segment by segment)."""
        theta, r = state
        # Using the normalised rows makes d|θ|²/dt = 0 exactly for the continuous flow.
        unit = normalize(theta)
        attn = self.attention(unit)
        radial = jnp.sum(unit * attn, axis=-1)
        attn_norm = jnp.linalg.norm(attn, axis=-1)
        s = scheme.speed(t, r, attn_norm)
        dtheta = tangent_project(unit, attn) / s[:, None]
        return dtheta, scheme.radial_rate(t, r, radial, attn_norm)

    def _segment(self, scheme, t0, t1, y0: State, ts: Array):
        controller = (
            dfx.PIDController(rtol=self.rtol, atol=self.atol)
            if self.adaptive
            else dfx.ConstantStepSize()
        )
        sol = dfx.diffeqsolve(
            # A module-level term with (model, scheme) as args: diffeqsolve's compiled code is
            # reused across calls whose static structure agrees (a lambda would recompile).
            dfx.ODETerm(_field),
            self.solver,
            t0,
            t1,
            self.dt0,
            y0,
            (self, scheme),
            saveat=dfx.SaveAt(ts=ts),
            stepsize_controller=controller,
            max_steps=self.max_steps,
        )
        assert sol.ys is not None and sol.stats is not None
        return sol.ys, sol.stats["num_accepted_steps"]

    @eqx.filter_jit
    def solve(self, x0: Float[Array, "N d"]) -> ODESolution:
        """Solve from ``x0`` (θ = x0/|x0|, r = |x0|) and return the saves."""
        dtype = x0.dtype
        ts = jnp.asarray(self.save_times, dtype)
        r0 = jnp.linalg.norm(x0, axis=-1)
        y0 = (x0 / r0[:, None], r0)
        if not self.scheme.keeps_radius:
            # Post-LN, nGPT and sqrt-scaling keep rows on the sphere: r = 1 throughout,
            # as after the first discrete layer.
            y0 = (y0[0], jnp.ones_like(r0))
        t0 = jnp.zeros((), dtype)
        t_end = jnp.asarray(self.horizon, dtype)
        if isinstance(self.scheme, MixLN):
            tau = jnp.clip(self.scheme.tau.astype(dtype), 0.0, t_end)
            # Post-LN normalises at once: its phase (if any) runs at r = 1.
            y0 = (y0[0], jnp.where(tau > 0, jnp.ones_like(r0), r0))
            ts1 = jnp.concatenate([jnp.minimum(ts, tau), tau[None]])
            (th1, r1), n1 = self._segment(PostLN(), t0, tau, y0, ts1)
            (th2, r2), n2 = self._segment(
                PreLN(), tau, t_end, (th1[-1], r1[-1]), jnp.maximum(ts, tau)
            )
            first = (ts <= tau)[:, None]
            theta = jnp.where(first[..., None], th1[:-1], th2)
            r = jnp.where(first, r1[:-1], r2)
            steps = n1 + n2
        else:
            (theta, r), steps = self._segment(self.scheme, t0, t_end, y0, ts)
        norms = jnp.linalg.norm(theta, axis=-1)
        drift = jnp.max(jnp.abs(norms - 1), axis=-1)
        return ODESolution(ts, theta / norms[..., None], r, drift, steps)

    def trajectory(self, x0, *, key: PRNGKeyArray | None = None):
        """The states r_i θ_i at :attr:`save_times` (deterministic: ``key`` is unused)."""
        del key
        return self.solve(x0).x


def _check_save_times(save_at, horizon: float) -> None:
    times = np.asarray(save_at, dtype=np.float64)
    if times.ndim != 1 or times.size == 0:
        raise ParameterError("save_at must name at least one time in [0, horizon].")
    if np.any((times < 0) | (times > horizon)) or not np.all(np.isfinite(times)):
        raise ParameterError(
            f"save_at={np.array2string(times, threshold=6)} has a time outside the solve "
            f"interval [0, {horizon}]; every save time must lie in it."
        )
    if np.any(np.diff(times) < 0):
        raise ParameterError("save_at must be non-decreasing.")


def _field(t, y, args):
    model, scheme = args
    return model.vector_field(t, y, scheme)
