"""Symmetric orthogonal start: the reduced ODEs of seed 004 Thm 4.1 (spec §4) and closed forms.

From ⟨θ_i(0), θ_j(0)⟩ = 0 (i ≠ j) and r_i(0) = r_0, n ≤ d, every pair keeps one cosine
γ(t) and every token one magnitude r(t). With softmax attention, Q = K = V = I and
Z(γ) = e^β + (n−1)e^{βγ}:

    F(γ) = e^{βγ}(1−γ)(1+(n−1)γ)/Z,   ⟨θ, A⟩ = (e^β + (n−1)γ e^{βγ})/Z,
    |A|² = (e^{2β} + 2(n−1)γ e^{β(1+γ)} + (n−1)e^{2βγ}(1+(n−2)γ))/Z²,
    γ' = 2F/s(t, r, |A|),   r' = ρ(t, r, ⟨θ, A⟩, |A|)

with the scheme's speed factors. The ODE is solved for ℓ = log(1 − γ) rather than γ:
the terminal decay of 1 − γ (e^{−2t}, t^{−2}, e^{−4√(t+1)}) then never underflows or cancels,
so terminal rates can be read off at any horizon. Dividing numerator and denominator by
e^β, with u = 1 − γ:

    ℓ' = −2 e^{−βu}(n − (n−1)u) / ((1 + (n−1)e^{−βu}) s),

which does not overflow at large β either.
"""

import warnings
from typing import ClassVar, final

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Key, PRNGKeyArray

from .._core import defaults
from .._core.attention import float_leaf
from .._core.errors import ParameterError, check_bound, check_int, check_swept
from .._core.saveat import SaveAt, without_saves
from .._core.schemes import AbstractScheme
from ..theory._symmetric import symmetric_attention
from .base import AbstractModel
from .integrators import ODEIntegrator


def symmetric_start(
    n_tokens: int, dim: int, r0: float = defaults.R0
) -> Float[Array, "n_tokens dim"]:
    """The orthogonal symmetric start: token i is r_0·e_i (needs n ≤ d)."""
    check_int("n_tokens", n_tokens, lower=1)
    check_int("dim", dim, lower=1)
    check_bound("r0", r0, lower=0.0, lower_open=True)
    check_fits(n_tokens, dim)
    return r0 * jnp.eye(n_tokens, dim, dtype=jnp.float32)


def check_fits(n_tokens: int, dim: int) -> None:
    """Refuse a symmetric orthogonal start that R^dim cannot hold (it needs n ≤ d)."""
    if n_tokens > dim:
        raise ParameterError(
            f"a symmetric orthogonal start needs n_tokens <= dim; got n_tokens={n_tokens}, "
            f"dim={dim}."
        )


def _attention_terms(u: Array, beta: Array, n: int) -> tuple[Array, Array, Array]:
    """(ℓ' · s, ⟨θ, A⟩, |A|) at 1 − γ = u, all divided through by e^β."""
    e, z, radial, attn_norm = symmetric_attention(u, beta, n, xp=jnp)
    log_rate = -2.0 * e * (n - (n - 1) * u) / z
    return log_rate, radial, attn_norm


class SymmetricSolution(eqx.Module):
    """γ(t) from the reduced ODE; ``log_gap`` = log(1 − γ) is exact where γ rounds to 1."""

    ts: Float[Array, " S"]
    log_gap: Float[Array, " S"]
    r: Float[Array, " S"]

    @property
    def gamma(self) -> Float[Array, " S"]:
        return 1.0 - jnp.exp(self.log_gap)

    @property
    def gap(self) -> Float[Array, " S"]:
        """1 − γ(t)."""
        return jnp.exp(self.log_gap)


@final
class SymmetricODE(AbstractModel):
    """The reduced ODE (Thm 4.1) for one scheme from the symmetric orthogonal start.

    ``beta`` and ``r0`` are array leaves (vmap over them); ``n_tokens`` is static. Mix-LN
    is solved up to τ with Post-LN's factors and on from there with Pre-LN's, as in
    :class:`attndyn.NormalizedAttentionODE` (r = 1 after a Post-LN phase). Softmax
    attention with Q = K = V = I only.

    As a model for the estimator, :meth:`simulate` ignores the starts it is given (the
    start is the symmetric one, and the flow is deterministic) and returns the n tokens as
    rows of an ``n × (n + 1)`` frame (k = n + 1 coordinates) whose Gram matrix is
    r²((1 − γ)I + γ11ᵀ).
    """

    per_device: ClassVar[bool] = False

    scheme: AbstractScheme
    beta: Float[Array, ""] = eqx.field(converter=float_leaf("beta"))
    n_tokens: int = eqx.field(static=True, default=2)
    r0: Float[Array, ""] = eqx.field(converter=float_leaf("r0"), default=1.0)
    saveat: SaveAt = SaveAt(1.0)
    integrator: ODEIntegrator = ODEIntegrator(rtol=1e-8, atol=1e-10)

    def batched_lapack(self) -> bool:
        return self.integrator.implicit

    def __check_init__(self):
        check_swept("beta", self.beta, lower=0.0)
        check_int("n_tokens", self.n_tokens, lower=2)
        check_swept("r0", self.r0, lower=0.0, lower_open=True)

    @property
    def save_times(self) -> np.ndarray:
        return self.saveat.times

    def vector_field(self, t, state, scheme: AbstractScheme | None = None):
        """(dℓ/dt, dr/dt) at time ``t``, for :attr:`scheme` (or another ``scheme``)."""
        scheme = self.scheme if scheme is None else scheme
        log_gap, r = state
        log_rate, radial, attn_norm = _attention_terms(jnp.exp(log_gap), self.beta, self.n_tokens)
        one = r[None]
        s = scheme.speed(t, one, attn_norm[None])[0]
        rho = scheme.radial_rate(t, one, radial[None], attn_norm[None])[0]
        return log_rate / s, rho

    def solve(
        self, x0: Float[Array, "N d"] | None = None, *, key: PRNGKeyArray | None = None
    ) -> SymmetricSolution:
        """γ and r at :attr:`save_times`. The start is the model's own (the symmetric one,
        radius ``r0``) and the flow is deterministic: ``x0`` only sets the dtype (JAX's
        default float when ``None``), ``key`` is unused; both are accepted so that every
        model's ``solve`` is called alike."""
        del key
        if x0 is None:
            return self._solve(jnp.zeros(()).dtype)
        if isinstance(x0, jax.Array | np.ndarray):
            return self._solve(x0.dtype)
        # Until 0.5.0 the argument was the dtype.
        warnings.warn(
            "SymmetricODE.solve(dtype) is deprecated (removed in attndyn 0.6): pass the "
            "tokens, solve(x0), for their dtype, or solve() for JAX's default float.",
            DeprecationWarning,
            stacklevel=2,
        )
        return self._solve(jnp.dtype(x0))

    def _solve(self, dtype) -> SymmetricSolution:
        ts = jnp.asarray(self.save_times, dtype)
        t_end = jnp.asarray(self.saveat.horizon, dtype)
        return _solve_symmetric(without_saves(self), ts, t_end)

    def simulate(
        self, x0: Float[Array, "batch N d"], keys: Key[Array, " batch"]
    ) -> Float[Array, "batch S N N+1"]:
        del keys
        if x0.shape[1] != self.n_tokens:
            raise ParameterError(
                f"SymmetricODE has n_tokens={self.n_tokens}; the points ask for "
                f"n_tokens={x0.shape[1]}."
            )
        check_fits(self.n_tokens, x0.shape[2])
        sol = self.solve(x0[0])
        frames = jax.vmap(self._frame)(sol.log_gap, sol.r)
        return jnp.broadcast_to(frames, (x0.shape[0], *frames.shape))

    def _frame(self, log_gap: Array, r: Array) -> Float[Array, "N N+1"]:
        """Rows r·(√γ, √(1 − γ) e_i): every pairwise cosine γ, the gap 1 − γ = e^ℓ kept
        with its relative precision."""
        n = self.n_tokens
        gap = jnp.exp(log_gap)
        common = jnp.sqrt(jnp.maximum(1 - gap, 0))
        own = jnp.sqrt(gap) * jnp.eye(n, dtype=gap.dtype)
        return r * jnp.concatenate([jnp.full((n, 1), common, gap.dtype), own], axis=1)


@eqx.filter_jit
def _solve_symmetric(
    model: SymmetricODE, ts: Float[Array, " S"], t_end: Float[Array, ""]
) -> SymmetricSolution:
    """:meth:`SymmetricODE.solve` with the save times and horizon as arrays (the model's
    own :class:`SaveAt` is a placeholder here, :func:`without_saves`)."""
    dtype = ts.dtype
    # The sphere schemes run at r = 1 (as in the full ODE), as does Mix-LN after a
    # Post-LN phase.
    y0 = (jnp.zeros((), dtype), model.scheme.start_radius(model.r0.astype(dtype)))
    t0 = jnp.zeros((), dtype)
    (log_gap, r), _ = model.integrator.solve_scheme(_field, model, t0, t_end, y0, ts)
    return SymmetricSolution(ts, log_gap, r)


def _field(t, y, args: tuple[SymmetricODE, AbstractScheme]):
    model, scheme = args
    return model.vector_field(t, y, scheme)
