"""Two tokens under hybrid (scalar) value noise: which ends attract, and exact P(antipodal).

The overlap Z = ⟨Y₁, Y₂⟩ of the hybrid SDE (003 eq. 8, spec §3.4) is the diffusion

    dZ = 2cb(1 − Z²)[(1 − ε²c(a + 2bZ)) dt + ε dB],   a = e^β, b = e^{βZ},

with c = ½ (USA) or 1/(a + b) (SA). Its scale density is
s(z) = exp(−∫ N(z)/(c b ε² (1 − z²)) dz), N = 1 − ε²c(a + 2bz). Integrated in closed form
*(derived; checked against direct quadrature in the tests)*:

    s(z) = (1 − z²)^{−1} exp(−K J(z) − κ artanh z),
    J(z) = ∫_0^z e^{−βy}/(1 − y²) dy  (exponential integrals),

with K = 2/ε² − e^β, κ = 0 (USA) and K = (1 − ε²)e^β/ε², κ = 1/ε² (SA). In u = artanh z
the measure s(z) dz is exactly exp(−K J(tanh u) − κu) du: smooth, with exponential tails
whose rates say which ends attract:

- +1 attracts iff K e^{−β} + κ > 0: ε² < 2e^{−β} (USA, 003 Prop. 1), ε² < 2 (SA);
- −1 attracts iff K e^{β} + κ < 0: ε² > 2e^{−β} (USA), ε² > 1 + e^{−2β} (SA).

For SA both attract when 1 + e^{−2β} < ε² < 2, and then P(antipodal) lies strictly between
0 and 1: P(antipodal | Z₀ = z) = ∫_z^1 s / ∫_{−1}^1 s, as for full noise.
"""

import math

import numpy as np
from scipy import integrate, optimize, special

from .._core.attention import ATTENTION_KINDS
from .._core.errors import check_choice, check_int, check_real_in
from ._phase import overlap_cdf

#: Largest β the closed form is evaluated at (e^{2β} and the exponential integrals stay
#: finite in float64 well beyond the values any study uses).
MAX_BETA = 300.0


def _check(
    beta: float, eps: float, attention: str, *, eps_zero: bool = False
) -> tuple[float, float]:
    """β and ε as floats (one real number each, refused by name otherwise): β in
    [0, MAX_BETA], ε > 0 (≥ 0 with ``eps_zero``)."""
    beta = check_real_in("beta", beta, lower=0.0, upper=MAX_BETA)
    eps = check_real_in("eps", eps, lower=0.0, lower_open=not eps_zero)
    check_choice("attention", attention, ATTENTION_KINDS)
    return beta, eps


def hybrid_coefficients(beta: float, eps: float, attention: str = "unnormalized"):
    """(K, κ) of the closed-form scale density above."""
    return _coefficients(*_check(beta, eps, attention), attention)


# The public functions check β, ε and the attention once (_check) and call these private
# kernels, which trust them: the quadratures below evaluate them without checking again.


def _coefficients(beta: float, eps: float, attention: str) -> tuple[float, float]:
    """:func:`hybrid_coefficients` of checked arguments."""
    inverse = 1 / eps / eps  # 1/ε², 0 where ε² overflows (ε ≳ 1e154): no OverflowError
    if attention == "unnormalized":
        return 2 * inverse - math.exp(beta), 0.0
    return (inverse - 1) * math.exp(beta), inverse


def hybrid_end_rates(beta: float, eps: float, attention: str = "unnormalized"):
    """(λ₊, λ₋): the scale measure decays like e^{−λ₊u} as u = artanh Z → +∞ and like
    e^{λ₋u} as u → −∞; an end attracts iff its rate is positive."""
    return _end_rates(*_check(beta, eps, attention), attention)


def _end_rates(beta: float, eps: float, attention: str) -> tuple[float, float]:
    """:func:`hybrid_end_rates` of checked arguments."""
    k, kappa = _coefficients(beta, eps, attention)
    return k * math.exp(-beta) + kappa, -(k * math.exp(beta) + kappa)


def hybrid_attracts(beta: float, eps: float, attention: str = "unnormalized"):
    """(+1 attracts, −1 attracts) for two tokens under hybrid noise."""
    plus, minus = _end_rates(*_check(beta, eps, attention), attention)
    return plus > 0, minus > 0


def sa_hybrid_boundaries(beta: float) -> tuple[float, float]:
    """For softmax attention: +1 attracts iff ε < √2, −1 attracts iff ε > √(1 + e^{−2β})
    *(derived)*; between the two both attract and P(antipodal) ∈ (0, 1)."""
    beta = check_real_in("beta", beta, lower=0.0, upper=MAX_BETA)
    return math.sqrt(2.0), math.sqrt(1 + math.exp(-2 * beta))


def _log_one_minus_tanh(u: float) -> float:
    """log(1 − tanh u) = log 2 − 2u − log(1 + e^{−2u}), without cancellation."""
    if u > 0:
        return math.log(2) - 2 * u - math.log1p(math.exp(-2 * u))
    return math.log(2) - math.log1p(math.exp(2 * u))


def _ei(x: float, log_x: float) -> float:
    """Ei(x) for x > 0; below 1e-8 by its series γ + log x + x (log x given exactly)."""
    if x < 1e-8:
        return float(np.euler_gamma) + log_x + x
    return float(special.expi(x))


def _e1(x: float, log_x: float) -> float:
    """E₁(x) for x > 0; below 1e-8 by its series −γ − log x + x."""
    if x < 1e-8:
        return -float(np.euler_gamma) - log_x + x
    return float(special.exp1(x))


def _j(u: float, beta: float) -> float:
    """J(tanh u) = ∫_0^{tanh u} e^{−βy}/(1 − y²) dy, with 1 ∓ z computed from u directly.

    J = ½[e^{−β}(Ei(β) − Ei(β(1 − z))) + e^{β}(E₁(β) − E₁(β(1 + z)))]: linear in u at both
    ends (the logarithms of the series), so the tails of the scale measure are exact.
    """
    if beta == 0.0:
        return u
    log_minus = _log_one_minus_tanh(u)  # log(1 − z)
    log_plus = _log_one_minus_tanh(-u)  # log(1 + z)
    lb = math.log(beta)
    upper = math.exp(-beta) * (_ei(beta, lb) - _ei(beta * math.exp(log_minus), lb + log_minus))
    lower = math.exp(beta) * (_e1(beta, lb) - _e1(beta * math.exp(log_plus), lb + log_plus))
    return 0.5 * (upper + lower)


def _log_measure(u: float, k: float, kappa: float, beta: float) -> float:
    return -k * _j(u, beta) - kappa * u


def _mass(lo: float, hi: float, log_measure, peak: float, top: float) -> float:
    """∫_lo^hi exp(log_measure − top), split at the peak so quad sees it."""

    def f(u):
        return math.exp(log_measure(u) - top)

    pieces = []
    if lo < peak:
        pieces.append((lo, min(peak, hi)))
    if hi > peak:
        pieces.append((max(peak, lo), hi))
    total = 0.0
    for a, b in pieces:
        value, _ = integrate.quad(f, a, b, epsabs=0.0, epsrel=1e-10, limit=400)
        total += value
    return total


def _peak(log_measure, lam_plus: float, lam_minus: float) -> tuple[float, float]:
    """The maximum of the log scale measure (it tends to −∞ at both ends)."""
    # The tails are linear in u with slopes −λ₊ and λ₋: bracket the peak where they cross.
    span = 5.0 + 50.0 / min(lam_plus, lam_minus)
    res = optimize.minimize_scalar(
        lambda u: -log_measure(u), bounds=(-span, span), method="bounded"
    )
    return float(res.x), float(log_measure(res.x))


def _p_antipodal(
    beta: float, eps: float, attention: str, *, lower: float = -np.inf, weight=None
) -> float:
    """∫_{tanh lower}^1 s(z) weight(z) dz / ∫_{−1}^1 s(z) dz (in u = artanh z), or the
    limiting 0 / 1 when an end does not attract (β, ε and the attention checked)."""
    lam_plus, lam_minus = _end_rates(beta, eps, attention)
    if not lam_minus > 0:
        return 0.0
    if not lam_plus > 0:
        return 1.0
    k, kappa = _coefficients(beta, eps, attention)

    def log_measure(u):
        return _log_measure(u, k, kappa, beta)

    peak, top = _peak(log_measure, lam_plus, lam_minus)
    total = _mass(-np.inf, np.inf, log_measure, peak, top)
    if weight is None:
        part = _mass(lower, np.inf, log_measure, peak, top)
    else:

        def weighted(u):
            return log_measure(u) + math.log(max(weight(math.tanh(u)), 1e-300))

        part = _mass(lower, np.inf, weighted, peak, top)
    return min(1.0, part / total)


def p_antipodal_hybrid_given_overlap(
    z: float, beta: float, eps: float, attention: str = "unnormalized"
) -> float:
    """P(antipodal at t = ∞ | Z₀ = z) for two tokens under hybrid noise (0 or 1 for USA)."""
    z = check_real_in("z", z, lower=-1.0, upper=1.0, lower_open=True, upper_open=True)
    beta, eps = _check(beta, eps, attention)
    return _p_antipodal(beta, eps, attention, lower=math.atanh(z))


def p_antipodal_hybrid_uniform(
    beta: float, eps: float, dim: int = 3, attention: str = "unnormalized"
) -> float:
    """P(antipodal at t = ∞) for two tokens started uniformly on S^{d−1} (hybrid noise).

    By Fubini, E[∫_{Z₀}^1 s] = ∫ s(x) P(Z₀ ≤ x) dx: one weighted integral.
    """
    check_int("dim", dim, lower=2)
    beta, eps = _check(beta, eps, attention)
    return _p_antipodal(beta, eps, attention, weight=lambda v: float(overlap_cdf(v, dim)))


#: Above this layer step the discrete hybrid model (003 eq. 7) is far from its SDE limit.
STEP_WARNING = 0.1


def hybrid_layer_step(
    beta: float, eps: float, depth: float | int, attention: str = "unnormalized"
) -> float:
    """The largest tangential move of one layer of 003 eq. 7 with |v_n| = 1: ε·e^β/(2√L)
    for USA (the self-weight e^β/2 times ε/√L), ε/(2√L) for SA (softmax weights are ≤ 1 and
    the tangential part of A is at most ½). When it is not small, L is far from the SDE
    limit of Prop. 1 and the answer depends on the law of v_n."""
    beta, eps = _check(beta, eps, attention, eps_zero=True)
    depth = check_real_in("depth", depth, lower=0.0, lower_open=True)
    weight = math.exp(beta) / 2 if attention == "unnormalized" else 0.5
    return eps * weight / math.sqrt(depth)


def depth_for_step(beta: float, eps: float, attention: str = "unnormalized") -> int:
    """The smallest L with :func:`hybrid_layer_step` ≤ 0.1."""
    beta, eps = _check(beta, eps, attention, eps_zero=True)
    weight = math.exp(beta) / 2 if attention == "unnormalized" else 0.5
    return max(1, math.ceil((eps * weight / STEP_WARNING) ** 2))
