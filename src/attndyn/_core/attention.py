"""The attention core shared by every model: one trajectory, tokens shaped ``(N, d)``."""

from typing import Literal

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from .errors import ParameterError, check_bound, check_choice, check_int, check_scalar

ATTENTION_KINDS = ("softmax", "unnormalized")
AttentionKind = Literal["softmax", "unnormalized"]


def as_float(x) -> Array:
    """Converter for swept parameters: a float array leaf, so sweeps never recompile."""
    x = jnp.asarray(x)
    if not jnp.issubdtype(x.dtype, jnp.floating):
        x = x.astype(jnp.float32)
    return x


class Attention(eqx.Module):
    r"""Self-attention ``A_i(X)`` of spec §1.

    Scores are ``s_ij = β ⟨Q x_i, K x_j⟩``, computed per head on a ``d/h`` block of
    coordinates, and

    - ``kind="softmax"`` (SA): ``A_i = Σ_j softmax_j(s_ij) x_j``, computed with a
      log-sum-exp shift so that it never overflows;
    - ``kind="unnormalized"`` (USA): ``A_i = (1/N) Σ_j exp(s_ij) x_j``. This overflows
      float32 once ``β ≳ 88``: the result is then non-finite, which the estimators
      detect and report; float64 inputs (with ``jax_enable_x64``) reach β ≈ 709.

    Options: ``laplacian=True`` replaces the attention matrix P by ``P − I`` (seeds 000,
    002); ``n_laplacian_heads=k`` makes only the first k heads Laplacian (seed 000's
    mixture); ``causal=True`` lets token i attend to ``j ≤ i`` only (USA keeps the 1/N
    factor); ``query``/``key_matrix`` are ``(h, d/h, d/h)`` or, with one head, ``(d, d)``
    matrices (identity when omitted).

    ``beta`` is an array leaf: changing it reuses the compiled code.
    """

    beta: Float[Array, ""] = eqx.field(converter=as_float)
    kind: str = eqx.field(static=True, default="softmax")
    query: Float[Array, "..."] | None = None
    key_matrix: Float[Array, "..."] | None = None
    n_heads: int = eqx.field(static=True, default=1)
    laplacian: bool = eqx.field(static=True, default=False)
    n_laplacian_heads: int | None = eqx.field(static=True, default=None)
    causal: bool = eqx.field(static=True, default=False)

    def __check_init__(self):
        check_choice("attention kind", self.kind, ATTENTION_KINDS)
        check_scalar("beta", self.beta)
        check_bound("beta", self.beta, lower=0.0)
        check_int("n_heads", self.n_heads, lower=1)
        if self.n_laplacian_heads is not None:
            check_int("n_laplacian_heads", self.n_laplacian_heads, lower=0)
            if self.n_laplacian_heads > self.n_heads:
                raise ParameterError(
                    f"n_laplacian_heads={self.n_laplacian_heads} must be at most "
                    f"n_heads={self.n_heads}."
                )
        for name, matrix in (("query", self.query), ("key_matrix", self.key_matrix)):
            if matrix is not None:
                self._check_matrix(name, matrix)

    def _check_matrix(self, name: str, matrix: Array) -> None:
        shape = jnp.shape(matrix)
        square = len(shape) in (2, 3) and shape[-1] == shape[-2]
        if not square or (len(shape) == 3 and shape[0] != self.n_heads):
            raise ParameterError(
                f"{name} has shape {shape}; it must be (d/h, d/h) or (h, d/h, d/h) with "
                f"h = n_heads = {self.n_heads}."
            )
        check_bound(name, matrix)  # finite entries (skipped when traced)

    def check_dim(self, dim: int) -> None:
        """Refuse a token dimension ``d`` that the heads or Q, K do not fit (a
        :class:`ParameterError` naming them), before anything is traced."""
        if dim % self.n_heads:
            raise ParameterError(
                f"n_heads={self.n_heads} must divide the dimension d={dim} (each head acts "
                "on a d/h block of coordinates)."
            )
        block = dim // self.n_heads
        for name, matrix in (("query", self.query), ("key_matrix", self.key_matrix)):
            if matrix is not None and jnp.shape(matrix)[-1] != block:
                raise ParameterError(
                    f"{name} has shape {jnp.shape(matrix)}, which does not fit d={dim} with "
                    f"n_heads={self.n_heads}: expected ({block}, {block})"
                    + (f" or ({self.n_heads}, {block}, {block})." if self.n_heads > 1 else ".")
                )

    def scores(self, x: Float[Array, "N d"]) -> Float[Array, "h N N"]:
        n_tokens, dim = x.shape
        self.check_dim(dim)
        blocks = x.reshape(n_tokens, self.n_heads, dim // self.n_heads).transpose(1, 0, 2)
        queries = blocks if self.query is None else _apply_per_head(self.query, blocks)
        keys = blocks if self.key_matrix is None else _apply_per_head(self.key_matrix, blocks)
        return self.beta * matmul(queries, jnp.swapaxes(keys, -1, -2))

    def matrix(self, x: Float[Array, "N d"]) -> Float[Array, "h N N"]:
        """The attention matrix per head (``P``, or ``P − I`` for Laplacian heads)."""
        n_tokens = x.shape[0]
        s = self.scores(x)
        if self.causal:
            mask = jnp.tril(jnp.ones((n_tokens, n_tokens), dtype=bool))
        else:
            mask = None
        if self.kind == "softmax":
            p = jax.nn.softmax(s, axis=-1, where=mask)
            if mask is not None:
                p = jnp.where(mask, p, 0)
        else:
            p = jnp.exp(s) / n_tokens
            if mask is not None:
                p = jnp.where(mask, p, 0)
        n_lap = self.n_heads if self.laplacian else 0
        if self.n_laplacian_heads is not None:
            n_lap = self.n_laplacian_heads
        if n_lap:
            lap = (jnp.arange(self.n_heads) < n_lap).astype(p.dtype)[:, None, None]
            p = p - lap * jnp.eye(n_tokens, dtype=p.dtype)[None]
        return p

    def __call__(self, x: Float[Array, "N d"]) -> Float[Array, "N d"]:
        n_tokens, dim = x.shape
        self.check_dim(dim)
        blocks = x.reshape(n_tokens, self.n_heads, dim // self.n_heads).transpose(1, 0, 2)
        out = matmul(self.matrix(x), blocks)
        return out.transpose(1, 0, 2).reshape(n_tokens, dim)


#: Below this many multiply-adds per product, contractions are written as broadcast-and-sum.
#: Under ``vmap`` a tiny matmul becomes a batched dot that XLA's CPU backend runs one small
#: matrix at a time; the elementwise form fuses and vectorises over the batch (2-3× faster
#: for N = 2, d = 4). Large products keep the dot, which is better on every backend.
SMALL_PRODUCT = 512


def matmul(a: Float[Array, "*b m k"], b: Float[Array, "*b k n"]) -> Float[Array, "*b m n"]:
    """``a @ b`` (batched over leading axes), picking the fastest form for the size."""
    m, k = a.shape[-2:]
    n = b.shape[-1]
    if m * k * n <= SMALL_PRODUCT:
        return jnp.sum(a[..., :, :, None] * b[..., None, :, :], axis=-2)
    return a @ b


def _apply_per_head(matrix: Array, blocks: Float[Array, "h N dh"]) -> Float[Array, "h N dh"]:
    if matrix.ndim == 2:
        matrix = matrix[None]
    return matmul(blocks, jnp.swapaxes(matrix, -1, -2))
