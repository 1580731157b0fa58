"""Parsing of the CLI's parameter ranges: ``a:b:step`` (inclusive) or ``a,b,c``."""

import collections
import math

from .._core.errors import ParameterError

#: The most values one range may expand to (a larger grid is a typo, not a study).
MAX_VALUES = 100_000


def parse_range(name: str, text: str, *, integer: bool = False) -> list:
    """``"0:2:0.5"`` → [0, 0.5, 1, 1.5, 2]; ``"4,6"`` → [4, 6]; ``"3"`` → [3].

    Raises :class:`ParameterError` naming ``name`` for an empty or malformed range, a
    non-finite number (NaN or infinity) anywhere in it, a range of more than
    :data:`MAX_VALUES` values, a value given twice, or (``integer``) a value that is not
    an integer.
    """
    text = text.strip()
    kind = "integers" if integer else "numbers"
    try:
        parts = [float(p) for p in (text.split(":") if ":" in text else text.split(",")) if p]
        if ":" in text and len(parts) != 3:
            raise ValueError
    except ValueError:
        raise ParameterError(
            f"--{name} {text!r} is not a range: use a:b:step (inclusive) or a comma list of {kind}."
        ) from None
    if not all(math.isfinite(v) for v in parts):
        raise ParameterError(f"--{name} {text!r}: every number must be finite (no nan or inf).")
    values = _expand(name, text, parts) if ":" in text else parts
    if not values:
        raise ParameterError(f"--{name} is an empty range; give at least one value.")
    if len(values) > MAX_VALUES:
        raise ParameterError(f"--{name} {text!r} has more than {MAX_VALUES} values.")
    repeated = sorted(v for v, n in collections.Counter(values).items() if n > 1)
    if repeated:  # the same point twice would be the same trajectories, not more of them
        raise ParameterError(
            f"--{name} {text!r} lists {repeated[0]:g} more than once; give each value once."
        )
    if integer:
        if any(v != int(v) for v in values):
            raise ParameterError(f"--{name} {text!r} must contain integers only.")
        return [int(v) for v in values]
    return values


def _expand(name: str, text: str, parts: list[float]) -> list[float]:
    start, stop, step = parts
    if step <= 0:
        raise ParameterError(f"--{name} {text!r}: the step must be > 0 in a:b:step.")
    if stop < start:
        raise ParameterError(f"--{name} {text!r} is an empty range: a:b:step needs a <= b.")
    count = math.floor((stop - start) / step + 1e-9) + 1 if (stop - start) / step < 2**53 else 0
    if not 0 < count <= MAX_VALUES:
        raise ParameterError(
            f"--{name} {text!r} has more than {MAX_VALUES} values; use a larger step."
        )
    return [round(start + i * step, 12) for i in range(count)]
