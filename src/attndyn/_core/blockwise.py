"""Attention of many tokens in blocks of queries: memory ``h × block × N``, never ``N × N``.

Each block of ``B`` queries is attended against all ``N`` keys at once (``lax.map`` over the
blocks), so a row sees its whole set of scores and its softmax is the dense one, shifted
by the row's own maximum ``m_i``:

    num_i = Σ_j w_ij v_j,   den_i = Σ_j w_ij,   w_ij = exp(s_ij − m_i) ∈ (0, 1].

Softmax attention is ``num_i / den_i``; unnormalised attention is
``(1/N) Σ_j e^{s_ij} v_j = num_i · e^{m_i − log N}``: the common factor ``e^{m_i}`` is
carried in log space and applied once at the end, so no intermediate overflows (the
product overflows only where the attention output itself exceeds the float's range;
:func:`blockwise_parts` returns the pieces before that product).

Masks are built per block from the indices (causal ``j ≤ i``, self-mask ``j ≠ i``) and the
diagonal shift is applied where ``j = i``: no ``N × N`` array exists at any point. The
last block is padded with copies of the last query and its rows dropped (queries do not
interact, so the padding changes no real row).
"""

import math

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int

from .linalg import dot

#: Query rows per block by default: about this many scores (per head) in a block, at most
#: :data:`CPU_BLOCK_ROWS` rows on a CPU. Measured on the 2-core CPU (2026-11-29, one
#: softmax attention, d = 8, alternating runs under load): at N = 16,384, 64 rows
#: 0.27-0.29 s, 128 rows 0.38-0.39 s, 256 rows 0.50 s (the plain 256-row lax.map 0.44 s);
#: at N = 4,096, 64-128 rows 17-19 ms, 256 rows 23 ms (docs/performance.md). On an
#: accelerator a block is larger (:data:`ACCELERATOR_BLOCK_ELEMENTS`), where fewer, wider
#: blocks keep it busy.
CPU_BLOCK_ELEMENTS = 1 << 21
CPU_BLOCK_ROWS = 128
ACCELERATOR_BLOCK_ELEMENTS = 1 << 27


def default_block(n_tokens: int, n_heads: int = 1) -> int:
    """Query rows per block for ``n_tokens`` keys and ``n_heads`` heads: a block of scores
    of about :data:`CPU_BLOCK_ELEMENTS` (CPU, at most :data:`CPU_BLOCK_ROWS` rows) or
    :data:`ACCELERATOR_BLOCK_ELEMENTS` elements, between 8 rows and all of them."""
    if jax.default_backend() == "cpu":
        rows = min(CPU_BLOCK_ROWS, CPU_BLOCK_ELEMENTS // max(1, n_tokens * n_heads))
    else:
        rows = ACCELERATOR_BLOCK_ELEMENTS // max(1, n_tokens * n_heads)
    return int(max(8, min(n_tokens, rows)))


def blockwise_parts(
    queries: Float[Array, "h N dk"],
    keys: Float[Array, "h N dk"],
    values: Float[Array, "h N dv"],
    beta: Float[Array, ""],
    *,
    block: int,
    causal: bool = False,
    self_mask: bool = False,
    diagonal_shift: Float[Array, ""] | None = None,
    self_keys: bool = False,
) -> tuple[Float[Array, "h N dv"], Float[Array, "h N"], Float[Array, "h N"]]:
    """For every head and query row i: ``num_i = Σ_j w_ij v_j``, ``den_i = Σ_j w_ij`` and a
    shift ``m_i`` at least the row maximum of the scores ``s_ij = β⟨q_i, k_j⟩`` (less the
    diagonal shift at j = i), with ``w_ij = exp(s_ij − m_i)`` over the keys the masks allow.

    Softmax attention is ``num/den``; unnormalised attention ``num · exp(m − log N)``.

    ``self_keys=True`` says the keys are the queries (one head), unmasked and unshifted:
    then ``m_i = β|q_i| max_j |k_j|`` (Cauchy–Schwarz) bounds the row's scores without a
    pass over them, while its own score β|q_i|² is at most ``g_i = β|q_i|(max_j |k_j| −
    |q_i|)`` below it: a block whose rows all have g_i ≤ :data:`BOUND_GAP` keeps full
    relative precision (w_ii ≥ e^{−60}; what underflows is below e^{−27} of it) and skips
    the maximum; a block with a larger gap (tokens of very different norms) takes it
    (a ``lax.cond`` per block: under ``vmap`` both sides run, as before). 10-15 % of a
    layer at d = 8 and 128-row blocks."""
    n_heads, n_tokens, _ = queries.shape
    block = int(min(block, n_tokens))
    n_blocks = -(-n_tokens // block)
    padded = n_blocks * block
    # Rows past the end repeat the last query: finite, and dropped below. The queries are
    # padded once and sliced per block (a gather per block cost ~10 % at d = 8).
    index = jnp.minimum(jnp.arange(padded), n_tokens - 1)
    if padded > n_tokens:
        last = jnp.broadcast_to(queries[:, -1:], (n_heads, padded - n_tokens, queries.shape[2]))
        queries = jnp.concatenate([queries, last], axis=1)
    starts = jnp.arange(n_blocks) * block
    keys_t = jnp.swapaxes(keys, -1, -2)  # once: inside the blocks it was copied per block
    # One head runs without the head axis: with it, the blocks took ~14 % more CPU at d = 8
    # (N = 16,384, paired calls in one process), though the compiled block looked the same.
    if n_heads == 1:
        queries, keys_t, values = queries[0], keys_t[0], values[0]
    bound = gap = None
    if self_keys and n_heads == 1:
        norms = jnp.sqrt(jnp.sum(queries * queries, axis=-1))  # (padded,)
        largest = jnp.max(norms)
        scale = beta.astype(queries.dtype) * norms
        bound, gap = scale * largest, scale * (largest - norms)
    rows_axis = queries.ndim - 2

    def one_block(start: Int[Array, ""]):
        rows = jax.lax.dynamic_slice_in_dim(index, start, block)
        q = jax.lax.dynamic_slice_in_dim(queries, start, block, axis=rows_axis)
        shift = None
        if bound is not None and gap is not None:
            shift = (
                jax.lax.dynamic_slice_in_dim(bound, start, block),
                jnp.max(jax.lax.dynamic_slice_in_dim(gap, start, block)) <= BOUND_GAP,
            )
        return _rows(q, rows, keys_t, values, beta, causal, self_mask, diagonal_shift, shift)

    num, den, top = jax.lax.map(one_block, starts)
    if n_heads == 1:  # (blocks, B, ·) → (1, N, ·)
        return (
            num.reshape(padded, -1)[None, :n_tokens],
            den.reshape(padded)[None, :n_tokens],
            top.reshape(padded)[None, :n_tokens],
        )
    # (blocks, h, B, ·) → (h, N, ·)
    num = jnp.moveaxis(num, 0, 1).reshape(n_heads, padded, -1)[:, :n_tokens]
    den = jnp.moveaxis(den, 0, 1).reshape(n_heads, padded)[:, :n_tokens]
    top = jnp.moveaxis(top, 0, 1).reshape(n_heads, padded)[:, :n_tokens]
    return num, den, top


def redo_rows(
    queries: Float[Array, "N dk"],
    keys_t: Float[Array, "dk N"],
    values: Float[Array, "N dv"],
    parts: tuple[Array, Array, Array],
    redo: Array,
    beta: Float[Array, ""],
    block: int,
) -> tuple[Array, Array, Array]:
    """``parts`` (one head's num, den, m) with the rows ``redo`` attended again against all
    keys, each shifted by its maximum, ``block`` rows at a time (a while loop: as many
    blocks as there are such rows, none when none)."""
    # Usually no row: then not even the list of rows is made (under vmap the cond runs
    # both sides, which costs what the list and an empty loop cost).
    return jax.lax.cond(
        jnp.any(redo),
        lambda parts: _redo(queries, keys_t, values, parts, redo, beta, block),
        lambda parts: parts,
        parts,
    )


def _redo(queries, keys_t, values, parts, redo, beta, block):
    n_tokens = queries.shape[0]
    block = int(min(block, n_tokens))
    padded = -(-n_tokens // block) * block
    order = jnp.nonzero(redo, size=padded, fill_value=0)[0]  # default int, as _rows' columns
    count = jnp.sum(redo, dtype=order.dtype)

    def body(state):
        step, num, den, top = state
        rows = jax.lax.dynamic_slice_in_dim(order, step * block, block)
        valid = step * block + jnp.arange(block, dtype=order.dtype) < count
        got = _rows(queries[rows], rows, keys_t, values, beta, False, False, None)
        at = jnp.where(valid, rows, n_tokens)  # out of range: dropped
        num = num.at[at].set(got[0], mode="drop")
        den = den.at[at].set(got[1], mode="drop")
        top = top.at[at].set(got[2], mode="drop")
        return step + 1, num, den, top

    state = (jnp.zeros((), order.dtype), *parts)
    _, num, den, top = jax.lax.while_loop(lambda s: s[0] * block < count, body, state)
    return num, den, top


#: The largest gap between a row's shift and its own score for which the Cauchy–Schwarz
#: shift is used (:func:`blockwise_parts`).
BOUND_GAP = 60.0


def _rows(q, rows, keys_t, values, beta, causal, self_mask, diagonal_shift, shift=None):
    """``(num, den, m)`` of one block of query rows (indices ``rows``) against all keys
    (``keys_t``: transposed, ``(h, dk, N)``, or ``(dk, N)`` for one head without its axis,
    as ``q`` and ``values``); ``shift``: (the rows' Cauchy–Schwarz bound, whether the block
    may use it), or None for their maximum."""
    # Both products are dots (full precision): linalg.matmul writes a contraction over
    # d ≤ 4 as a broadcast sum, which at B × N × d made the blocks 3.5× slower at d = 3.
    # β scales the B queries, not the B × N scores: the scores feed the shift's cond, so a
    # scaling after the dot was a pass of its own over them (at d = 8, N = 16,384 one
    # attention took 0.19 s against 0.14 s; the user's blocks 0.17 s).
    s = dot(beta.astype(q.dtype) * q, keys_t)  # ([h,] B, N)
    cols = jnp.arange(keys_t.shape[-1])
    same = rows[:, None] == cols[None, :]
    heads = tuple(range(s.ndim - 2))  # the head axis the (B, N) masks broadcast over
    if diagonal_shift is not None:
        shifted = jnp.where(same, diagonal_shift.astype(s.dtype), jnp.zeros((), s.dtype))
        s = s - jnp.expand_dims(shifted, heads)
    allowed = None
    if causal:
        allowed = cols[None, :] <= rows[:, None]
    elif self_mask:
        allowed = ~same
    if allowed is not None:
        s = jnp.where(jnp.expand_dims(allowed, heads), s, -jnp.inf)
    if shift is None:
        top = jnp.max(s, axis=-1)
    else:  # a cond, not a while loop: reverse-mode differentiation goes through
        top = jax.lax.cond(shift[1], lambda s: shift[0], lambda s: jnp.max(s, axis=-1), s)
    w = jnp.exp(s - top[..., None])
    return dot(w, values), jnp.sum(w, axis=-1), top


def combine(kind: str, parts: tuple[Array, Array, Array], n_tokens: int) -> Float[Array, "h N dv"]:
    """The attention output from :func:`blockwise_parts`: ``num/den`` (softmax) or
    ``num · exp(m − log N)`` (unnormalised; overflows only where the output does)."""
    num, den, top = parts
    if kind == "softmax":
        return num / den[..., None]
    scale = jnp.exp(top - jnp.asarray(math.log(n_tokens), top.dtype))
    return num * scale[..., None]
