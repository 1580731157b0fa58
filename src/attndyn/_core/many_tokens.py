"""Observables of many tokens (spec §7), one configuration ``X`` shaped ``(N, d)``, in blocks.

Every pairwise sum here runs over blocks of rows against all tokens (``lax.map``), so the
memory is ``block × N``, never ``N × N``; on S¹ and S² many tokens need no pairs at all
(the mode powers and the interaction energy from harmonics; on S¹ the clusters and the
minimum distance by sorting in angle, on S² by grid cells and a k-d tree: :mod:`.grid`).

- :func:`cluster_labels`, :func:`clusters`: the connected components of the graph joining
  tokens whose overlap is at least ``1 − tol`` (as :func:`attndyn.n_clusters`), by
  min-label propagation with pointer jumping;
- :func:`mode_powers`: ``P_ℓ = (1/N²) Σ_ij C_ℓ(⟨θ_i, θ_j⟩)`` for ``ℓ = 0 … ℓ_max``, with
  ``C_ℓ`` the Gegenbauer polynomial of index (d − 2)/2 normalised to ``C_ℓ(1) = 1``;
- :func:`log_interaction_energy`: ``log E_β``, ``E_β = (1/(2βN²)) Σ_ij e^{β⟨θ_i, θ_j⟩}``;
- :func:`min_distance`: ``min_{i≠j} |θ_i − θ_j|``.
"""

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int

from . import defaults, grid, spectral
from .blockwise import default_block
from .errors import ParameterError, check_bound, check_choice, check_int
from .linalg import matmul, small_sum
from .sphere import normalize

#: How :func:`mode_powers` sums: ``auto`` takes the harmonics on S¹ and S² (Fourier modes,
#: spherical harmonics: N·ℓ_max², no pairs) and the pair sums of Gegenbauer polynomials in
#: higher dimensions (N²·ℓ_max, in blocks).
MODE_METHODS = ("auto", "harmonics", "pairs")


def _row_blocks(n_tokens: int, block: int | None) -> tuple[int, Array]:
    """The block size and the first row of every block (the last block repeats row N − 1)."""
    block = int(min(block or default_block(n_tokens), n_tokens))
    return block, jnp.arange(-(-n_tokens // block)) * block


def _rows(start: Array, block: int, n_tokens: int) -> tuple[Array, Array]:
    """The row indices of the block at ``start`` (clipped to N − 1) and which are real."""
    rows = start + jnp.arange(block)
    return jnp.minimum(rows, n_tokens - 1), rows < n_tokens


def _map_rows(f, n_tokens: int, block: int | None) -> Array:
    """``f(rows, real)`` for every block of rows, stacked as ``(blocks, …)``."""
    size, starts = _row_blocks(n_tokens, block)
    return jax.lax.map(lambda s: f(*_rows(s, size, n_tokens)), starts)


# --- clusters -------------------------------------------------------------------------


def _together(a: Float[Array, "B d"], b: Float[Array, "N d"], tol) -> Array:
    """Whether each pair is joined: ``|θ_i − θ_j|² ≤ 2·tol``, which for unit vectors is
    ``⟨θ_i, θ_j⟩ ≥ 1 − tol``. Written as a sum of squared differences over the coordinates
    in a fixed order, the test is exactly symmetric in (i, j) (a Gram matrix computed in
    blocks of rows need not be), so the components are those of an undirected graph; it
    also has no cancellation near 1."""
    gap = a[:, None, :] - b[None, :, :]
    return small_sum(gap * gap, -1) <= 2 * tol


def cluster_labels(
    x: Float[Array, "N d"], tol: float | Array = defaults.TOL, *, block: int | None = None
) -> Int[Array, " N"]:
    """Each token's cluster, named by its smallest token index.

    Clusters are the connected components of the graph joining tokens whose overlap is at
    least ``1 − tol`` (as :func:`attndyn.n_clusters`). Min-label propagation: every label
    starts as its own index and takes the smallest label among its neighbours, then jumps
    twice along its labels (``l ← l[l]``, which stays in the component and never grows);
    at the fixed point the labels are constant on each component and equal to its smallest
    index. Each round is one pass over the pairs in blocks of rows; rounds stop when
    nothing changes.

    A configuration with any non-finite coordinate has no clusters to name: every label is
    −1 (a sentinel, never an index), as :func:`clusters` reports −1 for its counts."""
    check_bound("tol", tol, lower=0.0, upper=1.0, lower_open=True, upper_open=True)
    theta = normalize(x)
    n_tokens = x.shape[0]
    none = jnp.asarray(n_tokens, jnp.int32)

    def neighbours_min(labels):
        def f(rows, real):
            joined = _together(theta[rows], theta, jnp.asarray(tol, theta.dtype))
            return jnp.min(jnp.where(joined, labels[None, :], none), axis=1)

        found = _map_rows(f, n_tokens, block).reshape(-1)[:n_tokens]
        return jnp.minimum(found, labels)

    def round_(state):
        labels, _ = state
        new = neighbours_min(labels)
        new = new[new]
        new = new[new]
        return new, jnp.any(new != labels)

    start = jnp.arange(n_tokens, dtype=jnp.int32)
    finite = jnp.all(jnp.isfinite(x))
    # A non-finite configuration skips the rounds (its test of pairs would be meaningless).
    labels, _ = jax.lax.while_loop(lambda s: s[1], round_, (start, finite))
    return jnp.where(finite, labels, -1)


#: Above this many tokens on S², :func:`clusters` and :func:`min_distance` sort the tokens
#: into grid cells on the host (:mod:`.grid`: N log N plus the token pairs of cells the
#: cells' boxes leave undecided) instead of the N² pairs.
GRID_TOKENS = 2048


class Clusters(NamedTuple):
    """The clusters of one configuration (:func:`clusters`); counts are integers."""

    n_clusters: Int[Array, ""]
    largest: Int[Array, ""]
    #: Clusters of each size class: ``histogram[k]`` counts those of ``2^k ≤ size < 2^{k+1}``.
    histogram: Int[Array, " bins"]


def size_bins(n_tokens: int) -> int:
    """The number of size classes ``[2^k, 2^{k+1})`` that sizes 1 … N fall in."""
    return int(n_tokens).bit_length()


def _circle_sizes(x: Float[Array, "N 2"], tol) -> Int[Array, " N"]:
    """On S¹, the cluster sizes (at the positions of each cluster's first token in angular
    order; zeros elsewhere) without pairs: two tokens of an arc shorter than π are
    joined whenever they are, since each step between neighbours in angle is shorter than
    the arc and the chord grows with the arc; so the components are the runs between the
    breaks (neighbours in angle not joined), around the circle. The test on neighbours is
    :func:`_together`'s, on their coordinates."""
    theta = normalize(x)
    n_tokens = x.shape[0]
    order = jnp.argsort(jnp.arctan2(theta[:, 1], theta[:, 0]))
    ring = theta[order]
    nxt = jnp.roll(ring, -1, axis=0)
    gap = ring - nxt
    breaks = small_sum(gap * gap, -1) > 2 * jnp.asarray(tol, theta.dtype)  # i to i + 1
    # Label each token by the number of breaks before it; the run that wraps around the
    # end joins the first one unless the last pair is itself a break.
    run = jnp.concatenate([jnp.zeros((1,), jnp.int32), jnp.cumsum(breaks[:-1].astype(jnp.int32))])
    wraps = ~breaks[-1] & jnp.any(breaks)
    run = jnp.where(wraps & (run == run[-1]), 0, run)
    return jnp.zeros((n_tokens,), jnp.int32).at[run].add(1)


def clusters(
    x: Float[Array, "N d"], tol: float | Array = defaults.TOL, *, block: int | None = None
) -> Clusters:
    """The number of clusters, the size of the largest, and the histogram of their sizes in
    classes ``[2^k, 2^{k+1})``, ``k = 0 … ⌊log₂ N⌋`` (:func:`cluster_labels`; on S¹ by
    sorting the tokens by angle, N log N work: :func:`_circle_sizes`; on S² above
    :data:`GRID_TOKENS` tokens by grid cells: :func:`.grid.cluster_sizes`).

    A configuration with any non-finite coordinate (NaN or ±inf) has no clusters: every
    count, the histogram's included, is −1, a sentinel no configuration gives (an all-NaN
    array was counted as one cluster of N on S¹, N clusters of one elsewhere). Inside
    ``jit`` a value cannot be refused, so the sentinel is what a caller must test."""
    check_bound("tol", tol, lower=0.0, upper=1.0, lower_open=True, upper_open=True)
    n_tokens = x.shape[0]
    if x.shape[1] == 2:
        sizes = _circle_sizes(x, tol)
    elif x.shape[1] == 3 and n_tokens > GRID_TOKENS:
        sizes = grid.cluster_sizes(normalize(x), tol)
    else:
        labels = cluster_labels(x, tol, block=block)
        sizes = jnp.zeros((n_tokens,), jnp.int32).at[labels].add(1)
    present = sizes > 0
    # ⌊log₂ s⌋ by comparisons with powers of two (exact for every int32 size).
    powers = jnp.asarray([1 << k for k in range(size_bins(n_tokens))], jnp.int32)
    size_class = jnp.sum(sizes[:, None] >= powers[None, :], axis=1) - 1
    histogram = jnp.sum(
        (size_class[:, None] == jnp.arange(powers.size)[None, :]) & present[:, None], axis=0
    ).astype(jnp.int32)
    finite = jnp.all(jnp.isfinite(x))
    none = jnp.asarray(-1, jnp.int32)
    return Clusters(
        jnp.where(finite, jnp.sum(present).astype(jnp.int32), none),
        jnp.where(finite, jnp.max(sizes), none),
        jnp.where(finite, histogram, none),
    )


# --- modes ----------------------------------------------------------------------------


def gegenbauer(t: Array, ell_max: int, dim: int) -> list[Array]:
    """``C_ℓ(t)/C_ℓ(1)`` for ``ℓ = 0 … ℓ_max``, index α = (d − 2)/2 (Chebyshev T_ℓ for
    d = 2, Legendre P_ℓ for d = 3), by the recurrence
    ``(ℓ + 2α) G_{ℓ+1} = 2(ℓ + α) t G_ℓ − ℓ G_{ℓ−1}``, ``G_0 = 1``, ``G_1 = t``."""
    alpha = (dim - 2) / 2
    out = [jnp.ones_like(t), t][: ell_max + 1]
    for ell in range(1, ell_max):
        a = 2 * (ell + alpha) / (ell + 2 * alpha)
        b = ell / (ell + 2 * alpha)
        out.append(a * t * out[-1] - b * out[-2])
    return out


def _powers_by_pairs(theta: Array, ell_max: int, block: int | None) -> Array:
    """``(1/N²) Σ_ij C_ℓ(⟨θ_i, θ_j⟩)`` in blocks of rows (padding rows weigh 0)."""
    n_tokens, dim = theta.shape

    def f(rows, real):
        t = jnp.clip(matmul(theta[rows], theta.T), -1.0, 1.0)
        weight = real.astype(theta.dtype)[:, None]
        return jnp.stack([jnp.sum(g * weight) for g in gegenbauer(t, ell_max, dim)])

    sums = jnp.sum(_map_rows(f, n_tokens, block), axis=0)
    return sums / float(n_tokens) ** 2


def _powers_circle(theta: Array, ell_max: int) -> Array:
    """On S¹: ``|(1/N) Σ_j e^{iℓφ_j}|²`` (the Fourier power; ``T_ℓ(cos(φ_i − φ_j))`` summed)."""
    phi = jnp.arctan2(theta[:, 1], theta[:, 0])
    ell = jnp.arange(ell_max + 1, dtype=theta.dtype)
    angle = ell[:, None] * phi[None, :]
    re, im = jnp.mean(jnp.cos(angle), axis=1), jnp.mean(jnp.sin(angle), axis=1)
    return re * re + im * im


def _schmidt_diagonal(ell_max: int) -> np.ndarray:
    """``c_m`` with the Schmidt semi-normalised ``Q_m^m = c_m sin^m θ``:
    ``c_0 = c_1 = 1``, ``c_m = c_{m−1} √((2m − 1)/(2m))``."""
    c = np.ones(ell_max + 1)
    for m in range(2, ell_max + 1):
        c[m] = c[m - 1] * math.sqrt((2 * m - 1) / (2 * m))
    return c


def _powers_sphere(theta: Array, ell_max: int) -> Array:
    """On S²: the addition theorem ``P_ℓ(cos γ) = Σ_m Q_ℓ^m(z) Q_ℓ^m(z') cos(m(φ − φ'))``
    with the Schmidt semi-normalised associated Legendre functions Q_ℓ^m, so
    ``Σ_ij P_ℓ(⟨θ_i, θ_j⟩) = Σ_m |Σ_i Q_ℓ^m(z_i) e^{imφ_i}|²`` (N·ℓ_max² work, no pairs).
    The sums over the tokens a tile of :data:`POWER_TILE` at a time (:func:`_tile_harmonics`),
    the tiles' sums compensated (:func:`.spectral.chunked_sum`): over all tokens at once
    the recurrence's (ℓ_max + 1) × N arrays were new memory at every degree inside the
    modes study's loop over saves (10⁶ tokens on S²: 5.3 s of CPU a save, 3.2 of them the
    kernel's page faults; tiled, 1.8 s)."""
    parts, real = spectral.tiles(theta, POWER_TILE)
    sums = spectral.chunked_sum(
        spectral.over_tiles(lambda p, r: _tile_harmonics(p, r, ell_max), parts, real)
    )  # (2, ℓ, m): Σ_i Q_ℓ^m(z_i) cos mφ_i, … sin mφ_i
    powers = jnp.sum(sums[0] * sums[0] + sums[1] * sums[1], axis=-1)
    return powers / float(theta.shape[0]) ** 2  # (an int N² ≥ 2³¹ overflowed at N = 10⁶)


#: Tokens per tile of the S² mode powers (their recurrence's rows stay in the CPU's cache).
POWER_TILE = 2048


def _tile_harmonics(theta: Array, real: Array, ell_max: int) -> Array:
    """``Σ_i r_i Q_ℓ^m(z_i) (cos mφ_i, sin mφ_i)`` over one tile's tokens (``real``: 1 for a
    token, 0 for padding), ``(2, ℓ_max + 1, ℓ_max + 1)``; Q_ℓ^m by the stable recurrences
    in ℓ at fixed m, all m at once."""
    dtype = theta.dtype
    z = theta[:, 2]
    s = jnp.sqrt(jnp.clip(theta[:, 0] ** 2 + theta[:, 1] ** 2, 0.0, None))
    phi = jnp.arctan2(theta[:, 1], theta[:, 0])
    m = np.arange(ell_max + 1)
    angle = jnp.asarray(m, dtype)[:, None] * phi[None, :]
    cos_m, sin_m = jnp.cos(angle) * real[None, :], jnp.sin(angle) * real[None, :]
    diagonal = jnp.asarray(_schmidt_diagonal(ell_max), dtype)[:, None] * (
        s[None, :] ** jnp.asarray(m, dtype)[:, None]
    )  # Q_m^m, row m
    coefficients = jnp.asarray(_legendre_steps(ell_max), dtype)  # (ℓ, 5, m)
    first_off = jnp.asarray(np.sqrt(2 * m + 1.0), dtype)[:, None] * z[None, :]

    def degree(carry, c):
        """Q_ℓ^m for every m from Q_{ℓ−1}^m and Q_{ℓ−2}^m (c: this ℓ's coefficients)."""
        before, last = carry
        a, b, on_diagonal, first, inside = (row[:, None] for row in c)
        recurrence = a * z[None, :] * last - b * before
        current = on_diagonal * diagonal + first * first_off * last + inside * recurrence
        sums = jnp.stack([jnp.sum(current * cos_m, axis=1), jnp.sum(current * sin_m, axis=1)])
        return (last, current), sums

    # A scan over ℓ: one compiled step whatever ℓ_max (unrolled, ℓ_max = 14 compiled in
    # seconds).
    start = (jnp.zeros_like(diagonal), jnp.zeros_like(diagonal))
    _, sums = jax.lax.scan(degree, start, coefficients)  # (ℓ, 2, m)
    return jnp.moveaxis(sums, 1, 0)


def _legendre_steps(ell_max: int) -> np.ndarray:
    """Per degree ℓ and order m: the recurrence's ``a = (2ℓ − 1)/√(ℓ² − m²)`` and
    ``b = √((ℓ − 1)² − m²)/√(ℓ² − m²)`` (for m ≤ ℓ − 2), and 0/1 masks for the diagonal
    (m = ℓ: Q_m^m), the first off-diagonal (m = ℓ − 1: √(2m + 1) z Q_m^m) and the rest
    (m ≤ ℓ − 2); zero for m > ℓ. Shape (ℓ_max + 1, 5, ℓ_max + 1)."""
    m = np.arange(ell_max + 1, dtype=np.float64)
    steps = np.zeros((ell_max + 1, 5, ell_max + 1))
    for ell in range(ell_max + 1):
        inside = m <= ell - 2
        root = np.sqrt(np.maximum(ell * ell - m * m, 1.0))
        steps[ell, 0] = np.where(inside, (2 * ell - 1) / root, 0.0)
        steps[ell, 1] = np.where(
            inside, np.sqrt(np.maximum((ell - 1) ** 2 - m * m, 0.0)) / root, 0.0
        )
        steps[ell, 2] = m == ell
        steps[ell, 3] = m == ell - 1
        steps[ell, 4] = inside
    return steps


def mode_powers(
    x: Float[Array, "N d"],
    ell_max: int,
    *,
    method: str = "auto",
    block: int | None = None,
) -> Float[Array, " ell"]:
    """``P_ℓ = (1/N²) Σ_ij C_ℓ(⟨θ_i, θ_j⟩)``, ``ℓ = 0 … ℓ_max`` (``P_0 = 1``).

    ``C_ℓ`` is the Gegenbauer polynomial of index (d − 2)/2 with ``C_ℓ(1) = 1``; by the
    addition theorem ``P_ℓ`` is the squared norm of the empirical measure's degree-ℓ
    spherical-harmonic component (times ``|S^{d−1}|/dim H_ℓ``), and for i.i.d. uniform
    tokens ``E P_ℓ = 1/N`` (ℓ ≥ 1: only the N diagonal terms survive the mean).

    ``method``: ``harmonics`` sums harmonics over the tokens (S¹: Fourier modes; S²:
    Schmidt-normalised associated Legendre functions; N·ℓ_max² work), ``pairs`` the
    Gegenbauer polynomials over pairs in blocks (N²·ℓ_max work, any d), ``auto`` the
    harmonics where they exist (d ≤ 3)."""
    check_int("ell_max", ell_max, lower=0)
    check_choice("method", method, MODE_METHODS)
    theta = normalize(x)
    dim = x.shape[-1]
    if method == "harmonics" and dim > 3:
        raise ParameterError(
            f"method='harmonics' is written for d = 2 and 3 (got d = {dim}); use 'pairs' or 'auto'."
        )
    if method == "pairs" or (method == "auto" and dim > 3):
        return _powers_by_pairs(theta, ell_max, block)
    if dim == 2:
        return _powers_circle(theta, ell_max)
    return _powers_sphere(theta, ell_max)


# --- energy and distances -------------------------------------------------------------


#: Above this many tokens on S¹ and S², :func:`log_interaction_energy` sums the kernel's
#: harmonic series over the cloud's coefficients (N·K work on S¹, N·K² on S²) instead of
#: the N² pairs.
SPECTRAL_ENERGY_TOKENS = 2048


def log_interaction_energy(
    x: Float[Array, "N d"], beta: float | Array, *, block: int | None = None
) -> Float[Array, ""]:
    """``log E_β`` with ``E_β = (1/(2βN²)) Σ_ij e^{β⟨θ_i, θ_j⟩}`` (β > 0), the energy that
    unnormalised attention with Q = K = V = I increases (its gradient flow on the sphere).
    A log-sum-exp in blocks of rows: finite at any β where its logarithm is. On S¹ and S²
    above :data:`SPECTRAL_ENERGY_TOKENS` tokens it is the exact harmonic form instead
    (:func:`_circle_log_energy`, :func:`_sphere_log_energy`; no pairs) wherever its
    truncation bound is met. A β ≤ 0 (or not finite) is refused, naming it (it gave NaN,
    or inf at 0); a traced β is checked where it is concrete."""
    check_bound("beta", beta, lower=0.0, lower_open=True)
    n_tokens, dim = x.shape
    theta = normalize(x)
    beta = jnp.asarray(beta, theta.dtype)
    pairs = lambda: _pair_log_energy(theta, beta, block)  # noqa: E731
    if dim == 2 and n_tokens > SPECTRAL_ENERGY_TOKENS:
        total = _circle_log_energy(theta, beta, pairs)
    elif dim == 3 and n_tokens > SPECTRAL_ENERGY_TOKENS:
        total = _sphere_log_energy(theta, beta, pairs)
    else:
        total = pairs()
    return total - jnp.log(2 * beta) - 2 * jnp.log(jnp.asarray(n_tokens, theta.dtype))


def _pair_log_energy(theta: Float[Array, "N d"], beta: Array, block: int | None) -> Array:
    """``log Σ_ij e^{β⟨θ_i, θ_j⟩}`` over the pairs, a log-sum-exp in blocks of rows."""

    def f(rows, real):
        s = beta * matmul(theta[rows], theta.T)
        top = jnp.max(s, axis=1)
        row = top + jnp.log(jnp.sum(jnp.exp(s - top[:, None]), axis=1))
        return jnp.where(real, row, -jnp.inf)

    return jax.nn.logsumexp(_map_rows(f, theta.shape[0], block).reshape(-1))


def _circle_log_energy(theta: Float[Array, "N 2"], beta: Array, direct) -> Array:
    """``log Σ_ij e^{β cos(φ_i − φ_j)}`` on S¹ from ``e^{β cos u} = Σ_k I_k(β) e^{iku}``:
    ``β + log Σ_{k=0}^{K} w_k |c_k|²`` with ``c_k = Σ_j e^{ikφ_j}`` and ``w_k`` the scaled
    weights ``I_k(β)e^{−β}`` (doubled for k ≥ 1). Every term is ≥ 0, the diagonal alone
    gives ≥ N and every pair ≥ e^{−2β}, so the sum is ≥ (N/2)(1 + (N − 1)e^{−2β}) and the
    dropped tail ≤ N²·Σ_{k>K} w_k: its relative size is at most the spectral attention's
    bound 2N·T_K/m_N, which picks K below ε/8 (:func:`spectral.degree_index`). Where no
    degree serves β, ``direct()`` (the pairs) runs instead. The coefficients are summed
    in tiles by compensated sums."""
    n_tokens = theta.shape[0]
    index = spectral.degree_index(beta, n_tokens, 2, theta.dtype)
    degree = spectral.DEGREES[-1]  # one compiled degree for a traced β; exact for all

    def fourier():
        w = spectral.kernel_weights(beta, 2, degree, theta.dtype)
        parts, real = spectral.tiles(theta, spectral.TILE)
        sums = spectral.over_tiles(
            lambda p, r: jnp.sum(spectral.angle_rows(p[:, 0], p[:, 1], degree) * r[None], axis=1),
            parts,
            real,
        )
        f = spectral.chunked_sum(sums)  # Σ cos kφ (k = 0 … K), then Σ sin kφ (k = 1 … K)
        power = (
            f[: degree + 1] ** 2 + jnp.concatenate([jnp.zeros((1,), f.dtype), f[degree + 1 :]]) ** 2
        )
        return beta + jnp.log(jnp.sum(w * power))

    if isinstance(index, int):
        return fourier() if index < len(spectral.DEGREES) else direct()
    return jax.lax.cond(index < len(spectral.DEGREES), fourier, direct)


def _sphere_log_energy(theta: Float[Array, "N 3"], beta: Array | float, direct) -> Array:
    """``log Σ_ij e^{β⟨θ_i, θ_j⟩}`` on S² from Funk–Hecke and the addition theorem,
    ``e^{β(t − 1)} = Σ_ℓ w_ℓ P_ℓ(t)``, ``Σ_ij P_ℓ(⟨θ_i, θ_j⟩) = Σ_m (Σ_j S_ℓm(θ_j))²``:
    ``β + log Σ_{ℓ ≤ K} w_ℓ p_ℓ`` (:func:`spectral.sphere_powers`; every term ≥ 0). As on
    S¹ the dropped tail is at most N²·T_K against a sum ≥ (N/2)(1 + (N − 1)e^{−2β}), so the
    spectral attention's degree (:func:`spectral.degree_index`) keeps it below ε/8. The cost
    grows as K², so a traced β picks its degree at run time (``lax.switch``, one branch per
    degree of :data:`spectral.DEGREES`); past the last, ``direct()`` (the pairs)."""
    n_tokens = theta.shape[0]
    index = spectral.degree_index(beta, n_tokens, 3, theta.dtype)
    beta = jnp.asarray(beta, theta.dtype)

    def at(degree: int):
        def harmonics():
            w = spectral.kernel_weights(beta, 3, degree, theta.dtype)
            power = spectral.sphere_powers(theta, degree, spectral.TILE)
            return beta + jnp.log(jnp.sum(w * power))

        return harmonics

    branches = [at(degree) for degree in spectral.DEGREES] + [direct]
    if isinstance(index, int):
        return branches[index]()
    return jax.lax.switch(index, branches)


def min_distance(x: Float[Array, "N d"], *, block: int | None = None) -> Float[Array, ""]:
    """``min_{i≠j} |θ_i − θ_j|`` (N ≥ 2), from the coordinates' differences (``√(2 − 2⟨θ_i,
    θ_j⟩)`` would lose every digit below √ε): in blocks of rows, or on S¹ between
    neighbours in angle (the nearest token of each is one of its two neighbours), or on
    S² above :data:`GRID_TOKENS` tokens from each token's nearest in a k-d tree
    (:func:`.grid.min_distance`)."""
    n_tokens = x.shape[0]
    if n_tokens < 2:
        raise ParameterError("min_distance needs at least 2 tokens.")
    theta = normalize(x)
    if x.shape[1] == 2:
        ring = theta[jnp.argsort(jnp.arctan2(theta[:, 1], theta[:, 0]))]
        gap = ring - jnp.roll(ring, -1, axis=0)
        return jnp.sqrt(jnp.min(small_sum(gap * gap, -1)))
    if x.shape[1] == 3 and n_tokens > GRID_TOKENS:
        return grid.min_distance(theta)

    def f(rows, real):
        gap = theta[rows][:, None, :] - theta[None, :, :]
        squared = small_sum(gap * gap, -1)
        squared = jnp.where(rows[:, None] == jnp.arange(n_tokens)[None, :], jnp.inf, squared)
        return jnp.where(real, jnp.min(squared, axis=1), jnp.inf)

    return jnp.sqrt(jnp.min(_map_rows(f, n_tokens, block)))


class ManyTokenObservables(NamedTuple):
    """Every observable of :mod:`attndyn._core.many_tokens` of one configuration."""

    n_clusters: Int[Array, ""]
    largest: Int[Array, ""]
    histogram: Int[Array, " bins"]
    mode_power: Float[Array, " ell"]
    log_energy: Float[Array, ""]
    min_distance: Float[Array, ""]


def many_token_observables(
    x: Float[Array, "N d"],
    *,
    beta: float | Array,
    tol: float | Array = defaults.TOL,
    ell_max: int = defaults.ELL_MAX,
    block: int | None = None,
) -> ManyTokenObservables:
    """:func:`clusters`, :func:`mode_powers`, :func:`log_interaction_energy` and
    :func:`min_distance` of one configuration."""
    found = clusters(x, tol, block=block)
    return ManyTokenObservables(
        found.n_clusters,
        found.largest,
        found.histogram,
        mode_powers(x, ell_max, block=block),
        log_interaction_energy(x, beta, block=block),
        min_distance(x, block=block),
    )
