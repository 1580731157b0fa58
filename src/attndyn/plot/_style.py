"""Colours and captions shared by attndyn's figures.

- Categories (outcomes, schemes, value distributions) use the Okabe–Ito palette, which
  stays distinguishable under the common colour-vision deficiencies and in grey scale by
  its lightness steps.
- Ordered values (d, N, α, L) use viridis, which is perceptually uniform and readable by
  colour-blind readers; its palest end (yellow) is cut off so that lines stay visible on
  white.
- Every figure states its parameters and sample sizes: :func:`sample_line` builds that
  line from a results dataset's provenance.
"""

import json
import re
import textwrap
from collections.abc import Sequence
from typing import Any

import matplotlib
import numpy as np
import xarray as xr

from .._models.discrete import DEFAULT_DEPTH, DiscreteTransformer

#: Okabe & Ito (2008), "Color Universal Design", in the order used for categories:
#: blue, vermillion, bluish green, reddish purple, orange, sky blue, black, yellow.
OKABE_ITO = (
    "#0072B2",
    "#D55E00",
    "#009E73",
    "#CC79A7",
    "#E69F00",
    "#56B4E9",
    "#000000",
    "#F0E442",
)

#: The clustering outcomes: single cluster blue, antipodal vermillion, unclustered grey.
OUTCOME_COLORS = {
    "single": OKABE_ITO[0],
    "antipodal": OKABE_ITO[1],
    "has_antipodal_pair": OKABE_ITO[1],
    "unclustered": "#8C8C8C",
}


def category_colors(names: Sequence[str]) -> dict[str, str]:
    """One Okabe–Ito colour per category, in order (cycling after eight)."""
    return {name: OKABE_ITO[i % len(OKABE_ITO)] for i, name in enumerate(names)}


def ordered_colors(n: int, cmap: str = "viridis") -> np.ndarray:
    """``n`` colours for ordered values from a perceptually uniform map (RGBA rows)."""
    return matplotlib.colormaps.get_cmap(cmap)(np.linspace(0.0, 0.85, max(n, 1)))


def sample_line(ds: xr.Dataset) -> str:
    """``2,000 trajectories a point, L = 50, T = 60`` from a results dataset's provenance
    (the parts it records)."""
    record: dict[str, Any] = json.loads(ds.attrs.get("provenance", "{}"))
    parts = []
    if "n_trajectories" in record:
        parts.append(f"{int(record['n_trajectories']):,} trajectories a point")
    depth = record.get("depth") or _depth_from_repr(record.get("model", ""))
    engine = record.get("engine")
    if engine == "sde":
        parts.append(f"SDE, {record.get('solver', 'euler')}, dt = {record.get('dt')}")
    elif depth:
        parts.append(f"L = {depth}")
    parts.append(f"T = {float(ds['time'].values[-1]):g}")
    return ", ".join(parts)


def _depth_from_repr(model: str) -> int | None:
    """L of a layer-map model from its repr (equinox leaves out fields at their default)."""
    match = re.search(r"\bdepth=(\d+)", model)
    if match:
        return int(match.group(1))
    if model.startswith(f"{DiscreteTransformer.__name__}(") and not re.search(r"\bstep=", model):
        return DEFAULT_DEPTH  # depth=None means the default L
    return None


def wrap(text: str, width_inches: float, fontsize: float = 9.0) -> str:
    """``text`` broken into lines that fit ``width_inches`` at ``fontsize`` (each line of
    ``text`` wrapped on its own), so titles are never cut off at the figure's edge."""
    chars = max(30, int(width_inches * 72 / (0.55 * fontsize)))
    return "\n".join(textwrap.fill(line, chars) for line in text.splitlines())


def axes_width(ax: Any) -> float:
    """The width of an axes in inches (of its figure, or subfigure)."""
    return float(ax.bbox.width / ax.figure.dpi)


def values_line(ds: xr.Dataset, name: str) -> str:
    """``"d = 4, 6"``: the distinct values of a point coordinate, if the dataset has it."""
    if name not in ds.coords:
        return ""
    values = np.unique(ds[name].values)
    return ", ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in values.tolist())
