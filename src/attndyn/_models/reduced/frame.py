"""Frames of the tokens' span: the LQ factor, exact gaps, and the two-token frame."""

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int

from ..._core.attention import Attention
from ..._core.errors import ParameterError, check_int
from ..._core.linalg import lq as lq, small_sum
from ..._core.norms import AbstractNorm


def fits_frame(n_tokens: int, dim: int) -> bool:
    """Whether N tokens of R^d have a reduced frame route: N < d, or N = d = 2 (two tokens
    of the plane: the value noise has no complement, and the frame is the plane itself,
    so the route is exact in law and carries the angle between them, which on the full
    route float32 merges)."""
    return n_tokens < dim or n_tokens == dim == 2


def check_fits_frame(route: str, n_tokens: int, dim: int) -> None:
    """Refuse N tokens of R^d that ``route`` (a route in N × N coordinates) cannot hold."""
    check_int("n_tokens", n_tokens, lower=1)
    check_int("dim", dim, lower=2)
    if not fits_frame(n_tokens, dim):
        raise ParameterError(
            f"the {route} route needs N < d (or N = d = 2); got N = {n_tokens}, d = {dim}."
        )


def start_frame(x0: Float[Array, "N d"], start: AbstractNorm) -> Float[Array, "N N"]:
    """A start's coordinates in an orthonormal frame of its span: of ``x0`` itself under
    an RMS norm, of its unit centred rows under a centred LayerNorm (what the model's first
    layer starts from; they lie in the mean-zero hyperplane, where the route runs)."""
    if start.codimension == 0:
        return lq(x0)
    return lq(start.direction(x0))


def carried_lq(
    x: Float[Array, "N w"], steps: int | Int[Array, ""] | None = None
) -> Float[Array, "N N"]:
    """:func:`attndyn._core.linalg.lq` (Householder, the same factor in exact arithmetic),
    with the rows that each reflection is built from read from memory: the same bits for
    every use.

    Why (issue 42, seed 55's trajectory 838 at β = 3, d = 4, N = 3): the unrolled ``lq``
    lets XLA fuse each reflection into its consumers, and it recomputed row k's residual
    ``a`` (row k less its part in the earlier rows' span) in each fusion that needed it;
    the CPU backend contracted some of those recomputations into fused multiply-adds and
    not others. ``a`` is a difference of nearly equal numbers wherever token k is within
    ~10⁻⁴ of the earlier tokens' span (a cluster), so two recomputations differed by
    ~10⁻⁸, as much as ``a`` itself: the reflection took its norm from one and its vector
    from the other, was no longer orthogonal, and scaled the later rows' component along
    it by the wrong factor. Rows left the unit sphere (by 0.002 at that trajectory's last
    layer), and the later tokens moved as much, by arithmetic alone.

    Here reflections 1 … N − 2 are the steps of a loop whose carry is the rows (a loop
    carry is stored, never recomputed), and the first and last reflections, which build
    on a row that is not such a difference (row 0) or act on no later row (row N − 1),
    are outside it: each reflection is orthogonal to working precision for the rows it
    reads, whatever the fusions. ``steps``: N, traced where it can be (a count a compiler
    cannot read keeps the loop a loop: XLA unrolls short loops of a known trip count on
    some backends)."""
    n_tokens, width = x.shape
    cols = jnp.arange(width)
    rows = jnp.arange(n_tokens)[:, None]
    tiny = jnp.finfo(x.dtype).tiny

    def reflect(k, r):
        """Reflection k (written for a traced k: masks, not slices)."""
        row = r[k]
        ahead = cols >= k
        a = jnp.where(ahead, row, 0)
        lead = row[k]
        norm = jnp.sqrt(small_sum(a * a))
        sign = jnp.where(lead < 0, -1.0, 1.0).astype(x.dtype)
        v = a + jnp.where(cols == k, sign * norm, 0)
        vv = norm * (norm + jnp.abs(lead))  # vᵀv / 2, without cancellation
        # A row inside the earlier span (vᵀv below the smallest normal) is not reflected
        # (as in linalg.lq).
        usable = vv >= tiny
        scale = jnp.where(usable, 1 / jnp.where(usable, vv, 1), 0)
        reflected = r - (scale * small_sum(r * v[None, :], axis=1))[:, None] * v[None, :]
        # Row k itself is exactly (…, −sign·|a|, 0, …, 0) after its reflection.
        pivot = jnp.where(ahead, jnp.where(cols == k, -sign * norm, 0), row)
        return jnp.where(rows > k, reflected, jnp.where(rows == k, pivot[None, :], r))

    r = reflect(0, x)
    if n_tokens > 2:
        r = jax.lax.fori_loop(1, (n_tokens if steps is None else steps) - 1, reflect, r)
    if n_tokens > 1:
        r = reflect(n_tokens - 1, r)
    c = r[:, :n_tokens]
    flip = jnp.where(jnp.diagonal(c) < 0, -1.0, 1.0).astype(x.dtype)
    return c * flip[None, :]


def pair_gaps(c: Float[Array, "N k"]) -> tuple[Float[Array, "N N"], Float[Array, "N N"]]:
    """``1 − ⟨θ_i, θ_j⟩`` and ``1 + ⟨θ_i, θ_j⟩`` without cancellation: |θ_i ∓ θ_j|²/2."""
    theta = c / jnp.linalg.norm(c, axis=-1, keepdims=True)
    diff = theta[:, None, :] - theta[None, :, :]
    summ = theta[:, None, :] + theta[None, :, :]
    return 0.5 * jnp.sum(diff**2, axis=-1), 0.5 * jnp.sum(summ**2, axis=-1)


def two_token_frame(cz: Array, sz: Array) -> Float[Array, "2 2"]:
    one, zero = jnp.ones_like(cz), jnp.zeros_like(cz)
    return jnp.stack([jnp.stack([one, zero]), jnp.stack([cz, sz])])


def held_sine(sz: Array) -> Array:
    """sin φ of a route whose state carries it exactly (in log sin φ, or as 1/cosh X), held
    at the smallest normal number of its dtype when it is smaller (gaps below ~10⁻⁷⁶ in
    float32): the state never merges the tokens, and the observables see a gap that tiny
    as what it is — together, or antipodal — not as a numerical merge."""
    return jnp.maximum(sz, jnp.finfo(sz.dtype).tiny)


#: The two-token chains take out of the matrix the part of its largest score above this
#: (exactly the unscaled entries below it): their layer multiplies up to four weights
#: (|x₁|²·|x₂|²), which stays far inside float32 for weights up to e^10 ≈ 2·10⁴.
CHAIN_UNSHIFTED_SCORE = 10.0


def two_token_attention(
    attention: Attention, z: Array
) -> tuple[tuple[Array, Array, Array, Array], Array | None]:
    """The 2 × 2 attention matrix of two unit tokens with overlap z, entry by entry, with
    the exponent m taken out of it: ``((p11, p12, p21, p22), m)``, the matrix being
    ``e^m·(p11, p12; p21, p22)``.

    Softmax attention takes nothing out (``m`` is ``None``). Unnormalised attention weighs
    with e^{β − c} and e^{βz}, which overflow float32 (squared) from β ≈ 44 and, in a
    layer's products of four of them, from β ≈ 22; ``m`` is the part of the largest score
    above :data:`CHAIN_UNSHIFTED_SCORE`, shared by both rows (the two-token chain takes
    the difference of its rows), so that no entry exceeds e^{10} whatever β. Below that
    the entries are exactly the unscaled ones.

    Every rotation-invariant option is here: causal or self mask, the diagonal shift c
    (self-scores β − c) and a Laplacian of either sign.
    """
    beta = attention.beta
    shift = attention.diagonal_shift
    exponent = None
    if attention.kind == "softmax":
        # softmax of (β − c, βz): the off-diagonal weight is σ(−β(1 − z) + c), no overflow.
        gap = -beta * (1 - z)
        off = jax.nn.sigmoid(gap if shift is None else gap + shift)
        diag = 1 - off
        first_row = (jnp.ones_like(z), jnp.zeros_like(z))  # causal: token 1 sees itself
        eye = jnp.ones_like(z)
    else:
        self_score = (beta if shift is None else beta - shift) * jnp.ones_like(z)
        off_score = beta * z
        top = off_score if attention.self_mask else jnp.maximum(self_score, off_score)
        exponent = jnp.maximum(top - CHAIN_UNSHIFTED_SCORE, 0).astype(z.dtype)
        diag = jnp.exp(self_score - exponent) / 2
        off = jnp.exp(off_score - exponent) / 2
        first_row = (diag, jnp.zeros_like(z))
        eye = jnp.exp(-exponent)  # the identity of a Laplacian, scaled with the matrix
    if attention.self_mask:
        diag = jnp.zeros_like(z)
        if attention.kind == "softmax":
            off = jnp.ones_like(z)
    p11, p12, p21, p22 = diag, off, off, diag
    if attention.causal:
        p11, p12 = first_row
    if attention.laplacian_flags[0]:
        p11, p22 = p11 - eye, p22 - eye
        if attention.laplacian_sign == "I-P":
            p11, p12, p21, p22 = -p11, -p12, -p21, -p22
    return (p11, p12, p21, p22), exponent
