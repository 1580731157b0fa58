"""Parsing of the CLI's parameter ranges: ``a:b:step`` (inclusive) or ``a,b,c``."""

import numpy as np

from .._core.errors import ParameterError


def parse_range(name: str, text: str, *, integer: bool = False) -> list:
    """``"0:2:0.5"`` → [0, 0.5, 1, 1.5, 2]; ``"4,6"`` → [4, 6]; ``"3"`` → [3].

    Raises :class:`ParameterError` naming ``name`` for an empty or malformed range.
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
    if ":" in text:
        start, stop, step = parts
        if step <= 0:
            raise ParameterError(f"--{name} {text!r}: the step must be > 0 in a:b:step.")
        if stop < start:
            raise ParameterError(f"--{name} {text!r} is an empty range: a:b:step needs a <= b.")
        count = int(np.floor((stop - start) / step + 1e-9)) + 1
        values = [round(start + i * step, 12) for i in range(count)]
    else:
        values = parts
    if not values:
        raise ParameterError(f"--{name} is an empty range; give at least one value.")
    if integer:
        if any(v != int(v) for v in values):
            raise ParameterError(f"--{name} {text!r} must contain integers only.")
        return [int(v) for v in values]
    return values
