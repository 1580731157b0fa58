"""Closed forms for the symmetric orthogonal start (seed 004 Thm 4.1; spec §4).

Initial slopes γ'(0) and terminal laws of 1 − γ, per scheme: the reference that
:class:`attndyn.SymmetricODE` and the full ODE are tested against.
"""

import math
from typing import Literal, final

import equinox as eqx
import jax.numpy as jnp

from .._core.errors import ParameterError, check_bound, check_int
from .._core.schemes import NGPT, AbstractScheme, MixLN, PeriLN, PostLN, PreLN, SqrtScaling

RateKind = Literal["exponential", "power", "sqrt-exponential"]


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


#: The variable each law is exponential in (the rate is per unit of it).
VARIABLES = {"exponential": "t", "power": "log t", "sqrt-exponential": "√(t+1)"}


@final
class RateTheory(eqx.Module):
    """The predicted terminal law of 1 − γ: ``kind`` and ``value`` c in

    - exponential: 1 − γ ~ e^{−c t} (variable t);
    - power: 1 − γ ~ t^{−c} (variable log t);
    - sqrt-exponential: 1 − γ ~ e^{−c √(t+1)} (variable √(t + 1)).
    """

    kind: RateKind = eqx.field(static=True)
    value: float = eqx.field(static=True)
    formula: str = eqx.field(static=True)

    @property
    def variable(self) -> str:
        """The variable of the law: c is per unit of t, log t or √(t + 1)."""
        return VARIABLES[self.kind]


def terminal_rate_theory(scheme: AbstractScheme) -> RateTheory:
    """Thm 4.1: e^{−2t} Post-LN; t^{−2} Pre/Mix/Peri-LN; e^{−4√(t+1)} sqrt-scaling;
    e^{−2αt} nGPT. Each rate is per unit of its own variable (:attr:`RateTheory.variable`).

    nGPT's law is e^{−2∫α}: a rate in t exists for a constant α only, so a schedule is
    refused.
    """
    if isinstance(scheme, PostLN):
        return RateTheory("exponential", 2.0, "exp(-2t)")
    if isinstance(scheme, PreLN | MixLN | PeriLN):
        return RateTheory("power", 2.0, "t^-2")
    if isinstance(scheme, SqrtScaling):
        return RateTheory("sqrt-exponential", 4.0, "exp(-4 sqrt(t+1))")
    if isinstance(scheme, NGPT):
        if scheme.alpha_schedule is not None:
            raise ParameterError(
                "nGPT with an alpha schedule decays like exp(-2∫α): there is no terminal rate "
                "in t; use a constant alpha."
            )
        alpha = float(scheme.alpha)
        return RateTheory("exponential", 2.0 * alpha, f"exp(-{2 * alpha:g}t)")
    raise ParameterError(f"no terminal-rate theory for scheme {scheme.name!r}.")
