r"""The mean-field limit of the attention flow on S¹ and S² (spec §7, "The mean-field equation").

As N → ∞ the empirical measure μ of the tokens follows the continuity equation

    ∂_t μ + div(μ v[μ]) = 0,    v[μ](x) = P_x ∫ e^{β⟨x, y⟩} y dμ(y) / Z(x),

Q = K = V = I, with ``Z = ∫ e^{β⟨x, y⟩} dμ(y)`` (softmax) or ``Z = 1`` (unnormalised: the
average over the probability measure μ). One class, :class:`MeanFieldFlow`, solves it on
S¹ (``dim=2``) and S² (``dim=3``); what differs between the two spheres (the basis, the
grid, the transforms) is a small basis object, :class:`CircleBasis` or
:class:`SphereBasis`, whose methods the flow calls (no branch on the dimension elsewhere).

**The field from one set of coefficients.** Write ``D(x) = ∫ e^{β⟨x, y⟩} dμ(y)`` (the kernel
smoothing of μ, extended to all of R^d by the same formula). Its ambient gradient is
``∇D = β ∫ e^{β⟨x, y⟩} y dμ``, so the numerator is ``∇D/β`` and its tangent part at a unit x
is the surface gradient ``∇_S D/β``:

    softmax:        v = ∇_S D / (β D) = ∇_S log D / β,
    unnormalised:   v = ∇_S D / β.

Both are gradient fields of a function of μ's harmonic coefficients. The radial part
``⟨x, A⟩`` (needed by the common noise, below) is ``x·∇D/β = ∂_β D`` over Z.

**S¹** (:class:`CircleBasis`). The state is ``c_k = ∫ e^{−ikθ} dμ(θ)`` (k = 0 … K;
``c_{−k} = conj c_k``, ``c_0 = 1``); the density is ``μ(θ) = Σ_k c_k e^{ikθ}/(2π)`` and
attndyn's mode power (:func:`attndyn.mode_powers`) is ``P_ℓ = |c_ℓ|²``. With
``e^{β cos(θ − φ)} = Σ_k I_k(β) e^{ik(θ − φ)}``: ``D(θ) = Σ_k I_k c_k e^{ikθ}``,
``∂_θ D = Σ_k ik I_k c_k e^{ikθ}``, ``∂_β D = Σ_k I_k' c_k e^{ikθ}``
(``I_k' = I_{k+1} + (k/β) I_k``). For a test function φ, ``d⟨μ, φ⟩/dt = ⟨μ, v·∇φ⟩``; with
``φ = e^{−ikθ}``: ``dc_k/dt = −ik F̂_k``, ``F̂_k = ∫ e^{−ikθ} μ v dθ``.

**S²** (:class:`SphereBasis`). With the Schmidt semi-normalised associated Legendre
functions ``Q_ℓ^m`` (``P_ℓ(⟨x, y⟩) = Σ_{m=0}^{ℓ} Q_ℓ^m(z) Q_ℓ^m(z') cos m(φ − φ')``, the
addition theorem; attndyn's :func:`attndyn.mode_powers` uses the same ones) the state is

    C_ℓm = ∫ Q_ℓ^m(z) e^{−imφ} dμ     (0 ≤ m ≤ ℓ ≤ K; C_00 = 1),

an array ``(K + 1, K + 1)`` indexed ``[ℓ, m]``, zero for m > ℓ. Then
``P_ℓ = (1/N²) Σ_ij P_ℓ(⟨x_i, x_j⟩) = Σ_m |C_ℓm|²`` exactly as on S¹, the density is
``μ = Σ_ℓ (2ℓ + 1)/(4π) Σ_m Q_ℓ^m(z) Re(C_ℓm e^{imφ})`` (the real harmonics
``√((2ℓ + 1)/(4π)) Q_ℓ^m (cos mφ, sin mφ)`` are orthonormal), and by Funk–Hecke
(``e^{βt} = Σ_ℓ (2ℓ + 1) i_ℓ(β) P_ℓ(t)``, ``i_ℓ`` the modified spherical Bessel functions)

    D(x) = Σ_ℓ (2ℓ + 1) i_ℓ(β) Σ_m Q_ℓ^m(z) Re(C_ℓm e^{imφ}),

the kernel acting on degree ℓ by the factor ``4π i_ℓ(β)``; ``∂_β D`` takes ``i_ℓ' = i_{ℓ+1} +
(ℓ/β) i_ℓ``. In colatitude θ (z = cos θ) and longitude φ,
``∇_S g = e_θ ∂_θ g + e_φ (∂_φ g)/sin θ``, with
``∂_θ Q_ℓ^m = (ℓ z Q_ℓ^m − √((ℓ + m)(ℓ − m)) Q_{ℓ−1}^m)/sin θ``. With
``φ = Q_ℓ^m e^{−imφ}`` in ``d⟨μ, φ⟩/dt = ∫ μ v·∇_S φ dσ``:

    dC_ℓm/dt = ∫ [F_θ ∂_θ Q_ℓ^m − i m F_φ Q_ℓ^m / sin θ] e^{−imφ} dσ,    F = μ v.

(No derivative of the flux is formed: the test function carries it.) ``dC_00/dt = 0``
exactly: mass is kept.

**Linear rates.** About the uniform measure (μ = 1/|S^{d−1}|, D = D_0 = I_0(β) on S¹,
i_0(β) on S²), a degree-ℓ perturbation δμ gives ``δD = (kernel factor) δμ`` and
``div(μ_0 v) = Δ δD / (|S| β D_0)``, ``Δ = −ℓ(ℓ + d − 2)``: every coefficient of degree ℓ
grows at ``λ_ℓ = ℓ² I_ℓ(β)/(β I_0(β))`` (S¹) or ``ℓ(ℓ + 1) i_ℓ(β)/(β i_0(β))`` (S²; softmax),
without the division by D_0 unnormalised: :func:`attndyn.theory.mode_growth_rate`.
Linear modes are exact here (the linear flux μ_0 v is of degree ≤ K), so the engine's
linear rates equal λ_ℓ to rounding and the solver's tolerance; ``P_ℓ`` grows at 2λ_ℓ.

**Pseudo-spectrally.** The fields are summed on a grid, the flux is multiplied out there
and projected back onto degrees ≤ K. S¹: M ≥ 3K + 1 uniform points (FFTs; the 2/3 rule).
S²: ``⌈(3K + 1)/2⌉`` Gauss–Legendre nodes in z times M ≥ 3K + 1 uniform longitudes (the
same rule: the flux of unnormalised attention, a polynomial of degree ≤ 2K, is projected
onto degrees ≤ K without aliasing, the quadrature of degree-3K polynomials being exact).
Softmax's 1/D has every degree: its aliasing is what :attr:`MeanFieldSolution.velocity_tail`
watches. The Bessel weights are the exponentially scaled ones of
:mod:`attndyn._core.spectral` (``kernel_weights``: ``e^{−β} I_k``, ``(2ℓ + 1) e^{−β} i_ℓ``),
so nothing overflows; the unnormalised field carries the factor e^β (refused past β = 700).

**Truncation.** For any probability measure ``e^{−β} D ≥ e^{−2β}`` and ``|C_ℓm|``, ``|c_k| ≤
1``-bounded harmonics (``|P_ℓ| ≤ 1``, ``|P_ℓ'| ≤ ℓ(ℓ + 1)/2``, ``|T_k'| ≤ k``), so truncating the
kernel at K changes the velocity (|v| ≤ 1) by at most
``e^{2β} Σ_{ℓ>K} w_ℓ (1 + g_ℓ/β)`` with ``w_ℓ`` the scaled weights (summing to 1) and
``g_ℓ = ℓ`` (S¹) or ``ℓ(ℓ + 1)/2`` (S²); :func:`needed_modes` keeps it below float64's
rounding.

**Scalar common noise** (spec §3.3, seed 003 eq. 8). Every token moves by
``dY = [P_Y A + ε² F(Y, A)] dt + ε P_Y A dB``, B one scalar Brownian motion for all tokens,
``A = A[μ](Y)``. Drift and noise are fields of (Y, μ) only, the same for every token: a
common random transport, so μ follows a stochastic continuity equation, well defined, which
N tokens' empirical measure solves exactly. In Itô form, for a test function φ (extended
0-homogeneously, so that its ambient Hessian along tangent vectors is the sphere's)
``d⟨μ, φ⟩ = ⟨μ, ∇φ·(σ + ε² P_Y F) + (ε²/2) Hess φ(σ, σ)⟩ dt + ε ⟨μ, ∇φ·σ⟩ dB`` with
``σ = P_Y A = v`` and ``P_Y F = −⟨Y, A⟩ σ``. As σ is a gradient field, ``∇_σ σ = ½∇|σ|²``,
and two integrations by parts give

    ⟨μ, Hess φ(σ, σ)⟩ = ∫ [−div(μσ) σ + ½|σ|² ∇μ]·∇φ dσ + ½ ∫ |σ|² μ Δφ dσ,

so the drift is the transport by ``G = μσ(1 − ε²⟨x, A⟩) + (ε²/2)(−div(μσ) σ + ½|σ|²∇μ)``
plus ``(ε²/4) Δ`` acting on the projection of ``|σ|² μ``, and the noise is ε times the
noise-free derivative. Linearised, every degree-ℓ coefficient follows
``dC = λ_ℓ(1 − ε² c) C dt + ε λ_ℓ C dB`` (c = ⟨x, A⟩ at the uniform measure): ``E P_ℓ``
grows at ``2λ_ℓ(1 − ε² c) + ε² λ_ℓ²`` and ``log P_ℓ`` by ``2(λ_ℓ(1 − ε²c) − ε²λ_ℓ²/2) t +
2ε λ_ℓ B_t`` along each path. :meth:`MeanFieldFlow.solve_noisy` solves it (Itô–Milstein,
fixed step).

Everything runs in float64 (a run enables it for its own duration): a tiny perturbation
or the 1/N floor of N = 10⁵ tokens sits 10⁻⁸ … 10⁻³ below C_00 = 1 on the grid.
"""

import abc
import functools
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, final

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from .._core.errors import (
    NonFiniteError,
    ParameterError,
    check_choice,
    check_int,
    check_real_in,
)
from .._core.many_tokens import _legendre_steps, _schmidt_diagonal
from .._core.saveat import SaveAt
from .._core.spectral import kernel_weights, kernel_weights_host
from .integrators import ODEIntegrator

#: Dimensions with a mean-field engine: S¹ and S².
MEAN_FIELD_DIMS = (2, 3)
#: Kinds of attention the engine solves.
MEAN_FIELD_KINDS = ("softmax", "unnormalized")
#: The truncation's relative error in the velocity is at most this (float64 rounding).
TRUNCATION_TOLERANCE = 1e-17
#: The most modes the engine takes on S¹ (the grid is ≥ 3K + 1 points) and on S² (a grid
#: of ~1.5K × 3K points and tables of (K + 1)² × 1.5K numbers).
MAX_MODES = {2: 4096, 3: 256}
#: Unnormalised attention carries e^β: refused beyond this β (float64 overflows at 709.8).
USA_BETA_MAX = 700.0
#: Tokens per chunk when the coefficients of an empirical measure are summed.
_CHUNK = {2: 65_536, 3: 1024}


def needed_modes(beta: float, dim: int = 2) -> int:
    """The smallest K ≥ 1 with ``e^{2β} Σ_{ℓ>K} w_ℓ (1 + g_ℓ/β) ≤``
    :data:`TRUNCATION_TOLERANCE` (β > 0; ``w_ℓ`` the scaled kernel weights, summing to 1;
    ``g_ℓ = ℓ`` on S¹, ``ℓ(ℓ + 1)/2`` on S²): the velocity of every probability measure is
    then exact to float64 rounding when the kernel is truncated at K (module docstring)."""
    top = int(4 * beta + 40 * math.sqrt(beta + 1) + 64)
    w = kernel_weights_host(beta, dim, top)
    k = np.arange(top + 1)
    gradient = k if dim == 2 else k * (k + 1) / 2
    terms = w * (1 + gradient / beta)
    tail = np.append(np.cumsum(terms[::-1])[::-1][1:], 0.0)  # Σ_{j>K}
    # log of e^{2β}·tail, compared in logs (e^{2β} overflows float64 past β ≈ 355).
    with np.errstate(divide="ignore"):
        ok = 2 * beta + np.log(tail) <= math.log(TRUNCATION_TOLERANCE)
    found = np.nonzero(ok[1:])[0]
    if found.size == 0:
        raise ParameterError(f"beta={beta!r} needs more than {top} modes; allowed: beta <= 700.")
    return int(found[0]) + 1


def grid_size(n_modes: int) -> int:
    """Grid points M (S¹; S²'s longitudes) for K modes: a power of two ≥ 3K + 1 (the 2/3
    rule keeps degrees ≤ K of products of two degree-K series free of aliasing)."""
    return 1 << (3 * n_modes).bit_length()


def latitudes(n_modes: int) -> int:
    """Gauss–Legendre nodes of S²'s grid: ``⌈(3K + 1)/2⌉``, exact for polynomials in z of
    degree ≤ 3K (the flux of degree ≤ 2K times a test function of degree ≤ K)."""
    return (3 * n_modes + 2) // 2


def _derivative_weights(w: np.ndarray | Array, beta, dim: int):
    """Scaled weights of ∂_β D from those of D at degrees 0 … K + 1: ``e^{−β} I_k' =
    Ĩ_{k+1} + (k/β) Ĩ_k`` (S¹, ``w = Ĩ``) or ``(2ℓ + 1) e^{−β} i_ℓ' = (2ℓ + 1)(ĩ_{ℓ+1} + (ℓ/β)
    ĩ_ℓ)`` (S², ``w = (2ℓ + 1) ĩ``)."""
    k = np.arange(w.shape[-1] - 1, dtype=np.float64)
    if dim == 2:
        return w[1:] + (k / beta) * w[:-1]
    return (2 * k + 1) * w[1:] / (2 * k + 3) + (k / beta) * w[:-1]


# --- S²: Legendre tables ----------------------------------------------------------


def schmidt_legendre(z: np.ndarray, degree: int) -> np.ndarray:
    """``Q_ℓ^m(z)`` (Schmidt semi-normalised, no Condon–Shortley sign) as ``[m, ℓ, point]``
    for m, ℓ ≤ degree (zero where m > ℓ), float64: the stable recurrences in ℓ at fixed m
    of :func:`attndyn.mode_powers` (``_core.many_tokens``), from ``Q_m^m = c_m sin^m θ``."""
    z = np.asarray(z, np.float64)
    s = np.sqrt(np.clip(1 - z * z, 0.0, None))
    m = np.arange(degree + 1)
    with np.errstate(under="ignore"):
        diagonal = _schmidt_diagonal(degree)[:, None] * s[None, :] ** m[:, None]
    steps = _legendre_steps(degree)[..., None]  # (ℓ, 5, m, 1)
    first_off = np.sqrt(2 * m + 1.0)[:, None] * z[None, :]
    out = np.zeros((degree + 1, degree + 1, z.size))  # (ℓ, m, point)
    before = last = np.zeros((degree + 1, z.size))
    for ell in range(degree + 1):
        a, b, on_diagonal, first, inside = steps[ell]
        current = on_diagonal * diagonal + first * first_off * last
        current = current + inside * (a * z[None, :] * last - b * before)
        out[ell] = current
        before, last = last, current
    return out.transpose(1, 0, 2)


def legendre_derivatives(q: np.ndarray, z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``∂_θ Q_ℓ^m = (ℓ z Q_ℓ^m − √((ℓ + m)(ℓ − m)) Q_{ℓ−1}^m)/sin θ`` and ``m Q_ℓ^m/sin θ``
    from ``q = Q[m, ℓ, point]`` (points off the poles)."""
    degree = q.shape[0] - 1
    m = np.arange(degree + 1)[:, None, None]
    ell = np.arange(degree + 1)[None, :, None]
    s = np.sqrt(1 - z * z)[None, None, :]
    below = np.concatenate([np.zeros_like(q[:, :1]), q[:, :-1]], axis=1)  # Q_{ℓ−1}^m
    root = np.sqrt(np.maximum((ell + m) * (ell - m), 0))
    return (ell * z[None, None, :] * q - root * below) / s, m * q / s


@functools.lru_cache(maxsize=8)
def sphere_tables(n_modes: int) -> tuple[np.ndarray, ...]:
    """S²'s grid and tables for K modes: ``(weights, Q, ∂_θQ, mQ/sinθ, z)``, the Gauss–
    Legendre weights (summing to 2) and the tables ``[m, ℓ, node]`` at the nodes."""
    z, weights = np.polynomial.legendre.leggauss(latitudes(n_modes))
    q = schmidt_legendre(z, n_modes)
    d_theta, m_over_sin = legendre_derivatives(q, z)
    return weights, q, d_theta, m_over_sin, z


# --- the two bases ------------------------------------------------------------------


class AbstractBasis(eqx.Module):
    """What the flow needs of a sphere: its coefficients, grid and transforms. Vector
    fields on the grid are stacked components (S¹: the angular one; S²: e_θ, e_φ)."""

    if TYPE_CHECKING:  # pyright does not know equinox's AbstractClassVar
        dim: ClassVar[int]
    else:
        dim: eqx.AbstractClassVar[int]

    @abc.abstractmethod
    def shape(self, n_modes: int) -> tuple[int, ...]:
        """The shape of one state's coefficients."""

    @abc.abstractmethod
    def tables(self, n_modes: int) -> tuple[np.ndarray, ...]:
        """Host arrays the transforms take (passed as arguments: not baked into programs)."""

    @abc.abstractmethod
    def degrees(self, n_modes: int) -> np.ndarray:
        """The degree ℓ of every coefficient (shape :meth:`shape`)."""

    @abc.abstractmethod
    def synth(self, a: Array, tables) -> Array:
        """The grid values of ``Σ a × basis function`` (the density's form, module doc)."""

    @abc.abstractmethod
    def synth_grad(self, a: Array, tables) -> Array:
        """The surface gradient of :meth:`synth` ``(a)`` on the grid, stacked components."""

    @abc.abstractmethod
    def analyse(self, h: Array, tables, n_modes: int) -> Array:
        """``∫ h · conj(basis function) dσ`` of a grid field, degrees ≤ K."""

    @abc.abstractmethod
    def analyse_vector(self, g: Array, tables, n_modes: int) -> Array:
        """``∫ g·∇ conj(basis function) dσ`` of a grid vector field, degrees ≤ K."""

    @abc.abstractmethod
    def kernel_factor(self, w: Array) -> Array:
        """The kernel's factor on each degree's coefficients (scaled by e^{−β}) from
        :func:`attndyn._core.spectral.kernel_weights`: ``Ĩ_k`` (S¹, half of ``w_k``, k ≥ 1),
        ``(2ℓ + 1) ĩ_ℓ = w_ℓ`` (S²)."""

    @abc.abstractmethod
    def per_degree(self, x: Array) -> Array:
        """A per-degree array (K + 1) shaped to multiply the coefficients."""

    @abc.abstractmethod
    def powers(self, c: np.ndarray) -> np.ndarray:
        """``P_ℓ`` of coefficients (…, *shape) as (…, K + 1)."""

    @abc.abstractmethod
    def area_factor(self, n_modes: int) -> np.ndarray:
        """u_ℓ with ``density = synth(u ⊙ c)``: 1/(2π) (S¹), (2ℓ + 1)/(4π) (S²)."""

    @abc.abstractmethod
    def from_angles(self, points: np.ndarray, n_modes: int) -> np.ndarray:
        """The coefficients of unit points (rows), one per row: ``(n, *shape)``."""

    @abc.abstractmethod
    def floor_std(self, n_modes: int) -> tuple[np.ndarray, np.ndarray]:
        """Per coefficient, the standard deviations of its real and imaginary parts for
        one uniform token (N tokens: divided by √N, the central limit of the empirical
        measure's coefficients, uncorrelated between coefficients); 0 where fixed."""


def _half(n: int) -> np.ndarray:
    return np.where(np.arange(n) > 0, 0.5, 1.0)


@final
class CircleBasis(AbstractBasis):
    """S¹: Fourier coefficients ``c_k``, k = 0 … K, on a uniform grid."""

    dim: ClassVar[int] = 2

    def shape(self, n_modes):
        return (n_modes + 1,)

    def tables(self, n_modes):
        return ()

    def degrees(self, n_modes):
        return np.arange(n_modes + 1)

    def synth(self, a, tables):
        size = grid_size(a.shape[-1] - 1)
        return size * jnp.fft.irfft(a, n=size)

    def synth_grad(self, a, tables):
        k = jnp.asarray(1j * np.arange(a.shape[-1]), jnp.complex128)
        return self.synth(k * a, tables)[..., None, :]

    def analyse(self, h, tables, n_modes):
        return (2 * np.pi / h.shape[-1]) * jnp.fft.rfft(h)[..., : n_modes + 1]

    def analyse_vector(self, g, tables, n_modes):
        flux = self.analyse(g[..., 0, :], tables, n_modes)
        return jnp.asarray(-1j * np.arange(flux.shape[-1]), jnp.complex128) * flux

    def kernel_factor(self, w):
        return w * jnp.asarray(_half(w.shape[-1]), w.dtype)

    def per_degree(self, x):
        return x

    def powers(self, c):
        return np.abs(c) ** 2

    def area_factor(self, n_modes):
        return np.full(n_modes + 1, 1 / (2 * np.pi))

    def from_angles(self, points, n_modes):
        theta = np.arctan2(points[:, 1], points[:, 0])
        return np.exp(-1j * np.outer(theta, np.arange(n_modes + 1)))

    def floor_std(self, n_modes):
        std = np.where(np.arange(n_modes + 1) > 0, math.sqrt(0.5), 0.0)  # E|c_k|² = 1/N
        return std, std


@final
class SphereBasis(AbstractBasis):
    """S²: ``C_ℓm = ∫ Q_ℓ^m(z) e^{−imφ} dμ`` as ``[ℓ, m]`` on a Gauss–Legendre × uniform
    grid ``[node, longitude]``."""

    dim: ClassVar[int] = 3

    def shape(self, n_modes):
        return (n_modes + 1, n_modes + 1)

    def tables(self, n_modes):
        return sphere_tables(n_modes)[:4]

    def degrees(self, n_modes):
        return np.broadcast_to(np.arange(n_modes + 1)[:, None], self.shape(n_modes))

    def _synth_table(self, a, table):
        n_modes = a.shape[-1] - 1
        size = grid_size(n_modes)
        # Real tables times complex coefficients: the two parts apart (no promotion).
        g = jax.lax.complex(
            jnp.einsum("mlj,...lm->...jm", table, a.real),
            jnp.einsum("mlj,...lm->...jm", table, a.imag),
        )
        return size * jnp.fft.irfft(g * jnp.asarray(_half(n_modes + 1), g.dtype)[None], n=size)

    def synth(self, a, tables):
        return self._synth_table(a, tables[1])

    def synth_grad(self, a, tables):
        return jnp.stack(
            [self._synth_table(a, tables[2]), self._synth_table(1j * a, tables[3])], axis=-3
        )

    def _analyse_table(self, h, table, weights):
        n_modes = table.shape[0] - 1
        size = h.shape[-1]
        spectrum = (2 * np.pi / size) * jnp.fft.rfft(h)[..., : n_modes + 1]
        return jax.lax.complex(
            jnp.einsum("mlj,j,...jm->...lm", table, weights, spectrum.real),
            jnp.einsum("mlj,j,...jm->...lm", table, weights, spectrum.imag),
        )

    def analyse(self, h, tables, n_modes):
        return self._analyse_table(h, tables[1], tables[0])

    def analyse_vector(self, g, tables, n_modes):
        theta = self._analyse_table(g[..., 0, :, :], tables[2], tables[0])
        phi = self._analyse_table(g[..., 1, :, :], tables[3], tables[0])
        return theta - 1j * phi

    def kernel_factor(self, w):
        return w

    def per_degree(self, x):
        return x[:, None]

    def powers(self, c):
        return np.sum(np.abs(c) ** 2, axis=-1)

    def area_factor(self, n_modes):
        return (2 * np.arange(n_modes + 1) + 1) / (4 * np.pi)

    def from_angles(self, points, n_modes):
        rho = np.hypot(points[:, 0], points[:, 1])
        z = points[:, 2] / np.hypot(rho, points[:, 2])
        phi = np.arctan2(points[:, 1], points[:, 0])
        q = schmidt_legendre(z, n_modes)  # (m, ℓ, n)
        phase = np.exp(-1j * np.outer(np.arange(n_modes + 1), phi))  # (m, n)
        return np.einsum("mln,mn->nlm", q, phase)

    def floor_std(self, n_modes):
        ell = np.arange(n_modes + 1)[:, None]
        m = np.arange(n_modes + 1)[None, :]
        # E|C_ℓm|² = E Q_ℓ^m(z)² = (2 − δ_m0)/(2ℓ + 1) for one uniform token: each part
        # 1/(2ℓ + 1) for m > 0, all of it real for m = 0 (C_ℓ0 is real).
        real = np.where(m <= ell, 1 / np.sqrt(2 * ell + 1.0), 0.0)
        real[0, 0] = 0.0
        return real, np.where(m > 0, real, 0.0)


BASES: dict[int, AbstractBasis] = {2: CircleBasis(), 3: SphereBasis()}


# --- the field ----------------------------------------------------------------------


def _fields(basis: AbstractBasis, c: Array, beta: Array, softmax: Array, tables):
    """``(μ, D̃, σ, κ')`` on the grid: the density, ``e^{−β} D``, the velocity (stacked
    components) and the scaled weights of ∂_β D (for the radial part)."""
    n_modes = c.shape[-1] - 1
    c = c.astype(jnp.complex128)
    w = basis.kernel_factor(kernel_weights(beta, basis.dim, n_modes + 1, jnp.float64))
    kappa = basis.per_degree(w[: n_modes + 1]).astype(jnp.complex128)
    area = basis.per_degree(jnp.asarray(basis.area_factor(n_modes), jnp.complex128))
    density = basis.synth(area * c, tables)
    den = basis.synth(kappa * c, tables)  # e^{−β} D
    grad = basis.synth_grad(kappa * c, tables) / beta  # e^{−β} ∇_S D / β
    # Softmax: ∇D/(βD); unnormalised: ∇D/β = e^β·(e^{−β} ∇D/β). Both branches are finite
    # (den > 0; β ≤ 700), so the select never passes on a NaN.
    velocity = jnp.where(softmax, grad / den[None], grad * jnp.exp(beta))
    return density, den, velocity, _derivative_weights(w, beta, basis.dim)


def _derivative(basis, c: Array, beta: Array, softmax: Array, tables) -> Array:
    """The noise-free ``dC/dt`` (module docstring)."""
    density, _, velocity, _ = _fields(basis, c, beta, softmax, tables)
    return basis.analyse_vector(density[None] * velocity, tables, c.shape[-1] - 1)


def _noisy_parts(basis, c, beta, softmax, eps, tables) -> tuple[Array, Array]:
    """The Itô drift and the noise coefficient of ``dC`` under scalar common noise ε
    (module docstring): ``(drift, ε · noise-free derivative)``."""
    n_modes = c.shape[-1] - 1
    density, den, velocity, dkappa = _fields(basis, c, beta, softmax, tables)
    flux = density[None] * velocity
    plain = basis.analyse_vector(flux, tables, n_modes)
    area = basis.per_degree(jnp.asarray(basis.area_factor(n_modes), jnp.complex128))
    radial_raw = basis.synth(basis.per_degree(dkappa).astype(jnp.complex128) * c, tables)
    radial = jnp.where(softmax, radial_raw / den, radial_raw * jnp.exp(beta))  # ⟨x, A⟩
    minus_div = basis.synth(area * plain, tables)  # −div(μσ), the density's ∂_t
    speed2 = jnp.sum(velocity * velocity, axis=-basis.dim)  # the components' axis
    grad_density = basis.synth_grad(area * c, tables)
    e2 = eps * eps
    correction = minus_div[None] * velocity + 0.5 * speed2[None] * grad_density
    g = flux * (1 - e2 * radial[None]) + (e2 / 2) * correction
    ell = basis.degrees(n_modes)
    laplace = jnp.asarray(-ell * (ell + basis.dim - 2), jnp.complex128)
    drift = basis.analyse_vector(g, tables, n_modes)
    quarter = jnp.asarray(e2 / 4, jnp.complex128)
    drift = drift + quarter * laplace * basis.analyse(speed2 * density, tables, n_modes)
    return drift, jnp.asarray(eps, jnp.complex128) * plain


def _complex(y: Array) -> Array:
    return jax.lax.complex(y[0], y[1])


def _real(c: Array) -> Array:
    return jnp.stack([c.real, c.imag])


def _field(t, y, args):
    """:func:`_derivative` in the real form y = (Re C, Im C)."""
    basis, beta, softmax, tables = args
    return _real(_derivative(basis, _complex(y), beta, softmax, tables))


@eqx.filter_jit
def _solve(integrator: ODEIntegrator, args, y0: Array, ts: Array) -> tuple[Array, Array]:
    """The solves of every start in ``y0`` (B, 2, *shape), batched: ``(ys, steps)``."""
    t0 = jnp.zeros((), ts.dtype)

    def one(y):
        return integrator.solve(_field, t0, ts[-1], y, args, ts)

    return jax.vmap(one)(y0)


@eqx.filter_jit
def _solve_noisy(args, eps: Array, y0: Array, keys, ts: Array, dt: float):
    """Itô–Milstein solves of every start with its own Brownian path (key):
    ``(ys, B at ts)``."""
    basis, beta, softmax, tables = args
    t1 = ts[-1]

    def drift(t, y, _):
        return _real(_noisy_parts(basis, _complex(y), beta, softmax, eps, tables)[0])

    def noise(t, y, _):
        return _real(_noisy_parts(basis, _complex(y), beta, softmax, eps, tables)[1])

    def one(y, key):
        path = dfx.VirtualBrownianTree(0.0, t1, tol=dt / 8, shape=(), key=key)
        terms = dfx.MultiTerm(dfx.ODETerm(drift), dfx.ControlTerm(noise, path))
        sol = dfx.diffeqsolve(
            terms,
            dfx.ItoMilstein(),
            0.0,
            t1,
            dt,
            y,
            saveat=dfx.SaveAt(ts=ts),
            max_steps=None,
        )
        return sol.ys, jax.vmap(lambda t: path.evaluate(0.0, t))(ts)

    return jax.vmap(one)(y0, keys)


@eqx.filter_jit
def _diagnostics(basis, args_tail, c: Array):
    """Per state (leading axes flattened by the caller): the density's minimum on the
    grid and the velocity potential's per-degree norms (for :func:`_velocity_tail`)."""
    beta, softmax, tables = args_tail
    n_modes = c.shape[-1] - 1

    def one(cc):
        density, den, _, _ = _fields(basis, cc, beta, softmax, tables)
        potential = jnp.where(softmax, jnp.log(den), den)
        return jnp.min(density), basis.analyse(potential, tables, n_modes)

    return jax.vmap(one)(c)


@eqx.filter_jit
def _linear_residual(basis, args_tail, c: Array, uniform: Array):
    """Per state and coefficient: ``R(C)`` and ``J (C − U)``, the derivative and its
    linear part (J the Jacobian at the uniform measure U, by forward differentiation)."""
    beta, softmax, tables = args_tail

    def rhs(y):
        return _real(_derivative(basis, _complex(y), beta, softmax, tables))

    def one(cc):
        y = _real(cc)
        base = _real(uniform)
        _, linear = jax.jvp(rhs, (base,), (y - base,))
        return _complex(rhs(y)), _complex(linear)

    return jax.vmap(one)(c)


# --- the solution and the flow --------------------------------------------------------


@final
class MeanFieldSolution(eqx.Module):
    """What :meth:`MeanFieldFlow.solve` (and :meth:`~MeanFieldFlow.solve_noisy`) returns
    (NumPy arrays).

    ``coefficients[..., s, *]`` the state at save s: S¹ ``c_k(t_s) = ∫ e^{−ikθ} dμ_t``
    (k = 0 … K), S² ``C_ℓm(t_s) = ∫ Q_ℓ^m(z) e^{−imφ} dμ_t`` as ``[ℓ, m]``;
    ``density_min`` the smallest value of the (truncated) density on the grid at each
    save: a negative value says the truncated density is not a measure there (as the
    sharp truncation of an empirical measure is not); ``density_tail`` the largest
    ``√P_ℓ`` of the top third of the degrees kept (it starts at the 1/√N floor for N
    tokens, near 0 for a smooth start: growth beyond that says the density sharpens past
    what K holds); ``velocity_tail`` the largest degree-ℓ part of the velocity (its
    potential's coefficients times √(ℓ(ℓ + d − 2))) among the top third of the degrees kept,
    relative to the largest (softmax's log D has every degree: ~10⁻⁸ at a smooth start):
    as it grows the grid no longer resolves the field (clusters sharper than K can hold)
    and the solution is the truncation's, not the limit's. ``num_steps``: accepted solver
    steps; ``brownian``: the common noise's B(t_s) of each solve (zeros without noise).
    """

    dim: int = eqx.field(static=True)
    ts: Float[np.ndarray, " S"]
    coefficients: np.ndarray
    density_min: np.ndarray
    density_tail: np.ndarray
    velocity_tail: np.ndarray
    num_steps: np.ndarray
    brownian: np.ndarray

    def mode_powers(self, ell_max: int) -> np.ndarray:
        """``P_ℓ(t)``, ℓ = 0 … ell_max (P_0 = 1): the normalisation of
        :func:`attndyn.mode_powers` (S¹ ``|c_ℓ|²``, S² ``Σ_m |C_ℓm|²``)."""
        check_int("ell_max", ell_max, lower=0, upper=self.coefficients.shape[-1] - 1)
        return BASES[self.dim].powers(self.coefficients)[..., : ell_max + 1]

    def growth_rates(
        self, ell: Sequence[int] | np.ndarray, start: float | int, stop: float | int
    ) -> np.ndarray:
        """The rate of each degree's power over [start, stop]: the least-squares slope of
        ``log P_ℓ`` against t over the saves in the window (2λ_ℓ in the linear regime)."""
        ts = self.ts
        inside = (ts >= start) & (ts <= stop)
        if inside.sum() < 2:
            raise ParameterError(
                f"start={start!r}, stop={stop!r} hold fewer than two save times; allowed: a "
                "window of [0, horizon] with at least two saves."
            )
        ell = np.asarray(ell)
        check_int("ell", int(ell.max()), lower=0, upper=self.coefficients.shape[-1] - 1)
        powers = self.mode_powers(int(ell.max()))[..., inside, :][..., ell]
        with np.errstate(divide="ignore", invalid="ignore"):
            logs = np.log(powers)
            centred = logs - logs.mean(axis=-2, keepdims=True)
        t = ts[inside] - ts[inside].mean()
        return np.einsum("s,...sl->...l", t, centred) / (t @ t)


@final
class MeanFieldFlow(eqx.Module):
    """The continuity equation of the attention flow on S¹ or S² (Q = K = V = I), in
    Fourier or spherical-harmonic coefficients (module docstring).

    Args:
        beta: β > 0 (an array leaf: changing it reuses the compiled program when the
            number of modes is the same).
        kind: ``"softmax"`` or ``"unnormalized"`` (their fields differ by the factor
            Z(x); at the uniform measure Z = I_0(β) or i_0(β), so their linear rates
            differ by it).
        dim: 2 (S¹) or 3 (S²).
        n_modes: K, the highest degree kept; default :func:`needed_modes` (the kernel's
            truncation at float64 rounding). A larger K resolves sharper densities; a
            smaller one is refused.
        integrator: the diffrax solver and tolerances (default ``Tsit5``,
            rtol = 10⁻¹⁰, atol = 10⁻¹⁶: the 1/N floor and tiny perturbations are far below
            C_00 = 1 and are resolved relative to themselves).
    """

    beta: Float[np.ndarray, ""]
    kind: str = eqx.field(static=True)
    dim: int = eqx.field(static=True)
    n_modes: int = eqx.field(static=True)
    integrator: ODEIntegrator

    def __init__(
        self,
        beta: Any,
        kind: Any = "softmax",
        dim: Any = 2,
        *,
        n_modes: Any = None,
        integrator: Any = None,
    ):
        # Annotated Any: every argument is checked here, so that a wrong type is a
        # ParameterError naming it rather than a type checker's error.
        value = check_real_in("beta", beta, lower=0.0, lower_open=True)
        check_choice("kind", kind, MEAN_FIELD_KINDS)
        if kind == "unnormalized" and value > USA_BETA_MAX:
            raise ParameterError(
                f"beta={beta!r} is too large for unnormalised attention's mean field (its "
                f"field carries e^beta); allowed: 0 < beta <= {USA_BETA_MAX}."
            )
        if isinstance(dim, bool) or dim not in MEAN_FIELD_DIMS:
            raise ParameterError(
                f"dim={dim!r} is not allowed; the mean-field engine is built for dim=2 (S^1) "
                "and dim=3 (S^2)."
            )
        needed = needed_modes(value, int(dim))
        if n_modes is None:
            n_modes = needed
        top = MAX_MODES[int(dim)]
        check_int("n_modes", n_modes, lower=1, upper=top)
        if n_modes < needed:
            raise ParameterError(
                f"n_modes={n_modes} is below the {needed} modes beta={value:g} needs for the "
                f"kernel's truncation to stay at float64 rounding; allowed: {needed} <= "
                f"n_modes <= {top} (or None)."
            )
        self.beta = np.asarray(value, np.float64)
        self.kind = kind
        self.dim = int(dim)
        self.n_modes = int(n_modes)
        self.integrator = (
            ODEIntegrator(rtol=1e-10, atol=1e-16) if integrator is None else integrator
        )

    def __check_init__(self):
        if not isinstance(self.integrator, ODEIntegrator):
            raise ParameterError(
                f"integrator={self.integrator!r:.60} must be an attndyn.ODEIntegrator."
            )

    @property
    def basis(self) -> AbstractBasis:
        """The sphere's basis object (:class:`CircleBasis` or :class:`SphereBasis`)."""
        return BASES[self.dim]

    @property
    def shape(self) -> tuple[int, ...]:
        """The shape of one state's coefficients: (K + 1,) or (K + 1, K + 1)."""
        return self.basis.shape(self.n_modes)

    # --- initial coefficients ------------------------------------------------------

    def uniform(self) -> np.ndarray:
        """The coefficients of the uniform measure (C_00 = 1, all else 0)."""
        c = np.zeros(self.shape, np.complex128)
        c[(0,) * c.ndim] = 1.0
        return c

    def coefficients_from_tokens(self, x: ArrayLike) -> np.ndarray:
        """The coefficients of the empirical measure of the tokens ``x`` (N × d,
        normalised here): S¹ ``c_k = (1/N) Σ_j e^{−ikθ_j}``, S² ``C_ℓm = (1/N) Σ_j
        Q_ℓ^m(z_j) e^{−imφ_j}`` (degrees ≤ K): every mode keeps its 1/N floor and random
        phase; degrees above K are dropped (the sharp truncation, whose density may dip
        below 0; degrees above the kernel's reach do not move the ones below to float64
        rounding)."""
        points = np.asarray(x, np.float64)
        if points.ndim != 2 or points.shape[1] != self.dim or points.shape[0] < 1:
            raise ParameterError(
                f"x must be tokens of shape (N, {self.dim}) with N >= 1; got shape {points.shape}."
            )
        norms = np.sqrt(np.sum(points**2, axis=1))
        if not np.all(np.isfinite(points)) or np.any(norms == 0):
            raise ParameterError(
                f"x must be finite and non-zero rows (points of S^{self.dim - 1})."
            )
        points = points / norms[:, None]
        total = np.zeros(self.shape, np.complex128)
        chunk = _CHUNK[self.dim]
        for start in range(0, points.shape[0], chunk):
            total += self.basis.from_angles(points[start : start + chunk], self.n_modes).sum(0)
        return total / points.shape[0]

    def coefficients_from_floor(self, n_tokens: float, rng: np.random.Generator) -> np.ndarray:
        """A draw of the coefficients' law for N i.i.d. uniform tokens at large N (the
        central limit: independent Gaussian coefficients, ``E P_ℓ = 1/N`` for ℓ ≥ 1, phases
        uniform): the 1/N floor in every mode without drawing N tokens (any N ≥ 1)."""
        n = check_real_in("n_tokens", n_tokens, lower=1.0)
        real, imag = self.basis.floor_std(self.n_modes)
        scale = 1 / math.sqrt(n)
        c = scale * (
            real * rng.standard_normal(real.shape) + 1j * imag * rng.standard_normal(real.shape)
        )
        return self.uniform() + c

    def coefficients_from_perturbation(self, amplitudes: Any) -> np.ndarray:
        """The uniform measure perturbed: ``C[key] = amplitude`` for a mapping key →
        complex amplitude (S¹: degree k; S²: ``(ℓ, m)``, 0 ≤ m ≤ ℓ, or ℓ for m = 0), or a
        sequence for degrees 1, 2, … (m = 0 on S²); refused if the density is negative
        anywhere (not a measure) or a degree exceeds K."""
        if isinstance(amplitudes, Mapping):
            items = dict(amplitudes)
        elif isinstance(amplitudes, Sequence | np.ndarray) and not isinstance(amplitudes, str):
            items = {ell + 1: a for ell, a in enumerate(amplitudes)}
        else:
            raise ParameterError(
                f"amplitudes={amplitudes!r:.40} must be a mapping degree -> amplitude or a "
                "sequence of amplitudes for degrees 1, 2, ..."
            )
        c = self.uniform()
        for key, a in items.items():
            index = self._index(key)
            if not np.isfinite(complex(a)):
                raise ParameterError(f"amplitudes: the amplitude of {key!r} must be finite.")
            if self.dim == 3 and index[1] == 0 and complex(a).imag != 0:
                raise ParameterError(f"amplitudes: the amplitude of {key!r} (m = 0) must be real.")
            c[index] = complex(a)
        density = self._fine_density(c)
        if density.min() < 0:
            raise ParameterError(
                f"amplitudes make the density negative (min {density.min():.3g}); allowed: "
                "perturbations that keep the density >= 0."
            )
        return c

    def _index(self, key: Any) -> tuple[int, ...]:
        """The array index of a degree (S¹), or ``(ℓ, m)`` / ℓ (S²), checked."""
        parts: tuple[Any, ...] = (
            key if isinstance(key, tuple) else (key,) + ((0,) if self.dim == 3 else ())
        )
        if len(parts) != self.dim - 1 or any(
            isinstance(p, bool) or not isinstance(p, int | np.integer) for p in parts
        ):
            raise ParameterError(
                f"amplitudes: {key!r} must be "
                + ("an integer degree." if self.dim == 2 else "a degree l or a pair (l, m).")
            )
        ell = int(parts[0])
        if not 1 <= ell <= self.n_modes:
            raise ParameterError(
                f"amplitudes: degree {ell} is outside 1 ... n_modes={self.n_modes}; raise "
                "n_modes to perturb it."
            )
        if self.dim == 3 and not 0 <= int(parts[1]) <= ell:
            raise ParameterError(f"amplitudes: {key!r} needs 0 <= m <= l.")
        return tuple(int(p) for p in parts)

    def _fine_density(self, c: np.ndarray) -> np.ndarray:
        """The density on a grid twice as fine as the solver's (a positivity check)."""
        with jax.enable_x64(True):
            basis = self.basis
            fine = 2 * self.n_modes
            padded = np.zeros(basis.shape(fine), np.complex128)
            padded[tuple(slice(0, s) for s in c.shape)] = c
            area = basis.per_degree(jnp.asarray(basis.area_factor(fine), jnp.complex128))
            return np.asarray(basis.synth(area * jnp.asarray(padded), basis.tables(fine)))

    # --- the field -----------------------------------------------------------------

    def velocity(self, c: ArrayLike, at: ArrayLike) -> np.ndarray:
        """The velocity ``v[μ]`` summed directly from the coefficients (no grid, NumPy,
        float64): an independent route to the field that :meth:`solve` forms on its grid.
        S¹: ``at`` angles, the angular component; S²: ``at`` unit vectors (n, 3) off the
        poles, the Cartesian velocity (n, 3)."""
        c = np.asarray(c, np.complex128)
        beta = float(self.beta)
        w = kernel_weights_host(beta, self.dim, self.n_modes)
        if self.dim == 2:
            k = np.arange(self.n_modes + 1)
            phase = np.exp(1j * np.outer(np.asarray(at, np.float64), k))
            double = np.where(k > 0, 2.0, 1.0)  # c_{−k} = conj(c_k)
            scaled = double * w * _half(k.size) * c
            den, grad = np.real(phase @ scaled), np.real(phase @ (1j * k * scaled))
            out = grad / beta
        else:
            points = np.asarray(at, np.float64)
            z, phi = points[:, 2], np.arctan2(points[:, 1], points[:, 0])
            q = schmidt_legendre(z, self.n_modes)
            d_theta, m_over_sin = legendre_derivatives(q, z)
            m = np.arange(self.n_modes + 1)
            e = np.exp(1j * np.outer(phi, m))  # (n, m)
            a = w[:, None] * c  # [ℓ, m]
            den = np.real(np.einsum("mln,lm,nm->n", q, a, e))
            v_theta = np.real(np.einsum("mln,lm,nm->n", d_theta, a, e)) / beta
            v_phi = np.real(np.einsum("mln,lm,nm->n", m_over_sin, 1j * a, e)) / beta
            s = np.sqrt(1 - z * z)
            e_theta = np.stack([z * np.cos(phi), z * np.sin(phi), -s], axis=1)
            e_phi = np.stack([-np.sin(phi), np.cos(phi), np.zeros_like(phi)], axis=1)
            grad = v_theta[:, None] * e_theta + v_phi[:, None] * e_phi
            den = den[:, None]
            out = grad
        if self.kind == "softmax":
            return out / den
        return out * math.exp(beta)

    def _arguments(self) -> tuple[Any, ...]:
        """The field's arguments ``(basis, β, softmax, tables)``: the kind is a number
        (1 or 0), so both kinds and every β at one K are one compiled program."""
        tables = tuple(jnp.asarray(t) for t in self.basis.tables(self.n_modes))
        return self.basis, jnp.asarray(self.beta), jnp.asarray(self.kind == "softmax"), tables

    # --- solving -------------------------------------------------------------------

    def solve(self, coefficients0: ArrayLike, saveat: SaveAt) -> MeanFieldSolution:
        """The solution from ``coefficients0`` (:meth:`coefficients_from_tokens`,
        :meth:`coefficients_from_floor` or :meth:`coefficients_from_perturbation`; leading
        batch axes solve several starts at once, with one compiled program) at the save
        times of ``saveat``. Raises :class:`NonFiniteError` if a solve fails or leaves the
        float64 range."""
        c0 = self._check_start(coefficients0, saveat)
        ts = np.asarray(saveat.times, np.float64)
        flat = c0.reshape(-1, *self.shape)
        with jax.enable_x64(True):
            y0 = jnp.asarray(np.stack([np.real(flat), np.imag(flat)], axis=1))
            ys, steps = _solve(self.integrator, self._arguments(), y0, jnp.asarray(ts))
            ys, steps = np.asarray(ys), np.asarray(steps)
        batch = c0.shape[: c0.ndim - len(self.shape)]
        coefficients = (ys[:, :, 0] + 1j * ys[:, :, 1]).reshape(*batch, ts.size, *self.shape)
        return self._solution(ts, coefficients, steps.reshape(batch), np.zeros((*batch, ts.size)))

    def solve_noisy(
        self,
        coefficients0: ArrayLike,
        saveat: SaveAt,
        *,
        eps: float,
        dt: float,
        key: Any,
    ) -> MeanFieldSolution:
        """The stochastic continuity equation of scalar common noise ε (spec §3.3, seed
        003 eq. 8; module docstring) from ``coefficients0`` (a batch ``(B, *shape)`` or
        one state), each start with its own Brownian path (``fold_in(key, b)``), by the
        Itô–Milstein scheme (strong order 1 for scalar noise) with the fixed step ``dt``.
        ``eps = 0`` is the noise-free flow (solved at the step dt)."""
        eps_value = check_real_in("eps", eps, lower=0.0)
        c0 = self._check_start(coefficients0, saveat)
        ts = np.asarray(saveat.times, np.float64)
        dt_value = check_real_in("dt", dt, lower=0.0, lower_open=True, upper=float(ts[-1]))
        flat = c0.reshape(-1, *self.shape)
        batch = c0.shape[: c0.ndim - len(self.shape)]
        keys = jax.vmap(lambda i: jax.random.fold_in(key, i))(jnp.arange(flat.shape[0]))
        with jax.enable_x64(True):
            y0 = jnp.asarray(np.stack([np.real(flat), np.imag(flat)], axis=1))
            ys, path = _solve_noisy(
                self._arguments(), jnp.asarray(eps_value), y0, keys, jnp.asarray(ts), dt_value
            )
            ys, path = np.asarray(ys), np.asarray(path)
        coefficients = (ys[:, :, 0] + 1j * ys[:, :, 1]).reshape(*batch, ts.size, *self.shape)
        steps = np.full(batch, math.ceil(float(ts[-1]) / dt_value))
        return self._solution(ts, coefficients, steps, path.reshape(*batch, ts.size))

    def _solution(self, ts, coefficients, steps, path) -> MeanFieldSolution:
        finite = np.all(
            np.isfinite(coefficients.reshape(*coefficients.shape[: -len(self.shape)], -1)), axis=-1
        )
        if not np.all(finite):
            bad = ts[np.nonzero((~finite).reshape(-1, ts.size).any(axis=0))[0][0]]
            raise NonFiniteError(
                f"the mean-field solve failed or overflowed by t = {bad:g} (beta="
                f"{float(self.beta):g}, kind={self.kind!r}, dim={self.dim}, n_modes="
                f"{self.n_modes}); try a larger n_modes or the integrator's max_steps."
            )
        density_min, velocity_tail = self.diagnostics(coefficients)
        powers = self.basis.powers(coefficients)
        return MeanFieldSolution(
            dim=self.dim,
            ts=ts,
            coefficients=coefficients,
            density_min=density_min,
            density_tail=np.sqrt(powers[..., (2 * self.n_modes) // 3 + 1 :].max(axis=-1)),
            velocity_tail=velocity_tail,
            num_steps=steps,
            brownian=path,
        )

    def diagnostics(self, coefficients: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(density_min, velocity_tail)`` of states ``(…, *shape)``
        (:class:`MeanFieldSolution`)."""
        lead = coefficients.shape[: coefficients.ndim - len(self.shape)]
        flat = coefficients.reshape(-1, *self.shape)
        with jax.enable_x64(True):
            _, beta, softmax, tables = self._arguments()
            low, potential = _diagnostics(self.basis, (beta, softmax, tables), jnp.asarray(flat))
            low, potential = np.asarray(low), np.asarray(potential)
        ell = np.arange(self.n_modes + 1)
        size = np.sqrt(self.basis.powers(potential) * ell * (ell + self.dim - 2))
        top = size.max(axis=-1)
        tail = size[..., (2 * self.n_modes) // 3 + 1 :].max(axis=-1)
        with np.errstate(invalid="ignore", divide="ignore"):
            ratio = np.where(top > 0, tail / np.where(top > 0, top, 1.0), 0.0)
        return low.reshape(lead), ratio.reshape(lead)

    def linear_residual(self, coefficients: np.ndarray, ell_max: int) -> np.ndarray:
        """Per state ``(…, *shape)`` and degree ℓ = 0 … ell_max: ``‖R_ℓ(C) − J_ℓ(C − U)‖ /
        ‖J_ℓ(C − U)‖``, the nonlinear part of the derivative of degree ℓ relative to its
        linear part (J the engine's Jacobian at the uniform measure U; norms over m). The
        slope of log P_ℓ is then within that fraction of 2λ_ℓ (|d log P_ℓ/dt − 2λ_ℓ| ≤
        2‖nonlinear_ℓ‖/‖C_ℓ‖); ℓ = 0 is 0."""
        check_int("ell_max", ell_max, lower=0, upper=self.n_modes)
        lead = coefficients.shape[: coefficients.ndim - len(self.shape)]
        flat = coefficients.reshape(-1, *self.shape)
        with jax.enable_x64(True):
            _, beta, softmax, tables = self._arguments()
            full, linear = _linear_residual(
                self.basis, (beta, softmax, tables), jnp.asarray(flat), jnp.asarray(self.uniform())
            )
            full, linear = np.asarray(full), np.asarray(linear)
        rest = self.basis.powers(full - linear)[..., : ell_max + 1]
        base = self.basis.powers(linear)[..., : ell_max + 1]
        with np.errstate(invalid="ignore", divide="ignore"):
            ratio = np.where(base > 0, np.sqrt(rest / np.where(base > 0, base, 1.0)), 0.0)
        ratio[..., 0] = 0.0
        return ratio.reshape(*lead, ell_max + 1)

    def _check_start(self, coefficients0, saveat) -> np.ndarray:
        """``coefficients0`` as complex128 after checking it and ``saveat``."""
        c0 = np.asarray(coefficients0)
        rank = len(self.shape)
        if (
            c0.ndim not in (rank, rank + 1)
            or c0.shape[c0.ndim - rank :] != self.shape
            or c0.dtype.kind not in "iufc"
            or not np.all(np.isfinite(c0))
        ):
            raise ParameterError(
                f"coefficients0 must be finite complex numbers of shape {self.shape} (degrees "
                f"0 ... K, K = n_modes), or a batch of them (B, *shape); got shape {c0.shape}."
            )
        if np.any(np.abs(c0[(...,) + (0,) * rank] - 1) > 1e-12):
            raise ParameterError(
                "coefficients0's degree-0 entry must be 1 (the mass of a probability measure)."
            )
        if not isinstance(saveat, SaveAt):
            raise ParameterError(f"saveat={saveat!r:.40} must be an attndyn.SaveAt.")
        return c0.astype(np.complex128)
