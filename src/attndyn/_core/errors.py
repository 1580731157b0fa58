"""Input validation that runs before anything is traced or compiled."""

import sys
from collections.abc import Iterable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np


def user_stacklevel() -> int:
    """The ``stacklevel`` that points a warning (a deprecation) at the first frame outside
    attndyn and equinox (model construction runs through equinox's ``__init__``
    machinery)."""
    level, frame = 1, sys._getframe(1)
    while frame is not None and any(
        part in frame.f_code.co_filename for part in ("/attndyn/", "/equinox/", "<frozen")
    ):
        frame, level = frame.f_back, level + 1
    return level


class ParameterError(ValueError):
    """A user-supplied parameter is outside its allowed values.

    The message always names the parameter and what is allowed.
    """


class NonFiniteError(FloatingPointError):
    """A simulation produced NaN or infinite values (overflow)."""


class DistributedError(RuntimeError):
    """A multi-process run could not start: no coordinator answered in time, process 0
    could not open its port, or JAX's start-up failed. The message names the coordinator
    and what to check."""


class NumericalMergeError(FloatingPointError):
    """Tokens merged numerically and nothing bounds their class (``on_merged="auto"``, the
    default), or any merge under ``on_merged="raise"``: the float type cannot resolve their
    gap, so the arithmetic, not the dynamics, would fix those trajectories' class. A
    checkpointed run keeps its work: rerun it with ``on_merged="exclude"`` or ``"count"``
    to resume."""


class NumericalMergeWarning(UserWarning):
    """Tokens merged numerically and were counted (``on_merged="count"``) or excluded
    (``on_merged="exclude"``); ``n_merged`` says how many."""


def concrete(value: Any) -> np.ndarray | None:
    """The value as a NumPy array, or ``None`` when it is traced (inside jit/vmap)."""
    if isinstance(value, jax.Array) and not _is_concrete(value):
        return None
    try:
        return np.asarray(value)
    except Exception:
        return None


def _is_concrete(array: jax.Array) -> bool:
    try:
        array.addressable_shards  # noqa: B018 - raises for tracers
    except jax.errors.ConcretizationTypeError:
        return False
    except AttributeError:
        return False
    return True


def check_choice(name: str, value: Any, allowed: Iterable[Any]) -> None:
    allowed = tuple(allowed)
    if value not in allowed:
        raise ParameterError(
            f"{name}={value!r} is not allowed; choose one of {', '.join(map(repr, allowed))}."
        )


def check_bound(
    name: str,
    value: Any,
    *,
    lower: float | None = None,
    upper: float | None = None,
    lower_open: bool = False,
    upper_open: bool = False,
) -> None:
    """Check ``lower <= value <= upper`` elementwise (open ends if asked).

    Traced values are skipped: validation happens where the value is concrete, which is
    always before compilation for values the user passes in.
    """
    array = concrete(value)
    if array is None:
        return
    interval = _interval(lower, upper, lower_open, upper_open)
    # A string, None, a bool or a complex number would reach np.isfinite as a raw
    # TypeError, or pass as 0/1: refused by name ('V' is kept: ml_dtypes' bfloat16).
    if array.dtype.kind in "USObcMm":
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
        raise ParameterError(f"{name}={shown} must be a real number in {interval}.")
    if not np.all(np.isfinite(array)):
        raise ParameterError(f"{name}={_show(array)} must be finite; allowed: {interval}.")
    bad = np.zeros(array.shape, dtype=bool)
    if lower is not None:
        bad |= (array <= lower) if lower_open else (array < lower)
    if upper is not None:
        bad |= (array >= upper) if upper_open else (array > upper)
    if np.any(bad):
        raise ParameterError(f"{name}={_show(array)} is outside the allowed range {interval}.")


def _interval(lower: float | None, upper: float | None, lower_open: bool, upper_open: bool) -> str:
    lo = "(" if lower_open else "["
    hi = ")" if upper_open else "]"
    return f"{lo}{'-inf' if lower is None else lower}, {'inf' if upper is None else upper}{hi}"


#: The largest count that int32 arithmetic holds (layer and trajectory indices, step counts).
INT32_MAX = 2**31 - 1


def check_int(name: str, value: Any, *, lower: int, upper: int | None = None) -> None:
    """Check that ``value`` is an integer in ``[lower, upper]`` (``upper`` open-ended if None)."""
    allowed = f"an integer >= {lower}" if upper is None else f"an integer in [{lower}, {upper}]"
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise ParameterError(f"{name}={value!r} must be {allowed}.")
    if value < lower or (upper is not None and value > upper):
        raise ParameterError(f"{name}={value!r} must be {allowed}.")


def check_scalar(name: str, value: Any) -> None:
    """A swept parameter is one number per model: refuse arrays (which would broadcast)."""
    shape = np.shape(value)
    if shape != ():
        raise ParameterError(
            f"{name} must be a scalar; got an array of shape {shape}. To sweep it, build one "
            "model per value (e.g. a grid of points), not one model with an array."
        )


def check_swept(
    name: str,
    value: Any,
    *,
    lower: float | None = None,
    upper: float | None = None,
    lower_open: bool = False,
    upper_open: bool = False,
) -> None:
    """A swept parameter (an array leaf of a model): one number per model
    (:func:`check_scalar`), finite and within the bounds (:func:`check_bound`), in one
    check."""
    check_scalar(name, value)
    check_bound(name, value, lower=lower, upper=upper, lower_open=lower_open, upper_open=upper_open)


def check_bool(name: str, value: Any) -> None:
    """A flag must be a real bool: a truthy string such as ``"no"`` would switch it on."""
    if not isinstance(value, bool | np.bool_):
        raise ParameterError(f"{name}={value!r} must be True or False.")


def check_sequence(name: str, value: Any) -> None:
    """A list of values (list, tuple, range or 1-d array). A string is refused, since it
    would be read character by character; so are sets and dicts, whose order is not the
    caller's, and a bare number or None."""
    is_array = isinstance(value, np.ndarray | jax.Array)
    if is_array and value.ndim == 1:
        return
    if is_array or isinstance(value, str | bytes) or not isinstance(value, Sequence):
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
        hint = f" (for one value write [{shown}])" if isinstance(value, str) else ""
        raise ParameterError(
            f"{name} must be a list of values (a list, tuple, range or 1-d array, e.g. "
            f"[1, 2]); got {type(value).__name__} {shown}{hint}."
        )


def check_real(name: str, value: Any) -> None:
    """One real number (Python, NumPy or 0-d array): a string, a bool or None would reach
    NumPy's checks and fail there with a raw TypeError, or pass as 0/1."""
    if isinstance(value, np.ndarray | jax.Array) and value.ndim == 0:
        real = np.dtype(value.dtype).kind in "iuf"
    else:
        real = isinstance(value, int | float | np.integer | np.floating)
    if not real or isinstance(value, bool | np.bool_):
        raise ParameterError(f"{name}={value!r} must be a real number.")


def check_real_in(
    name: str,
    value: Any,
    *,
    lower: float | None = None,
    upper: float | None = None,
    lower_open: bool = False,
    upper_open: bool = False,
    array_hint: str = "",
) -> float:
    """One real number in an interval, returned as a float: an array (``array_hint`` says
    what to do instead), a string, a bool or None is refused naming it, as is NaN or ±inf,
    before NumPy would fail on it with a raw TypeError or carry it as NaN."""
    if isinstance(value, np.ndarray | jax.Array | list | tuple) and _ndim(value) != 0:
        if isinstance(value, np.ndarray | jax.Array):
            got = f"an array of shape {value.shape}"
        else:
            got = f"a {type(value).__name__} of {len(value)} values"
        raise ParameterError(
            f"{name} must be one real number; got {got}." + (f" {array_hint}" if array_hint else "")
        )
    try:
        check_real(name, value)
    except ParameterError:
        interval = _interval(lower, upper, lower_open, upper_open)
        raise ParameterError(f"{name}={value!r:.40} must be a real number in {interval}.") from None
    number = float(value)  # pyright: ignore[reportArgumentType] - check_real: one real number
    check_bound(
        name, number, lower=lower, upper=upper, lower_open=lower_open, upper_open=upper_open
    )
    return number


def _ndim(value: Any) -> int:
    try:
        return np.ndim(value)
    except ValueError:  # a ragged list
        return 1


def check_unique(name: str, values: Iterable[Any]) -> None:
    """Refuse a value given twice: it would be computed twice and label two rows alike."""
    seen: list[Any] = []
    for value in values:
        if any(value == other for other in seen):
            raise ParameterError(f"{name} gives {value!r} twice; give each value once.")
        seen.append(value)


#: Seeds are 32-bit: ``jax.random.key(seed)`` keeps only the low 32 bits of a larger seed.
SEED_LIMIT = 2**32


def check_seed(name: str, value: Any) -> None:
    """A PRNG seed in [0, 2³²): larger seeds would silently alias smaller ones."""
    check_int(name, value, lower=0, upper=SEED_LIMIT - 1)


def _show(array: np.ndarray) -> str:
    if array.ndim == 0:
        return repr(array.item())
    return np.array2string(array, threshold=6)


def check_start(name: str, x0: Any, *, ndim: int = 2) -> None:
    """A start of a model: a float array of ``ndim`` axes, ``(N, d)`` for one trajectory
    (``(batch, N, d)`` for a batch). Traced arrays are checked by shape and dtype."""
    shape = "(batch, N, d)" if ndim == 3 else "(N, d)"
    dtype = getattr(x0, "dtype", None)
    if not isinstance(x0, jax.Array | np.ndarray) or dtype is None:
        raise ParameterError(
            f"{name} must be a float array of shape {shape} (N tokens in R^d, e.g. "
            f"attndyn.uniform_sphere(...)); got {type(x0).__name__}."
        )
    if np.ndim(x0) != ndim or not np.issubdtype(np.dtype(dtype), np.floating):
        hint = "; convert it with .astype(jnp.float32)" if np.ndim(x0) == ndim else ""
        raise ParameterError(
            f"{name} must be a float array of shape {shape} (N tokens in R^d); got "
            f"{np.dtype(dtype).name} values of shape {tuple(np.shape(x0))}{hint}."
        )


def check_single_key(name: str, key: Any) -> None:
    """One JAX PRNG key: a typed key of shape () (``jax.random.key(seed)``) or a raw
    ``uint32`` key of shape (2,) (``jax.random.PRNGKey(seed)``)."""
    dtype = getattr(key, "dtype", None)
    typed = dtype is not None and jnp.issubdtype(dtype, jax.dtypes.prng_key)
    if isinstance(key, jax.Array | np.ndarray) and typed and key.shape == ():
        return
    if isinstance(key, jax.Array | np.ndarray) and dtype == np.uint32 and key.shape == (2,):
        return
    shown = repr(key) if len(repr(key)) <= 40 else repr(key)[:37] + "..."
    raise ParameterError(
        f"{name}={shown} must be one JAX PRNG key, e.g. {name}=jax.random.key(0) (an integer "
        "seed is not a key)."
    )
