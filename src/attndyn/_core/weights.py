"""Frozen random weights Q, K, V (spec §1; the peers' regime and seed 004 Fig. 4).

A :class:`RandomWeights` says how a layer's query/key bilinear form B = QᵀK and value matrix
V are drawn. The scores become β x_iᵀ B x_j and the attention output V A_i (column
convention: rows of the state are hit by Vᵀ). The weights are drawn once and kept across
depth — per trajectory (from the trajectory's key) or shared by every trajectory (from
``key``) — and optionally redrawn every ``redraw_every`` layers (``redraw_every=1``: fresh
weights every layer, as in :func:`attndyn.studies.random_weights_cosine`).

Laws of B (``bilinear``), with G, G' independent d × d standard Gaussian matrices:

| name | B | ν |
|---|---|---|
| ``identity`` | I | 1 |
| ``kaiming`` | QᵀK, Q = G/√d, K = G'/√d (seed 004 Fig. 4) | 1 |
| ``gaussian-product`` | G G'/√d | √d |
| ``goe`` | (G + Gᵀ)/√2 (off-diagonal variance 1, diagonal 2) | √(d + 1) |
| ``wigner`` | symmetric, every entry variance 1 | √d |
| ``gpt2`` | 0.02·G (GPT-2's N(0, 0.02²) initialisation) | 1 |

Laws of V (``value``), with G'' another Gaussian matrix: ``identity`` (I), ``gaussian``
(G''/√d, Kaiming: |Vx| ≈ |x|), ``wishart`` (G''G''ᵀ/√d), ``plus-bilinear`` (+B/ν: the
values ascend the interaction energy), ``minus-bilinear`` (−B/ν), ``gpt2`` (0.02·G''). The
normalisations ν follow the peers' simulators (one of which writes rows: their V acts as Vᵀ
here, the same matrix for every symmetric law).
"""

import math
from typing import final

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, PRNGKeyArray

from . import random
from .errors import ParameterError, check_choice, check_int
from .linalg import dot

BILINEAR_LAWS = ("identity", "kaiming", "gaussian-product", "goe", "wigner", "gpt2")
VALUE_LAWS = ("identity", "gaussian", "wishart", "plus-bilinear", "minus-bilinear", "gpt2")
#: GPT-2's initialisation scale.
GPT2_STD = 0.02
#: The trajectory key's stream that per-trajectory weights are drawn from (layer keys use
#: fold_in(key, n) with n < 2³² − 1, so they never meet it).
WEIGHTS_STREAM = 0xFFFFFFFF

Matrix = Float[Array, "d d"]


@final
class DrawnWeights(eqx.Module):
    """One draw: ``query``/``key_matrix`` for :class:`Attention` (``None``: identity) and the
    value matrix ``value`` (``None``: identity)."""

    query: Matrix | None
    key_matrix: Matrix | None
    value: Matrix | None


@final
class RandomWeights(eqx.Module):
    """Random Q, K, V drawn once and kept across depth (see the module docstring).

    Args:
        bilinear: the law of B = QᵀK (:data:`BILINEAR_LAWS`).
        value: the law of V (:data:`VALUE_LAWS`).
        key: when given, every trajectory shares the weights drawn from it (the peers'
            "no anneal"); when omitted, each trajectory draws its own from its key.
        redraw_every: redraw the weights every this many layers (default: never).
    """

    bilinear: str = eqx.field(static=True, default="gaussian-product")
    value: str = eqx.field(static=True, default="gaussian")
    key: PRNGKeyArray | None = None
    redraw_every: int | None = eqx.field(static=True, default=None)

    def __check_init__(self):
        check_choice("bilinear", self.bilinear, BILINEAR_LAWS)
        check_choice("value", self.value, VALUE_LAWS)
        if self.redraw_every is not None:
            check_int("redraw_every", self.redraw_every, lower=1)
        if self.key is not None and not (
            isinstance(self.key, jax.Array) and jnp.issubdtype(self.key.dtype, jax.dtypes.prng_key)
        ):
            raise ParameterError("key must be a JAX PRNG key (jax.random.key(seed)) or None.")

    def form_bound(self, dim: int) -> float:
        """A bound on the spectral norm of B = QᵀK that a draw exceeds with probability
        below e^{−50} ≈ 2·10⁻²²: a d × d standard Gaussian G has ‖G‖ ≤ 2√d + t but with
        probability ≤ e^{−t²/2} (Davidson–Szarek), here t = 10."""
        root = math.sqrt(dim)
        gauss = 2 * root + 10.0
        return {
            "identity": 1.0,
            "kaiming": (gauss / root) ** 2,
            "gaussian-product": gauss**2 / root,
            "goe": math.sqrt(2.0) * gauss,
            "wigner": math.sqrt(2.0) * gauss + gauss,
            "gpt2": GPT2_STD * gauss,
        }[self.bilinear]

    @property
    def shared(self) -> bool:
        """Whether every trajectory uses the same weights."""
        return self.key is not None

    @property
    def frozen(self) -> bool:
        """Whether one draw serves every layer."""
        return self.redraw_every is None

    def block_key(self, trajectory_key: PRNGKeyArray, layer: Array) -> PRNGKeyArray:
        """The key of the draw that layer ``layer`` uses."""
        base = self.key if self.key is not None else random.fold_in(trajectory_key, WEIGHTS_STREAM)
        block = 0 if self.redraw_every is None else layer // self.redraw_every
        return random.fold_in(base, block)

    def at_layer(self, trajectory_key: PRNGKeyArray, layer: Array, dim: int, dtype) -> DrawnWeights:
        """The weights of layer ``layer`` of the trajectory with ``trajectory_key``."""
        return self.sample(self.block_key(trajectory_key, layer), dim, dtype)

    def sample(self, key: PRNGKeyArray, dim: int, dtype=jnp.float32) -> DrawnWeights:
        """One draw of (B, V) from ``key``: ``key`` is split in three, for Q (or G), K (or
        G') and V."""
        check_int("dim", dim, lower=1)
        kq, kk, kv = jax.random.split(key, 3)
        query, key_matrix, nu = _bilinear(self.bilinear, kq, kk, dim, dtype)
        value = _value(self.value, kv, (query, key_matrix), nu, dim, dtype)
        return DrawnWeights(query, key_matrix, value)


def _normal(key: PRNGKeyArray, dim: int, dtype) -> Matrix:
    return random.normal(key, (dim, dim), dtype)


def _bilinear(law: str, kq, kk, dim: int, dtype):
    """(query, key_matrix, ν) for Attention: scores β⟨Q x_i, K x_j⟩ = β x_iᵀ B x_j."""
    root = math.sqrt(dim)
    if law == "identity":
        return None, None, 1.0
    if law == "kaiming":
        scale = 1.0 / root
        return scale * _normal(kq, dim, dtype), scale * _normal(kk, dim, dtype), 1.0
    if law == "gaussian-product":
        b, nu = dot(_normal(kq, dim, dtype), _normal(kk, dim, dtype)) / root, root
    elif law == "goe":
        g = _normal(kq, dim, dtype)
        b, nu = (g + g.T) / math.sqrt(2.0), math.sqrt(dim + 1.0)
    elif law == "wigner":
        g = _normal(kq, dim, dtype)
        off = (g + g.T) / math.sqrt(2.0)
        eye = jnp.eye(dim, dtype=bool)
        b, nu = jnp.where(eye, g, off), root
    else:  # gpt2
        b, nu = GPT2_STD * _normal(kq, dim, dtype), 1.0
    # β⟨Bᵀ x_i, x_j⟩ = β x_iᵀ B x_j.
    return b.T, None, nu


def _form(query: Matrix | None, key_matrix: Matrix | None, dim: int, dtype) -> Matrix:
    """B = QᵀK from the attention's matrices (identity where omitted)."""
    if query is None:
        return jnp.eye(dim, dtype=dtype)
    return query.T if key_matrix is None else dot(query.T, key_matrix)


def _value(
    law: str, kv, qk: tuple[Matrix | None, Matrix | None], nu: float, dim: int, dtype
) -> Matrix | None:
    if law == "identity":
        return None
    if law == "gaussian":
        return (1.0 / math.sqrt(dim)) * _normal(kv, dim, dtype)
    if law == "wishart":
        g = _normal(kv, dim, dtype)
        return dot(g, g.T) / math.sqrt(dim)
    if law in ("plus-bilinear", "minus-bilinear"):
        sign = 1.0 if law == "plus-bilinear" else -1.0
        return (sign / nu) * _form(qk[0], qk[1], dim, dtype)
    return GPT2_STD * _normal(kv, dim, dtype)
