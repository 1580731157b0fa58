"""Two-token overlap diffusions (003 Lemma 4, eq. 26; spec §3.4), as 1-D SDEs.

For N = 2 and Q = K = I the overlap Z = ⟨Y_1, Y_2⟩ of eq. 6 or eq. 8 is a closed
one-dimensional diffusion ``dZ = (1−Z²) m(Z) dt + (1−Z²) s(Z) dB``. With a = e^β,
b = e^{βZ}:

- full noise, USA (eq. 20): ``m = (σ²/4)(2(d−2)ab − Z(a²+b²))``, ``s = (σ/√2)√(a²+b²)``;
- full noise, SA: SA = USA·2/(a+b), so ``m`` is scaled by 4/(a+b)² and ``s`` by 2/(a+b):
  ``m = σ²(2(d−2)ab − Z(a²+b²))/(a+b)²``, ``s = √2 σ √(a²+b²)/(a+b)``. 003 eq. 21 prints
  the diffusion without the factor √2 (spec §3.4 carries the corrected form); the law of
  the full SDE agrees with the corrected one (``tests/test_overlap.py``);
- hybrid: with c = 1/2 (USA) or 1/(a+b) (SA): ``m = 2cb(1 − ε²c(a + 2bZ))``,
  ``s = 2εcb``. For USA this is eq. 26, ``e^{βZ}(1−Z²)[(1 − ε²e^β/2 − ε²Z e^{βZ})dt + ε dB]``.

Z itself sits on [−1, 1] with both ends absorbing-in-the-limit, where an explicit step
overshoots. The solver therefore integrates ``X = artanh Z`` on the whole line. By Itô's
formula ``dX = [m(Z) + Z s(Z)²] dt + s(Z) dB`` with ``Z = tanh X``: bounded coefficients,
no boundary. The coefficients are evaluated with r = b/a = e^{β(Z−1)} ∈ (0, 1] so SA
never overflows.
"""

import abc
import math
import warnings
from typing import TYPE_CHECKING, ClassVar, final

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Key, PRNGKeyArray

from .._core.attention import ATTENTION_KINDS, float_leaf
from .._core.errors import (
    ParameterError,
    check_bound,
    check_choice,
    check_int,
    check_scalar,
    user_stacklevel,
)
from .._core.saveat import SaveAt
from .base import OVERFLOW_MARGIN, AbstractModel, exp_square_threshold
from .integrators import AbstractItoSDE, SDEIntegrator
from .reduced.frame import held_sine, two_token_frame

OVERLAP_NOISES = ("full", "hybrid")


def overlap_solver_blocker(integrator: SDEIntegrator) -> str | None:
    """Why ``integrator``'s solver is not offered for the overlap diffusion, if it is not.

    The overlap is solved with plain Brownian increments (Euler, Heun, EulerHeun, …): a
    solver that asks for Lévy area (SPaRK) runs the full route instead, as it always has,
    so that a study's route and numbers do not depend on this choice of solver."""
    if integrator.levy_area is dfx.BrownianIncrement:
        return None
    return (
        f"the overlap diffusion is solved with Brownian increments only, and "
        f"{type(integrator.solver).__name__} asks for {integrator.levy_area.__name__}"
    )


@final
class OverlapSolution(eqx.Module):
    """One trajectory of an overlap diffusion at the save times.

    ``artanh_z`` is X = artanh Z, the state the solver integrates (NaN when the solve
    failed, ``ok`` False): exact where Z itself rounds to ±1. :attr:`z` is the overlap,
    :attr:`x` the two tokens as frame rows (what :meth:`AbstractOverlapSDE.simulate`
    returns).
    """

    ts: Float[Array, " S"]
    artanh_z: Float[Array, " S"]
    ok: Array

    @property
    def z(self) -> Float[Array, " S"]:
        """The overlap Z = ⟨Y_1, Y_2⟩ = tanh X."""
        return jnp.tanh(self.artanh_z)

    @property
    def x(self) -> Float[Array, "S 2 2"]:
        """The tokens (1, 0) and (Z, √(1 − Z²)), both computed from X."""
        return jax.vmap(_overlap_frame)(self.artanh_z)

    def __getitem__(self, index):
        # Until 0.5.0 ``solve`` returned the array of Z: indexing still reads it, for a
        # release.
        warnings.warn(
            "OverlapSDE.solve now returns an OverlapSolution; index its .z instead (indexing "
            "the solution is removed in attndyn 0.6).",
            DeprecationWarning,
            stacklevel=user_stacklevel(),
        )
        return self.z[index]


class AbstractOverlapSDE(AbstractModel, AbstractItoSDE):
    """The machinery of a two-token overlap diffusion ``dZ = (1−Z²)[m(Z) dt + s(Z) dB]``:
    subclasses give :meth:`rates`, a :class:`SaveAt` and an :class:`SDEIntegrator`.
    :class:`OverlapSDE` is the one of seed 003; a variant (say, a misprinted formula to be
    rejected by a test) is another subclass.

    Unlike the sphere SDEs, a scalar diffrax solve runs inside ``shard_map``, so each device
    solves its own slice of a chunk (``per_device``): faster than the compiler's
    partitioning of the batched solve loop."""

    per_device: ClassVar[bool] = True

    if TYPE_CHECKING:  # pyright reads AbstractVar as a field, first in __init__'s order

        @property
        def beta(self) -> Float[Array, ""]: ...

        @property
        def saveat(self) -> SaveAt: ...

        @property
        def integrator(self) -> SDEIntegrator: ...

    else:
        beta: eqx.AbstractVar[Float[Array, ""]]
        saveat: eqx.AbstractVar[SaveAt]
        integrator: eqx.AbstractVar[SDEIntegrator]

    @abc.abstractmethod
    def rates(self, z: Float[Array, "*b"]) -> tuple[Float[Array, "*b"], Float[Array, "*b"]]:
        """``(m(z), s(z))``: drift and diffusion of Z divided by (1 − z²)."""

    @property
    def n_steps(self) -> int:
        return self.integrator.n_steps(self.saveat.horizon)

    @property
    def save_times(self) -> np.ndarray:
        step = self.integrator.step_size(self.saveat.horizon)
        return self.saveat.steps(step) * step

    def drift(self, z: Float[Array, "*b"]) -> Float[Array, "*b"]:
        """The Itô drift of Z."""
        return (1 - z**2) * self.rates(z)[0]

    def diffusion(self, z: Float[Array, "*b"]) -> Float[Array, "*b"]:
        """The diffusion coefficient of Z."""
        return (1 - z**2) * self.rates(z)[1]

    # The Itô SDE of X = artanh Z that the integrator solves (AbstractItoSDE).
    def ito_drift(self, y: Float[Array, "*b"]) -> Float[Array, "*b"]:
        """The Itô drift of X = artanh Z at ``y`` = X: ``m(Z) + Z s(Z)²``."""
        z = jnp.tanh(y)
        m, s = self.rates(z)
        return m + z * s**2

    def diffusion_apply(self, y: Float[Array, "*b"], dw: Array) -> Float[Array, "*b"]:
        """``s(Z) dB``: the diffusion of X applied to the increment ``dw``."""
        return self.rates(jnp.tanh(y))[1] * dw

    def brownian_shape(self, y: Float[Array, "*b"]) -> tuple[int, ...]:
        return ()

    def diffusion_vf(self, y: Float[Array, "*b"]) -> Float[Array, "*b"]:
        """``s(Z)`` itself, which diffrax multiplies by the scalar increment: inside
        ``shard_map`` (:attr:`per_device`) lineax's closure-converted operator rejects the
        per-device arrays."""
        return self.rates(jnp.tanh(y))[1]

    def solve_artanh(self, z0: Float[Array, ""], *, key: PRNGKeyArray) -> Float[Array, " S"]:
        """X = artanh Z at :attr:`save_times`, from ``z0`` in (−1, 1) (NaN if the solve
        fails)."""
        return self._solve(z0, key=key).artanh_z

    def _solve(self, z0: Float[Array, ""], *, key: PRNGKeyArray) -> OverlapSolution:
        dtype = jnp.result_type(z0, jnp.float32)
        # Keep the start strictly inside (−1, 1) so artanh is finite.
        tiny = jnp.asarray(1e-6, dtype)
        x0 = jnp.arctanh(jnp.clip(jnp.asarray(z0, dtype), -1 + tiny, 1 - tiny))
        ts = jnp.asarray(self.save_times, dtype)
        xs, ok = self.integrator.solve(self, x0, ts, self.saveat.horizon, key=key, project=False)
        return OverlapSolution(ts, jnp.where(ok, xs, jnp.nan), ok)

    @eqx.filter_jit
    def solve(
        self, x0: Float[Array, ""] | Float[Array, "2 d"], *, key: PRNGKeyArray
    ) -> OverlapSolution:
        """Solve from ``x0``: two tokens ``(2, d)`` (their overlap is the start) or the
        overlap ``z0`` itself, a scalar in (−1, 1); NaN where the solve fails."""
        x0 = jnp.asarray(x0)
        if x0.ndim == 2:
            self._check_tokens(x0[None])
            theta = x0 / jnp.linalg.norm(x0, axis=-1, keepdims=True)
            x0 = jnp.sum(theta[0] * theta[1], axis=-1)
        elif x0.ndim != 0:
            raise ParameterError(
                f"x0 must be two tokens (2, d) or their overlap (a scalar); got shape {x0.shape}."
            )
        return self._solve(x0, key=key)

    def keeps_unit_rows(self) -> bool:
        return True  # the frame rows (1, 0) and (tanh X, 1/cosh X)

    def _check_tokens(self, x0: Float[Array, "batch N d"]) -> None:
        if x0.shape[1] != 2:
            raise ParameterError(
                f"an overlap diffusion has two tokens; the points ask for n_tokens={x0.shape[1]}."
            )

    def simulate(
        self, x0: Float[Array, "batch N d"], keys: Key[Array, " batch"]
    ) -> Float[Array, "batch S 2 2"]:
        self._check_tokens(x0)
        theta = x0 / jnp.linalg.norm(x0, axis=-1, keepdims=True)
        z0 = jnp.sum(theta[:, 0] * theta[:, 1], axis=-1)
        xs = jax.vmap(lambda z, k: self.solve_artanh(z, key=k))(z0, keys)
        return jax.vmap(jax.vmap(_overlap_frame))(xs)


@final
class OverlapSDE(AbstractOverlapSDE):
    """The overlap diffusion of two tokens, one trajectory at a time (vmap to batch).

    Args:
        beta: β ≥ 0 (array leaf).
        attention: ``"softmax"`` (SA) or ``"unnormalized"`` (USA).
        noise: ``"full"`` (eq. 6, parameter σ) or ``"hybrid"`` (eq. 8, parameter ε).
        sigma: σ > 0 (full noise); eps: ε ≥ 0 (hybrid). Array leaves.
        dim: d ≥ 2 (full noise only; the hybrid overlap does not depend on d).
        saveat: the horizon T and the save times, rounded to the step grid.
        integrator: :class:`SDEIntegrator` with a solver on Brownian increments,
            ``diffrax.Euler()`` (Itô) or ``diffrax.Heun()`` (Stratonovich, strong order 1),
            …; its projection does not apply (the state is X = artanh Z, on the whole line).

    As a model for the estimator (N = 2), :meth:`simulate` starts from the overlap of each
    start's two tokens and returns them as the frame rows (1, 0), (Z, √(1 − Z²)), with
    √(1 − Z²) = 1/cosh X and Z = tanh X computed from X: the gaps 1 ∓ Z keep their
    relative precision, so no pair merges numerically.
    """

    beta: Float[Array, ""] = eqx.field(converter=float_leaf("beta"))
    attention: str = eqx.field(static=True, default="softmax")
    noise: str = eqx.field(static=True, default="full")
    sigma: Float[Array, ""] = eqx.field(converter=float_leaf("sigma"), default=1.0)
    eps: Float[Array, ""] = eqx.field(converter=float_leaf("eps"), default=0.0)
    dim: int = eqx.field(static=True, default=3)
    saveat: SaveAt = SaveAt(1.0)  # pyright: ignore[reportIncompatibleMethodOverride]
    integrator: SDEIntegrator = SDEIntegrator()  # pyright: ignore[reportIncompatibleMethodOverride]

    def __check_init__(self):
        check_choice("attention", self.attention, ATTENTION_KINDS)
        check_choice("noise", self.noise, OVERLAP_NOISES)
        blocker = overlap_solver_blocker(self.integrator)
        if blocker is not None:
            raise ParameterError(f"solver: {blocker}; use diffrax.Euler() or diffrax.Heun().")
        self.integrator.check_noise(commutative=True)
        check_scalar("beta", self.beta)
        check_bound("beta", self.beta, lower=0.0)
        check_scalar("sigma", self.sigma)
        check_bound("sigma", self.sigma, lower=0.0, lower_open=True)
        check_scalar("eps", self.eps)
        check_bound("eps", self.eps, lower=0.0)
        check_int("dim", self.dim, lower=2)
        self.integrator.check_horizon(self.saveat.horizon)

    def rates(self, z: Float[Array, "*b"]) -> tuple[Float[Array, "*b"], Float[Array, "*b"]]:
        """``(m(z), s(z))``: drift and diffusion of Z divided by (1 − z²)."""
        beta = self.beta.astype(z.dtype)
        a = jnp.exp(beta)
        r = jnp.exp(beta * (z - 1))  # b/a, in (0, 1]
        if self.noise == "full":
            sigma = self.sigma.astype(z.dtype)
            inner = 2 * (self.dim - 2) * r - z * (1 + r**2)  # (2(d−2)ab − Z(a²+b²))/a²
            if self.attention == "unnormalized":
                return sigma**2 / 4 * a**2 * inner, sigma / math.sqrt(2) * a * jnp.sqrt(1 + r**2)
            return (
                sigma**2 * inner / (1 + r) ** 2,
                math.sqrt(2) * sigma * jnp.sqrt(1 + r**2) / (1 + r),
            )
        eps = self.eps.astype(z.dtype)
        # c·a and c·b, with c = 1/2 (USA) or 1/(a+b) (SA).
        ca, cb = (
            (a / 2, a * r / 2) if self.attention == "unnormalized" else (1 / (1 + r), r / (1 + r))
        )
        return 2 * cb * (1 - eps**2 * (ca + 2 * cb * z)), 2 * eps * cb

    def overflow_causes(self, dtype: np.dtype) -> list[str]:
        # USA's rates carry a = e^β and a² = e^{2β} (full noise); a² overflows past
        # β = ½·ln(max), the threshold of unnormalised attention in the token models.
        threshold = exp_square_threshold(dtype)
        beta = float(self.beta)
        if self.attention != "unnormalized" or beta + math.log(OVERFLOW_MARGIN) < threshold:
            return []
        x64 = "pass x64=True (CLI: --x64; limit 354.9), " if np.dtype(dtype) == np.float32 else ""
        return [
            f"unnormalised attention (beta): β = {beta:.4g} is near or above "
            f"{threshold:.1f} = ½·ln(max {np.dtype(dtype).name}), where the overlap drift's "
            f"e^{{2β}} overflows; {x64}lower β or use attention='softmax'"
        ]

    def _check_tokens(self, x0: Float[Array, "batch N d"]) -> None:
        super()._check_tokens(x0)
        if self.noise == "full" and x0.shape[2] != self.dim:
            raise ParameterError(
                f"OverlapSDE has dim={self.dim}; the points ask for dim={x0.shape[2]}."
            )


def _overlap_frame(x: Array) -> Float[Array, "2 2"]:
    """The frame rows (1, 0), (tanh X, 1/cosh X), 1/cosh X :func:`held_sine`: past
    |X| ≈ 89 it underflows in float32 although X itself is exact, and the estimator would
    otherwise count a numerical merge that the simulation never made."""
    return two_token_frame(jnp.tanh(x), held_sine(1 / jnp.cosh(x)))
