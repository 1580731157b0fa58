"""Common-noise SDEs of seed 003 on the sphere (spec §3.2-3.3), solved by ``diffrax``.

- :class:`TransformerSDE` (003 eq. 6): ``dY_i = ((1−d)σ²/2)|A_i|² Y_i dt + σ P_{Y_i}[dW A_i]``
  with one ``d×d`` Brownian motion ``W`` per trajectory, shared by its tokens;
- :class:`HybridSDE` (003 eq. 8): ``dY_i = [ε² F(Y_i, A_i) + P_{Y_i} A_i] dt
  + ε P_{Y_i} A_i dB`` with one scalar Brownian motion ``B`` per trajectory.

Both are Itô equations. The diffusion is a ``lineax.FunctionLinearOperator`` that maps the
Brownian increment (a ``(d, d)`` matrix or a scalar) to the ``(N, d)`` state increment,
so the ``(N, d, d, d)`` tensor of the matrix-noise diffusion is never formed.

Off the sphere the coefficients are extended by evaluating attention and the tangent
projection on the directions θ_i = Y_i/|Y_i| while keeping the factor Y_i of the radial
drift. On the sphere this is exactly eq. 6/8; off it, Itô's formula gives
``d|Y_i|² = (d−1)σ²|A_i|²(1 − |Y_i|²) dt`` (eq. 6) and
``d|Y_i|² = ε²(|A_i|² − ⟨θ_i, A_i⟩²)(1 − |Y_i|) dt`` (eq. 8): a solver's error is pulled
back toward the sphere instead of feeding on itself.

Both are stated once, in Itô form (:class:`AbstractItoSDE`); the solver's type decides what
is solved (``integrator=SDEIntegrator(solver)``, :mod:`attndyn._models.integrators`):

- an Itô solver, ``diffrax.Euler()`` (Euler–Maruyama, the default: weak order 1, strong
  order 1/2), takes the Itô drift;
- a Stratonovich solver, ``diffrax.Heun()`` (strong order 1 for the scalar noise of eq. 8,
  1/2 for the matrix noise of eq. 6; weak order 1) or ``diffrax.SPaRK()`` (space-time Lévy
  area: strong order 1/2 for general noise with a smaller constant, 1 for commutative
  noise), takes the Stratonovich drift ``b_S = b_I − ½ Σ_c Dg_c[g_c]`` over the noise
  channels c, computed by forward-mode autodiff of the diffusion
  (:func:`~attndyn._models.integrators.stratonovich_drift`: ``d²`` JVPs for eq. 6, so Heun
  and SPaRK cost about ``d²`` times more per step than Euler there; one JVP for eq. 8).

Additive-noise solvers (SRA1, ShARK, SEA) cannot handle this multiplicative noise and are
refused; Milstein needs commutative noise, which eq. 6 lacks (for the scalar noise of
eq. 8 Heun already has strong order 1).

By default every step is followed by the projection ``Y_i ← Y_i/|Y_i|`` (``project=True``,
:class:`ProjectedSolver`): a retraction that keeps the solution on the sphere to rounding
error and keeps the scheme's weak order. Without it, plain Euler–Maruyama on eq. 6 leaves
the sphere by O(√(T·dt)); the remaining drift is always measured and reported
(:attr:`SDESolution.sphere_drift`).
"""

import abc
from typing import ClassVar, final

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, PRNGKeyArray

from .._core.attention import Attention, float_leaf
from .._core.errors import check_single_key, check_start, check_swept
from .._core.linalg import matmul
from .._core.saveat import SaveAt
from .._core.sphere import normalize, tangent_project
from .base import AbstractTrajectoryModel, Reduction
from .integrators import AbstractItoSDE, SDEIntegrator, stratonovich_drift


@final
class SDESolution(eqx.Module):
    """One trajectory of a sphere SDE at the save times.

    ``x`` are the solver's states, not renormalised; ``sphere_drift`` is
    ``max_i | |x_i| − 1 |`` at each save (the error the solver left, rounding only when
    projecting); ``ok`` is False when the solve failed (then ``x`` is NaN).
    """

    ts: Float[Array, " S"]
    x: Float[Array, "S N d"]
    sphere_drift: Float[Array, " S"]
    ok: Array


class AbstractSphereSDE(AbstractTrajectoryModel, AbstractItoSDE):
    """Shared machinery: fixed-step ``diffeqsolve`` of an Itô SDE on ``(S^{d−1})^N``.

    Subclasses give the Itô drift, the diffusion operator and the Brownian shape
    (:meth:`noise_shape`); the integrator's solver decides which form is solved.
    Save times are rounded to the step grid (like the discrete layers), so every save is
    an actual solver step. The step is ``horizon / ceil(horizon / dt)``, at most ``dt``.
    """

    per_device: ClassVar[bool] = False

    attention: eqx.AbstractVar[Attention]
    saveat: eqx.AbstractVar[SaveAt]
    integrator: eqx.AbstractVar[SDEIntegrator]

    # --- to implement -------------------------------------------------------------
    @abc.abstractmethod
    def ito_drift(self, y: Float[Array, "N d"]) -> Float[Array, "N d"]:
        """The Itô drift at ``y`` (extended off the sphere as in the module docstring)."""

    @abc.abstractmethod
    def diffusion_apply(self, y: Float[Array, "N d"], dw: Array) -> Float[Array, "N d"]:
        """The diffusion applied to one Brownian increment ``dw``."""

    @abc.abstractmethod
    def noise_shape(self, dim: int) -> tuple[int, ...]:
        """Shape of one trajectory's Brownian motion."""

    @property
    @abc.abstractmethod
    def commutative_noise(self) -> bool:
        """Whether the noise vector fields commute (Milstein needs it)."""

    # --- shared ---------------------------------------------------------------------
    def _check_common(self) -> None:
        self.integrator.check_horizon(self.saveat.horizon)
        self.integrator.check_noise(commutative=self.commutative_noise)

    def brownian_shape(self, y: Float[Array, "N d"]) -> tuple[int, ...]:
        return self.noise_shape(y.shape[-1])

    @property
    def n_steps(self) -> int:
        return self.integrator.n_steps(self.saveat.horizon)

    @property
    def step_size(self) -> float:
        """The step actually taken (``horizon / n_steps``)."""
        return self.integrator.step_size(self.saveat.horizon)

    @property
    def save_times(self) -> np.ndarray:
        return self.saveat.steps(self.step_size) * self.step_size

    def stratonovich_drift(self, y: Float[Array, "N d"]) -> Float[Array, "N d"]:
        """``b_S = b_I − ½ Σ_c Dg_c(y)[g_c(y)]`` over unit Brownian channels ``c``: the
        drift a Stratonovich solver is given
        (:func:`attndyn._models.integrators.stratonovich_drift`)."""
        return stratonovich_drift(self, y)

    def solve(self, x0: Float[Array, "N d"], *, key: PRNGKeyArray) -> SDESolution:
        """Solve from the directions of ``x0``; the Brownian motion is built from ``key``."""
        check_start("x0", x0)  # before tracing: jit refuses some types first
        check_single_key("key", key)
        return self._solve(x0, key)

    @eqx.filter_jit
    def _solve(self, x0: Float[Array, "N d"], key: PRNGKeyArray) -> SDESolution:
        ts = jnp.asarray(self.save_times, x0.dtype)
        ys, ok = self.integrator.solve(self, normalize(x0), ts, self.saveat.horizon, key=key)
        ys = jnp.where(ok, ys, jnp.nan)
        drift = jnp.max(jnp.abs(jnp.linalg.norm(ys, axis=-1) - 1), axis=-1)
        return SDESolution(ts, ys, drift, ok)

    def trajectory(self, x0, *, key):
        """The states at :attr:`save_times` (NaN when the solve failed)."""
        return self.solve(x0, key=key).x

    def keeps_unit_rows(self) -> bool:
        return self.integrator.project

    def _overlap_blocker(self, n_tokens: int) -> str | None:
        """Why the two-token overlap diffusion is not this SDE's exact reduction."""
        from .overlap import overlap_solver_blocker

        att = self.attention
        if n_tokens != 2:
            return f"the overlap diffusion is for two tokens (N = {n_tokens})"
        if att.query is not None or att.key_matrix is not None or att.n_heads != 1:
            return "Q, K or the heads are not the identity"
        if att.laplacian or att.causal or att.n_laplacian_heads:
            return "Laplacian or causal attention changes the overlap diffusion"
        return overlap_solver_blocker(self.integrator)

    def _overlap_reduction(self, n_tokens: int, dim: int, **noise) -> Reduction:
        """The two-token overlap diffusion of this SDE (``noise``: its noise fields)."""
        from .overlap import OverlapSDE

        blocker = self._overlap_blocker(n_tokens)
        if blocker is not None:
            return Reduction(None, blocker)
        overlap = OverlapSDE(
            beta=self.attention.beta,
            attention=self.attention.kind,
            dim=dim,
            saveat=self.saveat,
            integrator=self.integrator,
            **noise,
        )
        return Reduction(overlap, "")


@final
class TransformerSDE(AbstractSphereSDE):
    """003 eq. 6, the depth limit of Post-LN with full value noise (Theorem 1).

    Args:
        attention: the attention core (β, kind, Q, K, options).
        sigma: σ > 0, an array leaf.
        saveat: the horizon T and the save times (rounded to the step grid).
        integrator: the diffrax solver (``diffrax.Euler()`` by default; Milstein is
            refused: the matrix noise is not commutative), step ``dt``, projection and
            Brownian path (:class:`SDEIntegrator`).
    """

    attention: Attention
    sigma: Float[Array, ""] = eqx.field(converter=float_leaf("sigma"), default=1.0)
    saveat: SaveAt = SaveAt(1.0)
    integrator: SDEIntegrator = SDEIntegrator()

    def __check_init__(self):
        check_swept("sigma", self.sigma, lower=0.0, lower_open=True)
        self._check_common()

    @property
    def commutative_noise(self) -> bool:
        return False

    def noise_shape(self, dim: int) -> tuple[int, ...]:
        return (dim, dim)

    def reduction(self, n_tokens: int, dim: int) -> Reduction:
        """For two tokens: the overlap diffusion (003 Lemma 4), exact in law."""
        return self._overlap_reduction(n_tokens, dim, noise="full", sigma=self.sigma)

    def merge_law(self, dim: int):
        """The law of a merged pair's gap (:mod:`.merging`)."""
        from .merging import law_of

        return law_of(self.attention, dim, sigma=float(self.sigma))

    def ito_drift(self, y):
        dim = y.shape[-1]
        attn = self.attention(normalize(y))
        sq = jnp.sum(attn * attn, axis=-1, keepdims=True)
        return ((1 - dim) * 0.5) * self.sigma**2 * sq * y

    def diffusion_apply(self, y, dw):
        theta = normalize(y)
        attn = self.attention(theta)
        # Row i of A Wᵀ is W A_i: the same matrix increment acts on every token.
        return self.sigma * tangent_project(theta, matmul(attn, dw.T))


def hybrid_correction(x: Float[Array, "N d"], y: Float[Array, "N d"]) -> Float[Array, "N d"]:
    """F(x, y) = (3/2)⟨x,y⟩² x − (1/2)|y|² x − ⟨x,y⟩ y of 003 eq. 8, row by row."""
    xy = jnp.sum(x * y, axis=-1, keepdims=True)
    yy = jnp.sum(y * y, axis=-1, keepdims=True)
    return 1.5 * xy**2 * x - 0.5 * yy * x - xy * y


@final
class HybridSDE(AbstractSphereSDE):
    """003 eq. 8, the depth limit of Post-LN with scalar value noise (Lemma 3).

    ``eps`` (ε ≥ 0) is an array leaf; ε = 0 is the deterministic attention flow. Other
    arguments as :class:`TransformerSDE`.
    """

    attention: Attention
    eps: Float[Array, ""] = eqx.field(converter=float_leaf("eps"), default=0.0)
    saveat: SaveAt = SaveAt(1.0)
    integrator: SDEIntegrator = SDEIntegrator()

    def __check_init__(self):
        check_swept("eps", self.eps, lower=0.0)
        self._check_common()

    @property
    def commutative_noise(self) -> bool:
        return True

    def noise_shape(self, dim: int) -> tuple[int, ...]:
        return ()

    def reduction(self, n_tokens: int, dim: int) -> Reduction:
        """For two tokens: the overlap diffusion (spec §3.4), exact in law."""
        return self._overlap_reduction(n_tokens, dim, noise="hybrid", eps=self.eps)

    def merge_law(self, dim: int):
        """The law of a merged pair's gap (:mod:`.merging`)."""
        from .merging import law_of

        return law_of(self.attention, dim, drift=1.0, eps=float(self.eps))

    def ito_drift(self, y):
        theta = normalize(y)
        attn = self.attention(theta)
        return self.eps**2 * hybrid_correction(theta, attn) + tangent_project(theta, attn)

    def diffusion_apply(self, y, dw):
        theta = normalize(y)
        return (self.eps * dw) * tangent_project(theta, self.attention(theta))
