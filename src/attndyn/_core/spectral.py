r"""Exact attention for Q = K = I on S¹ and S² from the kernel's own expansion: no pairs.

For unit tokens the scaled kernel ``e^{β(t − 1)}`` (``t = ⟨x, y⟩``) expands in the zonal
harmonics of the sphere with weights ``w_ℓ ≥ 0`` that sum to 1:

- S¹: ``e^{β(cos(θ − φ) − 1)} = Σ_k w_k cos(k(θ − φ))``, ``w_0 = Ĩ_0(β)``,
  ``w_k = 2 Ĩ_k(β)`` (``Ĩ_k = e^{−β} I_k``, the exponentially scaled Bessel functions);
- S²: ``e^{β(t − 1)} = Σ_ℓ w_ℓ P_ℓ(t)``, ``w_ℓ = (2ℓ + 1) e^{−β} i_ℓ(β)`` (Funk–Hecke,
  ``i_ℓ`` the modified spherical Bessel functions), and the addition theorem
  ``P_ℓ(⟨x, y⟩) = Σ_m S_ℓm(x) S_ℓm(y)`` over the real harmonics ``S_ℓm = P̄_ℓ^m(z)·cos mφ``
  and ``P̄_ℓ^m(z)·sin mφ`` with ``P̄_ℓ^m = √((2 − δ_m0)(ℓ − m)!/(ℓ + m)!) P_ℓ^m``.

So the denominator ``D̃_i = Σ_j e^{β(⟨x_i, x_j⟩ − 1)}`` and the numerator
``Ñ_i = Σ_j e^{β(⟨x_i, x_j⟩ − 1)} x_j`` are sums over the harmonic coefficients
``Σ_j S(x_j)`` and ``Σ_j S(x_j) x_j`` of the token cloud, truncated at a degree K chosen from
β, N and the dtype by the bound of :func:`truncation_bound` (derived in the many-tokens
guide): softmax attention is ``Ñ/D̃``, unnormalised attention ``e^{β − log N} Ñ`` (the parts
``(num, den, top)`` of :mod:`.blockwise`, with ``top = β``).

How the sums are formed (the cost is ~N·K² multiply-adds, in matrix products):

- S¹: the rows ``cos kφ_j``, ``sin kφ_j`` (k ≤ K + 1, by complex multiplication); the
  numerator's coefficients are the denominator's shifted by one degree.
- S²: every real harmonic of degree ≤ K is ``Q_ℓm(z)·ε_m(x)``, a polynomial ``Q_ℓm`` of
  degree ≤ ℓ in z times ``ε_m = ρ^{m mod 2} (cos mφ, sin mφ)`` (``ρ = √(x² + y²)``). With
  ``Q_ℓm`` written in Chebyshev polynomials ``T_k(z)`` (the tensor ``A[m, ℓ, k]``, exact,
  built once in float64), the token cloud enters only through
  ``F[k, m] = Σ_j T_k(z_j) ε_m(x_j)``, one matrix product; the numerator's ``Σ_j x_j …`` are
  fixed shifts of F (x, y and z times ``T_k ε_m`` are short sums of ``T_k' ε_m'``). The
  output is the bilinear form ``T(z_i)ᵀ Γ ε(x_i)``, one more matrix product.

Rounding. The coefficients are sums over N tokens: each chunk of :data:`CHUNK` tokens is
summed in the dtype and the chunks with compensated (two-sum) additions, so their error
does not grow with N. Where a row's denominator is small against the size of the terms
that cancel in it (a token far from every other, beside a dense cluster), float32 cannot
give it to rounding: :func:`spectral_parts` estimates each row's rounding error, and rows
whose estimate exceeds :data:`ROW_TOLERANCE` (relative, × max(1, β) × ε: the direct
route's own rounding of scores β⟨x_i, x_j⟩) are summed again in float64, the coefficients
and the rows (O(N K), not O(N) per row: while clusters form such rows are a few per cent
of all), where that costs less than attending them directly (:func:`_in_float64`). The
rest, and rows that even float64 cannot give (none seen), are attended directly against
all keys, in blocks. So are all rows when some token is off the unit sphere by more than
:data:`SPHERE_TOLERANCE` × ε (the expansion holds for unit tokens only).
"""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float
from scipy import special

from .blockwise import redo_rows
from .errors import concrete
from .linalg import matmul, small_sum

#: Token dimensions with a spectral route: S¹ (d = 2) and S² (d = 3).
SPECTRAL_DIMS = (2, 3)
#: The degrees the route truncates at: K is the smallest of these that meets the bound, so
#: that one compiled program serves a range of β (β is an array leaf; under a traced β
#: the degree is picked at run time among those that are cheaper than the direct route).
DEGREES = (8, 12, 16, 20, 26, 32, 40, 52, 64, 80, 100, 128)
#: The truncation error is at most this fraction of the dtype's ε (relative to the output).
TRUNCATION_FRACTION = 1 / 8
#: Rows whose estimated rounding error exceeds ``ROW_TOLERANCE · max(1, β) · ε`` are attended
#: directly (the direct route's own scores carry ``~β ε`` rounding).
ROW_TOLERANCE = 8.0
#: Tokens whose |x|² is farther than this many ε from 1 are off the sphere: every row is
#: then attended directly.
SPHERE_TOLERANCE = 64.0
#: Tokens per chunk of the coefficient sums (each chunk summed in the dtype, the chunks
#: with compensated additions).
CHUNK = 1024


# --- the kernel's weights ------------------------------------------------------------


def kernel_weights_host(beta: float, dim: int, degree: int) -> np.ndarray:
    """``w_0 … w_degree`` in float64 (SciPy's scaled Bessel functions)."""
    ell = np.arange(degree + 1)
    if beta == 0:
        return (ell == 0).astype(np.float64)
    if dim == 2:
        w = special.ive(ell, beta)
        w[1:] *= 2
        return w
    return (2 * ell + 1) * np.sqrt(np.pi / (2 * beta)) * special.ive(ell + 0.5, beta)


def kernel_weights(beta: Float[Array, ""], dim: int, degree: int, dtype) -> Float[Array, " K"]:
    """``w_0 … w_degree`` for a (possibly traced) β, in ``dtype``: the ratios
    ``I_k/I_{k−1}`` by the backward continued fraction ``r_k = 1/(a_k/β + r_{k+1})``
    (``a_k = 2k`` on S¹, ``2k + 1`` on S²; stable, started 40 degrees above), times
    ``Ĩ_0`` (``i0e``) or ``ĩ_0 = (1 − e^{−2β})/(2β)``."""
    beta = jnp.asarray(beta, dtype)
    ks = np.arange(degree + 40, 0, -1)
    a = jnp.asarray(2 * ks if dim == 2 else 2 * ks + 1, dtype) / beta  # β = 0: inf, r = 0

    def step(r, ak):
        r = 1 / (ak + r)
        return r, r

    _, ratios = jax.lax.scan(step, jnp.zeros((), dtype), a)
    ratios = ratios[::-1][:degree]
    if dim == 2:
        base = jax.scipy.special.i0e(beta)
    else:
        safe = jnp.where(beta > 0, beta, jnp.ones((), dtype))
        base = jnp.where(beta > 0, -jnp.expm1(-2 * safe) / (2 * safe), jnp.ones((), dtype))
    scaled = base * jnp.concatenate([jnp.ones((1,), dtype), jnp.cumprod(ratios)])
    ell = np.arange(degree + 1)
    factor = np.where(ell > 0, 2.0, 1.0) if dim == 2 else 2.0 * ell + 1
    return scaled * jnp.asarray(factor, dtype)


def _tails(beta: float, dim: int, degree: int) -> np.ndarray:
    """``T_K = Σ_{ℓ > K} w_ℓ`` for K = 0 … degree (float64, summed from the top)."""
    top = degree + 64 + int(4 * math.sqrt(beta + 1)) + int(beta)
    w = kernel_weights_host(beta, dim, top)
    tail = np.cumsum(w[::-1])[::-1]
    return np.append(tail[1:], 0.0)[: degree + 1]


def truncation_bound(beta: float, n_tokens: int, dim: int, degree: int) -> float:
    r"""The largest error that truncating at ``degree`` makes in a softmax output (absolute;
    unnormalised: relative to the output's scale ``(1/N) Σ_j e^{s_ij}``), for every
    configuration of ``n_tokens`` unit tokens:

    ``2 N T_K / (m_N − N T_K)``, ``m_N = 1 + (N − 1) e^{−2β}``,

    with ``T_K = Σ_{ℓ > K} w_ℓ``: each kernel value is truncated by at most T_K (|P_ℓ| ≤ 1,
    |cos| ≤ 1), so D̃_i and each coordinate of Ñ_i by at most N T_K, while
    D̃_i ≥ m_N (its own term is e^0 = 1, every other ≥ e^{−2β}) and |Ñ_i| ≤ D̃_i."""
    tail = float(_tails(float(beta), dim, degree)[degree])
    floor = 1 + (n_tokens - 1) * math.exp(-2 * float(beta))
    if n_tokens * tail >= floor:
        return math.inf
    return 2 * n_tokens * tail / (floor - n_tokens * tail)


def needed_degree(beta: float, n_tokens: int, dim: int, dtype) -> int | None:
    """The smallest degree of :data:`DEGREES` whose truncation bound is at most
    :data:`TRUNCATION_FRACTION` of the dtype's ε; ``None`` past the largest."""
    target = TRUNCATION_FRACTION * float(jnp.finfo(dtype).eps)
    tails = _tails(float(beta), dim, DEGREES[-1])
    floor = 1 + (n_tokens - 1) * math.exp(-2 * float(beta))
    for degree in DEGREES:
        spill = n_tokens * tails[degree]
        if spill < floor and 2 * spill / (floor - spill) <= target:
            return degree
    return None


@functools.lru_cache(maxsize=256)
def degree_limits(n_tokens: int, dim: int, dtype_name: str) -> tuple[float, ...]:
    """For each degree of :data:`DEGREES`, the largest β (a number of the dtype, rounded
    down) that it serves, by bisection in float64 on :func:`needed_degree`. Both the
    choice for a known β and the run-time choice under a traced β compare β with these
    (:func:`degree_index`), so they agree."""
    dtype = np.dtype(dtype_name)
    limits, lo = [], 0.0
    for degree in DEGREES:

        def serves(beta: float, degree: int = degree) -> bool:
            found = needed_degree(beta, n_tokens, dim, dtype)
            return found is not None and found <= degree

        if not serves(lo):
            limits.append(-math.inf)
            continue
        hi = max(2 * lo, 1.0)
        while serves(hi) and hi < 1e6:
            lo, hi = hi, 2 * hi
        for _ in range(50):
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if serves(mid) else (lo, mid)
        limit = np.asarray(lo, dtype)
        if float(limit) > lo:
            limit = np.nextafter(limit, np.asarray(-np.inf, dtype))
        limits.append(float(limit))
    return tuple(limits)


def degree_index(beta, n_tokens: int, dim: int, dtype):
    """Which degree of :data:`DEGREES` serves β: the number of limits below β (an int, or
    a traced integer for a traced β); ``len(DEGREES)`` past the last."""
    limits = degree_limits(n_tokens, dim, np.dtype(dtype).name)
    if isinstance(beta, float | int | np.floating | np.ndarray):
        value = np.asarray(beta, dtype)
        return int(sum(value > np.asarray(limit, dtype) for limit in limits))
    table = jnp.asarray(limits, dtype)
    return jnp.sum(jnp.asarray(beta, dtype) > table).astype(jnp.int32)


# --- compensated sums ----------------------------------------------------------------


def _two_sum(a: Array, b: Array) -> tuple[Array, Array]:
    """``a + b`` and its rounding error (Knuth's two-sum, exact in any binary float)."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def chunked_sum(values: Float[Array, "n ..."]) -> Float[Array, "..."]:
    """The sum over the leading axis (chunk sums), by a pairwise tree of two-sums whose
    rounding errors are carried apart and added once at the end: the error stays a few ε
    of Σ|values| however many chunks there are."""
    total, error = values, jnp.zeros_like(values)
    while total.shape[0] > 1:
        if total.shape[0] % 2:
            pad = jnp.zeros_like(total[:1])
            total = jnp.concatenate([total, pad])
            error = jnp.concatenate([error, pad])
        total, rounding = _two_sum(total[0::2], total[1::2])
        error = error[0::2] + error[1::2] + rounding
    return (total + error)[0]


def tiles(u: Float[Array, "N d"], tile: int) -> tuple[Array, Array]:
    """The tokens padded with zeros to whole tiles ``(n_tiles, tile, d)``, and which are
    real ``(n_tiles, tile)`` (as 0/1 in the dtype)."""
    n = u.shape[0]
    size = min(tile, n)
    count = -(-n // size)
    padded = jnp.pad(u, ((0, count * size - n), (0, 0)))
    real = (jnp.arange(count * size) < n).astype(u.dtype).reshape(count, size)
    return padded.reshape(count, size, u.shape[1]), real


def over_tiles(f, *arrays: Array):
    """``f`` of each tile (leading axis), stacked: ``lax.map``, or one call for one tile."""
    if arrays[0].shape[0] == 1:
        return jax.tree.map(lambda a: a[None], f(*(a[0] for a in arrays)))
    return jax.lax.map(lambda args: f(*args), arrays)


def untile(out: Float[Array, "t c B"], n_tokens: int) -> Float[Array, "c N"]:
    """Per-tile outputs ``(tiles, c, tile)`` as ``(c, N)``, the padding dropped."""
    count, rows, size = out.shape
    return out.transpose(1, 0, 2).reshape(rows, count * size)[:, :n_tokens]


# --- S¹ ------------------------------------------------------------------------------


def angle_rows(c: Float[Array, "..."], s: Float[Array, "..."], top: int) -> Float[Array, "r ..."]:
    """``cos kφ`` (k = 0 … top) then ``sin kφ`` (k = 1 … top) from (cos φ, sin φ), by
    complex multiplication (error ~k ε; a scan: unrolled, it compiled 20× slower)."""

    def step(carry, _):
        cos, sin = carry
        new = (cos * c - sin * s, cos * s + sin * c)
        return new, new

    one = jnp.ones_like(c)
    _, (cos, sin) = jax.lax.scan(step, (one, jnp.zeros_like(c)), None, length=top)
    return jnp.concatenate([one[None], cos, sin])


def _signed(f_cos: Array, f_sin: Array, k: np.ndarray) -> tuple[Array, Array]:
    """Rows of degree ``k`` (possibly negative) of cos and sin coefficient arrays indexed by
    degree ≥ 0: cos(−kφ) = cos kφ, sin(−kφ) = −sin kφ (``f_sin[0]`` is 0)."""
    sign = jnp.asarray(np.where(k < 0, -1.0, 1.0), f_sin.dtype)
    return f_cos[np.abs(k)], f_sin[np.abs(k)] * sign.reshape((-1,) + (1,) * (f_sin.ndim - 1))


def circle_sums(
    u: Float[Array, "N 2"], w: Float[Array, " K1"], tile: int
) -> tuple[Float[Array, "3 N"], Float[Array, " K1"], Float[Array, " K1"]]:
    """``(D̃, Ñ_x, Ñ_y)`` at every token, and per degree the norms of the denominator's and
    the numerator's coefficients (for the rounding estimate)."""
    degree = w.shape[0] - 1
    parts, real = tiles(u, tile)
    single = angle_rows(u[:, 0], u[:, 1], degree + 1) if parts.shape[0] == 1 else None
    sums = (
        over_tiles(
            lambda p, r: jnp.sum(angle_rows(p[:, 0], p[:, 1], degree + 1) * r[None], axis=1),
            parts,
            real,
        )
        if single is None
        else jnp.sum(single, axis=1)[None]
    )
    f = chunked_sum(sums)  # cos k (0 … K+1), sin k (1 … K+1)
    f_cos = f[: degree + 2]
    f_sin = jnp.concatenate([jnp.zeros((1,), f.dtype), f[degree + 2 :]])
    k = np.arange(degree + 1)
    up_c, up_s = _signed(f_cos, f_sin, k + 1)
    dn_c, dn_s = _signed(f_cos, f_sin, k - 1)
    # Σ_j x_j cos kφ_j etc. from cos φ cos kφ = (cos(k+1)φ + cos(k−1)φ)/2, …
    coef_cos = jnp.stack([f_cos[k], (up_c + dn_c) / 2, (up_s - dn_s) / 2])
    coef_sin = jnp.stack([f_sin[k], (up_s + dn_s) / 2, (dn_c - up_c) / 2])
    weighted = jnp.concatenate([coef_cos * w[None], (coef_sin * w[None])[:, 1:]], axis=1)
    keep = np.concatenate([np.arange(degree + 1), np.arange(degree + 2, 2 * degree + 2)])

    if single is not None:  # one tile: its rows once
        out = matmul(weighted, single[keep])
    else:
        evaluate = lambda p: matmul(weighted, angle_rows(p[:, 0], p[:, 1], degree + 1)[keep])  # noqa: E731
        out = untile(over_tiles(evaluate, parts), u.shape[0])
    norm_d = jnp.sqrt(coef_cos[0] ** 2 + coef_sin[0] ** 2)
    norm_n = jnp.sqrt(jnp.sum(coef_cos[1:] ** 2 + coef_sin[1:] ** 2, axis=0))
    return out, norm_d, norm_n


# --- S²: host tables ----------------------------------------------------------------


@functools.lru_cache(maxsize=32)
def legendre_chebyshev(degree: int) -> np.ndarray:
    """``A[m, ℓ, k]``: ``P̄_ℓ^m(z) / ρ^{m mod 2} = Σ_k A[m, ℓ, k] T_k(z)`` for
    m ≤ ℓ ≤ degree (zero elsewhere), in float64: ``Q_ℓm = P̄_ℓ^m / ρ^{m mod 2}`` is a
    polynomial of degree ≤ ℓ, interpolated exactly at the degree + 1 Chebyshev points
    ``z_j = cos θ_j`` (a cosine transform), where ``P̄_ℓ^m`` comes from the normalised
    recurrence ``P̄_ℓ^m = a z P̄_{ℓ−1}^m − b P̄_{ℓ−2}^m``, stable point by point, from the
    sectoral ``P̄_m^m = c_m ρ^m`` (``c_m = √((2 − δ_m0) (2m)!) / (2^m m!)``; no
    Condon–Shortley sign: it cancels in ``Σ_m S_ℓm(x) S_ℓm(y)``). (The same recurrence run
    on coefficient vectors lost everything past ℓ ≈ 90.)"""
    size = degree + 1
    wide = np.longdouble  # 64-bit mantissas on x86 (float64 elsewhere): a table to ~ε64
    theta = wide(np.pi) * (np.arange(size, dtype=wide) + wide(0.5)) / size
    z, rho = np.cos(theta), np.sin(theta)
    values = np.zeros((size, size, size), wide)  # (m, ℓ, node)
    c_m = wide(1)
    for m in range(size):
        if m:
            c_m *= np.sqrt(wide(2 * m - 1) / wide(2 * m)) * (np.sqrt(wide(2)) if m == 1 else 1)
        prev2, prev = np.zeros(size, wide), c_m * rho**m
        values[m, m] = prev
        for ell in range(m + 1, size):
            a = wide(2 * ell - 1) / np.sqrt(wide((ell - m) * (ell + m)))
            b = np.sqrt(wide(max((ell - 1 - m) * (ell - 1 + m), 0)) / wide((ell - m) * (ell + m)))
            prev2, prev = prev, a * z * prev - b * prev2
            values[m, ell] = prev
    odd = np.arange(size) % 2 == 1
    values[odd] /= rho  # Q_ℓm = P̄_ℓ^m / ρ for odd m (ρ > 0 at every node)
    k = np.arange(size)
    transform = np.cos(np.outer(theta, k)) * np.where(k == 0, 1, 2).astype(wide) / size
    table = (values @ transform).astype(np.float64)
    ell, m = np.arange(size)[None, :], np.arange(size)[:, None]
    return np.where((m <= ell)[:, :, None], table, 0.0)


def _k_terms(k: int, odd_m: bool) -> list[tuple[float, int]]:
    """``ρ^{1 + m mod 2} / ρ^{(m ± 1) mod 2}`` times T_k, as Σ coef T_k': T_k for even m,
    (1 − z²) T_k = T_k/2 − (T_{k+2} + T_{|k−2|})/4 for odd m."""
    if not odd_m:
        return [(1.0, k)]
    return [(0.5, k), (-0.25, k + 2), (-0.25, abs(k - 2))]


def _m_terms(component: str, kind: str, m: int) -> list[tuple[float, str, int]]:
    """``(cos φ or sin φ) · (cos mφ or sin mφ)`` as Σ coef (cos or sin)(m'φ), m' ≥ 0."""
    if component == "x":
        raw = [(0.5, kind, m + 1), (0.5, kind, m - 1)]
    elif kind == "cos":  # y: sin φ cos mφ = (sin(m+1)φ − sin(m−1)φ)/2
        raw = [(0.5, "sin", m + 1), (-0.5, "sin", m - 1)]
    else:  # y: sin φ sin mφ = (cos(m−1)φ − cos(m+1)φ)/2
        raw = [(0.5, "cos", m - 1), (-0.5, "cos", m + 1)]
    out = []
    for coef, kind2, m2 in raw:
        if kind2 == "sin" and m2 < 0:
            coef, m2 = -coef, -m2
        if kind2 == "sin" and m2 == 0:
            continue
        out.append((coef, kind2, abs(m2)))
    return out


@functools.lru_cache(maxsize=32)
def shift_maps(degree: int) -> tuple[np.ndarray, np.ndarray]:
    """Gather maps giving ``Σ_j c_j T_k(z_j) ε_t(x_j)`` for c = x, y, z (k ≤ degree, t over
    the target rows: cos m = 0 … degree, sin m = 1 … degree) from the flat
    ``F[k, r] = Σ_j T_k(z_j) ε_r(x_j)`` (k ≤ degree + 2, r over cos m ≤ degree + 1 and sin
    m = 1 … degree + 1): ``(index, coef)`` of shape ``(3, degree + 1, 2 degree + 1, 8)``."""
    top = degree + 1
    width = 2 * top + 1

    def flat(k: int, kind: str, m: int) -> int:
        return k * width + (m if kind == "cos" else top + m)

    index = np.zeros((3, degree + 1, 2 * degree + 1, 8), np.int32)
    coef = np.zeros((3, degree + 1, 2 * degree + 1, 8))
    for k in range(degree + 1):
        for t in range(2 * degree + 1):
            kind, m = ("cos", t) if t <= degree else ("sin", t - degree)
            terms = [(0.5, k + 1), (0.5, abs(k - 1))]
            lists = {
                "z": [(c, flat(k2, kind, m)) for c, k2 in terms],
                **{
                    comp: [
                        (cm * ck, flat(k2, kind2, m2))
                        for cm, kind2, m2 in _m_terms(comp, kind, m)
                        for ck, k2 in _k_terms(k, m % 2 == 1)
                    ]
                    for comp in ("x", "y")
                },
            }
            for c, comp in enumerate(("x", "y", "z")):
                for slot, (value, i) in enumerate(lists[comp]):
                    index[c, k, t, slot], coef[c, k, t, slot] = i, value
    return index, coef


# --- S²: the sums --------------------------------------------------------------------


def _sphere_rows(u: Float[Array, "N 3"], degree: int) -> tuple[Array, Array]:
    """``T_k(z)`` for k ≤ degree + 2 and ``ε_r = ρ^{m mod 2}(cos mφ, sin mφ)`` for
    m ≤ degree + 1, per token (columns), from complex powers of ``z + iρ`` and ``e^{iφ}``
    (one scan for both)."""
    x, y, z = u[:, 0], u[:, 1], u[:, 2]
    rho = jnp.sqrt(x * x + y * y)
    pole = rho == 0
    safe = jnp.where(pole, jnp.ones_like(rho), rho)
    c = jnp.where(pole, jnp.ones_like(rho), x / safe)
    s = jnp.where(pole, jnp.zeros_like(rho), y / safe)
    top = degree + 1
    base = jnp.stack([z, c]), jnp.stack([rho, s])  # two complex numbers per token
    both = angle_rows(*base, top + 1)  # (2 top + 3, 2, N)
    cheb = both[: top + 2, 0]
    keep = np.concatenate([np.arange(top + 1), top + 1 + np.arange(1, top + 1)])
    angles = both[keep, 1]
    m = np.concatenate([np.arange(top + 1), np.arange(1, top + 1)])
    odd = jnp.asarray(m % 2 == 1)[:, None]
    return cheb, jnp.where(odd, angles * rho[None], angles)


def sphere_sums(
    u: Float[Array, "N 3"], w: Float[Array, " K1"], tile: int
) -> tuple[Float[Array, "4 N"], Float[Array, " K1"], Float[Array, " K1"]]:
    """``(D̃, Ñ_x, Ñ_y, Ñ_z)`` at every token, and per degree the norms of the
    denominator's and the numerator's harmonic coefficients."""
    degree = w.shape[0] - 1
    dtype = u.dtype
    parts, real = tiles(u, tile)

    single = _sphere_rows(u, degree) if parts.shape[0] == 1 else None

    def coefficients(p, r):
        cheb, eps = _sphere_rows(p, degree) if single is None else single
        return matmul(cheb * r[None], eps.T)

    f = chunked_sum(over_tiles(coefficients, parts, real)).reshape(-1)  # F[k, r], flat
    top = degree + 1
    targets = np.concatenate([np.arange(degree + 1), top + np.arange(1, degree + 1)])
    plain = f.reshape(degree + 3, 2 * top + 1)[: degree + 1][:, targets]
    index, coef = shift_maps(degree)
    shifted = jnp.sum(f[index] * jnp.asarray(coef, dtype), axis=-1)  # (3, K+1, 2K+1)
    fc = jnp.concatenate([plain[None], shifted])
    m_of_t = np.concatenate([np.arange(degree + 1), np.arange(1, degree + 1)])
    a = jnp.asarray(legendre_chebyshev(degree)[m_of_t], dtype)  # (t, ℓ, k)
    highest = jax.lax.Precision.HIGHEST
    harmonic = jnp.einsum("tlk,ckt->clt", a, fc, precision=highest)
    gamma = jnp.einsum("tlk,clt->ckt", a, harmonic * w[None, :, None], precision=highest)
    gamma = gamma.reshape(4 * (degree + 1), 2 * degree + 1)

    def evaluate(p):
        cheb, eps = _sphere_rows(p, degree) if single is None else single
        y = matmul(gamma, eps[targets]).reshape(4, degree + 1, -1)
        out = y[:, 0] * cheb[0][None]
        for k in range(1, degree + 1):  # unrolled adds: a reduction over k ran 10× slower
            out = out + y[:, k] * cheb[k][None]
        return out

    out = untile(over_tiles(evaluate, parts), u.shape[0])
    norm_d = jnp.sqrt(jnp.sum(harmonic[0] ** 2, axis=-1))
    norm_n = jnp.sqrt(jnp.sum(harmonic[1:] ** 2, axis=(0, 2)))
    return out, norm_d, norm_n


def sphere_powers(u: Float[Array, "N 3"], degree: int, tile: int) -> Float[Array, " K1"]:
    """``Σ_m (Σ_j S_ℓm(x_j))² = Σ_ij P_ℓ(⟨x_i, x_j⟩)`` for ℓ = 0 … degree (the addition
    theorem), from the same coefficient sums as :func:`sphere_sums` (``F[k, t] = Σ_j
    T_k(z_j) ε_t(x_j)``, compensated over tiles, then the exact table ``A[m, ℓ, k]``)."""
    parts, real = tiles(u, tile)

    def coefficients(p, r):
        cheb, eps = _sphere_rows(p, degree - 1)  # T_k, k ≤ degree + 1; ε_m, m ≤ degree
        return matmul(cheb[: degree + 1] * r[None], eps.T)

    f = chunked_sum(over_tiles(coefficients, parts, real))  # (k, t): cos m ≤ K, sin m ≥ 1
    m_of_t = np.concatenate([np.arange(degree + 1), np.arange(1, degree + 1)])
    a = jnp.asarray(legendre_chebyshev(degree)[m_of_t], u.dtype)  # (t, ℓ, k)
    harmonic = jnp.einsum("tlk,kt->lt", a, f, precision=jax.lax.Precision.HIGHEST)
    return jnp.sum(harmonic * harmonic, axis=-1)


# --- the route -----------------------------------------------------------------------

#: Tokens per tile: the per-token rows of a tile (~(3K + 6) × tile numbers) stay in the
#: CPU's cache (at N = 16,384, d = 3, one tile of all tokens ran 7× slower than tiles).
TILE = 2048


def rounding_estimate(
    w: Float[Array, " K1"], norm_d: Array, norm_n: Array, n_tokens: int, dtype
) -> Float[Array, ""]:
    """An estimate of the largest rounding error of D̃_i and Ñ_i (absolute):
    ``ε √(K + 2) Σ_ℓ w_ℓ (|c_ℓ| + |g_ℓ| + √((2ℓ + 1) N))``. |c_ℓ| and |g_ℓ| are the norms of
    the degree-ℓ coefficients of the denominator and the numerator: by Cauchy–Schwarz and
    Σ_m S_ℓm² = 1 no term of degree ℓ exceeds w_ℓ |c_ℓ| at any token, so this is the size
    of what cancels in a row; the last term is the random rounding of the N-term sums; the
    rows carry errors growing with the degree, which add at random over the K + 1 degrees
    (√(K + 2)). Calibrated, not proved: on the uniform, clustered, antipodal, near-pole
    and lone-token configurations of the tests the realised error is at most 1/3 of it."""
    degree = w.shape[0] - 1
    eps = float(jnp.finfo(dtype).eps)
    noise = jnp.asarray(np.sqrt((2 * np.arange(degree + 1) + 1) * n_tokens), dtype)
    return eps * math.sqrt(degree + 2) * jnp.sum(w * (norm_d + norm_n + noise))


def _unit(x: Float[Array, "N d"], beta: Float[Array, ""]):
    """The directions u, β in the dtype, and whether some token is off the unit sphere."""
    eps = float(jnp.finfo(x.dtype).eps)
    r2 = small_sum(x * x, -1)
    off_sphere = jnp.max(jnp.abs(r2 - 1)) > SPHERE_TOLERANCE * eps
    return x / jnp.sqrt(r2)[:, None], jnp.asarray(beta, x.dtype), off_sphere


def _sums(u: Array, beta: Array, w: Array) -> tuple[Array, Array, Array]:
    """``(num, den, good)``: the truncated sums at the degree of ``w``, and which rows'
    rounding estimate is within :data:`ROW_TOLERANCE` (NaN compares False: not good).
    In float32, rows that are not good are summed again in float64 (:func:`_in_float64`)."""
    tolerance = ROW_TOLERANCE * jnp.maximum(beta, 1) * float(jnp.finfo(u.dtype).eps)
    num, den, good = _rows_within(u, w, tolerance)
    if u.dtype == jnp.float64:
        return num, den, good
    return _in_float64(u, beta, w, (num, den, good), tolerance)


def _rows_within(u: Array, w: Array, tolerance: Array) -> tuple[Array, Array, Array]:
    """``(num, den, good)`` in the dtype of ``u``: good where the rounding estimate is
    within ``tolerance`` (relative to the row's denominator)."""
    n_tokens, dim = u.shape
    sums = circle_sums if dim == 2 else sphere_sums
    out, norm_d, norm_n = sums(u, w, TILE)
    den = out[0]
    error = rounding_estimate(w, norm_d, norm_n, n_tokens, u.dtype)
    return out[1:].T, den, error <= tolerance * den


def _in_float64(u: Array, beta: Array, w: Array, parts, tolerance: Array):
    """``parts`` with the rows that are not good replaced by the same sums in float64 (the
    coefficients and every row, on the host CPU: :func:`_float64_rows`). Once clusters
    form, a token between them has a denominator far below the terms that cancel in it,
    which float32 cannot give to rounding (at N = 10⁵, β = 4 on S¹, ~5 % of the rows
    while the clusters form), and the direct route would cost N per such row. Rows float64
    cannot give either stay not good (attended directly).

    A host callback, not float64 traced inside the float32 program: JAX re-traces a traced
    program's pieces (vmap, jvp of a jitted function) outside any ``enable_x64`` context,
    and then the float64 pieces fail. A while loop that runs at most once, not a cond:
    under ``vmap`` it runs only when some trajectory has such a row, and each
    trajectory's call returns at once when it has none. The float64 values enter as
    ``num + stop_gradient(num64 − num)``: forward-mode derivatives are the float32
    expansion's."""
    (n_tokens, dim), degree = u.shape, w.shape[0] - 1
    shapes = (
        jax.ShapeDtypeStruct(parts[0].shape, u.dtype),
        jax.ShapeDtypeStruct(parts[1].shape, u.dtype),
        jax.ShapeDtypeStruct(parts[2].shape, jnp.bool_),
    )
    host = functools.partial(_float64_rows, dim=dim, degree=degree)
    # The pass runs where it is cheaper than attending the rows directly (small N and few
    # such rows: directly; the default modes run at N = 4,096 took 18 % more CPU with the
    # pass at every such row).
    pass_cost = HOST_PASS_S + HOST_PASS_FACTOR * spectral_cost(n_tokens, dim, degree)
    rows_worth = math.ceil(pass_cost / direct_cost_per_row(n_tokens))

    def again(state):
        _, num, den, good = state
        args = jax.lax.stop_gradient((u, beta, good, tolerance, _worth(good, rows_worth)))
        num64, den64, good64 = jax.pure_callback(host, shapes, *args, vmap_method="sequential")
        take = ~good & good64
        num = jnp.where(take[:, None], num + jax.lax.stop_gradient(num64 - num), num)
        den = jnp.where(take, den + jax.lax.stop_gradient(den64 - den), den)
        return jnp.ones((), bool), num, den, good | take

    def pending(state):
        return ~state[0] & _worth(state[3], rows_worth)

    return jax.lax.while_loop(pending, again, (jnp.zeros((), bool), *parts))[1:]


def _worth(good: Array, rows_worth: int) -> Array:
    """Whether at least ``rows_worth`` rows are not good (the float64 pass pays)."""
    return jnp.sum(~good, dtype=jnp.int32) >= rows_worth


def _float64_rows(u, beta, good, tolerance, worth, *, dim: int, degree: int):
    """``(num, den, good)`` of :func:`_rows_within` in float64 on the host CPU (the exact
    weights from SciPy), returned in the dtype of ``u``; all not good at once when the
    pass does not pay for this configuration (``worth`` False: a trajectory of a batch
    whose few rows are attended directly)."""
    n_tokens = u.shape[0]
    dtype = u.dtype
    if not worth:
        return np.zeros((n_tokens, dim), dtype), np.ones(n_tokens, dtype), np.zeros(n_tokens, bool)
    cpu = jax.devices("cpu")[0]
    with jax.enable_x64(True):
        w = jax.device_put(kernel_weights_host(float(beta), dim, degree), cpu)
        u64 = jax.device_put(np.asarray(u, np.float64), cpu)
        out = _rows_float64(u64, w, jnp.asarray(float(tolerance), jnp.float64))
        num, den, ok = (np.asarray(a) for a in out)
    return num.astype(dtype), den.astype(dtype), ok


#: :func:`_rows_within` compiled for the host pass (traced and run under ``enable_x64``).
_rows_float64 = jax.jit(lambda u, w, tolerance: _rows_within(u, w, tolerance))


def spectral_parts(
    x: Float[Array, "N d"], beta: Float[Array, ""], *, degree: int, block: int
) -> tuple[Float[Array, "N d"], Float[Array, " N"], Float[Array, " N"]]:
    """``(num, den, top)`` as :func:`.blockwise.blockwise_parts` gives them for one head
    (``top = β``: the weights are ``e^{β(⟨x_i, x_j⟩ − 1)}``), by the expansion truncated at
    ``degree``; rows whose rounding estimate is too large, or every row when a token is
    off the unit sphere, attended directly (:func:`repair`)."""
    u, beta, off_sphere = _unit(x, beta)
    num, den, good = _sums(u, beta, kernel_weights(beta, x.shape[1], degree, x.dtype))
    top = jnp.broadcast_to(beta, den.shape)
    return repair(x, (num, den, top), ~good | off_sphere, beta, block)


def repair(
    x: Float[Array, "N d"],
    parts: tuple[Array, Array, Array],
    bad: Array,
    beta: Float[Array, ""],
    block: int,
) -> tuple[Array, Array, Array]:
    """``parts`` with the rows ``bad`` attended directly against all keys, ``block`` rows
    at a time (:func:`.blockwise.redo_rows`: no block when no row is bad)."""
    return redo_rows(x, x.T, x, parts, bad, beta, block)


# --- which degrees are worth it --------------------------------------------------------

#: Seconds per unit of work, measured on the 2-core development CPU (2026-11-29,
#: benchmarks/manytokens.py; see docs/performance.md): the direct route per pair of tokens
#: (d ≤ 3), the S¹ route per token and row (2K + 3 rows), the S² route per token and
#: entry of its (K + 3) × (2K + 3) bilinear form.
DIRECT_PAIR_S = 6e-10
CIRCLE_ROW_S = 2.7e-9
SPHERE_ENTRY_S = 3.1e-10
#: ``auto`` takes the spectral route where it costs at most this fraction of the direct
#: route (a margin for rows it attends directly and for the machine's noise).
AUTO_MARGIN = 0.25
#: The float64 pass over rows float32 cannot give (:func:`_in_float64`): its fixed cost
#: (the host callback) and its cost against the float32 route's modelled one (float64 on
#: the host, both passes): 2.2-3.3 ms at N = 4,096, 0.27 s (S¹) and 1.0 s (S²) of CPU at
#: N = 10⁶, K = 20 (2026-11-29, the 2-core development CPU).
HOST_PASS_S = 1e-3
HOST_PASS_FACTOR = 3.0


def spectral_cost(n_tokens: int, dim: int, degree: int) -> float:
    """Modelled seconds of one spectral attention (both passes)."""
    if dim == 2:
        return CIRCLE_ROW_S * n_tokens * (2 * degree + 3)
    return SPHERE_ENTRY_S * n_tokens * (degree + 3) * (2 * degree + 3)


def direct_cost(n_tokens: int) -> float:
    """Modelled seconds of one direct attention of N tokens (d ≤ 3)."""
    return n_tokens * direct_cost_per_row(n_tokens)


def direct_cost_per_row(n_tokens: int) -> float:
    """Modelled seconds of one row attended directly against N keys (d ≤ 3)."""
    return DIRECT_PAIR_S * n_tokens


def cheaper_degrees(n_tokens: int, dim: int) -> tuple[int, ...]:
    """The degrees of :data:`DEGREES` at which the spectral route costs at most
    :data:`AUTO_MARGIN` of the direct route (a prefix of it, possibly empty)."""
    budget = AUTO_MARGIN * direct_cost(n_tokens)
    return tuple(d for d in DEGREES if spectral_cost(n_tokens, dim, d) <= budget)


def attention_parts(
    x: Float[Array, "N d"],
    beta: Float[Array, ""],
    *,
    degrees: tuple[int, ...],
    block: int,
    beta_max: float | None = None,
) -> tuple[Array, Array, Array]:
    """``(num, den, top)`` of one head: spectral at the degree β needs if it is one of
    ``degrees`` (a prefix of :data:`DEGREES`), else every row attended directly. A known
    β compiles its degree only; a traced β with ``beta_max`` compiles the degree of
    ``beta_max`` only (a smaller β runs it too: more than it needs, never less; a larger
    one is attended directly); a traced β without picks at run time among all of
    ``degrees`` (``lax.switch``, one compiled branch per degree; the weights, the sphere
    test and the direct rows are shared)."""
    n_tokens, dim = x.shape
    value = concrete(beta)
    index = degree_index(value if value is not None else beta, n_tokens, dim, x.dtype)
    if value is not None:
        degrees = degrees[index : index + 1]
        index = 0
    elif beta_max is not None:
        most = degree_index(np.asarray(beta_max), n_tokens, dim, x.dtype)
        degrees = degrees[most : most + 1]
        index = jnp.where(index <= most, 0, 1)
    if not degrees:
        top = jnp.zeros((n_tokens,), x.dtype)
        return repair(x, (jnp.zeros_like(x), top, top), jnp.ones((n_tokens,), bool), beta, block)
    u, beta, off_sphere = _unit(x, beta)
    w = kernel_weights(beta, dim, max(degrees), x.dtype)

    def none(u, beta, w):
        zeros = jnp.zeros((n_tokens,), x.dtype)
        return jnp.zeros_like(u), zeros, zeros > 0

    branches = [lambda u, b, w, k=k: _sums(u, b, w[: k + 1]) for k in degrees]
    if len(branches) == 1 and value is not None:
        num, den, good = branches[0](u, beta, w)
    else:
        which = jnp.minimum(index, len(branches))
        num, den, good = jax.lax.switch(which, [*branches, none], u, beta, w)
    top = jnp.broadcast_to(beta, (n_tokens,))
    return repair(x, (num, den, top), ~good | off_sphere, beta, block)
