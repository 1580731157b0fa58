"""The attention core shared by every model: one trajectory, tokens shaped ``(N, d)``."""

import functools
import math
from collections.abc import Callable
from typing import Any, Literal

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float

from . import defaults, spectral
from .blockwise import blockwise_parts, combine, default_block
from .errors import (
    ParameterError,
    check_bound,
    check_choice,
    check_int,
    check_real,
    check_scalar,
    concrete,
)
from .linalg import matmul, small_max, small_sum
from .names import ATTENTION_KINDS as ATTENTION_KINDS, IMPLEMENTATIONS as IMPLEMENTATIONS

AttentionKind = Literal["softmax", "unnormalized"]


def as_float(x, name: str = "value") -> Array:
    """Converter for swept parameters: a float array leaf, so sweeps never recompile.
    Anything but real numbers (a string, None, a bool, a complex number, a ragged list) is
    refused with a :class:`ParameterError` naming ``name``."""
    if isinstance(x, int) and not isinstance(x, bool):
        x = float(x) if abs(x) < 2**1023 else math.inf  # beyond int32: refused by its check
    try:
        array = (
            None if isinstance(x, str | bytes | bool | np.bool_) or x is None else jnp.asarray(x)
        )
    except (TypeError, ValueError, OverflowError):
        array = None
    if array is None or array.dtype == bool or array.dtype.kind not in "iuf":
        shown = repr(x) if len(repr(x)) <= 40 else repr(x)[:37] + "..."
        raise ParameterError(
            f"{name}={shown} must be a real number (a Python or NumPy number, or a 0-d "
            f"array); got {type(x).__name__}."
        )
    if not jnp.issubdtype(array.dtype, jnp.floating):
        array = array.astype(jnp.float32)
    return array


def float_leaf(name: str) -> Callable[[Any], Array]:
    """The converter of the swept parameter ``name``: :func:`as_float`, naming it."""
    return functools.partial(as_float, name=name)


def optional_float_leaf(name: str) -> Callable[[Any], Array | None]:
    """The converter of an optional swept parameter: ``None``, or :func:`as_float`."""
    return lambda x: None if x is None else as_float(x, name)


LAPLACIAN_SIGNS = ("P-I", "I-P")

#: How :class:`Attention` computes its output: ``dense`` forms the N × N matrix,
#: ``blockwise`` attends blocks of queries against all keys (memory block × N,
#: :mod:`attndyn._core.blockwise`), ``library`` calls ``jax.nn.dot_product_attention``
#: (softmax only), ``spectral`` sums the kernel's harmonic expansion (Q = K = I, one head,
#: no mask, unit tokens on S¹ or S²: :mod:`attndyn._core.spectral`), ``auto`` picks
#: (:meth:`Attention.implementation_for`).
#: ``auto`` attends in blocks above this many tokens per trajectory. Measured on a 2-core
#: CPU (benchmarks/README.md, "Many tokens"): below it the dense form is as fast or faster,
#: above it the N × N matrix (64 MiB per head at N = 4,096, 1 GiB at 16,384) outgrows the
#: caches and blocks are faster, as well as within memory.
AUTO_BLOCKWISE_TOKENS = 2048


class Attention(eqx.Module):
    r"""Self-attention ``A_i(X)`` of spec §1, with h heads.

    Scores are ``s_ij = β ⟨q_i, k_j⟩`` per head and

    - ``kind="softmax"`` (SA): ``A_i = Σ_j softmax_j(s_ij) v_j``, computed with a
      log-sum-exp shift so that it never overflows; past ``β‖Q‖‖K‖ ≈ 7·10⁸`` float32
      scores round by more than ``exp`` can take and a row can be 0/0, which the
      estimators detect and report with this cause;
    - ``kind="unnormalized"`` (USA): ``A_i = (1/N) Σ_j exp(s_ij) v_j``. ``exp`` overflows
      float32 once ``β ≳ 88.7``, and a layer, whose norm squares this output, once
      ``β‖Q‖‖K‖ ≳ 44.4`` (float64: 709.8 and 354.9). :meth:`scaled` gives the same output
      as ``e^{m_i}·Ã_i`` with the exponent m_i apart, which never overflows: the schemes
      whose layer map ignores a positive factor shared by a row and its update (Post-LN,
      sqrt-scaling, nGPT, Peri-LN) use it and run at any β; the others are refused
      before running where the output could overflow (see the estimator's checks).

    Heads. With ``n_heads = h`` each head sees a d/h-dimensional query, key and value per
    token and the h head outputs are concatenated (then mixed by ``output`` if given).
    ``query``, ``key_matrix`` and ``value`` may each be

    - omitted: the head's own block of d/h coordinates (today's coordinate blocks);
    - ``(h, d/h, d/h)``: a matrix per head acting on its block (``(d, d)`` with one head;
      a ``(d/h, d/h)`` matrix is shared by every head);
    - ``(h, d/h, d)``: a per-head projection W^h: R^d → R^{d/h} of the whole token (the
      general multi-head attention of seeds 000-001: q_i^h = W_Q^h x_i, …).

    ``output`` is W_O, ``(d, d)``: ``A_i ← W_O A_i``. Shapes are checked against the tokens
    when attention is first called (a :class:`ParameterError` names the argument).

    Options: ``laplacian=True`` replaces every head's attention matrix P by the graph
    Laplacian ``P − I`` (seeds 000, 002: ``A_i ← A_i − v_i``); ``n_laplacian_heads=k``
    makes the first k heads Laplacian, ``laplacian_heads=(0, 3)`` any subset (seed 000's
    mixture); ``laplacian_sign="I-P"`` uses ``I − P`` instead (seed 000 eq. 3 writes
    L = I − P and adds it, which moves tokens away from their attention mean; its §6 and
    seed 002 add P − I, graph diffusion). ``causal=True`` lets token i attend to
    ``j ≤ i`` only (USA keeps the 1/N factor); ``self_mask=True`` forbids ``j = i`` (seed
    002's mask M = ∞·I); ``diagonal_shift=c`` subtracts c from the self-scores s_ii (seed
    002's −βI; an array leaf).

    ``beta`` is an array leaf: changing it reuses the compiled code.

    ``implementation="spectral"`` (or ``auto`` above 2,048 tokens where it is cheaper)
    computes attention with Q = K = I, one head and no mask on S¹ or S² from the harmonic
    expansion of the kernel (:mod:`attndyn._core.spectral`): ~N·K² work instead of N², K
    the truncation degree that β, N and the dtype need (:meth:`spectral_degree`). Under
    a traced β (inside the models) every degree it may use is compiled and the one β
    needs runs; ``spectral_beta_max=b`` (static) compiles the degree of b only, for every
    β ≤ b (a larger β is attended directly). The spectral route differentiates in forward
    mode (``jax.jvp``, ``jacfwd``) only, as attention of the directions x/|x| (the dense
    form's derivative along the sphere, not across it): its rows attended directly run in
    a while loop, which ``jax.grad`` cannot reverse; blocks and the dense form take both.
    """

    beta: Float[Array, ""] = eqx.field(converter=float_leaf("beta"))
    kind: str = eqx.field(static=True, default="softmax")
    query: Float[Array, "..."] | None = None
    key_matrix: Float[Array, "..."] | None = None
    n_heads: int = eqx.field(static=True, default=1)
    laplacian: bool = eqx.field(static=True, default=False)
    n_laplacian_heads: int | None = eqx.field(static=True, default=None)
    causal: bool = eqx.field(static=True, default=False)
    value: Float[Array, "..."] | None = None
    output: Float[Array, "..."] | None = None
    laplacian_heads: tuple[int, ...] | None = eqx.field(static=True, default=None)
    laplacian_sign: str = eqx.field(static=True, default="P-I")
    self_mask: bool = eqx.field(static=True, default=False)
    diagonal_shift: Float[Array, ""] | None = eqx.field(
        converter=optional_float_leaf("diagonal_shift"), default=None
    )
    implementation: str = eqx.field(static=True, default=defaults.IMPLEMENTATION, kw_only=True)
    block_size: int | None = eqx.field(static=True, default=None, kw_only=True)
    spectral_beta_max: float | None = eqx.field(static=True, default=None, kw_only=True)

    def __check_init__(self):
        self._check_implementation()
        check_choice("attention kind", self.kind, ATTENTION_KINDS)
        check_scalar("beta", self.beta)
        check_bound("beta", self.beta, lower=0.0)
        check_int("n_heads", self.n_heads, lower=1)
        check_choice("laplacian_sign", self.laplacian_sign, LAPLACIAN_SIGNS)
        self._check_laplacian_heads()
        for name in ("query", "key_matrix", "value"):
            _check_head_matrix(name, getattr(self, name), self.n_heads)
        if self.output is not None:
            _check_finite("output", self.output)
        if self.output is not None and (
            jnp.ndim(self.output) != 2 or self.output.shape[0] != self.output.shape[1]
        ):
            raise ParameterError(
                f"output (W_O) must be a (d, d) matrix; got shape {jnp.shape(self.output)}."
            )
        if self.self_mask and self.causal:
            raise ParameterError(
                "self_mask=True with causal=True leaves token 0 nothing to attend to; "
                "choose one of them."
            )
        if self.diagonal_shift is not None:
            check_bound("diagonal_shift", self.diagonal_shift)

    def _check_implementation(self) -> None:
        check_choice("implementation", self.implementation, IMPLEMENTATIONS)
        if self.block_size is not None:
            check_int("block_size", self.block_size, lower=1)
        if self.spectral_beta_max is not None:
            check_real("spectral_beta_max", self.spectral_beta_max)
            check_bound("spectral_beta_max", self.spectral_beta_max, lower=0.0)
        if self.implementation == "library" and self.kind != "softmax":
            raise ParameterError(
                "implementation='library' (jax.nn.dot_product_attention) computes softmax "
                f"attention only; kind={self.kind!r} needs 'blockwise', 'dense' or 'auto'."
            )
        if self.implementation == "spectral" and self.spectral_refusal() is not None:
            raise ParameterError(
                "implementation='spectral' sums the harmonic expansion of e^{β⟨x_i, x_j⟩} "
                f"for Q = K = I, one head and no mask; {self.spectral_refusal()}. Use "
                "'auto', 'blockwise' or 'dense'."
            )

    def spectral_refusal(self) -> str | None:
        """Why the spectral route cannot compute this attention (``None``: it can, for
        tokens on S¹ or S²)."""
        for name in ("query", "key_matrix", "value", "output"):
            if getattr(self, name) is not None:
                return f"{name} is given (the expansion needs the tokens themselves)"
        reasons = {
            "n_heads > 1 (heads see blocks of coordinates, not unit tokens)": self.n_heads > 1,
            "Laplacian heads are asked for": any(self.laplacian_flags),
            "causal=True masks keys": self.causal,
            "self_mask=True masks keys": self.self_mask,
            "diagonal_shift is given": self.diagonal_shift is not None,
        }
        return next((why for why, holds in reasons.items() if holds), None)

    def implementation_for(
        self, n_tokens: int, dtype=jnp.float32, *, dim: int | None = None
    ) -> str:
        """The implementation that attends ``n_tokens`` tokens of ``dtype`` (of dimension
        ``dim``: without it the spectral route is never named): the one asked for, or
        under ``auto`` the dense form up to :data:`AUTO_BLOCKWISE_TOKENS` tokens and above
        them the spectral route where it applies (Q = K = I, one head, no mask, d = 2 or
        3) and its truncation degree for β costs at most a quarter of the direct route
        (:func:`attndyn._core.spectral.cheaper_degrees`), else blocks; ``library`` where
        cuDNN's fused kernel applies (a GPU, half-precision tokens, softmax, head
        dimensions a multiple of 8). In float32 ``jax.nn.dot_product_attention`` runs
        XLA's dense form (the N × N matrix, at JAX's default matmul precision), so ``auto``
        never picks it there. With a β that is traced the spectral route is named where
        some degree is cheaper; the degree is then chosen at run time."""
        if self.implementation != "auto":
            return self.implementation
        half = jnp.dtype(dtype) in (jnp.dtype(jnp.float16), jnp.dtype(jnp.bfloat16))
        if half and self.kind == "softmax" and jax.default_backend() == "gpu":
            return "library"
        if n_tokens <= AUTO_BLOCKWISE_TOKENS:
            return "dense"
        if dim is not None and self._spectral_degrees(n_tokens, dim):
            value = concrete(self.beta)
            if value is None or self.spectral_degree(n_tokens, dtype, dim=dim) is not None:
                return "spectral"
        return "blockwise"

    def _spectral_degrees(self, n_tokens: int, dim: int) -> tuple[int, ...]:
        """The truncation degrees the spectral route may use for these tokens: all under
        ``implementation='spectral'``, the cheaper ones under ``auto``, none where it does
        not apply."""
        if dim not in spectral.SPECTRAL_DIMS or self.spectral_refusal() is not None:
            return ()
        if self.implementation == "spectral":
            return spectral.DEGREES
        if self.implementation != "auto" or n_tokens <= AUTO_BLOCKWISE_TOKENS:
            return ()
        return spectral.cheaper_degrees(n_tokens, dim)

    def spectral_degree(self, n_tokens: int, dtype=jnp.float32, *, dim: int) -> int | None:
        """The truncation degree K of the spectral route for ``n_tokens`` tokens of
        ``dtype`` on S^{dim−1} at this β (its truncation changes an output by at most 1/8
        of the dtype's ε: :func:`attndyn._core.spectral.truncation_bound`), or ``None``
        where the spectral route does not run (it does not apply, or β needs a degree
        past those it may use). β must be known (not traced). For provenance."""
        value = concrete(self.beta)
        if value is None:
            raise ParameterError("spectral_degree needs a known β (it is traced here).")
        degrees = self._spectral_degrees(n_tokens, dim)
        index = spectral.degree_index(np.asarray(value), n_tokens, dim, jnp.dtype(dtype))
        return degrees[index] if index < len(degrees) else None

    def _check_laplacian_heads(self) -> None:
        if self.n_laplacian_heads is not None:
            check_int("n_laplacian_heads", self.n_laplacian_heads, lower=0)
            if self.n_laplacian_heads > self.n_heads:
                raise ParameterError(
                    f"n_laplacian_heads={self.n_laplacian_heads} must be at most "
                    f"n_heads={self.n_heads}."
                )
        if self.laplacian_heads is None:
            return
        if self.n_laplacian_heads is not None:
            raise ParameterError("give n_laplacian_heads or laplacian_heads, not both.")
        heads = tuple(self.laplacian_heads)
        bad = [h for h in heads if isinstance(h, bool) or not isinstance(h, int | np.integer)] + [
            h for h in heads if not 0 <= h < self.n_heads
        ]
        if bad or len(set(heads)) != len(heads):
            raise ParameterError(
                f"laplacian_heads={heads!r} must list distinct head indices in [0, {self.n_heads})."
            )

    @property
    def laplacian_flags(self) -> tuple[bool, ...]:
        """Per head: whether its attention matrix is replaced by the Laplacian."""
        if self.laplacian_heads is not None:
            chosen = set(self.laplacian_heads)
            return tuple(h in chosen for h in range(self.n_heads))
        n_lap = self.n_heads if self.laplacian else 0
        if self.n_laplacian_heads is not None:
            n_lap = self.n_laplacian_heads
        return tuple(h < n_lap for h in range(self.n_heads))

    @property
    def rotation_invariant(self) -> bool:
        """Whether ``A(XR) = A(X)R`` for every rotation R: true when the scores depend on
        the Gram matrix only and the output mixes the tokens themselves (one head, no
        matrices). Masks, the diagonal shift and Laplacian heads keep this."""
        matrices = (self.query, self.key_matrix, self.value, self.output)
        return self.n_heads == 1 and all(m is None for m in matrices)

    def check_dim(self, dim: int) -> None:
        """Refuse (ParameterError) a token dimension the heads or matrices do not fit,
        before anything is traced (the estimator's plan calls it for every point)."""
        self.check_shapes(dim)

    def check_shapes(self, dim: int) -> None:
        """Refuse (ParameterError) matrices that do not fit tokens of dimension ``dim``."""
        if dim % self.n_heads:
            raise ParameterError(
                f"dim={dim} must be divisible by n_heads={self.n_heads} (each head sees "
                "d/h coordinates)."
            )
        head_dim = dim // self.n_heads
        forms = {
            (head_dim, head_dim): "shared by the heads",
            (self.n_heads, head_dim, head_dim): "one matrix per head on its d/h block",
        }
        # With one head, (h, d/h, d) is the per-head-block shape: name it once.
        forms.setdefault((self.n_heads, head_dim, dim), "a per-head projection R^d → R^(d/h)")
        for name in ("query", "key_matrix", "value"):
            matrix = getattr(self, name)
            if matrix is not None and tuple(matrix.shape) not in forms:
                listed = ", ".join(f"{shape} ({what})" for shape, what in forms.items())
                raise ParameterError(
                    f"{name} has shape {tuple(matrix.shape)}; for d = {dim} and n_heads = "
                    f"{self.n_heads} it must be one of {listed}."
                )
        if self.output is not None and tuple(self.output.shape) != (dim, dim):
            raise ParameterError(
                f"output (W_O) has shape {tuple(self.output.shape)}; for d = {dim} it must "
                f"be ({dim}, {dim})."
            )
        if self.implementation == "spectral" and dim not in spectral.SPECTRAL_DIMS:
            raise ParameterError(
                f"implementation='spectral' attends tokens on S¹ or S² (dim 2 or 3); got "
                f"dim={dim}. Use 'auto', 'blockwise' or 'dense'."
            )

    def _blocks(self, x: Float[Array, "N d"]) -> Float[Array, "h N dh"]:
        n_tokens, dim = x.shape
        self.check_shapes(dim)
        if self.n_heads == 1:
            return x[None]
        return x.reshape(n_tokens, self.n_heads, dim // self.n_heads).transpose(1, 0, 2)

    def _project(self, matrix: Array | None, x: Float[Array, "N d"], blocks: Array) -> Array:
        """The heads' queries, keys or values ``(h, N, d/h)``."""
        if matrix is None:
            return blocks
        dim = x.shape[-1]
        if matrix.ndim == 3 and matrix.shape[-1] == dim and matrix.shape[-2] != dim:
            # A per-head projection of the whole token: W^h x_i.
            tokens = jnp.broadcast_to(x[None], (self.n_heads, *x.shape))
            return matmul(tokens, jnp.swapaxes(matrix, -1, -2))
        return _apply_per_head(matrix, blocks)

    def scores(self, x: Float[Array, "N d"]) -> Float[Array, "h N N"]:
        blocks = self._blocks(x)
        queries = self._project(self.query, x, blocks)
        keys = self._project(self.key_matrix, x, blocks)
        if self.n_heads == 1:
            # One head: a product of (N, d) matrices, given its head axis after. With the
            # unit head axis inside the dot, XLA kept it as a batch axis in a transposed
            # layout and copied the scores out of it inside shard_map, which split the
            # layer's fused kernel in two (W2 ran 13 % slower than the same layer under jit).
            return (self.beta * matmul(queries[0], keys[0].T))[None]
        return self.beta * matmul(queries, jnp.swapaxes(keys, -1, -2))

    def mask(self, n_tokens: int) -> Bool[Array, "N N"] | None:
        """Which keys each query may attend to (``None``: all)."""
        if self.causal:
            return jnp.tril(jnp.ones((n_tokens, n_tokens), dtype=bool))
        if self.self_mask:
            if n_tokens == 1:
                raise ParameterError("self_mask=True needs at least 2 tokens.")
            return ~jnp.eye(n_tokens, dtype=bool)
        return None

    def matrix(self, x: Float[Array, "N d"]) -> Float[Array, "h N N"]:
        """The attention matrix per head (``P``, or the Laplacian for Laplacian heads)."""
        return self._matrix(x, scaled=False)[0]

    def _matrix(
        self, x: Float[Array, "N d"], *, scaled: bool
    ) -> tuple[Float[Array, "h N N"], Float[Array, "N 1"] | None]:
        """The attention matrix, and (``scaled``, unnormalised attention) the exponent m_i
        taken out of row i: the matrix is then ``e^{−m_i}·P`` (:meth:`scaled`)."""
        n_tokens = x.shape[0]
        s = self.scores(x)
        if self.diagonal_shift is not None:
            shift = self.diagonal_shift.astype(s.dtype)
            s = s - shift * jnp.eye(n_tokens, dtype=s.dtype)[None]
        mask = self.mask(n_tokens)
        exponent = None
        if self.kind == "softmax":
            p = _softmax(s, None if mask is None else mask[None])
        elif scaled:
            exponent = _row_exponent(s, None if mask is None else mask[None])
            p = jnp.exp(s - exponent[None]) / n_tokens
        else:
            p = jnp.exp(s) / n_tokens
        if mask is not None:
            p = jnp.where(mask[None], p, 0)
        flags = self.laplacian_flags
        if any(flags):
            eye = jnp.eye(n_tokens, dtype=p.dtype)[None]
            if exponent is not None:  # the identity of P − I is scaled with its row
                eye = eye * jnp.exp(-exponent)[None]
            if self.laplacian_sign == "P-I":
                p = p - jnp.asarray(flags, p.dtype)[:, None, None] * eye
            else:
                p = jnp.where(jnp.asarray(flags)[:, None, None], eye - p, p)
        return p, exponent

    def __call__(self, x: Float[Array, "N d"]) -> Float[Array, "N d"]:
        return self._output(x, None)

    def scaled(
        self, x: Float[Array, "N d"]
    ) -> tuple[Float[Array, "N d"], Float[Array, "N 1"] | None]:
        """``(Ã, m)`` with ``A_i = e^{m_i}·Ã_i`` for every row: the output with its
        exponent apart, so that no β overflows it.

        Softmax attention has no exponent to take out (``m`` is ``None``, ``Ã = A``).
        Unnormalised attention takes out of row i the part of its largest score above
        :data:`UNSHIFTED_SCORE` (``m_i = max(max_j s_ij − 20, 0)``): rows whose scores stay
        below it are computed exactly as by ``__call__``, and no weight of ``Ã`` exceeds
        ``e^{20}/N``. W_V, W_O and the Laplacian act row by row, so they keep the factor."""
        if self.kind == "softmax":
            return self(x), None
        n_tokens, dim = x.shape
        implementation = self.implementation_for(n_tokens, x.dtype, dim=dim)
        if implementation == "dense":
            p, exponent = self._matrix(x, scaled=True)
            return self._output(x, p), exponent
        # Blocks and the spectral route give each row's (num, den, top): the same
        # exponent as the dense form's, taken from top, with nothing of size N × N.
        values = self._project(self.value, x, self._blocks(x))
        num, _, top = self._parts(x, values, implementation)
        exponent = jnp.maximum(jnp.max(top, axis=0) - UNSHIFTED_SCORE, 0)
        log_n = jnp.asarray(math.log(n_tokens), top.dtype)
        heads = num * jnp.exp(top - exponent[None] - log_n)[..., None]
        shifted = values * jnp.exp(-exponent)[None, :, None]  # the identity of P − I, scaled
        heads = _laplacian_heads(heads, shifted, self.laplacian_flags, self.laplacian_sign)
        return self._through_output(heads, n_tokens, dim), exponent[:, None]

    def _output(
        self, x: Float[Array, "N d"], p: Float[Array, "h N N"] | None
    ) -> Float[Array, "N d"]:
        """The heads' outputs through W_O. ``p``: the matrix (the scaled route gives it, in
        the dense form), or None for the implementation chosen for N (blocks and the
        spectral route never form the N × N matrix)."""
        n_tokens, dim = x.shape
        values = self._project(self.value, x, self._blocks(x))
        implementation = (
            "dense" if p is not None else self.implementation_for(n_tokens, x.dtype, dim=dim)
        )
        if implementation != "dense":
            heads = self._heads_without_matrix(x, values, implementation)
        else:
            p = self.matrix(x) if p is None else p
            # As in scores: no unit head axis inside a dot (the same numbers as one head).
            heads = matmul(p[0], values[0])[None] if self.n_heads == 1 else matmul(p, values)
        return self._through_output(heads, n_tokens, dim)

    def _through_output(self, heads: Float[Array, "h N dh"], n_tokens: int, dim: int) -> Array:
        """The heads concatenated ``(N, d)``, then W_O."""
        out = heads[0] if self.n_heads == 1 else heads.transpose(1, 0, 2).reshape(n_tokens, dim)
        if self.output is not None:
            out = matmul(out, self.output.T.astype(out.dtype))
        return out

    def _heads_without_matrix(
        self, x: Float[Array, "N d"], values: Float[Array, "h N dh"], implementation: str
    ) -> Float[Array, "h N dh"]:
        """Every head's output ``P v`` (or its Laplacian) without the N × N matrix: in
        blocks of queries, by the harmonic expansion, or by
        ``jax.nn.dot_product_attention``."""
        if implementation == "library":
            blocks = self._blocks(x)
            queries = self._project(self.query, x, blocks)
            keys = self._project(self.key_matrix, x, blocks)
            out = _library_attention(self, queries, keys, values)
        else:
            out = combine(self.kind, self._parts(x, values, implementation), x.shape[0])
        return _laplacian_heads(out, values, self.laplacian_flags, self.laplacian_sign)

    def _parts(
        self, x: Float[Array, "N d"], values: Float[Array, "h N dh"], implementation: str
    ) -> tuple[Array, Array, Array]:
        """Every head's ``(num, den, top)`` (:func:`.blockwise.blockwise_parts`): in blocks
        of queries, or (``spectral``) by the harmonic expansion, whose degree is chosen
        from β (at run time for a traced β), blocks past the degrees it may use."""
        n_tokens, dim = x.shape
        if self.self_mask and n_tokens == 1:
            raise ParameterError("self_mask=True needs at least 2 tokens.")
        block = self.block_size or default_block(n_tokens, self.n_heads)
        blocks = self._blocks(x)
        queries = self._project(self.query, x, blocks)
        keys = self._project(self.key_matrix, x, blocks)

        def direct(q, k, v, beta):
            return blockwise_parts(
                q,
                k,
                v,
                beta,
                block=block,
                causal=self.causal,
                self_mask=self.self_mask,
                diagonal_shift=self.diagonal_shift,
                self_keys=self_keys,
            )

        # The keys are the queries (no Q, K, mask or shift): the rows' shift needs no pass.
        self_keys = self.query is None and self.key_matrix is None and not self.causal
        self_keys = self_keys and not self.self_mask and self.diagonal_shift is None
        if implementation != "spectral":
            return direct(queries, keys, values, self.beta)
        degrees = self._spectral_degrees(n_tokens, dim)
        num, den, top = spectral.attention_parts(
            x, self.beta, degrees=degrees, block=block, beta_max=self.spectral_beta_max
        )
        return num[None], den[None], top[None]


def _laplacian_heads(
    out: Float[Array, "h N dh"], values: Float[Array, "h N dh"], flags, sign: str
) -> Float[Array, "h N dh"]:
    """Laplacian heads' outputs from their ``P v``: ``(P − I) v`` or ``(I − P) v``."""
    if not any(flags):
        return out
    chosen = jnp.asarray(flags)[:, None, None]
    laplacian = out - values if sign == "P-I" else values - out
    return jnp.where(chosen, laplacian, out)


def _library_attention(
    att: "Attention", queries: Array, keys: Array, values: Array
) -> Float[Array, "h N dh"]:
    """Softmax attention by ``jax.nn.dot_product_attention`` (heads as its N axis), in
    full matmul precision (XLA's path otherwise lets a GPU round float32 to TF32)."""
    n_tokens = queries.shape[1]
    bias = None
    if att.diagonal_shift is not None:
        eye = jnp.eye(n_tokens, dtype=queries.dtype)
        bias = (-att.diagonal_shift.astype(queries.dtype) * eye)[None, None]
    mask = None
    if att.self_mask:
        mask = ~jnp.eye(n_tokens, dtype=bool)[None, None]
    to_tnh = lambda a: jnp.swapaxes(a, 0, 1)  # noqa: E731 - (h, N, ·) → (N, h, ·)
    # β enters through the queries (the kernel's ``scale`` is a static float; β is swept).
    scaled = queries * att.beta.astype(queries.dtype)
    with jax.default_matmul_precision("highest"):
        out = jax.nn.dot_product_attention(
            to_tnh(scaled),
            to_tnh(keys),
            to_tnh(values),
            bias=bias,
            mask=mask,
            scale=1.0,
            is_causal=att.causal,
        )
    return jnp.swapaxes(out, 0, 1)


#: Unnormalised attention's :meth:`Attention.scaled` takes out of a row only the part of its
#: largest score above this: below it (weights up to e^20 ≈ 5·10⁸, squares far inside
#: float32) the row is computed exactly as without the scaling.
UNSHIFTED_SCORE = 20.0


def _row_exponent(s: Float[Array, "h N N"], mask: Bool[Array, "..."] | None) -> Float[Array, "N 1"]:
    """The exponent m_i taken out of row i: its largest allowed score over heads and keys,
    less :data:`UNSHIFTED_SCORE`, and never below 0."""
    if mask is not None:
        s = jnp.where(mask, s, -jnp.inf)
    top = jnp.max(small_max(s, -1), axis=0)[:, None]
    return jnp.maximum(top - UNSHIFTED_SCORE, 0).astype(s.dtype)


def _softmax(s: Float[Array, "*b n"], mask: Bool[Array, "..."] | None) -> Float[Array, "*b n"]:
    """Softmax over the last axis (keys), shifted by the row maximum so that it never
    overflows; masked keys get weight 0 (every row keeps at least one key). The short
    reductions are unrolled (:func:`small_sum`)."""
    if mask is not None:
        s = jnp.where(mask, s, -jnp.inf)
    e = jnp.exp(s - small_max(s, -1, keepdims=True))
    return e / small_sum(e, -1, keepdims=True)


def _check_finite(name: str, matrix) -> None:
    """Refuse a matrix with NaN or infinite entries (when its values are known)."""
    values = concrete(matrix)
    if values is not None and not np.all(np.isfinite(values)):
        raise ParameterError(f"{name} has NaN or infinite entries; give a finite matrix.")


def _check_head_matrix(name: str, matrix, n_heads: int) -> None:
    """What can be checked before the token dimension is known."""
    if matrix is None:
        return
    _check_finite(name, matrix)
    shape = jnp.shape(matrix)
    if len(shape) == 2 and shape[0] == shape[1]:
        return
    if len(shape) == 3 and shape[0] == n_heads:
        return
    raise ParameterError(
        f"{name} has shape {shape}; it must be (d/h, d/h) (shared by the heads), "
        f"(h, d/h, d/h) (one matrix per head) or (h, d/h, d) (a per-head projection), with "
        f"h = n_heads = {n_heads}."
    )


def _apply_per_head(matrix: Array, blocks: Float[Array, "h N dh"]) -> Float[Array, "h N dh"]:
    if matrix.ndim == 2:
        matrix = matrix[None]
    return matmul(blocks, jnp.swapaxes(matrix, -1, -2))
