r"""Cluster sizes and the minimum distance of many tokens in three dimensions without the N²
pairs: the tokens sorted into grid cells, on the host (NumPy, SciPy), called from JAX by
``jax.pure_callback``. Both give what the pair routes of :mod:`.many_tokens` give.

Clusters (:func:`cluster_sizes`). The graph joins tokens whose squared distance, computed
as the pair route computes it (``(g_x² + g_y²) + g_z²`` in the tokens' dtype), is at most
``2 tol``. Cells have side ``s = √(2 tol / 3) (1 − 10⁻⁴)``: two tokens of one cell are
then always joined (each coordinate differs by less than s), so a cell is connected and
the components are those of the graph of cells in which two cells are joined when some
token of one is joined to some token of the other. A joined pair differs by at most
``√(2 tol) < 2s`` in each coordinate, so only cells at most two apart in each index can
be joined (62 offsets, each pair once). For each such pair the tokens' bounding boxes
decide most cases: joined when the boxes' largest distance is below the threshold, apart
when their smallest distance is above it (each with a relative margin of 10⁻⁵, far above
the dtype's rounding of the computed distance); the pairs left are decided token by token
with the pair route's own arithmetic, first on a few witnesses, then all pairs. The work
is N log N plus the token pairs of undecided cells (at most what the pairs cost; for
10⁶ uniform tokens at tol = 10⁻³ a few times 10⁸ pairs instead of 5·10¹¹).

Minimum distance (:func:`min_distance`): each token's nearest other token within an upper
bound (a pair of tokens adjacent in the tree) from SciPy's k-d tree (exact, in float64),
and the minimum of those distances computed again as the pair route computes them (in
the dtype, from the coordinates' differences).
"""

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int
from scipy import sparse
from scipy.sparse import csgraph
from scipy.spatial import KDTree

#: The cells' side is this fraction below √(2 tol / 3), so that rounding never splits a
#: cell's tokens (their computed squared distance stays below 2 tol).
SIDE_MARGIN = 1e-4
#: Relative margin of the bounding-box decisions (the computed squared distance of a pair
#: is within a few ε of the exact one; ε = 1.2·10⁻⁷ in float32).
BOX_MARGIN = 1e-5
#: Token pairs tested at once (bounds the host memory: ~50 bytes a pair).
PAIR_CHUNK = 1 << 22
#: Witnesses per cell tried first for a pair of cells the boxes leave open (its extreme
#: tokens along each axis): most neighbouring cells of a spread cloud are joined by them.
WITNESSES = 6


def _squared(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``|a − b|²`` as :func:`.many_tokens._together` computes it: ``(g_x² + g_y²) + g_z²``
    in the dtype."""
    g = a - b
    return (g[:, 0] * g[:, 0] + g[:, 1] * g[:, 1]) + g[:, 2] * g[:, 2]


def _cells(theta: np.ndarray, side: float):
    """The tokens in cell order, each cell's first token, size, and bounding box, and the
    integer cell key (indices padded by 2, so that offsets never wrap)."""
    index = np.floor((theta.astype(np.float64) + 1.0) / side).astype(np.int64) + 2
    width = int(index.max()) + 3
    key = (index[:, 0] * width + index[:, 1]) * width + index[:, 2]
    order = np.argsort(key, kind="stable")
    keys, start = np.unique(key[order], return_index=True)
    ordered = theta[order]
    lo = np.minimum.reduceat(ordered, start, axis=0).astype(np.float64)
    hi = np.maximum.reduceat(ordered, start, axis=0).astype(np.float64)
    size = np.diff(np.append(start, len(theta)))
    return ordered, keys, start, size, (lo, hi), width


def _neighbour_pairs(keys: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    """Every pair of occupied cells at most two apart in each index, once (a < b in key)."""
    offsets = [
        (dx * width + dy) * width + dz
        for dx in range(-2, 3)
        for dy in range(-2, 3)
        for dz in range(-2, 3)
        if (dx, dy, dz) > (0, 0, 0)
    ]
    first, second = [], []
    for offset in offsets:
        target = keys + offset
        where = np.minimum(np.searchsorted(keys, target), len(keys) - 1)
        found = keys[where] == target
        first.append(np.flatnonzero(found))
        second.append(where[found])
    return np.concatenate(first), np.concatenate(second)


def _box_distances(box, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The smallest and largest squared distance between the boxes of cells a and b."""
    lo, hi = box
    near = np.maximum(0.0, np.maximum(lo[b] - hi[a], lo[a] - hi[b]))
    far = np.maximum(hi[b] - lo[a], hi[a] - lo[b])
    return np.sum(near * near, axis=1), np.sum(far * far, axis=1)


def _any_joined(ordered, first_of, count, a, b, limit) -> np.ndarray:
    """For each pair of cells (a, b), whether some token of a is joined to some token of b
    (cell c: tokens ``first_of[c] … first_of[c] + count[c] − 1`` of ``ordered``), in
    chunks of :data:`PAIR_CHUNK` token pairs."""
    na, nb = count[a], count[b]
    work = na * nb
    joined = np.zeros(len(a), bool)
    ends = np.cumsum(work)
    begin = 0
    while begin < len(a):
        stop = max(begin + 1, int(np.searchsorted(ends, ends[begin] - work[begin] + PAIR_CHUNK)))
        chunk = np.arange(begin, stop)
        owner = np.repeat(chunk, work[chunk])
        local = np.arange(len(owner)) - np.repeat(np.cumsum(work[chunk]) - work[chunk], work[chunk])
        i = first_of[a[owner]] + local // nb[owner]
        j = first_of[b[owner]] + local % nb[owner]
        hit = _squared(ordered[i], ordered[j]) <= limit
        joined[chunk] = np.bincount(owner[hit] - begin, minlength=len(chunk)) > 0
        begin = stop
    return joined


def _witnesses(ordered: np.ndarray, start: np.ndarray, size: np.ndarray) -> np.ndarray:
    """Each cell's :data:`WITNESSES` tokens (positions in ``ordered``, shape (cells, 6)):
    its first and last token along each axis (repeats in cells of fewer tokens)."""
    cell = np.repeat(np.arange(len(start)), size)
    last = start + size - 1
    out = []
    for axis in range(ordered.shape[1]):
        rank = np.lexsort((ordered[:, axis], cell))  # by cell, then along the axis
        out += [rank[start], rank[last]]
    return np.stack(out, axis=1)


def _witness_joined(ordered, witness, a, b, limit) -> np.ndarray:
    """For each pair of cells, whether one of the 36 pairs of their witnesses is joined."""
    joined = np.zeros(len(a), bool)
    step = max(1, PAIR_CHUNK // witness.shape[1] ** 2)
    for begin in range(0, len(a), step):
        wa = ordered[witness[a[begin : begin + step]]][:, :, None, :]
        wb = ordered[witness[b[begin : begin + step]]][:, None, :, :]
        g = wa - wb
        squared = (g[..., 0] * g[..., 0] + g[..., 1] * g[..., 1]) + g[..., 2] * g[..., 2]
        joined[begin : begin + step] = np.any(squared <= limit, axis=(1, 2))
    return joined


def _components(n_cells: int, a: np.ndarray, b: np.ndarray) -> tuple[int, np.ndarray]:
    """The connected components of the graph of cells with the edges (a, b)."""
    graph = sparse.coo_matrix((np.ones(len(a), np.int8), (a, b)), shape=(n_cells, n_cells))
    return csgraph.connected_components(graph, directed=False)


#: The pairs of cells the boxes leave open are tested in this many rounds, nearest boxes
#: first; a pair whose cells an earlier round already connected is not tested again.
ROUNDS = 4


def _cell_components(ordered, start, size, box, a, b, limit) -> tuple[int, np.ndarray]:
    """The components of the graph of cells: the edges the box tests decide, then, in
    rounds, those of the open pairs not yet connected, each by its witnesses and, failing
    them, by all its token pairs. Skipping a pair whose cells are already connected
    changes no component."""
    near, far = _box_distances(box, a, b)
    sure = far <= limit * (1 - BOX_MARGIN)
    open_ = np.flatnonzero(~sure & (near <= limit * (1 + BOX_MARGIN)))
    open_ = open_[np.argsort(far[open_], kind="stable")]
    edges_a, edges_b = [a[sure]], [b[sure]]
    count, component = _components(len(start), a[sure], b[sure])
    witness = _witnesses(ordered, start, size) if len(open_) else None
    for batch in np.array_split(open_, ROUNDS):
        for test in ("witnesses", "pairs"):
            ua, ub = a[batch], b[batch]
            apart = component[ua] != component[ub]
            batch, ua, ub = batch[apart], ua[apart], ub[apart]
            if not len(batch):
                break
            if test == "witnesses":
                found = _witness_joined(ordered, witness, ua, ub, limit)
            else:
                found = _any_joined(ordered, start, size, ua, ub, limit)
            edges_a.append(ua[found])
            edges_b.append(ub[found])
            count, component = _components(
                len(start), np.concatenate(edges_a), np.concatenate(edges_b)
            )
            batch = batch[~found]
    return count, component


def cluster_sizes_host(theta, tol) -> np.ndarray:
    """The sizes of the clusters (the first entries; zeros after), int32 of length N; all
    zeros for a configuration with a non-finite coordinate."""
    theta = np.asarray(theta)
    n_tokens = theta.shape[0]
    out = np.zeros(n_tokens, np.int32)
    if n_tokens == 0 or not np.all(np.isfinite(theta)):
        return out
    limit = theta.dtype.type(2) * theta.dtype.type(tol)  # as the pair route: 2·tol in dtype
    side = float(np.sqrt(float(limit) / 3.0)) * (1 - SIDE_MARGIN)
    ordered, keys, start, size, box, width = _cells(theta, side)
    a, b = _neighbour_pairs(keys, width)
    count, component = _cell_components(ordered, start, size, box, a, b, limit)
    out[:count] = np.bincount(component, weights=size, minlength=count).astype(np.int32)
    return out


def min_distance_host(theta) -> np.ndarray:
    """``min_{i≠j} |θ_i − θ_j|`` in the dtype (NaN for a non-finite configuration)."""
    theta = np.asarray(theta)
    if not np.all(np.isfinite(theta)):
        return np.asarray(np.nan, theta.dtype)
    wide = theta.astype(np.float64)
    tree = KDTree(wide)
    # An upper bound: tokens next to each other in the tree's order (a leaf's tokens are
    # contiguous) are a pair; the queries then look no farther (twice as fast).
    ordered = wide[tree.indices]
    bound = np.sqrt(np.min(np.sum((ordered[1:] - ordered[:-1]) ** 2, axis=1)))
    if bound == 0:  # two tokens coincide
        return np.zeros((), theta.dtype)
    nearest = np.asarray(tree.query(wide, k=2, distance_upper_bound=bound * (1 + 1e-9))[1])
    # With duplicates the tree may list a twin first and the token itself second; a token
    # with no neighbour within the bound gets the index N.
    own = np.arange(len(theta))
    other = np.where(nearest[:, 0] == own, nearest[:, 1], nearest[:, 0])
    found = other < len(theta)
    squared = _squared(theta[found], theta[other[found]])
    return np.asarray(np.sqrt(np.min(squared)), theta.dtype)


def cluster_sizes(theta: Float[Array, "N 3"], tol) -> Int[Array, " N"]:
    """:func:`cluster_sizes_host` from JAX (jit, vmap: one configuration at a time)."""
    shape = jax.ShapeDtypeStruct((theta.shape[0],), jnp.int32)
    tol = jnp.asarray(tol, theta.dtype)
    return jax.pure_callback(cluster_sizes_host, shape, theta, tol, vmap_method="sequential")


def min_distance(theta: Float[Array, "N 3"]) -> Float[Array, ""]:
    """:func:`min_distance_host` from JAX (jit, vmap: one configuration at a time)."""
    shape = jax.ShapeDtypeStruct((), theta.dtype)
    return jax.pure_callback(min_distance_host, shape, theta, vmap_method="sequential")
