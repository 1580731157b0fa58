"""When a model records its state: the horizon and the save times, apart from the equation.

As diffrax keeps ``SaveAt`` apart from the vector field and the solver, every attndyn model
takes one :class:`SaveAt`; it is validated here, once, for every model.
"""

import functools
from typing import final

import equinox as eqx
import numpy as np

from .errors import ParameterError, check_bound


def as_times(value) -> tuple[float, ...] | None:
    """Converter: save times as a tuple of Python floats (hashable, never a static array).
    A list, tuple, range or 1-d array of real numbers, or one number; anything else (a
    string, which NumPy would read as a number, a nested list) is refused, naming ``ts``."""
    if value is None:
        return None
    shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
    refusal = ParameterError(
        f"ts={shown} must be the save times: a list, tuple or 1-d array of numbers in "
        "[0, horizon] (e.g. SaveAt(2.0, [0.5, 1.0, 2.0])), or one number."
    )
    if isinstance(value, str | bytes) or isinstance(value, dict | set):
        raise refusal
    try:
        times = np.asarray(value)
    except (TypeError, ValueError):
        raise refusal from None
    if times.ndim > 1 or times.dtype == bool or times.dtype.kind not in "iuf":
        raise refusal
    return tuple(float(v) for v in np.atleast_1d(times.astype(np.float64)))


def as_horizon(value) -> float:
    """Converter: the horizon as a Python float; anything but one real number is refused."""
    try:
        real = (
            not isinstance(value, str | bytes | bool | np.bool_)
            and np.ndim(value) == 0
            and np.asarray(value).dtype.kind in "iuf"
        )
    except (TypeError, ValueError):
        real = False
    if not real:
        raise ParameterError(
            f"horizon={value!r:.40} must be a real number T > 0 (e.g. SaveAt(2.0)); got "
            f"{type(value).__name__}."
        )
    return float(value)


@final
class SaveAt(eqx.Module):
    """The horizon T and the times in [0, T] at which a model records its state.

    Args:
        horizon: T > 0, in units of t = n/L for the layer maps.
        ts: save times in [0, T], increasing (default: T only).

    Models that step on a grid (layers of size 1/L, SDE steps of size dt) round each save
    time to the nearest grid point: :meth:`steps` says which, and refuses two times that
    round to one point (they would be two rows of one time in a dataset).
    """

    horizon: float = eqx.field(static=True, converter=as_horizon)
    ts: tuple[float, ...] | None = eqx.field(static=True, default=None, converter=as_times)

    def __check_init__(self):
        check_bound("horizon", self.horizon, lower=0.0, lower_open=True)
        if self.ts is None:
            return
        times = np.asarray(self.ts, dtype=np.float64)
        if times.size == 0:
            raise ParameterError("saveat must name at least one time in [0, horizon].")
        if not np.all(np.isfinite(times)) or np.any((times < 0) | (times > self.horizon)):
            raise ParameterError(
                f"saveat={np.array2string(times, threshold=6)} has a time outside "
                f"[0, {self.horizon}]; every save time must lie in [0, horizon]."
            )
        if np.any(np.diff(times) <= 0):
            # A time given twice is two rows of one time coordinate: selecting by time
            # then fails or picks one of them.
            raise ParameterError("saveat must be increasing: every save time once, in order.")

    @property
    def times(self) -> np.ndarray:
        """The save times (float64)."""
        return np.asarray((self.horizon,) if self.ts is None else self.ts, dtype=np.float64)

    def steps(self, step: float, times: "np.ndarray | float | None" = None) -> np.ndarray:
        """Indices of the grid points ``k·step`` nearest to the save times (or to
        ``times``), as int64: ``rint(t/step)``, one rounding for every use (the layer count
        of the horizon included). Two save times that round to one grid point are
        refused.

        The save times' indices are worked out, and the refusal made, once per save grid
        and step (a model reads them at every use: its save layers, save times, layer
        count); a model refuses them where it is built by calling this in its
        ``__check_init__`` (:class:`attndyn.DiscreteTransformer`)."""
        if times is not None:
            return np.atleast_1d(np.rint(np.asarray(times, np.float64) / step).astype(np.int64))
        if isinstance(step, int | float):  # a Python number: hashable, one entry per step
            return _save_steps(self.horizon, self.ts, step).copy()  # a copy: the cache's own
        return _save_steps.__wrapped__(self.horizon, self.ts, step)


@functools.lru_cache(maxsize=256)
def _save_steps(horizon: float, ts: tuple[float, ...] | None, step: float) -> np.ndarray:
    """:meth:`SaveAt.steps` of the save grid ``(horizon, ts)``, refusing two save times on
    one grid point."""
    times = np.asarray((horizon,) if ts is None else ts, dtype=np.float64)
    steps = np.rint(times / step).astype(np.int64)
    same = np.flatnonzero(np.diff(steps) == 0)
    if same.size:
        a, b = times[same[0]], times[same[0] + 1]
        raise ParameterError(
            f"save times {a:g} and {b:g} round to the same step of the model's grid "
            f"(step {step:g}); save fewer times or use a finer grid (a larger depth L, "
            "or a smaller dt)."
        )
    return steps


#: The placeholder save grid of :func:`without_saves`.
_NO_SAVES = SaveAt(1.0)


def without_saves(model):
    """``model`` with a placeholder :class:`SaveAt`, for a compiled solve that takes the
    save times and horizon as arrays: a ``SaveAt`` is static (its times are Python floats,
    validated once), so a model that carries its own compiles once per save grid, where
    the solve itself (an adaptive ODE's: its steps do not depend on where it saves) is the
    same program for every grid."""
    return eqx.tree_at(lambda m: m.saveat, model, _NO_SAVES)
