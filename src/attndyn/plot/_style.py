"""Colours and captions shared by attndyn's figures.

- Categories (outcomes, schemes, value distributions) use the Okabe–Ito palette, which
  stays distinguishable under the common colour-vision deficiencies and in grey scale by
  its lightness steps.
- Ordered values (d, N, α, L) use viridis, which is perceptually uniform and readable by
  colour-blind readers; its palest end (yellow) is cut off so that lines stay visible on
  white.
- Every figure names its model and states its parameters and sample sizes:
  :func:`model_line` and :func:`sample_line` build those from a results dataset's
  provenance fields, and :func:`post_ln_theory` says whether seed 003's theory is the
  model's (the figures draw it nowhere else).
"""

import json
import textwrap
from collections.abc import Sequence
from typing import Any

import matplotlib
import numpy as np
import xarray as xr

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
    """``n`` colours (one when ``n`` < 1) for ordered values from a perceptually uniform
    map (RGBA rows)."""
    return matplotlib.colormaps.get_cmap(cmap)(np.linspace(0.0, 0.85, max(n, 1)))


def provenance_record(ds: xr.Dataset) -> dict[str, Any]:
    """The dataset's provenance record (its ``attrs["provenance"]`` JSON; empty if none)."""
    return json.loads(ds.attrs.get("provenance", "{}"))


#: How titles name the normalization schemes (seed 004's spelling).
SCHEME_TITLES = {
    "post-ln": "Post-LN",
    "pre-ln": "Pre-LN",
    "mix-ln": "Mix-LN",
    "peri-ln": "Peri-LN",
    "ngpt": "nGPT",
    "sqrt-scaling": "sqrt-scaling",
}


def model_scheme(ds: xr.Dataset) -> str | None:
    """The normalization scheme a study dataset's points ran, from its provenance fields
    (never a model's repr): its ``scheme``; Post-LN for a study dataset written before
    studies took a scheme (its ``model_equation`` is seed 003's, Post-LN's); ``None`` where
    the dataset records neither (an estimate of a model the figures cannot name)."""
    record = provenance_record(ds)
    if "scheme" in record:
        return str(record["scheme"])
    return "post-ln" if "model_equation" in record else None


def post_ln_theory(ds: xr.Dataset) -> bool:
    """Whether seed 003's exact t = ∞ curves and thresholds are this dataset's theory: its
    points ran Post-LN (or its SDE). Another scheme, or a model the provenance does not
    name, has none: no figure draws them there."""
    return model_scheme(ds) == "post-ln"


def model_line(ds: xr.Dataset) -> str:
    """``Post-LN, softmax attention, gaussian values``: the model of a study dataset as its
    provenance fields record it (scheme with τ or α and the token norm, the SDE engine,
    attention, the law of the values, per model where the models differ); empty where the
    dataset names no model."""
    record = provenance_record(ds)
    scheme = model_scheme(ds)
    if scheme is None:
        return ""
    name = SCHEME_TITLES.get(scheme, scheme)
    for key, symbol in (("tau", "τ"), ("alpha", "α")):
        if key in record and scheme in ("mix-ln", "ngpt"):
            name += f" ({symbol} = {float(record[key]):g})"
    if record.get("engine") == "sde":
        name += " SDE (L → ∞)"
    parts = [name]
    if record.get("norm", "rms") != "rms":
        parts.append(f"{record['norm']} tokens")
    if "attention" in record:
        parts.append(f"{record['attention']} attention")
    parts.append(_values_words(record.get("values"), sde=record.get("engine") == "sde"))
    return ", ".join(parts)


def _values_words(values: Any, *, sde: bool) -> str:
    """The law of the values as a title says it (per model where they differ)."""
    if isinstance(values, dict):
        return "values " + ", ".join(f"{model}: {law or 'none'}" for model, law in values.items())
    if values is None:
        return "Brownian noise" if sde else "deterministic values"
    return f"{values} values"


def sample_line(ds: xr.Dataset) -> str:
    """``2,000 trajectories a point, L = 50, T = 60`` from a results dataset's provenance
    fields (the parts it records; L is its ``depth`` field, which a study's spec and a
    model's :meth:`~attndyn.AbstractModel.provenance` write, never read out of a repr)."""
    record = provenance_record(ds)
    parts = []
    if "n_trajectories" in record:
        parts.append(f"{int(record['n_trajectories']):,} trajectories a point")
    depth = record.get("depth")
    engine = record.get("engine")
    if engine == "sde":
        parts.append(f"SDE, {record.get('solver', 'euler')}, dt = {record.get('dt')}")
    elif depth:
        parts.append(f"L = {depth}")
    parts.append(f"T = {float(ds['time'].values[-1]):g}")
    return ", ".join(parts)


def wrap(text: str, width_inches: float, fontsize: float = 9.0) -> str:
    """``text`` broken into lines that fit ``width_inches`` at ``fontsize`` (each line of
    ``text`` wrapped on its own), so titles are never cut off at the figure's edge."""
    chars = max(30, int(width_inches * 72 / (0.55 * fontsize)))
    # Never a break inside "L = 20": its spaces are held by a placeholder (not whitespace
    # to textwrap) while the lines are filled, and given back after.
    held = text.replace(" = ", "\0=\0")
    lines = (textwrap.fill(line, chars) for line in held.splitlines())
    return "\n".join(lines).replace("\0", " ")


def axes_width(ax: Any) -> float:
    """The width of an axes in inches (of its figure, or subfigure)."""
    return float(ax.bbox.width / ax.figure.dpi)


def values_line(ds: xr.Dataset, name: str) -> str:
    """``"d = 4, 6"``: the distinct values of a point coordinate, if the dataset has it."""
    if name not in ds.coords:
        return ""
    values = np.unique(ds[name].values)
    return ", ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in values.tolist())


#: The widest figure at the default dpi (130): 12.3 in → 1,600 px, a page's width.
MAX_WIDTH_INCHES = 12.3
#: The dpi the CLI writes figures at.
DEFAULT_DPI = 130


def errorbars(ax: Any, x, ds: xr.Dataset, *, color, label: str | None = None, **kwargs) -> Any:
    """The Monte Carlo estimates ``ds["probability"]`` at the sampled ``x`` with their
    Wilson 95 % intervals (``ci_lower``, ``ci_upper``) as error bars: intervals belong to
    the points sampled, never interpolated between them."""
    p = np.asarray(ds["probability"].values, dtype=float)
    lower = np.asarray(ds["ci_lower"].values, dtype=float)
    upper = np.asarray(ds["ci_upper"].values, dtype=float)
    yerr = np.clip(np.stack([p - lower, upper - p]), 0.0, None)
    style = {"fmt": "o", "ms": 4, "capsize": 2, "elinewidth": 0.9, "lw": 0} | kwargs
    return ax.errorbar(x, p, yerr=yerr, color=color, label=label, **style)


def key(kind: str, color: str = "0.25", **kwargs) -> Any:
    """A legend entry explaining a kind of mark: ``"estimate"`` (dot with an error bar:
    Monte Carlo ± Wilson 95 %), ``"exact"`` (solid line), ``"critical"`` (dashed line),
    ``"far"`` (the cross of a point far from its limit)."""
    from matplotlib.lines import Line2D

    if kind == "estimate":
        return Line2D([], [], marker="o", ms=4, color=color, lw=0, **kwargs)
    if kind == "far":
        return Line2D([], [], marker="x", ms=7, mew=1.6, color="k", lw=0, **kwargs)
    style = {"exact": "-", "critical": "--", "reference": ":"}[kind]
    return Line2D([], [], ls=style, color=color, lw=1.2, **kwargs)


def setting_line(ds: xr.Dataset, keys: Sequence[str] = ()) -> str:
    """The setting a figure shows: the model (:func:`model_line`), the point values every
    point shares (``d = 4``, ``N = 2``) and the sample line (:func:`sample_line`)."""
    model = model_line(ds)
    return f"{model}; {_shared_line(ds, keys)}" if model else _shared_line(ds, keys)


def _shared_line(ds: xr.Dataset, keys: Sequence[str]) -> str:
    parts = []
    for name in keys:
        if name in ds.coords:
            values = np.unique(np.asarray(ds[name].values))
            nan = values.dtype.kind == "f" and bool(np.isnan(values).all())
            if len(values) == 1 and not nan:  # NaN: a parameter these models lack
                parts.append(f"{SYMBOLS.get(name, name)} = {_value(values[0])}")
    return ", ".join([*parts, sample_line(ds)])


#: How figures name the point coordinates.
SYMBOLS = {"beta": "β", "dim": "d", "n_tokens": "N", "eps": "ε", "model": "model"}


def _value(value: Any) -> str:
    if isinstance(value, float | np.floating):
        return f"{float(value):g}"
    return str(value).strip('"')


def point_label(row: xr.Dataset, names: Sequence[str]) -> str:
    """``"d = 4, β = 0.25"``: a point's values of the coordinates ``names`` (a NaN left out:
    a parameter the point's model lacks, as ε of the full model)."""
    return ", ".join(
        f"{SYMBOLS.get(n, n)} = {_value(row[n].item())}"
        for n in names
        if n in row.coords and not _is_nan(row[n].item())
    )


def _is_nan(value: Any) -> bool:
    return isinstance(value, float | np.floating) and bool(np.isnan(value))


def swept(ds: xr.Dataset, names: Sequence[str]) -> list[str]:
    """The coordinates among ``names`` that take more than one value over the points (NaN
    counts once)."""
    out = []
    for name in names:
        if name in ds.coords:
            values = np.asarray(ds[name].values)
            if values.dtype.kind == "f":
                distinct = len(np.unique(values[np.isfinite(values)])) + bool(
                    np.isnan(values).any()
                )
            else:
                distinct = len(np.unique(values))
            if distinct > 1:
                out.append(name)
    return out
