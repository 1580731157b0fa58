"""Symmetric orthogonal start: the reduced ODEs of seed 004 Thm 4.1 (spec §4) and closed forms.

From ⟨θ_i(0), θ_j(0)⟩ = 0 (i ≠ j) and r_i(0) = r_0, n ≤ d, every pair keeps one cosine
γ(t) and every token one magnitude r(t). With softmax attention, Q = K = V = I and
Z(γ) = e^β + (n−1)e^{βγ}:

    F(γ) = e^{βγ}(1−γ)(1+(n−1)γ)/Z,   ⟨θ, A⟩ = (e^β + (n−1)γ e^{βγ})/Z,
    |A|² = (e^{2β} + 2(n−1)γ e^{β(1+γ)} + (n−1)e^{2βγ}(1+(n−2)γ))/Z²,
    γ' = 2F/s(t, r, |A|),   r' = ρ(t, r, ⟨θ, A⟩, |A|)

with the scheme's speed factors. The ODE is solved for ℓ = log(1 − γ) rather than γ:
the terminal decay of 1 − γ (e^{−2t}, t^{−2}, e^{−4√t}) then never underflows or cancels,
so terminal rates can be read off at any horizon. Dividing numerator and denominator by
e^β, with u = 1 − γ:

    ℓ' = −2 e^{−βu}(n − (n−1)u) / ((1 + (n−1)e^{−βu}) s),

which does not overflow at large β either.
"""

import math
from typing import Literal

import diffrax as dfx
import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from ._attention import as_float
from ._errors import ParameterError, check_bound, check_int
from ._ode import _check_save_times, as_times
from ._schemes import NGPT, AbstractScheme, MixLN, PeriLN, PostLN, PreLN, SqrtScaling

RateKind = Literal["exponential", "power", "sqrt-exponential"]


def symmetric_start(n_tokens: int, dim: int, r0: float = 1.0) -> Float[Array, "n_tokens dim"]:
    """The orthogonal symmetric start: token i is r_0·e_i (needs n ≤ d)."""
    check_int("n_tokens", n_tokens, lower=1)
    check_int("dim", dim, lower=1)
    check_bound("r0", r0, lower=0.0, lower_open=True)
    if n_tokens > dim:
        raise ParameterError(
            f"a symmetric orthogonal start needs n_tokens <= dim; got n_tokens={n_tokens}, "
            f"dim={dim}."
        )
    return r0 * jnp.eye(n_tokens, dim, dtype=jnp.float32)


def _attention_terms(u: Array, beta: Array, n: int) -> tuple[Array, Array, Array]:
    """(ℓ' · s, ⟨θ, A⟩, |A|) at 1 − γ = u, all divided through by e^β."""
    e = jnp.exp(-beta * u)  # e^{β(γ−1)}
    gamma = 1.0 - u
    z = 1.0 + (n - 1) * e
    log_rate = -2.0 * e * (n - (n - 1) * u) / z
    radial = (1.0 + (n - 1) * gamma * e) / z
    norm_sq = 1.0 + 2 * (n - 1) * gamma * e + (n - 1) * e**2 * (1.0 + (n - 2) * gamma)
    return log_rate, radial, jnp.sqrt(norm_sq) / z


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


class SymmetricODE(eqx.Module):
    """The reduced ODE (Thm 4.1) for one scheme from the symmetric orthogonal start.

    ``beta`` and ``r0`` are array leaves (vmap over them); ``n_tokens`` is static. Mix-LN
    is split at τ exactly as in :class:`attndyn.NormalizedAttentionODE` (r = 1 after a
    Post-LN phase). Softmax attention with Q = K = V = I only.
    """

    scheme: AbstractScheme
    beta: Float[Array, ""] = eqx.field(converter=as_float)
    n_tokens: int = eqx.field(static=True, default=2)
    r0: Float[Array, ""] = eqx.field(converter=as_float, default=1.0)
    horizon: float = eqx.field(static=True, default=1.0)
    save_at: tuple[float, ...] | None = eqx.field(static=True, default=None, converter=as_times)
    solver: dfx.AbstractSolver = dfx.Tsit5()
    rtol: float = eqx.field(static=True, default=1e-8)
    atol: float = eqx.field(static=True, default=1e-10)
    max_steps: int = eqx.field(static=True, default=100_000)

    def __check_init__(self):
        check_bound("beta", self.beta, lower=0.0)
        check_int("n_tokens", self.n_tokens, lower=2)
        check_bound("r0", self.r0, lower=0.0, lower_open=True)
        check_bound("horizon", self.horizon, lower=0.0, lower_open=True)
        if self.save_at is not None:
            _check_save_times(self.save_at, self.horizon)

    @property
    def save_times(self) -> np.ndarray:
        return np.asarray((self.horizon,) if self.save_at is None else self.save_at)

    def vector_field(self, t, state, scheme: AbstractScheme):
        log_gap, r = state
        log_rate, radial, attn_norm = _attention_terms(jnp.exp(log_gap), self.beta, self.n_tokens)
        one = r[None]
        s = scheme.speed(t, one, attn_norm[None])[0]
        rho = scheme.radial_rate(t, one, radial[None], attn_norm[None])[0]
        return log_rate / s, rho

    def _segment(self, scheme, t0, t1, y0, ts):
        sol = dfx.diffeqsolve(
            dfx.ODETerm(_field),
            self.solver,
            t0,
            t1,
            None,
            y0,
            (self, scheme),
            saveat=dfx.SaveAt(ts=ts),
            stepsize_controller=dfx.PIDController(rtol=self.rtol, atol=self.atol),
            max_steps=self.max_steps,
        )
        assert sol.ys is not None
        return sol.ys

    @eqx.filter_jit
    def solve(self, dtype=None) -> SymmetricSolution:
        """γ and r at :attr:`save_times` (``dtype`` defaults to JAX's default float)."""
        dtype = dtype or jnp.zeros(()).dtype
        ts = jnp.asarray(self.save_times, dtype)
        t0 = jnp.zeros((), dtype)
        t_end = jnp.asarray(self.horizon, dtype)
        r0 = self.r0.astype(dtype)
        if not self.scheme.keeps_radius:
            r0 = jnp.ones_like(r0)  # the sphere schemes run at r = 1 (as in the full ODE)
        y0 = (jnp.zeros((), dtype), r0)
        if isinstance(self.scheme, MixLN):
            tau = jnp.clip(self.scheme.tau.astype(dtype), 0.0, t_end)
            y0 = (y0[0], jnp.where(tau > 0, jnp.ones_like(r0), r0))
            ts1 = jnp.concatenate([jnp.minimum(ts, tau), tau[None]])
            l1, r1 = self._segment(PostLN(), t0, tau, y0, ts1)
            l2, r2 = self._segment(PreLN(), tau, t_end, (l1[-1], r1[-1]), jnp.maximum(ts, tau))
            first = ts <= tau
            return SymmetricSolution(
                ts, jnp.where(first, l1[:-1], l2), jnp.where(first, r1[:-1], r2)
            )
        log_gap, r = self._segment(self.scheme, t0, t_end, y0, ts)
        return SymmetricSolution(ts, log_gap, r)


def _field(t, y, args):
    model, scheme = args
    return model.vector_field(t, y, scheme)


def initial_slope(scheme: AbstractScheme, *, beta: float, n_tokens: int, r0: float = 1.0) -> float:
    """γ'(0) in closed form (Thm 4.1): e.g. 2/(e^β + n − 1) for Post-LN.

    Mix-LN starts as Post-LN when τ > 0 and as Pre-LN (radius r_0) when τ = 0; nGPT uses
    α(0).
    """
    check_bound("beta", beta, lower=0.0)
    check_int("n_tokens", n_tokens, lower=2)
    check_bound("r0", r0, lower=0.0, lower_open=True)
    n = n_tokens
    post = 2.0 / (math.exp(beta) + n - 1)
    sharp = math.sqrt(math.exp(2 * beta) + n - 1)
    if isinstance(scheme, PostLN | SqrtScaling):
        return post
    if isinstance(scheme, PreLN):
        return post / r0
    if isinstance(scheme, MixLN):
        return post if float(scheme.tau) > 0 else post / r0
    if isinstance(scheme, PeriLN):
        return 2.0 / (r0 * sharp)
    if isinstance(scheme, NGPT):
        return 2.0 * float(scheme.alpha_at(jnp.zeros(()))) / sharp
    raise ParameterError(f"no closed-form slope for scheme {scheme.name!r}.")


class RateTheory(eqx.Module):
    """The predicted terminal law of 1 − γ: ``kind`` and ``value`` c in

    - exponential: 1 − γ ~ e^{−c t};
    - power: 1 − γ ~ t^{−c};
    - sqrt-exponential: 1 − γ ~ e^{−c √t}.
    """

    kind: RateKind = eqx.field(static=True)
    value: float = eqx.field(static=True)
    formula: str = eqx.field(static=True)


def terminal_rate_theory(scheme: AbstractScheme) -> RateTheory:
    """Thm 4.1: e^{−2t} Post-LN; t^{−2} Pre/Mix/Peri-LN; e^{−4√t} sqrt-scaling; e^{−2αt} nGPT.

    nGPT's law is e^{−2∫α}: a rate in t exists for a constant α only, so a schedule is
    refused.
    """
    if isinstance(scheme, PostLN):
        return RateTheory("exponential", 2.0, "exp(-2t)")
    if isinstance(scheme, PreLN | MixLN | PeriLN):
        return RateTheory("power", 2.0, "t^-2")
    if isinstance(scheme, SqrtScaling):
        return RateTheory("sqrt-exponential", 4.0, "exp(-4 sqrt(t))")
    if isinstance(scheme, NGPT):
        if scheme.alpha_schedule is not None:
            raise ParameterError(
                "nGPT with an alpha schedule decays like exp(-2∫α): there is no terminal rate "
                "in t; use a constant alpha."
            )
        alpha = float(scheme.alpha)
        return RateTheory("exponential", 2.0 * alpha, f"exp(-{2 * alpha:g}t)")
    raise ParameterError(f"no terminal-rate theory for scheme {scheme.name!r}.")
