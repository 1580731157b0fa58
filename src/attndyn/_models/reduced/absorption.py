"""Early absorption for two tokens: when a trajectory's class can no longer change.

For N = 2, Post-LN, Q = K = I and full value noise without drift, the overlap Z = ⟨θ₁, θ₂⟩
is (as L → ∞) a diffusion on (−1, 1) with scale density s (spec §4, the same for SA and
USA and every σ). Near the ends s(x) ~ c₊ (1 − x)^{a₊} with a₊ = (d − 3)/2, and
s(x) ~ c₋ (1 + x)^{a₋} with a₋ = −1/2 − (d − 2)/(2 cosh 2β). From Z₀ = 1 − δ the chance
of ever getting back to 1 − tol (the only way to leave the "single" class) is, by the
scale function,

    R₊(δ) = ∫_{1−δ}^{1} s / ∫_{1−tol}^{1} s ≈ (δ/tol)^{κ₊},   κ₊ = a₊ + 1 = (d − 1)/2,

and likewise R₋(δ) ≈ (δ/tol)^{κ₋} with κ₋ = a₋ + 1 = 1/2 − (d − 2)/(2 cosh 2β) near −1
(an exit boundary only when κ₋ > 0, i.e. β > β_c(d)). The smooth factor of s changes by a
relative O(β·tol) over the end intervals; a safety factor 2 covers it. We choose

    δ± = tol · (ε/2)^{1/κ±}

so that an absorbed trajectory leaves its class later with probability at most ε (the
estimator's default 10⁻⁷, ``attndyn._core.defaults.CLASS_CHANGE_BOUND``) per trajectory. Over
n trajectories the expected number of changed class indicators is at most n·ε at every
save time, far below the Monte Carlo error √(n p(1−p)).
The bound is that of the diffusion limit; at finite L the two-token chain is close to it
(its log-gap is a random walk with the same drift-to-variance ratio up to O(1/L)), which
the tests check by comparing with full-horizon runs. The two-token chain carries sin φ with
relative precision down to float32's smallest normal numbers (gaps ~10⁻⁷⁶), so both ends
can be trusted far below the clustering tolerance; an end that would need δ below
``MIN_GAP`` (10⁻⁶⁰: sin φ ≈ 1.4·10⁻³⁰, inside the normal range) is simply never absorbed (δ = 0):
correctness first, speed where it is free.

Absorbed trajectories are set aside: each block of layers runs only the live ones,
compacted into tiles (:class:`.absorbing.AbsorbingRoute`, the wrapper model that runs
this), so a chunk's cost follows the trajectories still moving.

Absorbed trajectories keep their state, so their mean cosine at later saves is frozen
within δ of ±1 instead of creeping closer: a change of at most δ per trajectory.
"""

import math

import jax

from ...theory._phase import _critical, _exponents
from ..base import LayerMaps

#: Smallest δ used: the relative-precision chain resolves gaps far below it in float32.
MIN_GAP = 1e-60

#: Live trajectories run together between absorption checks
#: (:class:`.absorbing.AbsorbingRoute`): on CPU a tile that stays in cache and
#: follows the live count closely; an accelerator needs thousands side by side to be
#: filled at all (seed 003's Fig. 3 on one H100: 137 s in tiles of 512).
CPU_ABSORB_TILE = 512
ACCELERATOR_ABSORB_TILE = 8192

#: Covers the variation of the smooth factor of s over [1 − tol, 1] (relative O(β·tol)).
SAFETY = 2.0


def absorption_exponents(beta: float, dim: int) -> tuple[float, float]:
    """κ₊ and κ₋: R±(δ) ≈ (δ/tol)^{κ±}; κ₋ ≤ 0 means −1 does not absorb (β ≤ β_c(d))."""
    a_plus, a_minus = _exponents(beta, dim)
    return a_plus + 1, a_minus + 1


def absorption_gaps(beta: float, dim: int, tol: float, bound: float) -> tuple[float, float]:
    """(δ₊, δ₋): gaps 1 − z ≤ δ₊ or 1 + z ≤ δ₋ after which the class changes w.p. ≤ bound.

    Either is 0 when that end cannot be made safe within float32 resolution (or is not an
    absorbing end at all: −1 for β ≤ β_c(d)).

    Nothing is checked again here: β and d come from a model (its ``__check_init__``),
    ``tol`` and ``bound`` from the estimator's options (``check_options``), each checked
    where it entered.
    """
    gaps = []
    for kappa in absorption_exponents(beta, dim):
        if kappa <= 0 or (kappa < 1e-3):
            gaps.append(0.0)
            continue
        delta = tol * (bound / SAFETY) ** (1 / kappa)
        gaps.append(delta if delta >= MIN_GAP else 0.0)
    if dim > 3 and beta <= _critical(dim):
        gaps[1] = 0.0
    return gaps[0], gaps[1]


def escape_bound(beta: float, dim: int, tol: float, gap_plus: float, gap_minus: float) -> float:
    """The per-trajectory bound for given gaps: max over the absorbing ends of 2(δ/tol)^κ."""
    worst = 0.0
    for kappa, delta in zip(absorption_exponents(beta, dim), (gap_plus, gap_minus)):
        if delta > 0:
            worst = max(worst, SAFETY * (delta / tol) ** kappa)
    return min(worst, 1.0)


def absorption_applies(model: LayerMaps, n_tokens: int) -> str | None:
    """Why early absorption is not quantified for the reduced form of ``model``, or ``None``
    when it is."""
    if n_tokens != 2:
        return f"it is quantified for N = 2 only (got N = {n_tokens})"
    if not model.scheme.post_ln_map:
        return "it needs the Post-LN scheme"
    att = model.attention
    if any(att.laplacian_flags) or att.causal or att.self_mask:
        return "Laplacian, causal or self-masked attention changes the overlap diffusion"
    if att.diagonal_shift is not None:
        return "a diagonal shift of the scores changes the overlap diffusion"
    matrix = model.values.gaussian_matrix()
    if matrix is None or float(matrix[0]) != 0.0:
        return "it needs full (Gaussian) value noise without drift"
    if not math.isfinite(float(att.beta)):
        return "β must be finite"
    return None


def absorb_tile() -> int:
    """The compaction tile of this backend (:data:`CPU_ABSORB_TILE`, or
    :data:`ACCELERATOR_ABSORB_TILE` on a GPU or TPU)."""
    return CPU_ABSORB_TILE if jax.default_backend() == "cpu" else ACCELERATOR_ABSORB_TILE
