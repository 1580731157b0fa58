"""Plain Python values for JSON: the one conversion used by keys, provenance and the CLI."""

import math
from typing import Any

import numpy as np


def plain(value: Any) -> Any:
    """``value`` with NumPy scalars and arrays turned into Python numbers and lists.

    Non-finite floats become ``None`` (JSON has no NaN); tuples become lists.
    """
    if isinstance(value, np.ndarray):
        return [plain(v) for v in value.tolist()]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, tuple | list):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    return value
