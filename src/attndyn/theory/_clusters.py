"""Two clusters of tokens under full value noise: the overlap diffusion of their centres.

*(derived; not in the papers)* If k tokens sit exactly at θ₁ and m at θ₂, the common noise
moves equal tokens equally, so they stay equal and the N = k + m tokens are two "tokens"
whose attention weighs each side by its size. Itô's formula for Z = ⟨θ₁, θ₂⟩ (003 App. C,
the general two-token identity before eq. 20) then closes with

    A₁ = (k e^β θ₁ + m e^{βZ} θ₂)/D₁,   A₂ = (m e^β θ₂ + k e^{βZ} θ₁)/D₂,

D₁ = k e^β + m e^{βZ}, D₂ = m e^β + k e^{βZ} for softmax attention (SA); D₁ = D₂ = N for
unnormalised attention (USA). With k = m = 1 this is 003's eq. 21 (SA) and eq. 20 (USA).

At the antipodal configuration Z = −1 the drift is ½σ²(d − 1)(α − γ)², where A₁ = α θ₁ and
A₂ = γ θ₂ there: the noise turns each cluster by an amount proportional to its attention's
length, so unequal lengths break antipodality. For SA, α = γ exactly when k = m: an even
split is two tokens (the same law, whatever k), an uneven one is pushed off −1 at the rate
2σ²(d − 1)(a + c − 1)² ≈ 2σ²(d − 1)(k/m − m/k)² e^{−4β} (large β), a = k e^β/D₁,
c = k e^{−β}/D₂ at Z = −1. With d ≥ 3 the end −1 is then never attracting (the scale
density behaves like (1 + x)^{−(d−1)/2} there), so an uneven split is metastable: it
lasts longer as β grows (its push falls like e^{−4β}) and is gone at t = ∞. Plain NumPy.
"""

import math

import numpy as np

from .._core.attention import ATTENTION_KINDS
from .._core.errors import ParameterError, check_bound, check_choice, check_int


def _check(beta: float, dim: int, sizes: tuple[int, int], attention: str, sigma: float):
    check_bound("beta", beta, lower=0.0)
    check_int("dim", dim, lower=2)
    if len(sizes) != 2:
        raise ParameterError(f"sizes={sizes!r}: give the two cluster sizes (k, m)")
    for size in sizes:
        check_int("sizes", size, lower=1)
    check_choice("attention", attention, ATTENTION_KINDS)
    check_bound("sigma", sigma, lower=0.0, lower_open=True)


def _attention_coefficients(z, beta: float, sizes: tuple[int, int], attention: str):
    """(a, b, c, e) with A₁ = a θ₁ + b θ₂ and A₂ = c θ₁ + e θ₂ at overlap z."""
    k, m = sizes
    # Weights relative to e^β, so that large β does not overflow: e^{β(z−1)} ≤ 1.
    near = np.exp(beta * (np.asarray(z, np.float64) - 1.0))
    if attention == "softmax":
        first, second = k + m * near, m + k * near
    else:
        first = second = (k + m) * math.exp(-beta) * np.ones_like(near)
    return k / first, m * near / first, k * near / second, m / second


def two_cluster_overlap_coefficients(
    z: float | np.ndarray,
    beta: float,
    dim: int,
    sizes: tuple[int, int] = (1, 1),
    *,
    attention: str = "softmax",
    sigma: float = 1.0,
) -> tuple[np.ndarray, np.ndarray]:
    """Drift μ(z) and squared diffusion σ²(z) of dZ = μ dt + σ dB, Z = ⟨θ₁, θ₂⟩ for two
    exact clusters of ``sizes`` = (k, m) tokens (the module docstring; spec §4 for k = m = 1),
    full value noise of scale ``sigma``, Q = K = I.

    The general identity of 003 App. C: μ = σ²(½(1 − d)Z(|A₁|² + |A₂|²) + (Z² + d − 2)⟨A₁,A₂⟩),
    σ² = σ²(1 − Z²)(|A₁|² + |A₂|² − 2Z⟨A₁, A₂⟩)."""
    _check(beta, dim, sizes, attention, sigma)
    z = np.asarray(z, np.float64)
    a, b, c, e = _attention_coefficients(z, beta, sizes, attention)
    first = a * a + b * b + 2 * a * b * z  # |A₁|²
    second = c * c + e * e + 2 * c * e * z  # |A₂|²
    inner = a * c + b * e + (a * e + b * c) * z  # ⟨A₁, A₂⟩
    drift = sigma**2 * (0.5 * (1 - dim) * z * (first + second) + (z * z + dim - 2) * inner)
    variance = sigma**2 * (1 - z * z) * (first + second - 2 * z * inner)
    return np.asarray(drift), np.asarray(variance)


def antipodal_split_drift(
    beta: float,
    dim: int,
    sizes: tuple[int, int],
    *,
    attention: str = "softmax",
    sigma: float = 1.0,
) -> float:
    """The drift of Z = ⟨θ₁, θ₂⟩ at Z = −1 for clusters of ``sizes`` = (k, m) tokens: the
    rate at which the noise pushes an exactly antipodal k : m split apart (E[1 + Z_t] ≈
    this · t for small t). Zero for an even split under SA (an antipodal pair stays one,
    as for two tokens); positive for an uneven one, ≈ 2σ²(d − 1)(k/m − m/k)² e^{−4β} at
    large β, so an uneven antipodal split is metastable, never absorbing."""
    _check(beta, dim, sizes, attention, sigma)
    a, b, c, e = _attention_coefficients(-1.0, beta, sizes, attention)
    alpha, gamma = a - b, e - c  # A₁ = α θ₁, A₂ = γ θ₂ at Z = −1
    return float(0.5 * sigma**2 * (dim - 1) * (alpha - gamma) ** 2)


def antipodal_contraction_rate(beta: float, dim: int, *, attention: str = "softmax") -> float:
    """λ: the rate at which two tokens near the antipodal end close in on it, on a log
    scale (near Z = −1 the two-token overlap has μ ≈ A ε, σ² ≈ B ε², ε = 1 + Z, and
    d log ε has drift A − B/2 = −λ). SA: λ = 2 − (d − 1) sech²β; USA: cosh 2β − (d − 2).
    Positive exactly when −1 attracts two tokens, β > β_c(d) (003 Thm 2)."""
    _check(beta, dim, (1, 1), attention, 1.0)
    if attention == "softmax":
        return 2.0 - (dim - 1) / math.cosh(beta) ** 2  # = (cosh 2β − (d − 2))/cosh²β
    return math.cosh(2 * beta) - (dim - 2)


def antipodal_split_level(
    beta: float, dim: int, sizes: tuple[int, int], *, attention: str = "softmax"
) -> float:
    """Where an uneven antipodal split hovers: 1 + Z ≈ μ₀/λ, the level at which the push
    off −1 (:func:`antipodal_split_drift`) balances the contraction towards it
    (:func:`antipodal_contraction_rate`), to leading order in the push. σ cancels. ``inf``
    where λ ≤ 0 (below β_c(d) nothing holds the split near −1); 0 for an even split.

    A heuristic scale, not a law: the split is classified antipodal (1 + Z ≤ tol) while it
    hovers below tol, and leaves for good through rare excursions not described here.
    At large β (SA) ≈ (d − 1)(k/m − m/k)² e^{−4β}."""
    rate = antipodal_contraction_rate(beta, dim, attention=attention)
    push = antipodal_split_drift(beta, dim, sizes, attention=attention)
    if push == 0.0:
        return 0.0
    return push / rate if rate > 0 else math.inf
