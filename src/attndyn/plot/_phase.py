"""Figures of results datasets."""

import matplotlib
import numpy as np
import xarray as xr
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from ..theory import beta_critical, p_antipodal_curve
from ._figure import subplots


def plot_phase_diagram(
    ds: xr.Dataset, *, outcome: str = "antipodal", theory: bool = True, ax: Axes | None = None
) -> Figure:
    """P(outcome) at the last save time against β, one curve per d, with Wilson bands.

    With ``theory=True`` and two tokens, the exact t = ∞ probability is drawn for each d
    and β_c(d) is marked with a dashed vertical line (for a centred-LayerNorm study, those
    of d − 1 dimensions: the dataset's ``norm`` attribute).
    """
    norm = str(ds.attrs.get("norm", "rms"))
    if ax is None:
        fig, ax = subplots(figsize=(7, 4.5))
    else:
        fig = ax.figure  # type: ignore[assignment]
    assert ax is not None
    last = ds.isel(time=-1).sel(outcome=outcome)
    dims = np.unique(last["dim"].values)
    colors = matplotlib.colormaps.get_cmap("viridis")(np.linspace(0, 0.9, max(len(dims), 1)))
    tokens = np.unique(last["tokens"].values)
    for color, d in zip(colors, dims):
        sel = last.where(last["dim"] == d, drop=True).sortby("beta")
        beta = sel["beta"].values
        ax.fill_between(
            beta,
            sel["ci_lower"].values,
            sel["ci_upper"].values,
            color=color,
            alpha=0.25,
            linewidth=0,
        )
        ax.plot(beta, sel["probability"].values, "o", color=color, ms=4, label=f"d = {int(d)}")
        if theory and outcome == "antipodal" and list(tokens) == [2]:
            fine = np.linspace(0, max(beta.max(), 0.1), 121)
            ax.plot(fine, p_antipodal_curve(fine, int(d), norm), "-", color=color, lw=1)
            bc = beta_critical(int(d), norm)
            if bc > 0:
                ax.axvline(bc, color=color, ls="--", lw=0.8)
    ax.set_xlabel("β")
    ax.set_ylabel(f"P({outcome.replace('_', ' ')})")
    t = float(ds["time"].values[-1])
    title = f"N = {', '.join(map(str, tokens))}, T = {t:g}"
    if norm != "rms":
        title += f", {norm}"
    if theory and outcome == "antipodal" and list(tokens) == [2]:
        title += "  (dots: Monte Carlo with Wilson 95 % bands; lines: exact t = ∞; dashed: β_c(d))"
    ax.set_title(title, fontsize=9)
    ax.set_ylim(-0.02, max(0.55, float(np.nanmax(last["ci_upper"].values)) + 0.05))
    ax.legend(fontsize=8, ncols=2)
    return fig  # type: ignore[return-value]
