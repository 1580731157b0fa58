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
lasts longer as β grows (its push falls like e^{−4β}) and is gone at t = ∞.

How long it lasts, and how much of that time it is classified antipodal, are the classical
first-passage integrals of this diffusion (scale and speed densities), evaluated here in
w = artanh z: :func:`antipodal_split_lifetime`, :func:`antipodal_split_hover_fraction`.
Plain NumPy.
"""

import math

import numpy as np

from .._core import defaults
from .._core.attention import ATTENTION_KINDS
from .._core.errors import ParameterError, check_choice, check_int, check_real_in
from ._phase import _below_exact_max, _p_uniform

# The public functions check their arguments once (_check, _check_uneven) and call the
# private kernels (_contraction_rate, _split_drift, _split_level), which trust them.


def _check(beta: float, dim: int, sizes: tuple[int, int], attention: str, sigma: float):
    check_real_in("beta", beta, lower=0.0)
    check_int("dim", dim, lower=2)
    if len(sizes) != 2:
        raise ParameterError(f"sizes={sizes!r}: give the two cluster sizes (k, m)")
    for size in sizes:
        check_int("sizes", size, lower=1)
    check_choice("attention", attention, ATTENTION_KINDS)
    check_real_in("sigma", sigma, lower=0.0, lower_open=True)


def _attention_coefficients(z, beta: float, sizes: tuple[int, int], attention: str):
    """(a, b, c, e) with A₁ = a θ₁ + b θ₂ and A₂ = c θ₁ + e θ₂ at overlap z; for USA
    divided by e^β (:func:`_usa_log_scale`), which would overflow them beyond β ≈ 354."""
    k, m = sizes
    # Weights relative to e^β, so that large β does not overflow: e^{β(z−1)} ≤ 1.
    near = np.exp(beta * (np.asarray(z, np.float64) - 1.0))
    if attention == "softmax":
        first, second = k + m * near, m + k * near
    else:
        first = second = (k + m) * np.ones_like(near)
    return k / first, m * near / first, k * near / second, m / second


def _usa_log_scale(beta: float, attention: str) -> float:
    """log of the factor the quadratic forms of :func:`_attention_coefficients` were
    divided by: 2β for USA (its coefficients are e^β times those returned), 0 for SA."""
    return 2 * beta if attention == "unnormalized" else 0.0


def _rescale(values, log_scale: float, what: str, beta: float) -> np.ndarray:
    """``values``·e^{log_scale}, refused (naming β) where that exceeds float64."""
    values = np.asarray(values, np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        out = np.asarray(np.where(values == 0, 0.0, values * np.exp(log_scale)))
    if not np.all(np.isfinite(out)):
        raise ParameterError(
            f"beta={beta!r}: {what} of unnormalised attention grows like e^(2β) and exceeds "
            "float64 here; give a smaller beta (about 350 or less)."
        )
    return out


def _split_length(z, beta: float, sizes: tuple[int, int], attention: str):
    """α − γ = (a − b) − (e − c) at overlap z, written without cancellation: at large β
    (or a near-even split) the two lengths agree to many digits."""
    k, m = sizes
    near = np.exp(beta * (np.asarray(z, np.float64) - 1.0))
    if attention == "softmax":
        return 2 * near * (k * k - m * m) / ((k + m * near) * (m + k * near))
    return (k - m) * (1 + near) / (k + m)  # divided by e^β, as the coefficients are


def _reduced_coefficients(eps, delta, beta: float, dim: int, sizes, attention: str):
    """(μ/σ², Q) at z = ε − 1 = 1 − δ, with σ²(z) = σ² ε δ Q: the coefficients of
    :func:`two_cluster_overlap_coefficients` expanded about −1 so that neither carries a
    cancelled difference there. Q = (α − γ)² + 2ε(ab + ce − ac − be + 2ae + 2bc)
    − 2ε²(ae + bc), and μ/σ² = ½(d − 1)((α − γ)² + ε(2(a + c)(b + e) − |A₁|² − |A₂|²))
    − εδ⟨A₁, A₂⟩ (exact algebra; at ε = 0 they give μ(−1) = ½σ²(d − 1)(α − γ)²). For USA
    both are divided by e^{2β} (:func:`_usa_log_scale`)."""
    z = eps - 1.0
    a, b, c, e = _attention_coefficients(z, beta, sizes, attention)
    split = _split_length(z, beta, sizes, attention) ** 2
    lengths = a * a + b * b + c * c + e * e + 2 * (a * b + c * e) * z  # |A₁|² + |A₂|²
    inner = a * c + b * e + (a * e + b * c) * z  # ⟨A₁, A₂⟩
    q = split + 2 * eps * (a * b + c * e - a * c - b * e + 2 * (a * e + b * c))
    q = q - 2 * eps**2 * (a * e + b * c)
    drift = 0.5 * (dim - 1) * (split + eps * (2 * (a + c) * (b + e) - lengths))
    return drift - eps * delta * inner, q


def two_cluster_overlap_coefficients(
    z: float | np.ndarray,
    beta: float,
    dim: int,
    sizes: tuple[int, int] = (1, 1),
    *,
    attention: str = "softmax",
    sigma: float = defaults.SIGMA,
) -> tuple[np.ndarray, np.ndarray]:
    """Drift μ(z) and squared diffusion σ²(z) of dZ = μ dt + σ dB, Z = ⟨θ₁, θ₂⟩ for two
    exact clusters of ``sizes`` = (k, m) tokens (the module docstring; spec §4 for k = m = 1),
    full value noise of scale ``sigma``, Q = K = I.

    The general identity of 003 App. C: μ = σ²(½(1 − d)Z(|A₁|² + |A₂|²) + (Z² + d − 2)⟨A₁,A₂⟩),
    σ² = σ²(1 − Z²)(|A₁|² + |A₂|² − 2Z⟨A₁, A₂⟩), evaluated in a form expanded about −1
    (the same numbers, without the cancellation near the antipodal end)."""
    _check(beta, dim, sizes, attention, sigma)
    z = np.asarray(z, np.float64)
    drift, q = _reduced_coefficients(1.0 + z, 1.0 - z, beta, dim, sizes, attention)
    scale = _usa_log_scale(beta, attention) + 2 * math.log(sigma)
    what = "the overlap's drift and diffusion"
    return _rescale(drift, scale, what, beta), _rescale((1 + z) * (1 - z) * q, scale, what, beta)


def antipodal_split_drift(
    beta: float,
    dim: int,
    sizes: tuple[int, int],
    *,
    attention: str = "softmax",
    sigma: float = defaults.SIGMA,
) -> float:
    """The drift of Z = ⟨θ₁, θ₂⟩ at Z = −1 for clusters of ``sizes`` = (k, m) tokens: the
    rate at which the noise pushes an exactly antipodal k : m split apart (E[1 + Z_t] ≈
    this · t for small t). Zero for an even split under SA (an antipodal pair stays one,
    as for two tokens); positive for an uneven one, ≈ 2σ²(d − 1)(k/m − m/k)² e^{−4β} at
    large β, so an uneven antipodal split is metastable, never absorbing. USA's grows like
    e^{2β}: inf where it exceeds float64 (β ≳ 355)."""
    _check(beta, dim, sizes, attention, sigma)
    return _split_drift(beta, dim, sizes, attention, sigma)


def _split_drift(beta, dim: int, sizes: tuple[int, int], attention: str, sigma) -> float:
    """:func:`antipodal_split_drift` of checked arguments."""
    # A₁ = α θ₁, A₂ = γ θ₂ at Z = −1 (for USA divided by e^β).
    split = _split_length(-1.0, beta, sizes, attention)
    push = 0.5 * (dim - 1) * split**2
    scale = _usa_log_scale(beta, attention) + 2 * math.log(sigma)
    with np.errstate(over="ignore"):  # USA beyond β ≈ 355: inf, as its contraction rate
        return float(push * np.exp(scale)) if push else 0.0


def antipodal_contraction_rate(beta: float, dim: int, *, attention: str = "softmax") -> float:
    """λ: the rate at which two tokens near the antipodal end close in on it, on a log
    scale (near Z = −1 the two-token overlap has μ ≈ A ε, σ² ≈ B ε², ε = 1 + Z, and
    d log ε has drift A − B/2 = −λ). SA: λ = 2 − (d − 1) sech²β; USA: cosh 2β − (d − 2).
    Positive exactly when −1 attracts two tokens, β > β_c(d) (003 Thm 2). USA's is inf
    where cosh 2β exceeds float64 (β ≳ 355)."""
    _check(beta, dim, (1, 1), attention, 1.0)
    return _contraction_rate(beta, dim, attention)


def _contraction_rate(beta, dim: int, attention: str) -> float:
    """:func:`antipodal_contraction_rate` of checked arguments."""
    if attention == "softmax":
        sech = 2 * math.exp(-beta) / (1 + math.exp(-2 * beta))  # cosh β would overflow
        return 2.0 - (dim - 1) * sech * sech  # = (cosh 2β − (d − 2))/cosh²β
    if 2 * beta > 709.0:
        return math.inf
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
    _check(beta, dim, sizes, attention, 1.0)
    return _split_level(beta, dim, sizes, attention)


def _split_level(beta, dim: int, sizes: tuple[int, int], attention: str) -> float:
    """:func:`antipodal_split_level` of checked arguments."""
    if attention == "unnormalized":
        return _usa_split_level(beta, dim, sizes)
    rate = _contraction_rate(beta, dim, attention)
    push = _split_drift(beta, dim, sizes, attention, 1.0)
    if push == 0.0:
        return 0.0
    return push / rate if rate > 0 else math.inf


def _usa_split_level(beta: float, dim: int, sizes: tuple[int, int]) -> float:
    """USA's push/λ with both divided by e^{2β} (each overflows beyond β ≈ 355; their
    ratio tends to (d − 1)(k − m)²/(k + m)²)."""
    k, m = sizes
    small = math.exp(-2 * beta)
    push = 0.5 * (dim - 1) * ((k - m) * (1 + small) / (k + m)) ** 2
    rate = 0.5 * (1 + small * small) - (dim - 2) * small  # (cosh 2β − (d − 2)) e^{−2β}
    if push == 0.0:
        return 0.0
    return push / rate if rate > 0 else math.inf


#: Step of the quadrature grid in w = artanh(z): the logs of the integrands are smooth on
#: that scale, and each panel is exact for their exponential (power-law) parts, however
#: steep (d − 1 per unit w near −1): halving it moves the results by ≤ 10⁻⁴ (tested).
_STEP = 0.01
#: The smallest split level the grid (which starts 10⁻¹⁰ below it) can hold in float64.
_SMALLEST_LEVEL = 1e-290


def _log_cumulative(log_values: np.ndarray, log_start: float, step: float) -> np.ndarray:
    """log of the running integral of exp(log_values), from exp(log_start): each panel
    integrates the exponential of the linear interpolant of the logs, exact for the
    power laws of the ends (s ~ ε^{−(d−1)/2}), however steep; a panel with an infinite
    end (a density vanishing there) uses the trapezoid."""
    low, high = log_values[:-1], log_values[1:]
    with np.errstate(invalid="ignore"):
        jump = np.abs(high - low)
    top = np.maximum(low, high)
    finite = np.isfinite(jump) & (jump > 1e-6)
    safe = np.where(finite, jump, 1.0)
    # ∫ over the panel = step·e^{top}·(1 − e^{−jump})/jump; → step·e^{top}·(1 − jump/2).
    shape = np.where(finite, np.log(-np.expm1(-safe) / safe), -0.5 * jump)
    exponential = math.log(step) + top + shape
    trapezoid = np.logaddexp(high, low) + math.log(step / 2)
    pieces = np.where(np.isfinite(jump), exponential, trapezoid)
    return np.logaddexp.accumulate(np.concatenate([[log_start], pieces]))


def _split_measures(beta, dim, sizes, attention, tol, step):
    """On a grid in w = artanh(z) from far below the split's level to 1 − z = tol: w, its
    step (at most ``step``), 1 + z, 1 − z and the logs of the scale density s and the speed
    density m (per unit w, σ = 1).

    In w the equation is smooth at both ends: dz = εδ dw (ε = 1 + z, δ = 1 − z), so
    d log s/dw = −2μ/(σ²Q) and m dw = 2/(Q s) dw with σ²(z) = σ²εδQ."""
    level = min(_split_level(beta, dim, sizes, attention), tol)
    # Below 10⁻¹⁰ of the level the speed measure holds a fraction ~ (10⁻¹⁰)^((d−1)/2): the
    # occupation integrals leave it out, the lifetime adds its closed-form tail.
    low = 0.5 * math.log(level * 1e-10 / 2)
    high = 0.5 * math.log(2 / tol - 1)  # 1 − z = tol exactly: the grid ends on b
    w, step = np.linspace(low, high, math.ceil((high - low) / step) + 1, retstep=True)
    eps, delta = 2 / (1 + np.exp(-2 * w)), 2 / (1 + np.exp(2 * w))
    drift, q = _reduced_coefficients(eps, delta, beta, dim, sizes, attention)
    slope = 2 * drift / q  # smooth in w, however large (≈ d − 1 near −1); scale-free
    log_scale = -np.concatenate([[0.0], np.cumsum(0.5 * step * (slope[1:] + slope[:-1]))])
    log_speed = np.log(2 / q) - _usa_log_scale(beta, attention) - log_scale  # q·e^{2β} (USA)
    return w, step, eps, delta, log_scale, log_speed


def _check_uneven(beta, dim, sizes, attention, tol):
    _check(beta, dim, sizes, attention, 1.0)
    _check_split(beta, dim, sizes, attention, tol)


def _check_split(beta, dim, sizes, attention, tol):
    """The tolerance and the split (β, d, the sizes and the attention checked)."""
    check_real_in("tol", tol, lower=0.0, upper=1.0, lower_open=True, upper_open=True)
    if sizes[0] == sizes[1]:
        raise ParameterError(
            f"sizes={tuple(sizes)!r}: an even split is never pushed off an exact antipodal "
            "start (it stays there for ever); give two different cluster sizes."
        )
    # The grid starts 10⁻¹⁰ below the split's level (∝ e^{−4β}): it must be a normal float64.
    if not _split_level(beta, dim, sizes, attention) > _SMALLEST_LEVEL:
        raise ParameterError(
            f"beta={beta}: the split's level 1 + Z ≈ push/λ is below float64's range here "
            f"(under {_SMALLEST_LEVEL:g}); give a smaller beta (softmax: below about 165, "
            "where the lifetime is ~e^{2β} ≈ 10¹⁴³ already)."
        )


def antipodal_split_lifetime(
    beta: float,
    dim: int,
    sizes: tuple[int, int],
    *,
    tol: float = defaults.TOL,
    attention: str = "softmax",
    sigma: float = defaults.SIGMA,
) -> float:
    """Mean time until an exactly antipodal uneven split of ``sizes`` = (k, m) tokens has
    merged, 1 − Z ≤ ``tol`` (the classifier's "single"), for the overlap diffusion of
    :func:`two_cluster_overlap_coefficients` (Q = K = I, full value noise).

    The end −1 is an entrance boundary for an uneven split (pushed off it, never
    returning), so the classical first-passage formula applies:
    E τ = ∫₋₁^b s(y) ∫₋₁^y m(u) du dy, b = 1 − tol, with scale density s = exp(−∫2μ/σ²)
    and speed density m = 2/(σ² s) (Karlin & Taylor, *A Second Course in Stochastic
    Processes*, 1981, ch. 15), evaluated on a grid in w = artanh z, in logarithms, each
    panel exact for exponentials (the power laws at the ends, however steep).
    Above β_c the split first hovers near −1 (:func:`antipodal_split_level`) and leaves
    through a rare excursion: the lifetime grows like e^{2β} at large β (SA) and, for a
    deep well, the survival to time T is ≈ exp(−T/lifetime). It scales as 1/σ²."""
    _check_uneven(beta, dim, sizes, attention, tol)
    check_real_in("sigma", sigma, lower=0.0, lower_open=True)
    return _split_life(beta, dim, sizes, attention, tol)[0] / sigma**2


def antipodal_split_hover_fraction(
    beta: float,
    dim: int,
    sizes: tuple[int, int],
    *,
    tol: float = defaults.TOL,
    attention: str = "softmax",
) -> float:
    """The fraction of its life an exactly antipodal uneven split spends classified
    antipodal: E[time with 1 + Z ≤ ``tol`` before 1 − Z ≤ ``tol``] / E[that merging time]
    (:func:`antipodal_split_lifetime`). σ cancels.

    The occupation density before the first passage to b = 1 − tol from the entrance −1
    is g(u) = m(u)(S(b) − S(u)), S the scale function (S' = s; Karlin & Taylor, ch. 15), so
    the fraction is ∫₋₁^{−1+tol} g / ∫₋₁^b g. In a deep well (a lifetime long against
    1/λ, :func:`antipodal_contraction_rate`) S(b) − S(u) is nearly constant on the well
    and this is the speed measure's share below tol: the chance that a split which has
    not yet merged is classified antipodal. Close to 1 where
    :func:`antipodal_split_level` is well below ``tol`` and to 0 well above it: a smooth
    form of the level's onset."""
    _check_uneven(beta, dim, sizes, attention, tol)
    return _split_life(beta, dim, sizes, attention, tol)[1]


def _split_life(beta, dim, sizes, attention, tol) -> tuple[float, float]:
    """(lifetime at σ = 1, share of it with 1 + Z ≤ tol) from one grid."""
    w, step, eps, delta, log_scale, log_speed = _split_measures(
        beta, dim, sizes, attention, tol, _STEP
    )
    log_s_dz = log_scale + np.log(eps * delta)  # s dz = s εδ dw
    # E τ = ∫ s ∫ m; the speed measure below the grid: m dw ~ C e^{(d−1)w} as w → −∞
    # (s ~ ε^{−(d−1)/2}), which integrates to m(w₀)/(d − 1).
    log_inner = _log_cumulative(log_speed, log_speed[0] - math.log(dim - 1), step)
    lifetime = float(np.exp(_log_cumulative(log_s_dz + log_inner, -np.inf, step)[-1]))
    # The occupation density g = m·(S(b) − S(w)) per unit w; S(b) − S(w) runs from the top.
    log_rest = _log_cumulative(log_s_dz[::-1], -np.inf, step)[::-1]
    log_total = _log_cumulative(log_speed + log_rest, -np.inf, step)
    below = np.interp(0.5 * math.log(tol / (2 - tol)), w, log_total)
    return lifetime, float(np.exp(below - log_total[-1]))


#: Above this β a 2 : 1 split outlives any horizon (τ ≈ e^{2β} > 10¹³⁰) and sits far below
#: any tolerance: its survival F·e^{−T/τ} is 1 in float64.
_SPLIT_FOREVER_BETA = 150.0


def p_antipodal_pair_three_tokens(
    beta: float,
    dim: int,
    horizon: float,
    *,
    tol: float = defaults.TOL,
    sigma: float = defaults.SIGMA,
) -> float:
    """Three uniform tokens (full value noise, softmax attention, Q = K = I): the chance of
    an antipodal pair at time ``horizon``, read as (3/2)·P₂·F·e^{−T/τ}.

    Settled, three tokens are one cluster (no antipodal pair) or a 2 : 1 split (two
    antipodal pairs), so by exchangeability P(split) = (3/2)·P(a given pair is antipodal),
    exactly; each pair is then read as two tokens (P₂ = :func:`p_antipodal_uniform`), and
    the split is still seen at T with probability F·e^{−T/τ}
    (:func:`antipodal_split_hover_fraction`, :func:`antipodal_split_lifetime`). A reading,
    not a proof: within 0.017 of seed 003 Fig. 6 at the paper's scale (d = 4, T = 500,
    every β of its grid), and tested at β = 3, T = 200 with Fig. 6's layer map."""
    beta = check_real_in("beta", beta, lower=0.0)  # compared with a threshold below
    check_real_in("horizon", horizon, lower=0.0)
    check_int("dim", dim, lower=3)
    check_real_in("sigma", sigma, lower=0.0, lower_open=True)
    survival = 1.0
    if beta <= _SPLIT_FOREVER_BETA:
        _check_split(beta, dim, (2, 1), "softmax", tol)
        lifetime, hover = _split_life(beta, dim, (2, 1), "softmax", tol)
        survival = hover * math.exp(-horizon * sigma**2 / lifetime)
    return 1.5 * _p_uniform(_below_exact_max(beta), dim) * survival
