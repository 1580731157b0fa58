"""Figures of results datasets."""

import numpy as np
import xarray as xr
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from ..theory import EXACT_BETA_MAX, beta_critical, p_antipodal_curve
from ._figure import subplots
from ._style import axes_width, ordered_colors, sample_line, wrap


def plot_phase_diagram(
    ds: xr.Dataset,
    *,
    outcome: str = "antipodal",
    theory: bool = True,
    ax: Axes | None = None,
    title: str | None = None,
) -> Figure:
    """P(outcome) at the last save time against β, one curve per d, with Wilson bands.

    With ``theory=True`` and two tokens, the exact t = ∞ probability is drawn for each d
    and β_c(d) is marked with a dashed vertical line (for a centred-LayerNorm study, those
    of d − 1 dimensions: the dataset's ``norm`` attribute). Colours run along viridis with d.
    The title says what to look for (``title`` replaces its first line); the second line
    gives N, the sample size, L and T.
    """
    norm = str(ds.attrs.get("norm", "rms"))
    if ax is None:
        fig, ax = subplots(figsize=(7, 4.6))
    else:
        fig = ax.figure  # type: ignore[assignment]
    assert ax is not None
    last = ds.isel(time=-1).sel(outcome=outcome)
    dims = np.unique(last["dim"].values)
    tokens = np.unique(last["tokens"].values)
    exact = theory and outcome == "antipodal" and list(tokens) == [2]
    for color, d in zip(ordered_colors(len(dims)), dims):
        sel = last.where(last["dim"] == d, drop=True).sortby("beta")
        beta = sel["beta"].values
        ax.fill_between(
            beta, sel["ci_lower"].values, sel["ci_upper"].values, color=color, alpha=0.25, lw=0
        )
        ax.plot(beta, sel["probability"].values, "o", color=color, ms=4, label=f"d = {int(d)}")
        if exact:
            bc = beta_critical(int(d), norm)
            # 61 points and the kink at β_c itself: the curve is smooth on either side; it
            # is computed up to EXACT_BETA_MAX (within 1e-3 of its limit 1/2).
            top = min(max(beta.max(), 0.1), EXACT_BETA_MAX)
            fine = np.union1d(np.linspace(0, top, 61), [min(bc, top)])
            ax.plot(fine, p_antipodal_curve(fine, int(d), norm), "-", color=color, lw=1)
            if bc > 0:
                ax.axvline(bc, color=color, ls="--", lw=0.8)
    name = outcome.replace("_", " ")
    ax.set_xlabel("β (inverse temperature)")
    ax.set_ylabel(f"P({name}) at T")
    if exact:
        headline = "Antipodal pairs appear only above β_c(d) and follow the exact t = ∞ curves"
        key = "dots: Monte Carlo, bands: Wilson 95 %, lines: exact t = ∞, dashed: β_c(d)"
    else:
        headline = f"P({name}) against β, one colour per d"
        key = "dots: Monte Carlo, bands: Wilson 95 %"
    tokens_text = ", ".join(str(int(n)) for n in tokens)
    if norm != "rms":
        tokens_text += f" ({norm}: the curves of d − 1 dimensions)"
    text = f"{title or headline}\nN = {tokens_text}, {sample_line(ds)}\n{key}"
    ax.set_title(wrap(text, axes_width(ax) + 0.5), fontsize=9)
    upper = last["ci_upper"].values
    top = float(np.nanmax(upper)) if np.isfinite(upper).any() else 0.0  # all excluded: NaN
    ax.set_ylim(-0.02, max(0.55, top + 0.05))
    ax.legend(fontsize=8, ncols=2, title="dimension", title_fontsize=8)
    return fig  # type: ignore[return-value]
