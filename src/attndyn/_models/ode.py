"""The normalized-attention ODE of seed 004 (eq. NA, Table 2; spec §3.1), solved with diffrax.

State (θ, r): directions θ_i on S^{d−1} and magnitudes r_i > 0, with

    dθ_i/dt = P_{θ_i}(A_i(Θ)) / s_i(t),    dr_i/dt = ρ_i(t),

V = I, and the speed factors s_i, ρ_i of the scheme (:meth:`AbstractScheme.speed`,
:meth:`AbstractScheme.radial_rate`).
"""

from typing import ClassVar, final

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, PRNGKeyArray

from .._core.attention import Attention
from .._core.errors import ParameterError, check_start
from .._core.saveat import SaveAt, without_saves
from .._core.schemes import AbstractScheme, PostLN
from .._core.sphere import tangent_project
from .base import AbstractTrajectoryModel
from .integrators import ODEIntegrator

State = tuple[Float[Array, "N d"], Float[Array, " N"]]


@final
class ODESolution(eqx.Module):
    """What :meth:`NormalizedAttentionODE.solve` returns for one trajectory.

    ``theta`` is normalised at every save (the solver's own drift off the sphere is in
    ``sphere_drift``, max over tokens of ``| |θ_i| − 1 |`` before normalising); ``r`` are
    the magnitudes; ``num_steps`` counts the solver's accepted steps.
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


@final
class NormalizedAttentionODE(AbstractTrajectoryModel):
    """The speed-regulated attention ODE for one scheme, solved by ``diffrax.diffeqsolve``.

    The vector field evaluates attention on the normalised rows and moves θ along the
    tangent space of the normalised rows, so the exact flow keeps |θ_i| = 1 and only
    integration error moves θ off the sphere: it is reported (``sphere_drift``), never
    hidden, and θ is renormalised only in the output.

    Schemes that keep rows on the sphere (Post-LN, nGPT, sqrt-scaling) run at r = 1 from
    any start, as their first discrete layer normalises it away
    (:meth:`AbstractScheme.start_radius`). Mix-LN's speed factors jump at τ
    (:attr:`AbstractScheme.switch_time`): the solve runs up to τ with Post-LN's factors
    and on from there with Pre-LN's (:meth:`AbstractScheme.phases`), so no step straddles
    the switch.

    With a scheme whose ``norm`` is :class:`LayerNorm` (no gain or bias) the start is
    centred, θ = (x0 − x̄0)/|x0 − x̄0| and r = |x0 − x̄0|, and the flow stays on the unit
    sphere of the mean-zero hyperplane. Where the speed factor vanishes (Peri-LN and nGPT
    at A_i = 0) the token does not move.

    Args:
        attention: the attention core (β, Q, K, kind); V = I.
        scheme: the normalization scheme (speed factors).
        saveat: the horizon T and the save times.
        integrator: the diffrax solver and step control (default adaptive ``Tsit5``).
    """

    per_device: ClassVar[bool] = False

    attention: Attention
    scheme: AbstractScheme = PostLN()
    saveat: SaveAt = SaveAt(1.0)
    integrator: ODEIntegrator = ODEIntegrator()

    #: Deterministic: a float64 solve from the float32 start of the same key is the same
    #: path (to the solver's tolerance), so merged trajectories may be rerun in float64.
    same_path_in_float64: ClassVar[bool] = True

    def batched_lapack(self) -> bool:
        return self.integrator.implicit

    def merge_law(self, dim: int):
        """The law of a merged pair's gap (:mod:`.merging`) for Post-LN (speed 1: the
        attention flow itself); ``None`` for the other schemes, whose speed depends on the
        token (its radius or |A_i|) and so on the gap."""
        from .merging import law_of

        if not self.scheme.post_ln_map:
            return None
        return law_of(self.attention, self.scheme.norm.effective_dim(dim), drift=1.0)

    @property
    def save_times(self) -> np.ndarray:
        return self.saveat.times

    def __check_init__(self):
        if self.scheme.norm.affine:
            raise ParameterError(
                "the normalized-attention ODE needs a norm without gain or bias (tokens on a "
                "sphere); use the discrete layer maps for an affine LayerNorm."
            )

    def vector_field(self, t, state: State, scheme: AbstractScheme | None = None) -> State:
        """(dθ/dt, dr/dt) at time ``t``, for :attr:`scheme` (or another ``scheme``)."""
        scheme = self.scheme if scheme is None else scheme
        theta, r = state
        # Using the normalised rows makes d|θ|²/dt = 0 exactly for the continuous flow.
        unit = scheme.norm.direction(theta)
        attn = self.attention(unit)
        radial = jnp.sum(unit * attn, axis=-1)
        attn_norm = jnp.linalg.norm(attn, axis=-1)
        # Peri-LN and nGPT give s_i = ∞ where A_i = 0: no direction to move in, dθ_i = 0.
        s = scheme.speed(t, r, attn_norm)
        dtheta = tangent_project(unit, attn) / s[:, None]
        return dtheta, scheme.radial_rate(t, r, radial, attn_norm)

    def solve(self, x0: Float[Array, "N d"], *, key: PRNGKeyArray | None = None) -> ODESolution:
        """Solve from ``x0`` (θ its rows normalised, centred first under LayerNorm; r their
        norms, or 1 for the schemes that keep tokens on the sphere: the class docstring) and
        return the saves. The flow is
        deterministic: ``key`` is accepted (one signature for every model) and unused."""
        del key
        check_start("x0", x0)  # before tracing: jit refuses some types first
        return self._solve(x0)

    def _solve(self, x0: Float[Array, "N d"]) -> ODESolution:
        ts = jnp.asarray(self.save_times, x0.dtype)
        t_end = jnp.asarray(self.saveat.horizon, x0.dtype)
        return _solve_ode(without_saves(self), x0, ts, t_end)

    def trajectory(self, x0, *, key: PRNGKeyArray | None = None):
        """The states r_i θ_i at :attr:`save_times` (deterministic: ``key`` is unused)."""
        return self.solve(x0, key=key).x


@eqx.filter_jit
def _solve_ode(
    model: NormalizedAttentionODE,
    x0: Float[Array, "N d"],
    ts: Float[Array, " S"],
    t_end: Float[Array, ""],
) -> ODESolution:
    """:meth:`NormalizedAttentionODE.solve` with the save times and horizon as arrays (the
    model's own :class:`SaveAt` is a placeholder here, :func:`without_saves`)."""
    dtype = x0.dtype
    centred = model.scheme.norm.centre(x0)
    r0 = jnp.linalg.norm(centred, axis=-1)
    # Post-LN, nGPT, sqrt-scaling (and Mix-LN before τ > 0) keep rows on the sphere:
    # r = 1 throughout, as after the first discrete layer.
    y0 = (centred / r0[:, None], model.scheme.start_radius(r0))
    t0 = jnp.zeros((), dtype)
    (theta, r), steps = model.integrator.solve_scheme(_field, model, t0, t_end, y0, ts)
    norms = jnp.linalg.norm(theta, axis=-1)
    drift = jnp.max(jnp.abs(norms - 1), axis=-1)
    return ODESolution(ts, theta / norms[..., None], r, drift, steps)


def _field(t, y, args: tuple[NormalizedAttentionODE, AbstractScheme]):
    model, scheme = args
    return model.vector_field(t, y, scheme)
