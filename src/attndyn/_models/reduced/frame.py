"""Frames of the tokens' span: the LQ factor, exact gaps, and the two-token frame."""

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from ..._core.attention import Attention


def lq(x: Float[Array, "N w"]) -> Float[Array, "N N"]:
    """A lower-triangular C with ``x = C Q`` for some Q with orthonormal rows (Householder).

    Row k is reflected onto its first free coordinate by ``H_k = I − 2 v vᵀ/(vᵀv)``,
    ``v = a + sign(a₀)|a| e₀`` (a: row k beyond column k), and every later row is hit by the
    same reflection. ``|v| ≥ |a|``, so no reflection divides by a cancelled quantity: each
    H_k is orthogonal to working precision whatever its rows hold, and C is the exact
    factor of an ``x + E`` with ``|E| ≤ c·ε_mach·|x|`` (Householder's backward stability).
    A later row close to an earlier one (or to its antipode) keeps its offset with absolute
    error ε_mach·|x|: the gaps ``1 ∓ z = |c_i ∓ c_j|²/2`` have relative precision
    ε_mach/√(1 ∓ z), as in the two-token chain.

    Gram–Schmidt, used here before, loses this when a row lies in the span of the earlier
    ones to rounding (tokens clustered to float32 resolution): its residual is then a
    rounding error of the projection coefficient, i.e. parallel to the earlier directions,
    and normalising it gave a "new" direction almost equal to an old one, which broke
    clusters apart (issue 8). The diagonal is made non-negative (a sign flip of each frame
    direction), so a row inside the span of the earlier ones has a zero diagonal.
    """
    n_tokens, width = x.shape
    r = x
    for k in range(n_tokens):
        a = r[k, k:]
        norm = jnp.sqrt(jnp.sum(a * a))
        sign = jnp.where(a[0] < 0, -1.0, 1.0).astype(x.dtype)
        v = a.at[0].add(sign * norm)
        vv = norm * (norm + jnp.abs(a[0]))  # vᵀv / 2, without cancellation
        scale = jnp.where(vv > 0, 1 / jnp.where(vv > 0, vv, 1), 0)
        tail = r[k:, k:]
        tail = tail - (scale * jnp.sum(tail * v[None, :], axis=1))[:, None] * v[None, :]
        # Row k itself is exactly (−sign·|a|, 0, …, 0) after its reflection.
        pivot = jnp.zeros((width - k,), x.dtype).at[0].set(-sign * norm)
        r = r.at[k:, k:].set(tail.at[0].set(pivot))
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


def two_token_attention(attention: Attention, z: Array) -> tuple[Array, Array, Array, Array]:
    """The 2 × 2 attention matrix of two unit tokens with overlap z, entry by entry."""
    beta = attention.beta
    if attention.kind == "softmax":
        # softmax of (β, βz): the off-diagonal weight is σ(−β(1 − z)), with no overflow.
        off = jax.nn.sigmoid(-beta * (1 - z))
        diag = 1 - off
        first_row = (jnp.ones_like(z), jnp.zeros_like(z))  # causal: token 1 sees itself
    else:
        diag = jnp.exp(beta) / 2 * jnp.ones_like(z)
        off = jnp.exp(beta * z) / 2
        first_row = (diag, jnp.zeros_like(z))
    p11, p12, p21, p22 = diag, off, off, diag
    if attention.causal:
        p11, p12 = first_row
    laplacian = attention.laplacian
    if attention.n_laplacian_heads is not None:
        laplacian = attention.n_laplacian_heads >= 1
    if laplacian:
        p11, p22 = p11 - 1, p22 - 1
    return p11, p12, p21, p22
