"""The uniform state of many tokens and its unstable modes (spec §7; derived in
docs/guides/theory.md, "Many tokens: the modes of the uniform state").

With Q = K = V = I the mean-field attention of a token at x ∈ S^{d−1} against the measure
μ of the tokens is, with the kernel K(t) = e^{βt} and (K∗μ)(x) = ∫ e^{β⟨x, y⟩} dμ(y),

- unnormalised (USA): A[μ](x) = ∫ e^{β⟨x,y⟩} y dμ(y) = (1/β) ∇(K∗μ)(x);
- softmax (SA):       A[μ](x) = (1/β) ∇ log (K∗μ)(x),

and the tokens move with the tangent part, v = P_x A = (1/β) ∇_S (K∗μ) (resp. of the log).
Linearising ∂_t μ + div(μ v) = 0 about the uniform probability measure σ, a perturbation
μ = (1 + f)σ with f a spherical harmonic of degree ℓ grows as e^{λ_ℓ t}:

    λ_ℓ = ℓ(ℓ + d − 2) K̂_ℓ / β            (USA),
    λ_ℓ = ℓ(ℓ + d − 2) K̂_ℓ / (β K̂_0)       (SA),

with the Funk–Hecke coefficient of e^{βt} (σ a probability measure)

    K̂_ℓ = Γ(d/2) (2/β)^{d/2−1} I_{ℓ+d/2−1}(β)      (d = 2: I_ℓ(β); d = 3: i_ℓ(β)).

The mode power P_ℓ (a square of the amplitude) grows at 2λ_ℓ. The depth-L layer maps
x ← normalize(x + A(x)/L) move each token by v/(L + c) per layer, c = ⟨x, A[σ](x)⟩ the
radial part of the uniform attention (normalising divides it out), so the degree-ℓ
amplitude is multiplied by 1 + λ_ℓ/(L + c) per layer: a rate L log(1 + λ_ℓ/(L + c)) per
unit time t = n/L (:func:`mode_growth_rate` with ``depth``).

Everything is computed in logs from :mod:`._bessel` (``log(I_μ(β) e^{−β})`` and ratios
``log(I_μ/I_ν)``, by ``ive`` at small arguments and Debye's uniform expansion at large
ones), so that no intermediate overflows, underflows or loses its digits: softmax rates
are finite at every β ≥ 0 and degree ℓ ≥ 0, and ℓ* is exact at every β (neighbouring
degrees compared at as many decimal digits as that needs beyond β = 10⁴). Plain NumPy/SciPy
and the standard library's ``decimal``.
"""

import math
from collections.abc import Sequence
from decimal import Decimal, localcontext

import numpy as np
from scipy import integrate, special

from .._core.attention import ATTENTION_KINDS
from .._core.errors import (
    ParameterError,
    check_choice,
    check_int,
    check_real_in,
)
from ._bessel import (
    decimal_digits,
    log_bessel_ratio,
    log_hypergeometric_0f1,
    log_ive_decimal,
)

#: Degrees ℓ: one, or an array or list of them.
Degrees = int | np.integer | np.ndarray | Sequence[int]

#: Up to this β, ℓ* is the largest of the float64 rates of every degree up to
#: 4√(2β + 1) + 16; beyond it, a search among neighbouring degrees at as many digits as
#: β needs (the log-rates of ℓ* and ℓ* ± 1 differ by about 1/β: float64 stops resolving
#: them near β ≈ 10¹²).
EXHAUSTIVE_BETA_MAX = 1e4

_BETA_ARRAY_HINT = (
    "The theory functions take an array of degrees ell, not of beta: call them once per "
    "beta, e.g. [mode_growth_rate(b, dim, ell) for b in betas]."
)


def _result(values) -> np.ndarray | float:
    """A float for one degree, an array for several."""
    values = np.asarray(values, np.float64)
    return float(values) if values.ndim == 0 else values


def _degrees(ell) -> np.ndarray:
    """``ell`` as an array of degrees ≥ 0: integers, of any size (Python ints beyond int64,
    such as :func:`most_unstable_degree` at β ≳ 10³⁷, as float64: the rates are smooth in
    ℓ); a ParameterError names it otherwise."""
    values = np.asarray(ell)
    if isinstance(ell, list | tuple) and any(isinstance(v, bool | np.bool_) for v in ell):
        values = None  # NumPy would read True as the degree 1
    elif values.dtype.kind == "O" and all(
        isinstance(v, int | np.integer) and not isinstance(v, bool) for v in values.flat
    ):
        values = values.astype(np.float64)
    elif values.dtype.kind not in "iu":
        values = None
    if values is None or np.any(values < 0):
        raise ParameterError(
            f"ell={ell!r:.60} must be whole degrees >= 0: an integer, or a list or integer "
            "array of them."
        )
    return values


def _log_laplace(ell: np.ndarray, dim: int) -> np.ndarray:
    """log ℓ(ℓ + d − 2) (−inf at ℓ = 0), as a sum of logs: the product overflows beyond
    ℓ ≈ 10¹⁵⁴."""
    with np.errstate(divide="ignore"):
        return np.asarray(np.log(ell) + np.log(ell + (dim - 2.0)))


def _beta(beta, *, positive: bool = False) -> float:
    """β as a float: one real number >= 0 (> 0 if ``positive``), finite."""
    return check_real_in("beta", beta, lower=0.0, lower_open=positive, array_hint=_BETA_ARRAY_HINT)


def _nu(dim: int) -> float:
    check_int("dim", dim, lower=2)
    return dim / 2 - 1


def _log_k0_scaled(beta: float, dim: int) -> float:
    """log(K̂_0 e^{−β}) (≤ 0), β > 0."""
    return log_hypergeometric_0f1(dim / 2 - 1, beta, scaled=True)


def _log_funk_hecke(beta: float, dim: int, ell: np.ndarray) -> np.ndarray:
    """log K̂_ℓ (β > 0): log K̂_0 = log ₀F₁(; d/2; β²/4) plus log(I_{ℓ+ν}/I_ν), each
    without cancellation at any β and d."""
    nu = dim / 2 - 1
    return np.asarray(log_hypergeometric_0f1(nu, beta) + log_bessel_ratio(ell + nu, nu, beta))


def log_funk_hecke_exponential(beta: float | int, dim: int, ell: Degrees) -> np.ndarray | float:
    """``log K̂_ℓ`` of the kernel e^{βt} on S^{d−1} (β > 0):
    ``K̂_ℓ = Γ(d/2) (2/β)^{d/2−1} I_{ℓ+d/2−1}(β)``, finite at every β > 0 and degree ℓ
    (where K̂_ℓ itself overflows or underflows float64)."""
    beta = _beta(beta, positive=True)
    _nu(dim)
    return _result(_log_funk_hecke(beta, dim, _degrees(ell)))


def funk_hecke_exponential(beta: float | int, dim: int, ell: Degrees) -> np.ndarray | float:
    """``K̂_ℓ = ∫ e^{β⟨x,y⟩} C_ℓ(⟨x,y⟩) dσ(y)`` with C_ℓ(1) = 1 and σ the uniform probability
    measure on S^{d−1}: ``Γ(d/2) (2/β)^{d/2−1} I_{ℓ+d/2−1}(β)``; at β = 0, 1 for ℓ = 0 and 0
    otherwise. inf where K̂_ℓ exceeds the float64 range (β ≳ 709; its log,
    :func:`log_funk_hecke_exponential`, is finite), 0 where it is below it."""
    beta = _beta(beta)
    _nu(dim)
    ell = _degrees(ell)
    if beta == 0:
        return _result(np.where(ell == 0, 1.0, 0.0))
    with np.errstate(over="ignore", under="ignore"):
        return _result(np.exp(_log_funk_hecke(beta, dim, ell)))


def funk_hecke_quadrature(kernel, dim: int, ell: int) -> float:
    """``∫ K(t) C_ℓ(t) dσ`` by quadrature: ``∫_{-1}^{1} K(t) C_ℓ(t) (1 − t²)^{(d−3)/2} dt``
    over the same integral of the weight alone (C_ℓ the Gegenbauer polynomial of index
    (d − 2)/2 normalised to C_ℓ(1) = 1). An independent check of the closed forms."""
    check_int("dim", dim, lower=2)
    check_int("ell", ell, lower=0)
    alpha = (dim - 2) / 2

    def c_ell(t):
        if alpha == 0:
            return special.eval_chebyt(ell, t)
        return special.eval_gegenbauer(ell, alpha, t) / special.eval_gegenbauer(ell, alpha, 1.0)

    # t = cos φ: the weight (1 − t²)^{(d−3)/2} dt becomes sin^{d−2} φ dφ (no endpoint singularity).
    def integrand(phi, f):
        return f(math.cos(phi)) * math.sin(phi) ** (dim - 2)

    top = integrate.quad(integrand, 0, math.pi, args=(lambda t: kernel(t) * c_ell(t),), limit=200)
    weight = integrate.quad(integrand, 0, math.pi, args=(lambda t: 1.0,), limit=200)
    return top[0] / weight[0]


def _log_self_normaliser(beta: float, dim: int, n_tokens: int) -> float:
    """log(1 − 1/N + e^β/(N K̂_0)): a softmax row's normaliser over N i.i.d. tokens, the
    token's own weight e^β/N included, relative to K̂_0."""
    own = -_log_k0_scaled(beta, dim) - math.log(n_tokens)  # log(e^β/(N K̂_0))
    return float(np.logaddexp(math.log1p(-1 / n_tokens), own))


def _log_flow_rate(
    beta: float, dim: int, ell: np.ndarray, attention: str, n_tokens: int | None
) -> np.ndarray:
    """log λ_ℓ of the flow (β > 0; −inf at ℓ = 0)."""
    if attention == "unnormalized":
        return np.asarray(beta + _log_usa_rate_scaled(beta, dim, ell))
    nu = dim / 2 - 1
    log_laplace = _log_laplace(ell, dim)
    log_k = log_bessel_ratio(ell + nu, nu, beta)  # K̂_ℓ/K̂_0
    if n_tokens:
        log_k = log_k - _log_self_normaliser(beta, dim, n_tokens)
    return np.asarray(log_laplace + log_k - math.log(beta))


def _log_usa_rate_scaled(beta: float, dim: int, ell: np.ndarray) -> np.ndarray:
    """log(λ_ℓ e^{−β}) of USA's flow, λ_ℓ = ℓ(ℓ + d − 2) K̂_ℓ/β (β > 0; −inf at ℓ = 0):
    relative to e^β, so that λ_ℓ and c (both ∝ e^β) are compared without a difference of
    two numbers of size β."""
    nu = dim / 2 - 1
    log_laplace = _log_laplace(ell, dim)
    log_k = _log_k0_scaled(beta, dim) + log_bessel_ratio(ell + nu, nu, beta)  # K̂_ℓ e^{−β}
    return np.asarray(log_laplace + log_k - math.log(beta))


def _softmax_radial_part(beta: float, dim: int, n_tokens: int | None) -> float:
    """c = ⟨x, A(x)⟩ at the uniform state under softmax, ``I_{d/2}(β)/I_{d/2−1}(β)`` (≤ 1);
    with ``n_tokens`` the token's own weight e^β/N is added (it attends to itself at
    overlap 1). At β = 0 also USA's: 1/N (0 without N)."""
    if beta == 0:
        return 1 / n_tokens if n_tokens else 0.0
    nu = dim / 2 - 1
    ratio = math.exp(float(log_bessel_ratio(nu + 1, nu, beta)))  # I_{ν+1}/I_ν
    if not n_tokens:
        return ratio
    # (e^β + (N − 1) K̂_0 r) / (e^β + (N − 1) K̂_0), relative to e^β (K̂_0 e^{−β} ≤ 1).
    others = (n_tokens - 1) * math.exp(_log_k0_scaled(beta, dim))
    return (1 + others * ratio) / (1 + others)


def _log_usa_radial_scaled(beta: float, dim: int, n_tokens: int | None) -> float:
    """log(c e^{−β}) under USA (β > 0), c = ``K̂_0'(β) = Γ(d/2)(2/β)^ν I_{d/2}(β)``; with
    ``n_tokens``, (e^β + (N − 1) K̂_0')/N."""
    nu = dim / 2 - 1
    log_derivative = _log_k0_scaled(beta, dim) + float(log_bessel_ratio(nu + 1, nu, beta))
    if not n_tokens:
        return log_derivative
    own_and_others = np.logaddexp(0.0, math.log(n_tokens - 1) + log_derivative)
    return float(own_and_others - math.log(n_tokens))


def _check_rate_options(
    dim: int, attention: str, depth: float | int | None, n_tokens: int | None
) -> float | None:
    """Check the options :func:`mode_growth_rate` and :func:`most_unstable_degree` share;
    the depth as a float."""
    _nu(dim)
    check_choice("attention", attention, ATTENTION_KINDS)
    if n_tokens is not None:
        check_int("n_tokens", n_tokens, lower=2)
    if depth is None:
        return None
    return check_real_in("depth", depth, lower=0.0, lower_open=True)


def mode_growth_rate(
    beta: float | int,
    dim: int,
    ell: Degrees,
    attention: str = "softmax",
    *,
    depth: float | int | None = None,
    n_tokens: int | None = None,
) -> np.ndarray | float:
    """λ_ℓ(β, d): the growth rate of a degree-ℓ perturbation of the uniform measure (of its
    amplitude; the mode power P_ℓ grows at 2λ_ℓ), Q = K = V = I, per unit time.

    ``USA``: ``ℓ(ℓ + d − 2) K̂_ℓ / β``; ``softmax``: ``ℓ(ℓ + d − 2) K̂_ℓ / (β K̂_0)``
    (:func:`funk_hecke_exponential`; d = 2: ``ℓ² I_ℓ(β)/β`` and ``ℓ² I_ℓ(β)/(β I_0(β))``).
    At β = 0 the limit: (d − 1)/d for ℓ = 1, 0 for ℓ ≥ 2.

    ``beta``: one number ≥ 0 (call once per β); ``ell``: one degree or an array of them,
    any integers ≥ 0 (0 where the rate is below float64's range, e.g. ℓ ≫ β).
    ``n_tokens``: N tokens instead of the N → ∞ limit: a softmax row's normaliser also
    holds the token's own weight e^β/N, K̂_0 → ((N − 1)K̂_0 + e^β)/N (USA is unchanged: the
    token's own term is radial). ``depth``: the rate per unit time of the depth-L layer
    maps with ``V = I/L`` (Post-LN), ``L log(1 + λ_ℓ/(L + c))`` with c the radial part of
    the uniform attention (see the module docstring); ``None``: the flow (L → ∞).

    Computed in logs (:mod:`attndyn.theory._bessel`): softmax rates and every rate with
    ``depth`` are finite at every β; USA flow rates are inf only where they exceed the
    float64 range (β ≳ 709)."""
    beta = _beta(beta)
    depth = _check_rate_options(dim, attention, depth, n_tokens)
    ell = _degrees(ell)
    if beta == 0 or attention == "softmax":
        # Softmax rates are ℓ(ℓ + d − 2)/β times a ratio ≤ 1, and c ≤ 1: formed directly
        # (a rate through exp(log) would carry |log λ|·10⁻¹⁶ relative error, 10⁻¹³ at β = 10³⁰⁰).
        rate = _softmax_rate(beta, dim, ell, n_tokens)
        if depth is None:
            return _result(rate)
        c = _softmax_radial_part(beta, dim, n_tokens)
        return _result(depth * np.log1p(rate / (depth + c)))
    # USA: λ_ℓ and c grow like e^β: in logs relative to e^β (inf only where a flow rate
    # exceeds float64).
    log_rate = _log_usa_rate_scaled(beta, dim, ell)
    with np.errstate(over="ignore", under="ignore"):
        if depth is None:
            return _result(np.exp(log_rate + beta))
        log_c = _log_usa_radial_scaled(beta, dim, n_tokens)
        log_depth = math.log(depth) - beta  # log L relative to e^β
        step = np.exp(log_rate - np.logaddexp(log_depth, log_c))  # λ_ℓ/(L + c)
    return _result(depth * np.log1p(step))


def _softmax_rate(beta: float, dim: int, ell: np.ndarray, n_tokens: int | None) -> np.ndarray:
    """The softmax flow's λ_ℓ (and at β = 0 either kind's limit)."""
    if beta == 0:
        return np.where(ell == 1, (dim - 1) / dim, 0.0)
    log_k = log_bessel_ratio(ell + dim / 2 - 1, dim / 2 - 1, beta)  # K̂_ℓ/K̂_0
    if n_tokens:
        log_k = log_k - _log_self_normaliser(beta, dim, n_tokens)
    with np.errstate(under="ignore"):
        # (ℓ/β)(ℓ + d − 2): ℓ(ℓ + d − 2) alone overflows at ℓ* of β ≳ 10³⁰⁸.
        return np.asarray((ell / beta) * (ell + (dim - 2.0)) * np.exp(log_k))


def most_unstable_degree(
    beta: float | int,
    dim: int,
    attention: str = "softmax",
    *,
    depth: float | int | None = None,
    n_tokens: int | None = None,
) -> int:
    """ℓ*(β, d): the degree ℓ ≥ 1 of the largest :func:`mode_growth_rate` (the smallest
    such degree on a tie). The same for softmax and USA, whose rates differ by the factor
    K̂_0, for every N (a factor again) and every depth (whose rate increases with λ_ℓ): all
    are ℓ* of x_ℓ I_{ℓ+ν}(β), x_ℓ = ℓ(ℓ + d − 2), ν = d/2 − 1, which is what is computed.

    For large β, λ_ℓ ∝ x e^{−x/(2β)}, largest near ℓ(ℓ + d − 2) = 2β: ℓ* ≈ √(2β + ν²) − ν
    (≈ √(2β)). ℓ ↦ log x_ℓ I_{ℓ+ν}(β) is concave (Turán's inequality for I), so ℓ* is the
    first degree whose successor's rate is not larger: up to β = 10⁴ found among every
    degree up to 4√(2β + 1) + 16 in float64, beyond it by a search from √(2β + ν²) − ν that
    compares neighbours' rates at as many decimal digits as β needs (a Python int, exact
    at every β, e.g. 141,421 at β = 10¹⁰, d = 2)."""
    beta = _beta(beta)
    _check_rate_options(dim, attention, depth, n_tokens)
    if beta == 0:
        return 1  # λ_1 = (d − 1)/d, λ_ℓ = 0 for ℓ ≥ 2
    if beta <= EXHAUSTIVE_BETA_MAX:
        return _star_float(beta, dim)
    return _star_decimal(beta, dim)


def _star_float(beta: float, dim: int) -> int:
    """ℓ* among every degree up to 4√(2β + 1) + 16 (float64 log-rates; β > 0)."""
    nu = dim / 2 - 1
    top = int(4 * math.sqrt(2 * beta + 1) + 16)
    while True:
        ell = np.arange(1, top + 1)
        log_rates = _log_laplace(ell, dim) + log_bessel_ratio(ell + nu, nu, beta)
        star = int(np.argmax(log_rates))
        if star < top - 1:  # an interior maximum of a concave sequence: the largest
            return star + 1
        top *= 2


def _star_decimal(beta: float, dim: int) -> int:
    """ℓ* by a search from the asymptotic ℓ*, comparing log x_ℓ + log I_{ℓ+ν}(β) e^{−β}
    (Debye's expansion, :func:`log_ive_decimal`) of neighbours at the digits β needs."""
    nu = dim / 2 - 1
    with localcontext() as context:
        context.prec = decimal_digits(beta, nu)
        b, v = Decimal(beta), Decimal(nu)  # exact: every float is a decimal fraction
        cache: dict[int, Decimal] = {}

        def log_rate(n: int) -> Decimal:
            if n not in cache:
                cache[n] = (n * (n + 2 * v)).ln() + log_ive_decimal(n + v, b)
            return cache[n]

        start = int((2 * b + v * v).sqrt() - v)
        return _first_peak(lambda n: log_rate(n + 1) > log_rate(n), max(start, 1))


def _first_peak(rises, start: int) -> int:
    """The smallest n ≥ 1 with ``rises(n)`` false, for ``rises`` true then false (a concave
    sequence's rise to its peak): gallop from ``start`` to a bracket, then bisect."""
    if rises(start):
        low, step = start, 1
        while rises(start + step):
            low, step = start + step, 2 * step
        high = start + step
    else:
        high, step = start, 1
        while start - step >= 1 and not rises(start - step):
            high, step = start - step, 2 * step
        low = max(start - step, 0)  # rises(0) counts as true: ℓ* ≥ 1
    while high - low > 1:  # rises(low), not rises(high)
        middle = (low + high) // 2
        low, high = (middle, high) if rises(middle) else (low, middle)
    return high


def self_attention_weight(beta: float | int, dim: int, n_tokens: int) -> float:
    """The weight a token gives itself under softmax attention when the other N − 1
    tokens are uniform on S^{d−1}, in the mean: ``e^β / (e^β + (N − 1) K̂_0(β))`` (computed
    relative to e^β: finite at every β).

    Above ½ attention is mostly the identity (each token keeps to itself: tokens barely
    move); below, every token averages over many others and all of them cluster. With
    β = γ log N and d ≫ β², K̂_0 = ₀F₁(; d/2; β²/4) ≈ e^{β²/(2d)} → 1 and the crossover
    is at γ = 1 (d ≫ β alone is not enough: at d = β^{3/2}, log K̂_0 ≈ √β/2 grows without
    bound). The critical scaling β ∝ log N of Chen, Lin, Polyanskiy and Rigollet."""
    beta = _beta(beta)
    _nu(dim)
    check_int("n_tokens", n_tokens, lower=2)
    if beta == 0:
        return 1 / n_tokens
    log_others = math.log(n_tokens - 1) + _log_k0_scaled(beta, dim)  # relative to e^β
    return float(special.expit(-log_others))


def critical_gamma(n_tokens: int, dim: int) -> float:
    """γ_c(N, d): the γ at which β = γ log N gives :func:`self_attention_weight` = ½, i.e.
    ``β − log K̂_0(β) = log(N − 1)``. Tends to 1 as d → ∞ (K̂_0 → 1). In few dimensions
    β − log K̂_0(β) grows only like ((d − 1)/2) log β, so the crossover needs
    β ~ N^{2/(d−1)}, far beyond γ log N: inf where it lies past β = 10⁷."""
    check_int("n_tokens", n_tokens, lower=3)
    _nu(dim)
    target = math.log(n_tokens - 1)

    def gap(beta: float | int) -> float:
        return -_log_k0_scaled(beta, dim) - target  # β − log K̂_0(β) − log(N − 1)

    # β − log K̂_0(β) increases from 0 (β → 0) like β − (d−1)/2·log β for large β.
    high = 2 * target + dim + 10
    while gap(high) < 0:
        high *= 2
        if high > 1e7:
            return math.inf
    from scipy.optimize import brentq

    # At β = log(N − 1)/2 the gap is negative (log K̂_0 ≥ 0): a bracket for any d.
    beta = float(brentq(gap, target / 2, high, xtol=1e-12))  # type: ignore[arg-type]
    return beta / math.log(n_tokens)
