"""Figures of results datasets."""

import numpy as np
import xarray as xr
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from ..theory import EXACT_BETA_MAX, beta_critical, p_antipodal_curve
from ._figure import subplots
from ._style import (
    axes_width,
    errorbars,
    key,
    ordered_colors,
    post_ln_theory,
    setting_line,
    wrap,
)


def plot_phase_diagram(
    ds: xr.Dataset,
    *,
    outcome: str = "antipodal",
    theory: bool = True,
    ax: Axes | None = None,
    title: str | None = None,
) -> Figure:
    """P(outcome) at the last save time against β, one colour per d: the Monte Carlo
    estimates with their Wilson 95 % intervals as error bars at the sampled β.

    With ``theory=True``, two tokens and ``outcome="antipodal"``, the exact t = ∞ probability
    is drawn for each d and β_c(d) is marked with a dashed vertical line (for a
    centred-LayerNorm study, those of d − 1 dimensions: the dataset's ``norm`` attribute)
    where they are the model's theory: seed 003's, for Post-LN and its SDE, read from the
    provenance's ``scheme`` field (:func:`._style.post_ln_theory`); another scheme, or a
    dataset that does not name its model, gets none, and the title says so.
    Colours run along viridis with d.
    The legend explains every mark and line; the title names the model and states the
    setting (N, the sample size, L and T; ``title`` adds a first line).
    """
    norm = str(ds.attrs.get("norm", "rms"))
    if ax is None:
        fig, ax = subplots(figsize=(7.5, 4.8))
    else:
        fig = ax.figure  # type: ignore[assignment]
    assert ax is not None
    last = ds.isel(time=-1).sel(outcome=outcome)
    dims = np.unique(last["dim"].values)
    tokens = np.unique(last["n_tokens"].values)
    two_tokens = theory and outcome == "antipodal" and list(tokens) == [2]
    exact = two_tokens and post_ln_theory(ds)
    for color, d in zip(ordered_colors(len(dims)), dims):
        sel = last.where(last["dim"] == d, drop=True).sortby("beta")
        beta = sel["beta"].values
        errorbars(ax, beta, sel, color=color, label=f"d = {int(d)}")
        if exact:
            _exact_curve(ax, beta, int(d), norm, color)
    name = outcome.replace("_", " ")
    ax.set_xlabel("β (inverse temperature)")
    ax.set_ylabel(f"P({name}) at t = T")
    handles, labels = ax.get_legend_handles_labels()
    handles.append(key("estimate"))
    labels.append("Monte Carlo ± Wilson 95 %")
    if exact:
        handles += [key("exact"), key("critical")]
        labels += ["exact t = ∞", "β_c(d)"]
    setting = setting_line(ds, ("n_tokens",))
    if exact and norm != "rms":
        setting += f"; {norm} tokens: the exact curves of d − 1 dimensions"
    if two_tokens and not exact:
        setting += "; no exact curve: the t = ∞ theory (seed 003) is Post-LN's"
    text = f"{title}\n{setting}" if title else setting
    ax.set_title(wrap(text, axes_width(ax) + 0.5), fontsize=9)
    upper = last["ci_upper"].values
    top = float(np.nanmax(upper)) if np.isfinite(upper).any() else 0.0  # all excluded: NaN
    ax.set_ylim(-0.02, max(0.55, top + 0.05))
    ax.legend(handles, labels, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig  # type: ignore[return-value]


def _exact_curve(ax: Axes, beta: np.ndarray, d: int, norm: str, color) -> None:
    """The exact t = ∞ probability of d over the plotted β range (61 points and the kink
    at β_c itself: the curve is smooth on either side; computed up to EXACT_BETA_MAX,
    within 1e-3 of its limit 1/2), and β_c(d) dashed."""
    bc = beta_critical(d, norm)
    top = min(max(float(beta.max()), 0.1), EXACT_BETA_MAX)
    fine = np.union1d(np.linspace(0, top, 61), [min(bc, top)])
    ax.plot(fine, p_antipodal_curve(fine, d, norm), "-", color=color, lw=1)
    if bc > 0:
        ax.axvline(bc, color=color, ls="--", lw=0.8)
