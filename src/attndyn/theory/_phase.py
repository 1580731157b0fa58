"""Closed forms of the phase theory (spec §4): thresholds and exact two-token probabilities.

These are plain NumPy/SciPy functions: they are the reference the simulations are
checked against, so they share no code with them.

``norm="layernorm"`` (centred LayerNorm, spec §0) gives the same quantities for tokens in
R^d normalised by a centred LayerNorm: *(derived)* Post-LN is then the RMS model in d − 1
dimensions at the same β, so every formula is evaluated at d − 1 (threshold
d − 3 < cosh 2β).
"""

import math

import numpy as np
from scipy import integrate, special

from .._core.errors import ParameterError, check_bound, check_int
from .._core.norms import AbstractNorm, as_norm


def effective_dim(dim: int, norm: "AbstractNorm | str" = "rms") -> int:
    """The dimension of the RMS model whose two-token law is that of tokens in R^``dim``
    under ``norm``: d for RMS, d − 1 for centred LayerNorm (at least 2 either way)."""
    norm = as_norm(norm)
    if norm.affine:
        raise ParameterError(
            "the two-token theory needs a norm without gain or bias (tokens on a sphere)."
        )
    check_int("dim", dim, lower=2 + norm.codimension)
    return norm.effective_dim(dim)


def beta_critical(dim: int, norm: "AbstractNorm | str" = "rms") -> float:
    """β_c(d) = ½ arccosh(d − 2) (003 Thm 2): P(antipodal) > 0 iff β > β_c(d), for d ≥ 3.

    For d = 2 both ±1 attract at every β, and β_c(2) is returned as 0. For d = 3 it is 0.
    With ``norm="layernorm"``: ½ arccosh(d − 3), the RMS threshold of d − 1 dimensions.
    """
    dim = effective_dim(dim, norm)
    if dim <= 3:
        return 0.0
    return 0.5 * math.acosh(dim - 2)


def eps_critical(beta: float) -> float:
    """ε_c(β) = √(2 e^{−β}) (003 Prop 1, hybrid USA, N = 2)."""
    check_bound("beta", beta, lower=0.0)
    return math.sqrt(2 * math.exp(-beta))


#: Above this argument cosh overflows float64 soon (at 710.5): sech and cosh switch to their
#: exponential forms, which are exact to rounding there (e^{−2x} < 10⁻⁶⁰⁰).
_LARGE = 700.0


def _sech(x: float) -> float:
    """1/cosh(x) without overflow (x ≥ 0)."""
    return 1 / math.cosh(x) if x < _LARGE else 2 * math.exp(-x)


def _cosh(x: float) -> float:
    """cosh(x), ``inf`` where it overflows float64."""
    return math.cosh(x) if x < _LARGE else math.inf


def _exponents(beta: float, dim: int) -> tuple[float, float]:
    """Exponents of the scale density s(x) ~ (1 − x)^{a₊} (1 + x)^{a₋} at the two ends."""
    k_plus = (dim - 2) / 2
    k_minus = (dim - 2) / 2 * _sech(2 * beta)
    return k_plus - 0.5, -k_minus - 0.5


def _smooth_rate(y: float, beta: float, dim: int) -> float:
    """r(y): the integrand of ∫_0^x (d−2)/(cosh(β(1−y))(1−y²)) dy less its two poles.

    With 1/(1−y²) = ½[1/(1−y) + 1/(1+y)], the poles are k₊/(1−y) at y = 1 (cosh → 1) and
    k₋/(1+y) at y = −1 (cosh → cosh 2β). What is left is smooth on [−1, 1]; both
    difference quotients are written to avoid cancellation, and every sech is evaluated
    as 2e^{−x} past :data:`_LARGE` (where cosh would overflow). Called millions of times
    per probability, so it calls no helper.
    """
    u = beta * (1 - y)
    # (sech u − 1)/(1 − y) = −2 sinh²(u/2) / (cosh u · (1 − y)) = −β sinh(u/2)·sinhc(u/2)/cosh u
    half = 0.5 * u
    if u < _LARGE:
        sinhc = 1.0 if abs(half) < 1e-8 else math.sinh(half) / half
        near_one = -beta * math.sinh(half) * sinhc / math.cosh(u)
        sech_u = 1 / math.cosh(u)
    else:  # sech u is negligible against 1: no cancellation left to avoid
        sech_u = 2 * math.exp(-u)
        near_one = (sech_u - 1) / (1 - y)
    sech_2beta = 1 / math.cosh(2 * beta) if 2 * beta < _LARGE else 2 * math.exp(-2 * beta)
    w = 1 + y
    if abs(w) < 1e-7:
        # derivative of sech(β(1 − y)) in y at y = −1
        near_minus_one = beta * math.tanh(2 * beta) * sech_2beta
    else:
        near_minus_one = (sech_u - sech_2beta) / w
    return (dim - 2) / 2 * (near_one + near_minus_one)


def _log_smooth_scale(x: float, beta: float, dim: int) -> float:
    """−R(x) = −∫_0^x r(y) dy, so that s(x) = (1−x)^{a₊}(1+x)^{a₋} e^{−R(x)}."""
    value, _ = integrate.quad(_smooth_rate, 0.0, x, args=(beta, dim), epsabs=1e-13, epsrel=1e-12)
    return -value


def scale_density(x: float | np.ndarray, beta: float, dim: int) -> np.ndarray:
    """The scale density s(x) of the two-token overlap diffusion (spec §4).

    s(x) = (1−x²)^{−1/2} exp(−∫_0^x (d−2) / (cosh(β(1−y))(1−y²)) dy), the same for SA and
    USA and every σ.
    """
    a_plus, a_minus = _exponents(beta, dim)
    xs = np.atleast_1d(np.asarray(x, dtype=np.float64))
    out = np.array(
        [
            (1 - v) ** a_plus * (1 + v) ** a_minus * math.exp(_log_smooth_scale(v, beta, dim))
            for v in xs
        ]
    )
    return out.reshape(np.shape(x))


#: The largest β at which the exact probabilities are computed. The quadrature converges
#: (and was checked against the β → ∞ limit) up to β ≈ 10⁷ for d ≤ 4096; above 10⁶ the
#: probabilities are within 10⁻³ of their limit (P(antipodal | z) → arccos(z)/π, so 1/2
#: for uniform starts), which the boundary layer of width 1/β at +1 approaches like β^{−½}.
EXACT_BETA_MAX = 1e6


def _validate(beta: float, dim: int) -> None:
    check_bound("beta", beta, lower=0.0)
    check_int("dim", dim, lower=2)


def _validate_quadrature(beta: float, dim: int) -> None:
    _validate(beta, dim)
    if beta > EXACT_BETA_MAX:
        raise ParameterError(
            f"beta={beta!r} is above {EXACT_BETA_MAX:g}, the largest β for which the exact "
            "probabilities are computed (as β → ∞, P(antipodal | z) → arccos(z)/π: 1/2 for "
            "uniform starts)."
        )


def antipodal_reachable(beta: float, dim: int, norm: "AbstractNorm | str" = "rms") -> bool:
    """Whether ∫ s converges at −1, i.e. d − 2 < cosh 2β: P(antipodal) > 0 iff it does
    (d − 3 < cosh 2β with ``norm="layernorm"``)."""
    dim = effective_dim(dim, norm)
    _validate(beta, dim)
    return dim - 2 < _cosh(2 * beta)


#: Largest k₊·ln(1 + β) for which the +1 end of s is taken by the algebraic weight: beyond it
#: e^{−R} grows like (β/(1+β(1−x)))^{k₊} across a boundary layer of width 1/β at +1, which
#: the weight (1 − x)^{a₊} cancels only after the quadrature has lost digits (or
#: overflowed). There the factor (1 − x)^{k₊} e^{−R} ≤ 1 is kept together, in log form.
_AMPLIFICATION = 10.0


def _weighted_integral(f, beta: float, dim: int, lower: float = -1.0) -> float:
    """∫_lower^1 s(x) f(x) dx, with the algebraic end singularities taken by QUADPACK's
    ``weight='alg'`` rule (exact for (1+x)^{a₋}(1−x)^{a₊} times a smooth function).

    For large k₊·ln β the weight at +1 is (1 − x)^{−1/2} only and the rest of s is
    evaluated as exp(k₊ ln(1 − x) − R(x)), which never overflows: this stays accurate (and
    tends to the β → ∞ limit s ∝ (1 − x²)^{−1/2}) for every β and d.
    """
    a_plus, a_minus = _exponents(beta, dim)
    k_plus = (dim - 2) / 2
    split = k_plus * math.log1p(beta) > _AMPLIFICATION

    def smooth(v):
        if not split:
            return math.exp(_log_smooth_scale(v, beta, dim)) * f(v)
        if v >= 1.0:
            return 0.0
        return math.exp(k_plus * math.log1p(-v) + _log_smooth_scale(v, beta, dim)) * f(v)

    weight_plus = -0.5 if split else a_plus
    if lower == -1.0:
        value, _ = integrate.quad(
            smooth, -1.0, 1.0, weight="alg", wvar=(a_minus, weight_plus), epsabs=1e-13, limit=200
        )
        return value
    # (1+x)^{a₋} is smooth away from −1: fold it into the integrand.
    value, _ = integrate.quad(
        lambda v: smooth(v) * (1 + v) ** a_minus,
        lower,
        1.0,
        weight="alg",
        wvar=(0.0, weight_plus),
        epsabs=1e-13,
        limit=200,
    )
    return value


def p_antipodal_given_overlap(
    z: float, beta: float, dim: int, norm: "AbstractNorm | str" = "rms"
) -> float:
    """P(antipodal at t = ∞ | Z_0 = z) = ∫_z^1 s / ∫_{−1}^1 s, or 0 when ∫ s diverges at −1.

    Two tokens, full value noise, Q = K = I (003 Thm 2, App. C). For d = 2 this is
    arccos(z)/π. With ``norm="layernorm"`` z is the overlap of the centred tokens.
    """
    dim = effective_dim(dim, norm)
    _validate_quadrature(beta, dim)
    check_bound("z", z, lower=-1.0, upper=1.0)
    if not antipodal_reachable(beta, dim):
        return 0.0
    total = _weighted_integral(lambda v: 1.0, beta, dim)
    return _weighted_integral(lambda v: 1.0, beta, dim, lower=z) / total


def overlap_start_cdf(z: float | np.ndarray, dim: int) -> np.ndarray:
    """P(⟨x_1, x_2⟩ ≤ z) for two independent uniform points on S^{d−1}.

    The overlap has density ∝ (1 − z²)^{(d−3)/2}, i.e. (1 + Z)/2 ~ Beta((d−1)/2, (d−1)/2).
    """
    a = (dim - 1) / 2
    return np.asarray(special.betainc(a, a, (1 + np.asarray(z, dtype=np.float64)) / 2))


def p_antipodal_uniform(beta: float, dim: int, norm: "AbstractNorm | str" = "rms") -> float:
    """P(antipodal at t = ∞) for two tokens started uniformly and independently on S^{d−1}.

    By Fubini, ``E[∫_{Z_0}^1 s] = ∫_{−1}^1 s(x) P(Z_0 ≤ x) dx``, so one weighted quadrature
    against the start CDF gives the average; the (1 + x) singularity of s is integrable
    exactly when β > β_c(d), and is handled by the algebraic-weight rule.

    With ``norm="layernorm"`` the first centring maps the uniform start on S^{d−1} to the
    uniform law on the unit sphere of the hyperplane, and the answer is the RMS one at d − 1.
    """
    dim = effective_dim(dim, norm)
    _validate_quadrature(beta, dim)
    if not antipodal_reachable(beta, dim):
        return 0.0
    total = _weighted_integral(lambda v: 1.0, beta, dim)
    return _weighted_integral(lambda v: float(overlap_start_cdf(v, dim)), beta, dim) / total


def p_antipodal_curve(betas, dim: int, norm: "AbstractNorm | str" = "rms") -> np.ndarray:
    """:func:`p_antipodal_uniform` over an array of β."""
    return np.array([p_antipodal_uniform(float(b), dim, norm) for b in np.asarray(betas).ravel()])
