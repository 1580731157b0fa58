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

Everything is computed from the exponentially scaled Bessel functions (``scipy.special.ive``)
so that no intermediate overflows: the softmax rates are ratios of them, finite at any β.
Plain NumPy/SciPy.
"""

import math
from collections.abc import Sequence

import numpy as np
from scipy import integrate, special

from .._core.attention import ATTENTION_KINDS
from .._core.errors import ParameterError, check_bound, check_choice, check_int

#: Degrees ℓ: one, or an array or list of them.
Degrees = int | np.integer | np.ndarray | Sequence[int]


def _result(values) -> np.ndarray | float:
    """A float for one degree, an array for several."""
    values = np.asarray(values, np.float64)
    return float(values) if values.ndim == 0 else values


def _degrees(ell) -> np.ndarray:
    """``ell`` as an integer array of degrees ≥ 0 (a ParameterError names it otherwise)."""
    values = np.asarray(ell)
    if values.dtype.kind not in "iu" or np.any(values < 0):
        raise ParameterError(f"ell={ell!r} must be whole degrees >= 0.")
    return values


def _check(beta, dim: int) -> None:
    check_bound("beta", np.asarray(beta, np.float64), lower=0.0)
    check_int("dim", dim, lower=2)


def _log_bessel_i(order: float | np.ndarray, beta: float | int) -> np.ndarray:
    """``log I_μ(β)`` (β > 0) without overflow or underflow: from ``ive`` (``I_μ e^{−β}``)
    where it is a normal number, else (large orders, where ``ive`` underflows) from the
    series ``I_μ(β) = (β/2)^μ Σ_k (β²/4)^k / (k! Γ(μ + k + 1))``, summed in logs."""
    order = np.asarray(order, np.float64)
    with np.errstate(divide="ignore", under="ignore"):
        scaled = special.ive(order, beta)
        out = np.log(scaled) + beta
    small = scaled <= 1e-280
    if np.any(small):
        mu = order[small]
        z = beta * beta / 4
        k = np.arange(int(4 * math.sqrt(z) + 80))[:, None]
        terms = k * math.log(z) - special.gammaln(k + 1) - special.gammaln(mu[None, :] + k + 1)
        out = np.array(out, np.float64)
        with np.errstate(under="ignore"):  # negligible terms of the series
            out[small] = mu * math.log(beta / 2) + special.logsumexp(terms, axis=0)
    return np.asarray(out)


def log_funk_hecke_exponential(beta: float | int, dim: int, ell: Degrees) -> np.ndarray | float:
    """``log K̂_ℓ`` of the kernel e^{βt} on S^{d−1} (β > 0):
    ``K̂_ℓ = Γ(d/2) (2/β)^{d/2−1} I_{ℓ+d/2−1}(β)`` (no overflow or underflow at any β)."""
    _check(beta, dim)
    check_bound("beta", beta, lower=0.0, lower_open=True)
    ell = _degrees(ell)
    nu = dim / 2 - 1
    return _result(
        special.gammaln(dim / 2) + nu * math.log(2 / beta) + _log_bessel_i(ell + nu, beta)
    )


def funk_hecke_exponential(beta: float | int, dim: int, ell: Degrees) -> np.ndarray | float:
    """``K̂_ℓ = ∫ e^{β⟨x,y⟩} C_ℓ(⟨x,y⟩) dσ(y)`` with C_ℓ(1) = 1 and σ the uniform probability
    measure on S^{d−1}: ``Γ(d/2) (2/β)^{d/2−1} I_{ℓ+d/2−1}(β)``; at β = 0, 1 for ℓ = 0 and 0
    otherwise. Overflows (to inf) only where K̂_ℓ exceeds the float64 range (β ≳ 709)."""
    _check(beta, dim)
    ell = _degrees(ell)
    if beta == 0:
        return _result(np.where(ell == 0, 1.0, 0.0))
    with np.errstate(over="ignore"):
        return _result(np.exp(log_funk_hecke_exponential(beta, dim, ell)))


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


def _bessel_ratio(beta: float | int, dim: int, ell: np.ndarray) -> np.ndarray:
    """``K̂_ℓ / K̂_0 = I_{ℓ+ν}(β)/I_ν(β)`` (ν = d/2 − 1), from ``ive`` (finite at any β)."""
    nu = dim / 2 - 1
    if beta == 0:
        return np.where(ell == 0, 1.0, 0.0)
    return np.asarray(np.exp(_log_bessel_i(ell + nu, beta) - _log_bessel_i(np.asarray(nu), beta)))


def _radial_part(beta: float | int, dim: int, attention: str, n_tokens: int | None) -> float:
    """``c = ⟨x, A(x)⟩`` at the uniform state: USA ``K̂_0'(β) = Γ(d/2)(2/β)^{ν} I_{d/2}(β)``,
    SA ``I_{d/2}(β)/I_{d/2−1}(β)``; with ``n_tokens`` the token's own weight e^β/N is added
    (it attends to itself at overlap 1)."""
    if beta == 0:
        return 1 / n_tokens if n_tokens else 0.0
    ratio = float(_bessel_ratio(beta, dim, np.asarray(1)))  # I_{ν+1}/I_ν
    if attention == "softmax":
        if not n_tokens:
            return ratio
        # (e^β + (N − 1) K̂_0 r) / (e^β + (N − 1) K̂_0), with everything relative to e^β.
        k0 = float(np.exp(log_funk_hecke_exponential(beta, dim, 0) - beta))
        return (1 + (n_tokens - 1) * k0 * ratio) / (1 + (n_tokens - 1) * k0)
    k0 = float(funk_hecke_exponential(beta, dim, 0))
    derivative = k0 * ratio  # K̂_0' = Γ(d/2)(2/β)^ν I_{ν+1}(β)
    if not n_tokens:
        return derivative
    with np.errstate(over="ignore"):
        return float((np.exp(beta) + (n_tokens - 1) * derivative) / n_tokens)


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

    ``n_tokens``: N tokens instead of the N → ∞ limit: a softmax row's normaliser also
    holds the token's own weight e^β/N, K̂_0 → ((N − 1)K̂_0 + e^β)/N (USA is unchanged: the
    token's own term is radial). ``depth``: the rate per unit time of the depth-L layer
    maps with ``V = I/L`` (Post-LN), ``L log(1 + λ_ℓ/(L + c))`` with c the radial part of
    the uniform attention (see the module docstring); ``None``: the flow (L → ∞).

    Overflow-safe: softmax rates are ratios of scaled Bessel functions; USA rates overflow
    to inf only where they exceed the float64 range (β ≳ 709)."""
    _check(beta, dim)
    check_choice("attention", attention, ATTENTION_KINDS)
    ell = _degrees(ell)
    if n_tokens is not None:
        check_int("n_tokens", n_tokens, lower=2)
    if depth is not None:
        check_bound("depth", depth, lower=0.0, lower_open=True)
    laplace = ell * (ell + dim - 2.0)
    if beta == 0:
        rate = np.where(ell == 1, (dim - 1) / dim, 0.0)
    elif attention == "softmax":
        ratio = _bessel_ratio(beta, dim, ell)
        if n_tokens:
            # K̂_0 → ((N − 1) K̂_0 + e^β)/N, relative to K̂_0: 1 − 1/N + e^β/(N K̂_0).
            k0_rel = math.exp(beta - float(log_funk_hecke_exponential(beta, dim, 0)))
            ratio = ratio / (1 - 1 / n_tokens + k0_rel / n_tokens)
        rate = laplace * ratio / beta
    else:
        with np.errstate(over="ignore"):
            rate = laplace * funk_hecke_exponential(beta, dim, ell) / beta
    if depth is None:
        return _result(rate)
    c = _radial_part(beta, dim, attention, n_tokens)
    return _result(depth * np.log1p(rate / (depth + c)))


def most_unstable_degree(
    beta: float | int,
    dim: int,
    attention: str = "softmax",
    *,
    depth: float | int | None = None,
    n_tokens: int | None = None,
) -> int:
    """ℓ*(β, d): the degree ℓ ≥ 1 of the largest :func:`mode_growth_rate` (the same for
    softmax and USA, whose rates differ by the factor K̂_0, and for every depth, whose rate
    increases with λ_ℓ). For large β, λ_ℓ ∝ x e^{−x/(2β)} with x = ℓ(ℓ + d − 2), largest
    near ℓ(ℓ + d − 2) ≈ 2β; the search runs well past it."""
    _check(beta, dim)
    top = int(4 * math.sqrt(2 * beta + 1) + 16)
    ell = np.arange(1, top + 1)
    rates = mode_growth_rate(beta, dim, ell, attention, depth=depth, n_tokens=n_tokens)
    return int(ell[int(np.argmax(rates))])


def self_attention_weight(beta: float | int, dim: int, n_tokens: int) -> float:
    """The weight a token gives itself under softmax attention when the other N − 1
    tokens are uniform on S^{d−1}, in the mean: ``e^β / (e^β + (N − 1) K̂_0(β))``.

    Above ½ attention is mostly the identity (each token keeps to itself: tokens barely
    move); below, every token averages over many others and all of them cluster. With
    β = γ log N and d ≫ β, K̂_0 → e^{β²/(2d)} → 1 and the crossover is at γ = 1 (the
    critical scaling β ∝ log N of Chen, Lin, Polyanskiy and Rigollet)."""
    _check(beta, dim)
    check_int("n_tokens", n_tokens, lower=2)
    if beta == 0:
        return 1 / n_tokens
    log_others = math.log(n_tokens - 1) + float(log_funk_hecke_exponential(beta, dim, 0))
    return float(special.expit(beta - log_others))


def critical_gamma(n_tokens: int, dim: int) -> float:
    """γ_c(N, d): the γ at which β = γ log N gives :func:`self_attention_weight` = ½, i.e.
    ``β − log K̂_0(β) = log(N − 1)``. Tends to 1 as d → ∞ (K̂_0 → 1). In few dimensions
    β − log K̂_0(β) grows only like ((d − 1)/2) log β, so the crossover needs
    β ~ N^{2/(d−1)}, far beyond γ log N: inf where it lies past β = 10⁷."""
    check_int("n_tokens", n_tokens, lower=3)
    check_int("dim", dim, lower=2)
    target = math.log(n_tokens - 1)

    def gap(beta: float | int) -> float:
        return beta - float(log_funk_hecke_exponential(beta, dim, 0)) - target

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
