"""Clustering observables of one configuration ``X`` shaped ``(N, d)`` (spec §5)."""

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int

from . import defaults
from .errors import check_bound
from .linalg import SMALL_AXIS, dot
from .sphere import normalize

#: The clustering classes, in the order of the last axis of :func:`cluster_classes`.
OUTCOMES = ("single", "antipodal", "has_antipodal_pair", "unclustered")

#: The peers' thresholds: a pair is "in one cluster" above this cosine, and a Gram
#: eigenvalue counts towards the span above this value.
PAIR_DENSITY_THRESHOLD = 0.999
SPAN_THRESHOLD = 1e-3


def overlaps(x: Float[Array, "N d"]) -> Float[Array, "N N"]:
    """Pairwise cosines ⟨θ_i, θ_j⟩ of the directions θ = x/|x|."""
    theta = normalize(x)
    return dot(theta, theta.T)


def _pair_mask(n_tokens: int) -> Bool[Array, "N N"]:
    return jnp.triu(jnp.ones((n_tokens, n_tokens), dtype=bool), k=1)


def _sums(operands: tuple[Array, ...]) -> tuple[Array, ...]:
    """The sums of N × N arrays, as one variadic reduction (one pass for all of them)."""
    zeros = tuple(jnp.zeros((), op.dtype) for op in operands)
    add = lambda a, b: tuple(u + v for u, v in zip(a, b, strict=True))  # noqa: E731
    return tuple(jax.lax.reduce(operands, zeros, add, (0, 1)))


def _pair_sums(x: Float[Array, "N d"], *terms: Callable[[Array], Array]) -> tuple[Array, ...]:
    """``Σ_{i<j} term(⟨θ_i, θ_j⟩)`` for each term, in one pass over the Gram matrix.

    Separate ``jnp.sum``/``all``/``any`` calls each recomputed the Gram matrix (XLA fuses
    its elementwise producer into every reduction): N = 50, d = 4, 2,048 trajectories ×
    41 saves took 1.8 s for classes, cosine and density one after the other, 0.49 s as
    one reduction (a study at 41 saves: 5-12 % faster)."""
    gram = overlaps(x)
    pairs = _pair_mask(x.shape[0])
    return _sums(tuple(jnp.where(pairs, term(gram), 0) for term in terms))


class PairObservables(NamedTuple):
    """The pair-based observables of one configuration, from one pass over its pairs."""

    classes: Bool[Array, "4"]  # cluster_classes
    mean_cosine: Float[Array, ""]
    pair_density: Float[Array, ""]


def pair_observables(
    x: Float[Array, "N d"],
    tol: float | Array = defaults.TOL,
    threshold: float | Array = PAIR_DENSITY_THRESHOLD,
) -> PairObservables:
    """:func:`cluster_classes`, :func:`mean_cosine` and :func:`pair_density` together.

    Pair counts decide the classes: together (⟨θ_i, θ_j⟩ ≥ 1 − tol) and antipodal
    (≤ −1 + tol) are disjoint for tol < 1, so every pair is one or the other exactly when
    the two counts add up to the number of pairs."""
    check_bound("tol", tol, lower=0.0, upper=1.0, lower_open=True, upper_open=True)
    counts = jnp.int32
    together, apart, close, cosines = _pair_sums(
        x,
        lambda g: (g >= 1 - tol).astype(counts),
        lambda g: (g <= -1 + tol).astype(counts),
        lambda g: (g > threshold).astype(counts),
        lambda g: g,
    )
    n_pairs = x.shape[0] * (x.shape[0] - 1) // 2
    single = together == n_pairs
    any_apart = apart > 0
    antipodal = (together + apart == n_pairs) & any_apart
    classes = jnp.stack([single, antipodal, any_apart, ~(single | antipodal)])
    if n_pairs == 0:  # one token: one cluster; cosine and density 1 by convention
        defined = jnp.all(jnp.isfinite(x)) & jnp.any(x != 0)
        one = jnp.where(defined, 1, jnp.nan).astype(x.dtype)
        return PairObservables(classes & defined, one, one)
    # A NaN coordinate or a zero row (no direction) makes a cosine NaN, and the
    # configuration has no class at all (not "unclustered"): its mean cosine is NaN.
    return PairObservables(
        classes & ~jnp.isnan(cosines), cosines / n_pairs, close.astype(x.dtype) / n_pairs
    )


def cluster_classes(x: Float[Array, "N d"], tol: float | Array = defaults.TOL) -> Bool[Array, "4"]:
    """Membership in each of :data:`OUTCOMES`.

    A pair is *together* if ⟨θ_i, θ_j⟩ ≥ 1 − tol and *antipodal* if ⟨θ_i, θ_j⟩ ≤ −1 + tol.

    - single: every pair together (always true for N = 1);
    - antipodal: every pair together or antipodal, at least one antipodal;
    - has_antipodal_pair: at least one antipodal pair (overlaps the others);
    - unclustered: neither single nor antipodal.

    A configuration with a NaN coordinate or a zero row (a token without a direction)
    belongs to no class: all four are False (and :func:`mean_cosine` is NaN).
    """
    return pair_observables(x, tol).classes


def mean_cosine(x: Float[Array, "N d"]) -> Float[Array, ""]:
    """Mean of ⟨θ_i, θ_j⟩ over pairs i < j (seed 000's CosSim); 1 when N = 1."""
    return pair_observables(x).mean_cosine


def variance(x: Float[Array, "N d"]) -> Float[Array, ""]:
    """Var = (1/N) Σ_k |θ_k − θ̄|² = 1 − |θ̄|² (seed 004, Thm 4.3)."""
    theta = normalize(x)
    return jnp.mean(jnp.sum((theta - jnp.mean(theta, axis=0, keepdims=True)) ** 2, axis=-1))


def n_clusters(x: Float[Array, "N d"], tol: float | Array = defaults.TOL) -> Int[Array, ""]:
    """Number of connected components of the "together" graph, as an integer.

    The reachability matrix comes from ⌈log₂ N⌉ boolean squarings; each component is
    counted once, at its first token (the one that no earlier token reaches). Summing
    1/size over tokens instead gave floats such as 2.9999999999999996, which ``int()``
    truncates to 2.
    """
    check_bound("tol", tol, lower=0.0, upper=1.0, lower_open=True, upper_open=True)
    n_tokens = x.shape[0]
    reach = (overlaps(x) >= 1 - tol).astype(x.dtype)
    for _ in range(max(1, (n_tokens - 1).bit_length())):
        reach = (dot(reach, reach) > 0).astype(x.dtype)
    earlier = jnp.tril(jnp.ones((n_tokens, n_tokens), dtype=bool), k=-1)  # [i, j]: j < i
    first = ~jnp.any((reach > 0) & earlier, axis=-1)
    return jnp.sum(first, dtype=jnp.int32)


#: Most numbers :func:`numerically_merged` compares at once for one trajectory.
MERGE_BLOCK_ELEMENTS = 1 << 18


def numerically_merged(x: Float[Array, "N d"]) -> Bool[Array, ""]:
    """Whether two tokens have become numerically identical (or antipodal): their
    directions equal (or opposite) to within one ulp in every coordinate, a state the
    arithmetic can no longer leave. True dynamics never reach it in finite time; float32
    coordinates do once two tokens agree to ~10⁻⁷ (N × d routes) and the
    relative-precision routes only at underflow. Counted by the estimator as
    ``n_merged`` and reported, never silently kept."""
    theta = normalize(x)
    n_tokens, dim = x.shape
    if dim <= SMALL_AXIS:
        return _merged_by_coordinates(theta)

    def rows(i):
        """Whether row i is merged with a later row (pairs i < j only)."""
        a = theta[i][:, None, :]
        merged = _within_an_ulp(a, theta[None, :, :]) | _within_an_ulp(a, -theta[None, :, :])
        return jnp.any(merged & (jnp.arange(n_tokens)[None, :] > i[:, None]), axis=-1)

    # The comparison holds N × d numbers per row: all N rows at once for small N, else
    # blocks of rows, so its memory stays below MERGE_BLOCK_ELEMENTS a trajectory (all rows
    # at once asked for 6.9 GB at N = d = 1,500).
    block = max(1, min(n_tokens, MERGE_BLOCK_ELEMENTS // (n_tokens * dim)))
    starts = jnp.arange(0, n_tokens, block)
    if starts.size == 1:
        return jnp.any(rows(jnp.arange(n_tokens)))
    hit = jax.lax.map(lambda s: rows(jnp.minimum(s + jnp.arange(block), n_tokens - 1)), starts)
    return jnp.any(hit)


def _merged_by_coordinates(theta: Float[Array, "N d"]) -> Bool[Array, ""]:
    """:func:`numerically_merged` for few coordinates: one N × N comparison per
    coordinate, with each number's own ulp computed once (the ulp of the larger of two
    magnitudes is the larger of their ulps, since the ulp never decreases with the
    magnitude), and one pass over the pairs. N = 50, d = 4, 2,048 trajectories × 41 saves:
    0.45 s by rows, 0.22 s this way, the same answers."""
    size = jnp.abs(theta)
    ulp = jnp.nextafter(size, jnp.asarray(jnp.inf, theta.dtype)) - size
    same = opposite = jnp.ones((theta.shape[0],) * 2, bool)
    for k in range(theta.shape[1]):
        a, b = theta[:, k, None], theta[None, :, k]
        unit = jnp.maximum(ulp[:, k, None], ulp[None, :, k])
        same = same & (jnp.abs(a - b) <= unit)
        opposite = opposite & (jnp.abs(a + b) <= unit)
    pairs = _pair_mask(theta.shape[0])
    # The pair count is a second operand only for speed: XLA's CPU backend runs this
    # reduction of two operands 2× faster than the merge count alone (0.42 s).
    n_pairs, merged = _sums(
        (pairs.astype(jnp.int32), (pairs & (same | opposite)).astype(jnp.int32))
    )
    return (merged > 0) & (n_pairs > 0)  # uses the count, so XLA keeps it


def _within_an_ulp(a: Array, b: Array) -> Array:
    """Whether a and b are equal or adjacent floats in every coordinate (last axis).

    Exact equality missed merged pairs on an H100: there two tokens' directions kept
    differing by one unit in the last place in a coordinate (their arithmetic is fused
    differently), with 1 − z = 0 exactly. The unit is each coordinate's own, so the
    relative-precision routes, whose frame coordinates carry gaps like sin φ = 10⁻³⁰
    against 0, are never called merged before underflow."""
    big = jnp.maximum(jnp.abs(a), jnp.abs(b))
    ulp = jnp.nextafter(big, jnp.asarray(jnp.inf, big.dtype)) - big
    return jnp.all(jnp.abs(a - b) <= ulp, axis=-1)


def pair_density(
    x: Float[Array, "N d"], threshold: float | Array = PAIR_DENSITY_THRESHOLD
) -> Float[Array, ""]:
    """Fraction of pairs i < j with ⟨θ_i, θ_j⟩ > ``threshold`` (the peers' density of
    clustered pairs); 1 when N = 1, like :func:`mean_cosine`."""
    return pair_observables(x, threshold=threshold).pair_density


def span_dimension(
    x: Float[Array, "N d"], threshold: float | Array = SPAN_THRESHOLD
) -> Int[Array, ""]:
    """The dimension of the tokens' span, counted as the eigenvalues of the Gram matrix
    ⟨θ_i, θ_j⟩ above ``threshold`` (the peers' measure; an integer between 1 and
    min(N, d)).

    For N ≤ 2 the eigenvalues are written out (1 and 1 ± ⟨θ_1, θ_2⟩): no LAPACK call, which
    matters because jaxlib's batched LAPACK kernels can deadlock when several devices run
    them at once (see :func:`attndyn._estimate.runner.span_dimensions`). For N > d the
    d × d matrix ΘᵀΘ stands in for the N × N Gram matrix ΘΘᵀ: the two have the same
    nonzero eigenvalues (the other N − d are 0, below any positive threshold), and at
    N = 50, d = 4 the small one is forty times faster (the span was 80 % of a study's
    observation cost, which at 41 saves exceeded its simulation)."""
    n_tokens, dim = x.shape
    if n_tokens == 1:
        eigenvalues = jnp.ones((1,), x.dtype)
    elif n_tokens == 2:
        cosine = overlaps(x)[0, 1]
        eigenvalues = jnp.stack([1 - cosine, 1 + cosine])
    elif dim < n_tokens:
        theta = normalize(x)
        eigenvalues = jnp.linalg.eigvalsh(dot(theta.T, theta))
    else:
        eigenvalues = jnp.linalg.eigvalsh(overlaps(x))
    return jnp.sum(eigenvalues > threshold, dtype=jnp.int32)
