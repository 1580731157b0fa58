"""Where every trajectory's randomness comes from: the study key, the point and the index.

Trajectory ``i`` of a point gets the key ``fold_in(fold_in(key, point_id), i)``, with
``point_id`` a hash of the point's parameters: the numbers depend on the seed, the point
and the trajectory index only, never on the chunk size, the device count or which other
points share the grid.
"""

import json
import zlib
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, PRNGKeyArray

from .._core.errors import ParameterError

Point = Mapping[str, Any]

#: Point names renamed since their values first entered :func:`point_id`: a point is hashed
#: under its first name, so that a rename never changes its random numbers (0.5 renamed
#: ``tokens`` to ``n_tokens``). Frozen, as :func:`canonical` is.
HASHED_AS = {"n_tokens": "tokens"}


def canonical(value: Any) -> Any:
    """A point value as it enters :func:`point_id` (NumPy scalars as Python numbers,
    tuples as lists). Frozen: changing it would change every published number."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, jax.Array) and value.ndim == 0:  # as the NumPy scalar it holds
        return np.asarray(value).item()
    if isinstance(value, tuple | list):
        return [canonical(v) for v in value]
    return value


def point_text(point: Point) -> str:
    """The point's canonical JSON, each parameter under its hashed name (:data:`HASHED_AS`):
    equal for equal points as written (``1`` ≠ ``1.0``)."""
    named = {HASHED_AS.get(k, k): canonical(v) for k, v in point.items()}
    return json.dumps(named, sort_keys=True)


def point_id(point: Point) -> int:
    """A stable 31-bit identifier of a parameter point (its canonical JSON, hashed)."""
    return zlib.crc32(point_text(point).encode()) & 0x7FFFFFFF


def numeric_identity(point: Point) -> str:
    """The point as numbers: equal for points whose values compare equal (``beta=1`` and
    ``beta=1.0``), which :func:`point_id` tells apart (it hashes the values as written)."""

    def as_number(value: Any) -> Any:
        value = canonical(value)
        if isinstance(value, list):
            return [as_number(v) for v in value]
        if isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        return value

    return json.dumps({k: as_number(v) for k, v in sorted(point.items())}, sort_keys=True)


def point_key(key: PRNGKeyArray, point: Point) -> PRNGKeyArray:
    """The key of all trajectories at ``point``."""
    return jax.random.fold_in(key, point_id(point))


def trajectory_key(key: PRNGKeyArray, point: Point, index: int | Array) -> PRNGKeyArray:
    """The key of trajectory ``index`` at ``point``."""
    return jax.random.fold_in(point_key(key, point), index)


def check_key(key: Any) -> PRNGKeyArray:
    """``key`` if it is one JAX PRNG key: a typed key (``jax.random.key``) of shape (), or a
    raw ``uint32`` key (``jax.random.PRNGKey``). Anything else is refused by name."""
    if isinstance(key, jax.Array) and jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        if key.shape == ():
            return key
        raise ParameterError(
            f"key must be a single PRNG key; got an array of {key.shape} keys (pass one, e.g. "
            "jax.random.key(0))."
        )
    if isinstance(key, jax.Array | np.ndarray) and key.dtype == np.uint32 and key.shape == (2,):
        return jnp.asarray(key)
    raise ParameterError(
        f"key={_short(key)} is not a JAX PRNG key; pass one, e.g. key=jax.random.key(0)."
    )


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
