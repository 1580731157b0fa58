r"""The mean-field limit of the attention flow on S¹ (spec §7, "The mean-field equation").

As N → ∞ the empirical measure μ of the tokens follows the continuity equation

    ∂_t μ + ∂_θ(μ v[μ]) = 0,    v[μ](θ) = ∫ e^{β cos(θ − φ)} sin(φ − θ) dμ(φ) / Z(θ),

Q = K = V = I, with ``Z = ∫ e^{β cos(θ − φ)} dμ(φ)`` (softmax) or ``Z = 1`` (unnormalised:
the average over the probability measure μ). The state is the Fourier coefficients
``c_k = ∫ e^{−ikθ} dμ(θ)`` (k = 0 … K; ``c_{−k}`` is the conjugate, ``c_0 = 1``), so that
the density is ``μ(θ) = Σ_k c_k e^{ikθ}/(2π)`` and the mode power of attndyn's many-token
observables (:func:`attndyn.mode_powers`) is ``P_ℓ = |c_ℓ|²``.

With the kernel's expansion ``e^{β cos(θ − φ)} = Σ_k I_k(β) e^{ik(θ − φ)}`` both parts of the
field are Fourier series with coefficients ``I_k c_k``: ``D(θ) = Σ_k I_k c_k e^{ikθ}`` and
``β v Z = D'(θ) = Σ_k ik I_k c_k e^{ikθ}`` (softmax: ``v = D'/(βD)``; unnormalised:
``v = D'/β``). The product μ·v and the division are formed pseudo-spectrally: the three
series are summed on a uniform grid of M ≥ 3K + 1 points (inverse real FFTs), the flux is
multiplied out there and transformed back, and only degrees ≤ K are kept (the 2/3 rule:
the product of two degree-K series aliases onto degrees > K only). Then
``dc_k/dt = −ik F̂_k`` with ``F̂_k = ∫ e^{−ikθ} μ v dθ``. The Bessel functions are the
exponentially scaled ones of :mod:`attndyn._core.spectral` (``Ĩ_k = e^{−β} I_k``), so
nothing overflows; the unnormalised field carries the factor e^β (refused past β = 700,
where float64 holds it no longer).

The truncation degree K is where the kernel's tail stops mattering: for any probability
measure ``e^{−β} D ≥ e^{−2β}`` and ``|c_k| ≤ 1``, so truncating D and D' at K changes the
velocity by at most ``e^{2β} Σ_{k>K} (2 + 2k/β) Ĩ_k`` relatively (:func:`needed_modes`),
kept below float64's rounding. Linearised about the uniform measure the degree-ℓ
coefficient grows at ``λ_ℓ = ℓ² I_ℓ(β)/(β I_0(β))`` (softmax) or ``ℓ² I_ℓ(β)/β``
(unnormalised): :func:`attndyn.theory.mode_growth_rate`, exactly (no truncation enters a
linear mode).

Everything runs in float64 (a run enables it for its own duration): a tiny perturbation
or the 1/N floor of N = 10⁵ tokens sits 10⁻⁸ … 10⁻³ below c_0 = 1 on the grid.
"""

import math
from collections.abc import Mapping, Sequence
from typing import Any, final

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
from .._core.saveat import SaveAt
from .._core.spectral import kernel_weights, kernel_weights_host
from .integrators import ODEIntegrator

#: Dimensions with a mean-field engine (S¹; S² is not built yet).
MEAN_FIELD_DIMS = (2,)
#: Kinds of attention the engine solves.
MEAN_FIELD_KINDS = ("softmax", "unnormalized")
#: The truncation's relative error in the velocity is at most this (float64 rounding).
TRUNCATION_TOLERANCE = 1e-17
#: The most modes the engine takes (the grid is 4× as many points).
MAX_MODES = 4096
#: Unnormalised attention carries e^β: refused beyond this β (float64 overflows at 709.8).
USA_BETA_MAX = 700.0
#: Tokens per chunk when the coefficients of an empirical measure are summed.
_CHUNK = 65_536


def needed_modes(beta: float) -> int:
    """The smallest K ≥ 1 with ``e^{2β} Σ_{k>K} (2 + 2k/β) Ĩ_k(β) ≤``
    :data:`TRUNCATION_TOLERANCE` (β > 0): the velocity of every probability measure is then
    exact to float64 rounding when the kernel is truncated at K (module docstring)."""
    top = int(4 * beta + 40 * math.sqrt(beta + 1) + 64)
    w = kernel_weights_host(beta, 2, top)  # Ĩ_0, 2Ĩ_k: sums to 1
    k = np.arange(top + 1)
    terms = w * (1 + k / beta)
    tail = np.append(np.cumsum(terms[::-1])[::-1][1:], 0.0)  # Σ_{j>K}
    # log of e^{2β}·tail, compared in logs (e^{2β} overflows float64 past β ≈ 355).
    with np.errstate(divide="ignore"):
        ok = 2 * beta + np.log(tail) <= math.log(TRUNCATION_TOLERANCE)
    found = np.nonzero(ok[1:])[0]
    if found.size == 0:
        raise ParameterError(f"beta={beta!r} needs more than {top} modes; allowed: beta <= 700.")
    return int(found[0]) + 1


def grid_size(n_modes: int) -> int:
    """Grid points M for K modes: a power of two ≥ 3K + 1 (the 2/3 rule keeps degrees ≤ K
    of products of two degree-K series free of aliasing)."""
    return 1 << (3 * n_modes).bit_length()


@final
class MeanFieldSolution(eqx.Module):
    """What :meth:`MeanFieldFlow.solve` returns (NumPy arrays).

    ``coefficients[s, k] = c_k(t_s) = ∫ e^{−ikθ} dμ_t`` (k = 0 … K); ``density_min`` the
    smallest value of the (truncated) density on the grid at each save: a negative value
    says the truncated density is not a measure there (as the sharp truncation of an
    empirical measure is not); ``density_tail`` the largest |c_k| of the top third of the
    degrees kept (it starts at the 1/√N floor for N tokens, near 0 for a smooth start:
    growth beyond that says the density sharpens past what K holds); ``velocity_tail``
    the largest velocity coefficient among the top third of the degrees kept, relative
    to the largest (softmax's 1/D has every degree: ~10⁻⁸ at a smooth start): as it grows
    the grid no longer resolves the field (clusters sharper than K can hold) and the
    solution is the truncation's, not the limit's. ``num_steps``: accepted solver steps.
    """

    ts: Float[np.ndarray, " S"]
    coefficients: np.ndarray
    density_min: Float[np.ndarray, "*B S"]
    density_tail: Float[np.ndarray, "*B S"]
    velocity_tail: Float[np.ndarray, "*B S"]
    num_steps: np.ndarray

    def mode_powers(self, ell_max: int) -> Float[np.ndarray, "*B S ell"]:
        """``P_ℓ(t) = |c_ℓ(t)|²``, ℓ = 0 … ell_max (P_0 = 1): the normalisation of
        :func:`attndyn.mode_powers` (``|(1/N) Σ_j e^{iℓθ_j}|²`` for N tokens)."""
        check_int("ell_max", ell_max, lower=0, upper=self.coefficients.shape[-1] - 1)
        return np.abs(self.coefficients[..., : ell_max + 1]) ** 2

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
        with np.errstate(divide="ignore", invalid="ignore"):
            logs = np.log(np.abs(self.coefficients[..., inside, :][..., ell]) ** 2)
            centred = logs - logs.mean(axis=-2, keepdims=True)
        t = ts[inside] - ts[inside].mean()
        return np.einsum("s,...sl->...l", t, centred) / (t @ t)


@final
class MeanFieldFlow(eqx.Module):
    """The continuity equation of the attention flow on S¹ (Q = K = V = I), in Fourier
    coefficients (module docstring).

    Args:
        beta: β > 0 (an array leaf: changing it reuses the compiled program when the
            number of modes is the same).
        kind: ``"softmax"`` or ``"unnormalized"`` (their fields differ by the factor
            Z(θ); at the uniform measure Z = I_0(β), so their linear rates differ by it).
        dim: 2 (S¹); S² is not built yet.
        n_modes: K, the highest degree kept; default :func:`needed_modes` (the kernel's
            truncation at float64 rounding). A larger K resolves sharper densities; a
            smaller one is refused.
        integrator: the diffrax solver and tolerances (default ``Tsit5``,
            rtol = 10⁻¹⁰, atol = 10⁻¹⁶: the 1/N floor and tiny perturbations are far below
            c_0 = 1 and are resolved relative to themselves).
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
                f"dim={dim!r} is not allowed; the mean-field engine is built for dim=2 (S^1) only."
            )
        needed = needed_modes(value)
        if n_modes is None:
            n_modes = needed
        check_int("n_modes", n_modes, lower=1, upper=MAX_MODES)
        if n_modes < needed:
            raise ParameterError(
                f"n_modes={n_modes} is below the {needed} modes beta={value:g} needs for the "
                f"kernel's truncation to stay at float64 rounding; allowed: {needed} <= "
                f"n_modes <= {MAX_MODES} (or None)."
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

    # --- initial coefficients ------------------------------------------------------

    def coefficients_from_tokens(self, x: ArrayLike) -> np.ndarray:
        """``c_k = (1/N) Σ_j e^{−ikθ_j}`` (k ≤ K) of the empirical measure of the tokens
        ``x`` (N × 2, normalised here): every mode keeps its 1/N floor and random phase;
        degrees above K are dropped (the sharp truncation, whose density may dip below 0;
        degrees above the kernel's reach do not move the ones below to float64
        rounding)."""
        points = np.asarray(x, np.float64)
        if points.ndim != 2 or points.shape[1] != 2 or points.shape[0] < 1:
            raise ParameterError(
                f"x must be tokens of shape (N, 2) with N >= 1; got shape {points.shape}."
            )
        if not np.all(np.isfinite(points)) or np.any(np.sum(points**2, axis=1) == 0):
            raise ParameterError("x must be finite and non-zero rows (points of S^1).")
        theta = np.arctan2(points[:, 1], points[:, 0])
        k = np.arange(self.n_modes + 1)
        total = np.zeros(k.shape, np.complex128)
        for start in range(0, theta.size, _CHUNK):
            total += np.exp(-1j * np.outer(k, theta[start : start + _CHUNK])).sum(axis=1)
        return total / theta.size

    def coefficients_from_perturbation(
        self, amplitudes: Mapping[int, complex | float] | Sequence[complex | float] | np.ndarray
    ) -> np.ndarray:
        """The uniform measure perturbed: ``c_ℓ = amplitudes[ℓ]`` (a mapping degree →
        complex amplitude, or a sequence for ℓ = 1, 2, …), so that the density is
        ``(1 + Σ_ℓ 2 Re(c_ℓ e^{iℓθ}))/(2π)``; refused if that is negative anywhere (not
        a measure) or a degree exceeds K."""
        if isinstance(amplitudes, Mapping):
            items = dict(amplitudes)
        elif isinstance(amplitudes, Sequence | np.ndarray) and not isinstance(amplitudes, str):
            items = {ell + 1: a for ell, a in enumerate(amplitudes)}
        else:
            raise ParameterError(
                f"amplitudes={amplitudes!r:.40} must be a mapping degree -> amplitude or a "
                "sequence of amplitudes for degrees 1, 2, ..."
            )
        c = np.zeros(self.n_modes + 1, np.complex128)
        c[0] = 1.0
        for ell, a in items.items():
            if isinstance(ell, bool) or not isinstance(ell, int | np.integer):
                raise ParameterError(f"amplitudes: degree {ell!r} must be an integer.")
            if not 1 <= ell <= self.n_modes:
                raise ParameterError(
                    f"amplitudes: degree {ell} is outside 1 ... n_modes={self.n_modes}; "
                    "raise n_modes to perturb it."
                )
            if not np.isfinite(complex(a)):
                raise ParameterError(f"amplitudes: the amplitude of degree {ell} must be finite.")
            c[ell] = complex(a)
        grid = 4 * grid_size(self.n_modes)
        density = grid * np.fft.irfft(c, n=grid)
        if density.min() < 0:
            raise ParameterError(
                f"amplitudes make the density negative (min {density.min() / (2 * np.pi):.3g}); "
                "allowed: perturbations with 1 + sum 2 Re(c_l e^{il theta}) >= 0."
            )
        return c

    # --- the field -----------------------------------------------------------------

    def velocity(self, c: ArrayLike, theta: ArrayLike) -> np.ndarray:
        """The velocity ``v[μ](θ)`` (its angular component: the tangent part of the
        mean-field attention) at any angles, summed directly from the coefficients (no
        grid, NumPy, float64): an independent route to the field that :meth:`solve` forms
        on its grid."""
        k = np.arange(self.n_modes + 1)
        c = np.asarray(c, np.complex128)
        w = kernel_weights_host(float(self.beta), 2, self.n_modes) * np.where(k > 0, 0.5, 1.0)
        phase = np.exp(1j * np.outer(np.asarray(theta, np.float64), k))
        double = np.where(k > 0, 2.0, 1.0)  # c_{−k} = conj(c_k)
        den = np.real(phase @ (double * w * c))
        num = np.real(phase @ (double * 1j * k * w * c)) / float(self.beta)
        if self.kind == "softmax":
            return num / den
        return num * math.exp(float(self.beta))

    def _arguments(self) -> tuple[Array, Array]:
        """The field's array arguments ``(β, softmax)``: the kind is a number (1 or 0), so
        both kinds and every β at one K are one compiled program."""
        return jnp.asarray(self.beta), jnp.asarray(self.kind == "softmax")

    # --- solving -------------------------------------------------------------------

    def solve(self, coefficients0: ArrayLike, saveat: SaveAt) -> MeanFieldSolution:
        """The solution from ``coefficients0`` (:meth:`coefficients_from_tokens` or
        :meth:`coefficients_from_perturbation`; a leading batch axis solves several starts
        at once, with one compiled program) at the save times of ``saveat``. Raises
        :class:`NonFiniteError` if a solve fails or leaves the float64 range."""
        c0 = self._check_start(coefficients0, saveat)
        ts = np.asarray(saveat.times, np.float64)
        flat = c0.reshape(-1, self.n_modes + 1)
        with jax.enable_x64(True):
            y0 = jnp.asarray(np.stack([np.real(flat), np.imag(flat)], axis=1))
            ys, steps = _solve(self.integrator, self._arguments(), y0, jnp.asarray(ts))
            ys, steps = np.asarray(ys), np.asarray(steps)
        coefficients = (ys[:, :, 0] + 1j * ys[:, :, 1]).reshape(*c0.shape[:-1], ts.size, -1)
        finite = np.all(np.isfinite(coefficients), axis=-1)
        if not np.all(finite):
            bad = ts[np.nonzero((~finite).reshape(-1, ts.size).any(axis=0))[0][0]]
            raise NonFiniteError(
                f"the mean-field solve failed or overflowed by t = {bad:g} (beta="
                f"{float(self.beta):g}, kind={self.kind!r}, n_modes={self.n_modes}); try a "
                "larger n_modes or the integrator's max_steps."
            )
        density, _ = _host_fields(self, coefficients)
        return MeanFieldSolution(
            ts=ts,
            coefficients=coefficients,
            density_min=density.min(axis=-1),
            density_tail=np.abs(coefficients[..., (2 * self.n_modes) // 3 + 1 :]).max(axis=-1),
            velocity_tail=_velocity_tail(self, coefficients),
            num_steps=steps.reshape(c0.shape[:-1]),
        )

    def _check_start(self, coefficients0, saveat) -> np.ndarray:
        """``coefficients0`` as complex128 after checking it and ``saveat``."""
        c0 = np.asarray(coefficients0)
        if (
            c0.ndim not in (1, 2)
            or c0.shape[-1] != self.n_modes + 1
            or c0.dtype.kind not in "iufc"
            or not np.all(np.isfinite(c0))
        ):
            raise ParameterError(
                f"coefficients0 must be {self.n_modes + 1} finite complex numbers (c_0 ... "
                f"c_K, K = n_modes), or a batch of them (B, K + 1); got shape {c0.shape}."
            )
        if np.any(np.abs(c0[..., 0] - 1) > 1e-12):
            raise ParameterError(
                "coefficients0[..., 0] must be 1 (the mass of a probability measure)."
            )
        if not isinstance(saveat, SaveAt):
            raise ParameterError(f"saveat={saveat!r:.40} must be an attndyn.SaveAt.")
        return c0.astype(np.complex128)


def _grid_fields(c: Array, beta: Array, softmax: Array) -> tuple[Array, Array]:
    """``(μ, v)`` on the grid ``θ_j = 2πj/M`` (:func:`grid_size`; K from ``c``)."""
    n_modes = c.shape[-1] - 1
    size = grid_size(n_modes)
    c = c.astype(jnp.complex128)
    half = np.where(np.arange(n_modes + 1) > 0, 0.5, 1.0)
    w = kernel_weights(beta, 2, n_modes, jnp.float64) * half  # Ĩ_k = e^{−β} I_k
    scaled = w.astype(jnp.complex128) * c
    derivative = jnp.asarray(1j * np.arange(n_modes + 1), jnp.complex128)
    den = size * jnp.fft.irfft(scaled, n=size)  # e^{−β} D
    num = size * jnp.fft.irfft(derivative * scaled, n=size) / beta  # e^{−β} D'/β
    density = size * jnp.fft.irfft(c, n=size) / (2 * np.pi)
    # Softmax: D'/(βD); unnormalised: D'/β = e^β·(e^{−β} D'/β). Both branches are finite
    # (den > 0; β ≤ 700), so the select never passes on a NaN.
    velocity = jnp.where(softmax, num / den, num * jnp.exp(beta))
    return density, velocity


def _derivative(c: Array, beta: Array, softmax: Array) -> Array:
    """``dc_k/dt = −ik F̂_k``, ``F̂_k = (2π/M) Σ_j e^{−ikθ_j} μ(θ_j) v(θ_j)`` (k ≤ K)."""
    n_modes = c.shape[-1] - 1
    size = grid_size(n_modes)
    density, velocity = _grid_fields(c, beta, softmax)
    flux = (2 * np.pi / size) * jnp.fft.rfft(density * velocity)[..., : n_modes + 1]
    return jnp.asarray(-1j * np.arange(n_modes + 1), jnp.complex128) * flux


def _field(t, y, args):
    """The real form of :func:`_derivative`: y = (Re c, Im c)."""
    dc = _derivative(jax.lax.complex(y[0], y[1]), *args)
    return jnp.stack([dc.real, dc.imag])


@eqx.filter_jit
def _solve(
    integrator: ODEIntegrator, args: tuple[Array, Array], y0: Array, ts: Array
) -> tuple[Array, Array]:
    """The solves of every start in ``y0`` (B, 2, K + 1), batched: ``(ys, steps)``."""
    t0 = jnp.zeros((), ts.dtype)

    def one(y):
        return integrator.solve(_field, t0, ts[-1], y, args, ts)

    return jax.vmap(one)(y0)


def _host_fields(model: "MeanFieldFlow", c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_grid_fields` in NumPy (the diagnostics of every save, without dispatch)."""
    size = grid_size(model.n_modes)
    k = np.arange(model.n_modes + 1)
    beta = float(model.beta)
    scaled = kernel_weights_host(beta, 2, model.n_modes) * np.where(k > 0, 0.5, 1.0) * c
    den = size * np.fft.irfft(scaled, n=size)
    num = size * np.fft.irfft(1j * k * scaled, n=size) / beta
    density = size * np.fft.irfft(c, n=size) / (2 * np.pi)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        velocity = num / den if model.kind == "softmax" else num * math.exp(beta)
    return density, velocity


def _velocity_tail(model: "MeanFieldFlow", c: np.ndarray) -> np.ndarray:
    """Per row of ``c`` (…, K + 1): the largest velocity coefficient of degree > 2K/3
    over the largest of all."""
    _, velocity = _host_fields(model, c)
    spectrum = np.abs(np.fft.rfft(velocity, axis=-1))[..., : model.n_modes + 1]
    top = spectrum.max(axis=-1)
    tail = spectrum[..., (2 * model.n_modes) // 3 + 1 :].max(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(top > 0, tail / np.where(top > 0, top, 1.0), 0.0)
