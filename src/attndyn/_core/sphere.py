"""Geometry of the unit sphere S^{d-1}."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, PRNGKeyArray

from .errors import check_int, check_single_key
from .linalg import small_sum


def normalize(y: Float[Array, "*batch d"]) -> Float[Array, "*batch d"]:
    """``y / |y|`` along the last axis (RMSNorm up to the constant √d)."""
    return y / jnp.sqrt(small_sum(y * y, -1, keepdims=True))


def tangent_project(
    x: Float[Array, "*batch d"], y: Float[Array, "*batch d"]
) -> Float[Array, "*batch d"]:
    """P_x(y) = y − ⟨x, y⟩ x, the projection onto the tangent space at the unit vector x."""
    return y - jnp.sum(x * y, axis=-1, keepdims=True) * x


def uniform_sphere(
    *,
    key: PRNGKeyArray,
    n_tokens: int | np.integer,
    dim: int | np.integer,
    dtype: jnp.dtype = jnp.float32,
) -> Float[Array, "n_tokens dim"]:
    """``n_tokens`` independent points uniform on S^{dim-1} (normalised Gaussians).

    Compiled (``eqx.filter_jit``, as diffrax's ``diffeqsolve`` is): called outside ``jit``
    it runs as one program instead of op by op; inside the estimator's program the call
    is inlined, with the same numbers. The Gaussians are ``jax.random.normal``'s: the
    unrolled :func:`.random.normal`, bit-exact alone, fuses differently with the
    normalisation and moves the starts by a rounding. They are float32 numbers whatever
    ``dtype`` (cast, then normalised in ``dtype``): a float64 start is the float32 start of
    the same key, to rounding (see :mod:`attndyn._core.random`)."""
    check_single_key("key", key)  # an integer seed would fail inside JAX, unnamed
    check_int("n_tokens", n_tokens, lower=1)
    check_int("dim", dim, lower=1)
    return sphere_points(key, n_tokens, dim, dtype)


def sphere_points(
    key: PRNGKeyArray, n_tokens: int | np.integer, dim: int | np.integer, dtype=jnp.float32
) -> Float[Array, "n_tokens dim"]:
    """:func:`uniform_sphere` without its checks, the same numbers: for a caller whose key,
    N and d were checked where they entered (the estimator draws every trajectory's start
    here, per point and trajectory, from a point it checked once)."""
    # Python ints and a dtype are static under filter_jit (a NumPy integer would be traced).
    return _uniform_sphere(key, int(n_tokens), int(dim), jnp.dtype(dtype))


@eqx.filter_jit
def _uniform_sphere(key: PRNGKeyArray, n_tokens: int, dim: int, dtype) -> Array:
    return normalize(jax.random.normal(key, (n_tokens, dim), jnp.float32).astype(dtype))


def sphere_drift(x: Float[Array, "*batch d"]) -> Float[Array, ""]:
    """max | |x_i| − 1 |: how far a state has left the sphere."""
    return jnp.max(jnp.abs(jnp.linalg.norm(x, axis=-1) - 1))
