"""Closed forms for the symmetric orthogonal start (seed 004 Thm 4.1; spec §4).

Initial slopes γ'(0), terminal laws of 1 − γ and the time 1 − γ takes to fall to a gap
(:func:`time_to_gap`), per scheme: the reference that :class:`attndyn.SymmetricODE` and the
full ODE are tested against.
"""

import math
from typing import Literal, final

import equinox as eqx
import numpy as np
from scipy import optimize

from .._core import defaults
from .._core.errors import ParameterError, check_int, check_real_in
from .._core.renamed import old_attribute, renamed
from .._core.schemes import AbstractScheme, SpeedLaw

#: A terminal law of 1 − γ (0.4 called it a rate's kind, ``RateKind``).
RateLaw = Literal["exponential", "power", "sqrt-exponential"]


def initial_slope(
    scheme: AbstractScheme, *, beta: float, n_tokens: int, r0: float = defaults.R0
) -> float:
    """γ'(0) in closed form (Thm 4.1): e.g. 2/(e^β + n − 1) for Post-LN.

    Post-LN's slope divided by the scheme's speed factor at the start (its first
    :class:`~attndyn._core.schemes.SpeedLaw`): s = r_0 (Pre-LN, Mix-LN at τ = 0), r_0·|A|
    (Peri-LN), |A|/α(0) (nGPT), 1 (Post-LN, sqrt-scaling, Mix-LN at τ > 0), with
    |A| = √(e^{2β} + n − 1)/(e^β + n − 1) at the start.
    """
    check_real_in("beta", beta, lower=0.0)
    check_int("n_tokens", n_tokens, lower=2)
    check_real_in("r0", r0, lower=0.0, lower_open=True)
    (_, law), *_ = _laws(scheme, "closed-form slope")
    n = n_tokens
    r = r0 if law.radius else 1.0
    small = math.exp(-beta)  # written in e^{−β}: e^β overflows beyond β ≈ 709
    if law.attention:
        # 2/(e^β + n − 1) divided by r|A|/α: the factor e^β + n − 1 cancels.
        return 2.0 * law.alpha * small / (r * math.sqrt(1 + (n - 1) * small * small))
    return 2.0 * small / (1 + (n - 1) * small) * law.alpha / r


def _laws(scheme: AbstractScheme, what: str) -> tuple[tuple[float, SpeedLaw], ...]:
    """The scheme's speed factors in closed form, or a refusal naming ``what`` is missing."""
    laws = scheme.speed_laws()
    if laws is None:
        raise ParameterError(f"no {what} for scheme {scheme.name!r}.")
    return laws


#: The variable each law is exponential in (the rate is per unit of it).
VARIABLES = {"exponential": "t", "power": "log t", "sqrt-exponential": "√(t+1)"}


@final
class RateTheory(eqx.Module):
    """The predicted terminal law of 1 − γ: ``law`` and ``value`` c in

    - exponential: 1 − γ ~ e^{−c t} (variable t);
    - power: 1 − γ ~ t^{−c} (variable log t);
    - sqrt-exponential: 1 − γ ~ e^{−c √(t+1)} (variable √(t + 1)).
    """

    law: RateLaw = eqx.field(static=True)
    value: float = eqx.field(static=True)
    formula: str = eqx.field(static=True)

    @property
    def variable(self) -> str:
        """The variable of the law: c is per unit of t, log t or √(t + 1)."""
        return VARIABLES[self.law]

    #: 0.4's name of ``law`` (deprecated).
    kind = old_attribute("kind", "law", "RateTheory")


def terminal_rate_theory(scheme: AbstractScheme) -> RateTheory:
    """Thm 4.1: e^{−2t} Post-LN; t^{−2} Pre/Mix/Peri-LN; e^{−4√(t+1)} sqrt-scaling;
    e^{−2αt} nGPT. Each rate is per unit of its own variable (:attr:`RateTheory.variable`).

    From the scheme's last speed law: near consensus |A| → 1 and dx/dt ≈ 2/s for
    x = −log(1 − γ), so s = 1/α gives e^{−2αt}, s = √(t + 1)/α gives e^{−4α√(t+1)}, and a
    growing radius (r ~ t, whatever |A| and α) gives t^{−2}. nGPT's law is e^{−2∫α}: a rate
    in t exists for a constant α only, so a schedule is refused.
    """
    *_, (_, law) = _laws(scheme, "terminal-rate theory")
    if not law.constant:
        raise ParameterError(
            f"{scheme.name} with an alpha schedule decays like exp(-2∫α): there is no terminal "
            "rate in t; use a constant alpha."
        )
    alpha = law.alpha
    if law.radius and not law.sqrt_time:
        return RateTheory("power", 2.0, "t^-2")
    if law.sqrt_time and not law.radius:
        return RateTheory("sqrt-exponential", 4.0 * alpha, f"exp(-{4 * alpha:g} sqrt(t+1))")
    if not law.radius:
        return RateTheory("exponential", 2.0 * alpha, f"exp(-{2 * alpha:g}t)")
    raise ParameterError(f"no terminal-rate theory for scheme {scheme.name!r}.")


# --- Time for 1 − γ to fall to a given gap (quadrature of Thm 4.1's reduced ODE) ------------

#: Gauss–Legendre rule of each quadrature panel.
_GL_NODES, _GL_WEIGHTS = np.polynomial.legendre.leggauss(16)


def time_to_gap(
    scheme: AbstractScheme,
    *,
    beta: float,
    n_tokens: int,
    r0: float = defaults.R0,
    gap: float = 1e-2,
) -> float:
    """The time at which 1 − γ first falls to ``gap`` from the symmetric start (Thm 4.1):
    ``inf`` past the float64 range.

    In x = −log(1 − γ), u = e^{−x}, the reduced ODE reads dx/dt = G/s with
    G = 2(n − (n−1)u)/(e^{βu} + n − 1) (1 − γ only decreases), so the time is a quadrature,
    t = ∫ s/G dx over [0, −log gap], with the scheme's speed s: Post-LN 1; nGPT |A|/α;
    Pre-LN r; Peri-LN r|A|, where in both dr/dt = ρ gives log r = log r_0 + ∫ ⟨θ, A⟩/G dx.
    sqrt-scaling runs Post-LN's course in the clock c = 2(√(t+1) − 1); Mix-LN is Post-LN up
    to τ, then Pre-LN from r = 1 (from r_0 when τ = 0). The integrals are computed in logs
    (composite 16-point Gauss–Legendre, refined where e^{βu} varies fastest): relative error
    below 1e-12 wherever t < 1e15.
    """
    check_real_in("beta", beta, lower=0.0)
    check_int("n_tokens", n_tokens, lower=2)
    check_real_in("r0", r0, lower=0.0, lower_open=True)
    check_real_in("gap", gap, lower=0.0, upper=1.0, lower_open=True)
    laws = _laws(scheme, "reduced ODE")
    if not all(law.constant for _, law in laws):
        raise ParameterError(f"time_to_gap needs {scheme.name} with a constant alpha.")
    end, beta, r0 = -math.log(gap), float(beta), float(r0)
    with np.errstate(over="ignore"):
        if len(laws) == 1:
            return _law_time(laws[0][1], beta, n_tokens, 0.0, end, log_r=math.log(r0))
        if len(laws) == 2:
            (_, first), (switch, then) = laws
            if not (first.radius or first.sqrt_time or then.sqrt_time):
                return _switched_time(first, then, switch, beta, n_tokens, end)
    # Two stretches of another kind, or more: no closed form written here.
    raise ParameterError(f"no reduced ODE for scheme {scheme.name!r}.")


def _law_time(law: SpeedLaw, beta: float, n: int, a: float, b: float, *, log_r: float) -> float:
    """The time one speed law takes from x = a to x = b (radius e^{log_r} at a, if it
    grows): the quadrature in the law's clock (c = 2(√(t+1) − 1) for s ∝ √(t + 1))."""
    if law.attention:
        speed = lambda attn_norm: attn_norm / law.alpha  # noqa: E731
    elif law.alpha != 1.0:
        speed = lambda attn_norm: np.full_like(attn_norm, 1.0 / law.alpha)  # noqa: E731
    else:
        speed = None
    t = _exp(_log_time(beta, n, a, b, speed=speed, log_r=log_r if law.radius else None))
    return (t / 2 + 1) ** 2 - 1 if law.sqrt_time else t


def _switched_time(
    first: SpeedLaw, then: SpeedLaw, switch: float, beta: float, n: int, end: float
) -> float:
    """Mix-LN: the first law's time if it gets there by the switch; else the switch time
    plus the second law's from r = 1 (the first law normalises the rows) where the first
    law's clock reads the switch time."""

    def before(x: float) -> float:
        return _law_time(first, beta, n, 0.0, x, log_r=0.0)

    if before(end) <= switch:
        return before(end)
    found = optimize.root_scalar(lambda x: before(x) - switch, bracket=(0.0, end), xtol=1e-15)
    return switch + _law_time(then, beta, n, float(found.root), end, log_r=0.0)


def _exp(log_value: float) -> float:
    return float(np.exp(log_value))


def _log_time(beta, n, a, b, *, speed=None, log_r=None) -> float:
    """log ∫_a^b s/G dx with s = speed(|A|) (1 if None), times r(x) = e^{log_r + ∫_a^x ⟨θ,A⟩/G}
    when ``log_r`` is given."""
    edges = _panels(beta, a, b)
    x, w = _rule(edges)
    log_inv_rate, _, attn_norm = _terms(x, beta, n)
    f = log_inv_rate + np.log(w)
    if speed is not None:
        f = f + np.log(speed(attn_norm))
    if log_r is not None:
        f = f + log_r + _growth(edges, beta, n)
    if f.size == 0:
        return -math.inf
    top = float(np.max(f))
    return top if not math.isfinite(top) else top + math.log(float(np.sum(np.exp(f - top))))


def _growth(edges: np.ndarray, beta: float, n: int) -> np.ndarray:
    """∫_a^x ⟨θ, A⟩/G at the quadrature nodes x of ``edges`` (a = edges[0])."""

    def integrand(y):
        log_inv_rate, radial, _ = _terms(y, beta, n)
        return radial * np.exp(log_inv_rate)

    k = _GL_NODES.size
    x, w = _rule(edges)
    panel = np.repeat(np.arange(len(edges) - 1), k)
    whole = np.concatenate([[0.0], np.cumsum((w * integrand(x)).reshape(-1, k).sum(axis=1))])
    start = edges[panel]
    half = (x - start)[:, None] / 2
    part = (half * _GL_WEIGHTS * integrand(start[:, None] + half * (_GL_NODES + 1))).sum(axis=1)
    return whole[panel] + part


def _panels(beta: float, a: float, b: float) -> np.ndarray:
    """Panel edges on [a, b]: 64 even panels, 64 more over the first 40/(β e^{−a}) (where
    e^{βu} changes fastest), and panels graded geometrically towards a down to 1e-14 of
    b − a (n − (n−1)u changes on a scale 1/n there)."""
    if b <= a:
        return np.asarray([a])
    fine = min(b - a, 40.0 * math.exp(a) / max(beta, 1.0))
    graded = a + (b - a) * np.geomspace(1e-14, 1.0, 100)
    even = [np.linspace(a, b, 65), np.linspace(a, a + fine, 65)]
    return np.unique(np.concatenate([*even, graded]))


def _rule(edges: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Nodes and weights of the composite rule on the panels ``edges``."""
    start, half = edges[:-1, None], np.diff(edges)[:, None] / 2
    return (start + half * (_GL_NODES + 1)).ravel(), (half * _GL_WEIGHTS).ravel()


def symmetric_attention(u, beta, n: int, xp=np):
    """Thm 4.1's attention at 1 − γ = u, divided through by e^β: (e^{β(γ−1)}, its
    normaliser z = 1 + (n − 1)e^{β(γ−1)}, ⟨θ, A⟩, |A|), in the array namespace ``xp``
    (NumPy here, ``jax.numpy`` in :class:`attndyn.SymmetricODE`'s vector field)."""
    e = xp.exp(-beta * u)
    gamma = 1.0 - u
    z = 1.0 + (n - 1) * e
    radial = (1.0 + (n - 1) * gamma * e) / z
    norm_sq = 1.0 + 2 * (n - 1) * gamma * e + (n - 1) * e**2 * (1.0 + (n - 2) * gamma)
    return e, z, radial, xp.sqrt(norm_sq) / z


def _terms(x: np.ndarray, beta: float, n: int):
    """log(1/G), ⟨θ, A⟩ and |A| at 1 − γ = e^{−x}; 1/G = (e^{βu} + n − 1)/(2(n − (n−1)u))
    in logs, finite where e^{βu} overflows."""
    u = np.exp(-x)
    _, _, radial, attn_norm = symmetric_attention(u, beta, n)
    log_inv_rate = np.logaddexp(beta * u, math.log(n - 1)) - np.log(2.0 * (n - (n - 1) * u))
    return log_inv_rate, radial, attn_norm


@renamed(kind="law")
def rate_clock(ts, law: str) -> np.ndarray:
    """The clock s(t) in which the terminal ``law`` is linear: ``log(1 − γ)`` falls like
    ``−c·s(t)`` with s = t (exponential), log t (power) or √(t + 1) (sqrt-exponential).
    ``law`` is checked by the callers (the rate fit, the figures)."""
    ts = np.asarray(ts, dtype=np.float64)
    if law == "exponential":
        return ts
    if law == "sqrt-exponential":
        return np.sqrt(ts + 1.0)
    with np.errstate(divide="ignore"):
        return np.log(ts)
