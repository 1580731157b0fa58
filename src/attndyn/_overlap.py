"""Two-token overlap diffusions (003 Lemma 4, eq. 26; spec §3.4), as 1-D SDEs.

For N = 2 and Q = K = I the overlap Z = ⟨Y_1, Y_2⟩ of eq. 6 or eq. 8 is a closed
one-dimensional diffusion ``dZ = (1−Z²) m(Z) dt + (1−Z²) s(Z) dB``. With a = e^β,
b = e^{βZ}:

- full noise, USA (eq. 20): ``m = (σ²/4)(2(d−2)ab − Z(a²+b²))``, ``s = (σ/√2)√(a²+b²)``;
- full noise, SA: SA = USA·2/(a+b), so ``m`` is scaled by 4/(a+b)² and ``s`` by 2/(a+b):
  ``m = σ²(2(d−2)ab − Z(a²+b²))/(a+b)²``, ``s = √2 σ √(a²+b²)/(a+b)``. 003 eq. 21 (and
  spec §3.4) print the diffusion without the factor √2; the law of the full SDE agrees
  with the corrected one (``tests/test_overlap.py``);
- hybrid: with c = 1/2 (USA) or 1/(a+b) (SA): ``m = 2cb(1 − ε²c(a + 2bZ))``,
  ``s = 2εcb``. For USA this is eq. 26, ``e^{βZ}(1−Z²)[(1 − ε²e^β/2 − ε²Z e^{βZ})dt + ε dB]``.

Z itself sits on [−1, 1] with both ends absorbing-in-the-limit, where an explicit step
overshoots. The solver therefore integrates ``X = artanh Z`` on the whole line. By Itô's
formula ``dX = [m(Z) + Z s(Z)²] dt + s(Z) dB`` with ``Z = tanh X``: bounded coefficients,
no boundary. The coefficients are evaluated with r = b/a = e^{β(Z−1)} ∈ (0, 1] so SA
never overflows.
"""

import math
from typing import Literal

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, PRNGKeyArray

from ._attention import ATTENTION_KINDS, as_float
from ._errors import ParameterError, check_bound, check_choice, check_int
from ._ode import as_times

OVERLAP_NOISES = ("full", "hybrid")
OVERLAP_SOLVERS = ("euler", "heun")


class OverlapSDE(eqx.Module):
    """The overlap diffusion of two tokens, one trajectory at a time (vmap to batch).

    Args:
        attention: ``"softmax"`` (SA) or ``"unnormalized"`` (USA).
        noise: ``"full"`` (eq. 6, parameter σ) or ``"hybrid"`` (eq. 8, parameter ε).
        beta: β ≥ 0; sigma: σ > 0 (full noise); eps: ε ≥ 0 (hybrid). Array leaves.
        dim: d ≥ 2 (full noise only; the hybrid overlap does not depend on d).
        horizon, dt, save_at: as :class:`attndyn.TransformerSDE`.
        solver: ``"euler"`` (Itô) or ``"heun"`` (Stratonovich form, strong order 1).
    """

    beta: Float[Array, ""] = eqx.field(converter=as_float)
    attention: Literal["softmax", "unnormalized"] = eqx.field(static=True, default="softmax")
    noise: Literal["full", "hybrid"] = eqx.field(static=True, default="full")
    sigma: Float[Array, ""] = eqx.field(converter=as_float, default=1.0)
    eps: Float[Array, ""] = eqx.field(converter=as_float, default=0.0)
    dim: int = eqx.field(static=True, default=3)
    horizon: float = eqx.field(static=True, default=1.0)
    dt: float = eqx.field(static=True, default=0.01)
    save_at: tuple[float, ...] | None = eqx.field(static=True, default=None, converter=as_times)
    solver: str = eqx.field(static=True, default="euler")

    def __check_init__(self):
        check_choice("attention", self.attention, ATTENTION_KINDS)
        check_choice("noise", self.noise, OVERLAP_NOISES)
        check_choice("solver", self.solver, OVERLAP_SOLVERS)
        check_bound("beta", self.beta, lower=0.0)
        check_bound("sigma", self.sigma, lower=0.0, lower_open=True)
        check_bound("eps", self.eps, lower=0.0)
        check_int("dim", self.dim, lower=2)
        check_bound("horizon", self.horizon, lower=0.0, lower_open=True)
        check_bound("dt", self.dt, lower=0.0, lower_open=True)
        if self.dt > self.horizon:
            raise ParameterError(
                f"dt={self.dt} is larger than the horizon={self.horizon}; the step must lie "
                "in (0, horizon]."
            )
        if self.save_at is not None:
            check_bound("save_at", np.asarray(self.save_at), lower=0.0, upper=self.horizon)

    @property
    def n_steps(self) -> int:
        return max(1, math.ceil(self.horizon / self.dt - 1e-9))

    @property
    def save_times(self) -> np.ndarray:
        step = self.horizon / self.n_steps
        times = (self.horizon,) if self.save_at is None else self.save_at
        return np.rint(np.asarray(times, dtype=np.float64) / step) * step

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

    def drift(self, z: Float[Array, "*b"]) -> Float[Array, "*b"]:
        """The Itô drift of Z."""
        return (1 - z**2) * self.rates(z)[0]

    def diffusion(self, z: Float[Array, "*b"]) -> Float[Array, "*b"]:
        """The diffusion coefficient of Z."""
        return (1 - z**2) * self.rates(z)[1]

    def _x_drift(self, x):
        z = jnp.tanh(x)
        m, s = self.rates(z)
        ito = m + z * s**2
        if self.solver == "euler":
            return ito
        # Stratonovich drift for Heun: subtract ½ s·ds/dx.
        _, ds = jax.jvp(lambda u: self.rates(jnp.tanh(u))[1], (x,), (s,))
        return ito - 0.5 * ds

    @eqx.filter_jit
    def solve(self, z0: Float[Array, ""], *, key: PRNGKeyArray) -> Float[Array, " S"]:
        """Z at :attr:`save_times`, from ``z0`` in (−1, 1) (NaN if the solve fails)."""
        dtype = jnp.result_type(z0, jnp.float32)
        # Keep the start strictly inside (−1, 1) so artanh is finite.
        tiny = jnp.asarray(1e-6, dtype)
        x0 = jnp.arctanh(jnp.clip(jnp.asarray(z0, dtype), -1 + tiny, 1 - tiny))
        step = self.horizon / self.n_steps
        path = dfx.UnsafeBrownianPath(shape=jax.ShapeDtypeStruct((), dtype), key=key)
        terms = dfx.MultiTerm(
            dfx.ODETerm(lambda t, x, m: m._x_drift(x)),
            dfx.ControlTerm(lambda t, x, m: m.rates(jnp.tanh(x))[1], path),
        )
        solver = dfx.Euler() if self.solver == "euler" else dfx.Heun(scan_kind="lax")
        sol = dfx.diffeqsolve(
            terms,
            solver,
            jnp.zeros((), dtype),
            jnp.asarray(self.horizon, dtype),
            jnp.asarray(step, dtype),
            x0,
            self,
            saveat=dfx.SaveAt(ts=jnp.asarray(self.save_times, dtype)),
            stepsize_controller=dfx.ConstantStepSize(),
            max_steps=self.n_steps + 2,
            throw=False,
            adjoint=dfx.ForwardMode(),
        )
        assert sol.ys is not None
        return jnp.where(sol.result == dfx.RESULTS.successful, jnp.tanh(sol.ys), jnp.nan)
