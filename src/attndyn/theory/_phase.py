"""Closed forms of the phase theory (spec §4): thresholds and exact two-token probabilities.

These are plain NumPy/SciPy functions: they are the reference the simulations are
checked against, so they share no code with them.

``norm="layernorm"`` (centred LayerNorm, spec §0) gives the same quantities for tokens in
R^d normalised by a centred LayerNorm: *(derived)* Post-LN is then the RMS model in d − 1
dimensions at the same β, so every formula is evaluated at d − 1 (threshold
d − 3 < cosh 2β).
"""

import bisect
import functools
import itertools
import math

import numpy as np
from numpy.polynomial import chebyshev
from scipy import integrate, special

from .._core.errors import ParameterError, check_bound, check_int, check_real_in
from .._core.norms import AbstractNorm, as_norm


def effective_dim(dim: int, norm: "AbstractNorm | str" = "rms") -> int:
    """The dimension of the RMS model whose two-token law is that of tokens in R^``dim``
    under ``norm``: d for RMS, d − 1 for centred LayerNorm (at least 2 either way).

    The public functions below check their arguments here and in :func:`_validate`, once,
    and then call the private kernels (``_reachable``, ``_p_uniform``, ...), which trust
    them: a curve of 60 β or a quadrature's hundreds of nodes check nothing again."""
    norm = as_norm(norm)
    if norm.affine:
        raise ParameterError(
            "the two-token theory needs a norm without gain or bias (tokens on a sphere)."
        )
    check_int("dim", dim, lower=2)
    if dim < 2 + norm.codimension:
        raise ParameterError(
            f"dim={dim} must be >= {2 + norm.codimension} with norm={norm.name!r} (CLI: --norm "
            f"{norm.name}): it puts the tokens on the unit sphere of the mean-zero hyperplane, "
            f"of dimension d − {1 + norm.codimension}; give a larger dim or norm='rms'."
        )
    return norm.effective_dim(dim)


def beta_critical(dim: int, norm: "AbstractNorm | str" = "rms") -> float:
    """β_c(d) = ½ arccosh(d − 2) (003 Thm 2): P(antipodal) > 0 iff β > β_c(d), for d ≥ 3.

    For d = 2 both ±1 attract at every β, and β_c(2) is returned as 0. For d = 3 it is 0.
    With ``norm="layernorm"``: ½ arccosh(d − 3), the RMS threshold of d − 1 dimensions.
    """
    return _critical(effective_dim(dim, norm))


def _critical(dim: int) -> float:
    """:func:`beta_critical` of an effective d ≥ 2 (checked)."""
    if dim <= 3:
        return 0.0
    return 0.5 * math.acosh(dim - 2)


def eps_critical(beta: float) -> float:
    """ε_c(β) = √(2 e^{−β}) (003 Prop 1, hybrid USA, N = 2)."""
    beta = check_real_in("beta", beta, lower=0.0, array_hint=ONE_BETA)
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


#: Gauss–Legendre nodes and weights on [−1, 1] for the segments of :func:`_rate_table`.
_NODES, _WEIGHTS = np.polynomial.legendre.leggauss(24)
#: Halvings of 1 − y toward +1 at most (1 − 2⁻⁵⁰ is still exact in float64).
_MAX_HALVINGS = 50


def _sinhc(t: np.ndarray) -> np.ndarray:
    """sinh(t)/t for 0 ≤ t ≤ 20 (1 at t = 0)."""
    safe = np.where(t > 1e-8, t, 1.0)
    return np.where(t > 1e-8, np.sinh(safe) / safe, 1.0)


def _unit_rate(v: np.ndarray, beta: float) -> np.ndarray:
    """ρ(v) = r(1 − v)/k₊, k₊ = (d − 2)/2: the integrand of the scale density's exponent less
    its two poles, in v = 1 − y ∈ [0, 2] (exact near y = 1, where the boundary layer is).

    With a = βv, b = 2β, w = 2 − v = 1 + y and 1/(1 − y²) = ½[1/(1 − y) + 1/(1 + y)]:
    ρ = (sech a − 1)/v + (sech a − sech b)/w. Both quotients are written without
    cancellation or overflow: the first as −β sinh(a/2)·sinhc(a/2)·sech a for a < 1, the
    second through sech a − sech b = 2 sinh((a+b)/2) sinh(βw/2) sech a sech b. The function
    is analytic, its only singularities the poles of sech at v = iπ(2m+1)/(2β).
    """
    a = beta * v
    b = 2.0 * beta
    ea, eb = np.exp(-a), math.exp(-b)
    sech_a = 2 * ea / (1 + ea * ea)
    half = np.minimum(0.5 * a, 0.5)  # the small-a branch only
    safe_v = np.where(a < 1, 1.0, v)
    near_one = np.where(a < 1, -beta * np.sinh(half) * _sinhc(half) * sech_a, (sech_a - 1) / safe_v)
    # sinh((a+b)/2)·sech a·sech b·2 = F·e^{−(a+b)/2}, and e^{−(a+b)/2} sinh(t)/w with
    # t = βw/2 is (β/2)e^{−(a+b)/2}·sinhc(t) (small t) or ½(e^{−a} − e^{−b})/w (t ≥ 20).
    factor = -4 * np.expm1(-(a + b)) / ((1 + ea * ea) * (1 + eb * eb))
    w = 2.0 - v
    t = 0.5 * beta * w
    safe_w = np.where(t < 20, 1.0, w)
    quotient = np.where(
        t < 20,
        0.5 * beta * np.exp(-0.5 * (a + b)) * _sinhc(np.minimum(t, 20.0)),
        0.5 * (ea - eb) / safe_w,
    )
    return near_one + factor * quotient


def _segment_integrals(low: np.ndarray, high: np.ndarray, beta: float) -> np.ndarray:
    """∫_low^high ρ(v) dv per segment by Gauss–Legendre: exact to rounding, as each segment
    is at most a third as long as its distance to the nearest pole of ρ."""
    mid, half = (high + low) / 2, (high - low) / 2
    values = _unit_rate(mid[:, None] + half[:, None] * _NODES, beta)
    return half * (values @ _WEIGHTS)


#: Chebyshev degree of Φ on each segment: its error is ~(3 + √8)^{−degree} of Φ's size on
#: the segment's Bernstein ellipse (segments are at most a third of their distance to the
#: poles), below 10⁻¹⁸ at 24.
_DEGREE = 24


@functools.lru_cache(maxsize=256)
def _rate_table(beta: float) -> tuple[list[float], list[tuple[float, float, list[float]]]]:
    """Φ(v) = ∫_v^1 ρ on [0, 2], as a Chebyshev series per segment, built once per β.

    Segments run between anchors v = 2, 1, ½, ¼, … (down to below π/(4β)) and 0: halving
    toward v = 0 keeps every segment [v/2, v] a third of its distance to the poles of ρ (at
    ±iπ/(2β)); the last, [0, v_J], is a quarter of it. Φ at the anchors and at each
    segment's Chebyshev points is summed from Gauss–Legendre segments.

    Returns the negated anchors (ascending, for :mod:`bisect`) and per segment its ends and
    coefficients.
    """
    floor = math.pi / (4 * beta) if beta > 0 else 1.0
    anchors = [2.0, 1.0]
    while anchors[-1] > floor and len(anchors) < _MAX_HALVINGS:
        anchors.append(anchors[-1] / 2)
    ends = np.array([*anchors, 0.0])
    pieces = _segment_integrals(ends[1:], ends[:-1], beta)
    # Φ(1) = 0; Φ(v_j) for j ≥ 2 adds the segments between v_j and 1; Φ(2) = −∫_1^2 ρ.
    phi = np.concatenate([[-pieces[0], 0.0], np.cumsum(pieces[1:-1])])
    segments = []
    for j, (high, low) in enumerate(itertools.pairwise(ends)):

        def phi_on_segment(t, j=j, high=high, low=low):
            v = (high + low) / 2 + (high - low) / 2 * t
            return phi[j] + _segment_integrals(v, np.full_like(v, high), beta)

        coef = chebyshev.chebinterpolate(phi_on_segment, _DEGREE)
        segments.append((float(low), float(high), [float(c) for c in coef]))
    return [-a for a in anchors], segments


def _log_smooth_scale(x: float, beta: float, dim: int) -> float:
    """−R(x) = −∫_0^x r(y) dy, so that s(x) = (1−x)^{a₊}(1+x)^{a₋} e^{−R(x)}.

    R(x) = k₊ Φ(1 − x) from :func:`_rate_table` (one per β; 1 − x is exact for x ≥ ½), by
    Clenshaw's recurrence in plain floats: this is called hundreds of times per
    probability, inside QUADPACK's loop (a nested adaptive quadrature took ~60 evaluations
    of r each, 2·10⁶ per theory curve).
    """
    negated, segments = _rate_table(float(beta))
    v = 1.0 - float(x)
    low, high, coef = segments[min(max(bisect.bisect_right(negated, -v) - 1, 0), len(segments) - 1)]
    t = (2 * v - low - high) / (high - low)
    b1 = b2 = 0.0
    for c in reversed(coef[1:]):
        b1, b2 = 2 * t * b1 - b2 + c, b1
    return -(dim - 2) / 2 * (t * b1 - b2 + coef[0])


def scale_density(x: float | np.ndarray, beta: float, dim: int) -> np.ndarray:
    """The scale density s(x) of the two-token overlap diffusion (spec §4).

    s(x) = (1−x²)^{−1/2} exp(−∫_0^x (d−2) / (cosh(β(1−y))(1−y²)) dy), the same for SA and
    USA and every σ.
    """
    beta = _validate(beta, dim)
    check_bound("x", x, lower=-1.0, upper=1.0)
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


#: What a ParameterError about an array of β says to do instead.
ONE_BETA = "Call the function once per β (p_antipodal_curve takes an array of β)."


def _validate(beta: float, dim: int) -> float:
    """β as a float (one real number ≥ 0; refused by name otherwise), and d ≥ 2."""
    beta = _checked_beta(beta)
    check_int("dim", dim, lower=2)
    return beta


def _checked_beta(beta: float) -> float:
    """β as a float: one real number ≥ 0, refused by name otherwise (d is checked by
    :func:`effective_dim`)."""
    return check_real_in("beta", beta, lower=0.0, array_hint=ONE_BETA)


def _quadrature_beta(beta: float) -> float:
    """β as a float in [0, EXACT_BETA_MAX], where the quadrature is computed."""
    return _below_exact_max(_checked_beta(beta))


def _below_exact_max(beta: float) -> float:
    """A checked β, refused above EXACT_BETA_MAX (where the quadrature stops)."""
    if beta > EXACT_BETA_MAX:
        raise ParameterError(
            f"beta={beta!r} is above {EXACT_BETA_MAX:g}, the largest β for which the exact "
            "probabilities are computed (as β → ∞, P(antipodal | z) → arccos(z)/π: 1/2 for "
            "uniform starts)."
        )
    return beta


def antipodal_reachable(beta: float, dim: int, norm: "AbstractNorm | str" = "rms") -> bool:
    """Whether ∫ s converges at −1, i.e. d − 2 < cosh 2β: P(antipodal) > 0 iff it does
    (d − 3 < cosh 2β with ``norm="layernorm"``)."""
    dim = effective_dim(dim, norm)
    return _reachable(_checked_beta(beta), dim)


def _reachable(beta: float, dim: int) -> bool:
    """:func:`antipodal_reachable` of a checked β and effective d."""
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
    beta = _quadrature_beta(beta)
    z = check_real_in("z", z, lower=-1.0, upper=1.0)
    if not _reachable(beta, dim):
        return 0.0
    total = _weighted_integral(lambda v: 1.0, beta, dim)
    return _weighted_integral(lambda v: 1.0, beta, dim, lower=z) / total


def overlap_start_cdf(z: float | np.ndarray, dim: int) -> np.ndarray:
    """P(⟨x_1, x_2⟩ ≤ z) for two independent uniform points on S^{d−1}.

    The overlap has density ∝ (1 − z²)^{(d−3)/2}, i.e. (1 + Z)/2 ~ Beta((d−1)/2, (d−1)/2).
    """
    check_int("dim", dim, lower=2)
    check_bound("z", z, lower=-1.0, upper=1.0)
    return overlap_cdf(z, dim)


def overlap_cdf(z: float | np.ndarray, dim: int) -> np.ndarray:
    """:func:`overlap_start_cdf` unchecked (inside quadratures, whose nodes are in [−1, 1])."""
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
    return _p_uniform(_quadrature_beta(beta), dim)


def _p_uniform(beta: float, dim: int) -> float:
    """:func:`p_antipodal_uniform` of a checked β and effective d."""
    if not _reachable(beta, dim):
        return 0.0
    total = _weighted_integral(lambda v: 1.0, beta, dim)
    return _weighted_integral(lambda v: float(overlap_cdf(v, dim)), beta, dim) / total


def p_antipodal_curve(betas, dim: int, norm: "AbstractNorm | str" = "rms") -> np.ndarray:
    """:func:`p_antipodal_uniform` over an array of β (d and the norm checked once, each β
    once)."""
    values = np.asarray(betas)
    if values.dtype.kind not in "iuf":  # '4' would be read as 4.0 by float()
        raise ParameterError(f"betas={betas!r:.40} must be real numbers β >= 0.")
    dim = effective_dim(dim, norm)
    return np.array([_p_uniform(_quadrature_beta(float(b)), dim) for b in values.ravel()])
