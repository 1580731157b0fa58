"""Parsing of the CLI's parameter ranges: ``a:b:step`` (inclusive) or ``a,b,c``."""

import collections
import decimal
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
    pieces = [p.strip() for p in (text.split(":") if ":" in text else text.split(","))]
    pieces = [p for p in pieces if p]
    try:
        parts = [float(p) for p in pieces]
        if ":" in text and len(parts) != 3:
            raise ValueError
    except ValueError:
        raise ParameterError(
            f"--{name} {text!r} is not a range: use a:b:step (inclusive) or a comma list of {kind}."
        ) from None
    if not all(math.isfinite(v) for v in parts):
        raise ParameterError(f"--{name} {text!r}: every number must be finite (no nan or inf).")
    values = _expand(name, text, pieces) if ":" in text else parts
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


def _expand(name: str, text: str, pieces: list[str]) -> list[float]:
    """The values of ``a:b:step``, computed in decimal from the numbers as written: every
    value is the float nearest to the exact ``a + i·step`` (``0:3.6e-12:1.2e-12`` is 0,
    1.2e-12, 2.4e-12, 3.6e-12; rounding to a fixed number of decimals made it 0, 1e-12,
    2e-12, 4e-12), and ``b`` is included when it is on the grid."""
    with decimal.localcontext() as context:
        context.prec = 40
        context.traps[decimal.Inexact] = False
        start, stop, step = (decimal.Decimal(p) for p in pieces)
        if step <= 0:
            raise ParameterError(f"--{name} {text!r}: the step must be > 0 in a:b:step.")
        if stop < start:
            raise ParameterError(f"--{name} {text!r} is an empty range: a:b:step needs a <= b.")
        # The quotient first (a huge one would not fit the context's integer division).
        if (stop - start) / step >= MAX_VALUES:
            raise ParameterError(
                f"--{name} {text!r} has more than {MAX_VALUES} values; use a larger step."
            )
        count = int((stop - start) // step) + 1
        return [float(start + i * step) for i in range(count)]
