"""Figures for the (β, ε), (β, N) and time-resolved studies (seed 003 Figs. 4, 6-9)."""

import numpy as np
import xarray as xr
from matplotlib.colors import to_rgb
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from ..theory import eps_critical
from ._figure import subplots
from ._style import OUTCOME_COLORS, ordered_colors, sample_line, values_line, wrap

#: Colour-blind-safe outcome colours (Okabe–Ito): blue = single cluster, vermillion =
#: antipodal, grey = unclustered (seed 003 draws magenta and violet, hard to tell apart).
SINGLE_COLOR = OUTCOME_COLORS["single"]
ANTIPODAL_COLOR = OUTCOME_COLORS["antipodal"]
UNCLUSTERED_COLOR = OUTCOME_COLORS["unclustered"]


def plot_beta_eps(ds: xr.Dataset, *, title: str | None = None) -> Figure:
    """Seed 003 Fig. 4: each (β, ε) cell coloured by its dominant outcome (single or
    antipodal), shaded by that outcome's fraction; ε_c(β) = √(2e^{−β}) dashed."""
    last = ds.isel(time=-1)
    betas = np.unique(last["beta"].values)
    epss = np.unique(last["eps"].values)
    image = np.ones((len(epss), len(betas), 3))
    single_rgb, anti_rgb = np.array(to_rgb(SINGLE_COLOR)), np.array(to_rgb(ANTIPODAL_COLOR))
    for i in range(ds.sizes["point"]):
        row = last.isel(point=i)
        b = np.searchsorted(betas, float(row["beta"]))
        e = np.searchsorted(epss, float(row["eps"]))
        ps = float(row["probability"].sel(outcome="single"))
        pa = float(row["probability"].sel(outcome="antipodal"))
        if not np.isfinite(ps):
            continue
        rgb, frac = (single_rgb, ps) if ps >= pa else (anti_rgb, pa)
        image[e, b] = 1 - frac * (1 - rgb)  # white at 0, full colour at 1
    fig, ax = subplots(figsize=(6.5, 4.8))

    def edges(v):
        if len(v) == 1:
            return np.array([v[0] - 0.5, v[0] + 0.5])
        mid = (v[1:] + v[:-1]) / 2
        return np.concatenate([[2 * v[0] - mid[0]], mid, [2 * v[-1] - mid[-1]]])

    ax.pcolormesh(edges(betas), edges(epss), image, shading="flat")
    fine = np.linspace(max(edges(betas)[0], 0), edges(betas)[-1], 200)
    ax.plot(fine, [eps_critical(b) for b in fine], "k--", lw=1.2, label="ε_c(β) = √(2e^{−β})")
    ax.set_ylim(edges(epss)[0], edges(epss)[-1])
    ax.set_xlabel("β")
    ax.set_ylabel("ε")
    handles = [
        Patch(color=SINGLE_COLOR, label="single cluster dominant"),
        Patch(color=ANTIPODAL_COLOR, label="antipodal dominant"),
        *ax.get_legend_handles_labels()[0],
    ]
    ax.legend(handles=handles, fontsize=8, loc="upper right")
    t = float(ds["time"].values[-1])
    ax.set_title(title or f"hybrid model, d = {int(last['dim'].values[0])}, T = {t:g}", fontsize=9)
    return fig  # type: ignore[return-value]


def plot_beta_n(
    ds: xr.Dataset, *, outcome: str = "has_antipodal_pair", title: str | None = None
) -> Figure:
    """Seed 003 Fig. 6: P(outcome) at the last save time against β, one curve per N
    (viridis, ordered by N), with Wilson 95 % bands. ``title`` replaces the first line of
    the title; the second gives d, the sample size, L and T."""
    last = ds.isel(time=-1).sel(outcome=outcome)
    tokens = np.unique(last["tokens"].values)
    fig, ax = subplots(figsize=(7, 4.6))
    for color, n in zip(ordered_colors(len(tokens)), tokens):
        sel = last.where(last["tokens"] == n, drop=True).sortby("beta")
        beta = sel["beta"].values
        ax.fill_between(beta, sel["ci_lower"], sel["ci_upper"], color=color, alpha=0.25, lw=0)
        ax.plot(beta, sel["probability"], "o-", color=color, ms=4, lw=1, label=f"N = {int(n)}")
    name = outcome.replace("_", " ")
    ax.set_xlabel("β (inverse temperature)")
    ax.set_ylabel(f"P({name}) at T")
    headline = title or f"P({name}) against β, one colour per number of tokens N"
    text = f"{headline}\nd = {values_line(last, 'dim')}, {sample_line(ds)}; bands: Wilson 95 %"
    ax.set_title(wrap(text, fig.get_figwidth()), fontsize=9)
    ax.legend(fontsize=8, title="tokens", title_fontsize=8)
    return fig  # type: ignore[return-value]


def plot_evolution(
    ds: xr.Dataset, *, label_keys: tuple[str, ...] = ("beta",), title: str | None = None
) -> Figure:
    """Seed 003 Figs. 7-9: fractions of single (blue) / antipodal (vermillion) /
    unclustered (grey) against time, one panel per point, with Wilson 95 % bands. The
    figure's title gives the sample size, L and T (``title`` adds a first line)."""
    n = ds.sizes["point"]
    fig, axes = subplots(1, n, figsize=(4.2 * n, 3.8), squeeze=False)
    times = ds["time"].values
    for i, ax in enumerate(axes[0]):
        row = ds.isel(point=i)
        for outcome, color in (
            ("single", SINGLE_COLOR),
            ("antipodal", ANTIPODAL_COLOR),
            ("unclustered", UNCLUSTERED_COLOR),
        ):
            sel = row.sel(outcome=outcome)
            ax.fill_between(times, sel["ci_lower"], sel["ci_upper"], color=color, alpha=0.2, lw=0)
            ax.plot(times, sel["probability"], color=color, lw=1.5, label=outcome)
        if int(row["tokens"]) > 2:
            sel = row.sel(outcome="has_antipodal_pair")
            ax.plot(
                times, sel["probability"], ":", color=ANTIPODAL_COLOR, label="has antipodal pair"
            )
        parts = [f"{k} = {_fmt(row[k].item())}" for k in label_keys if k in row.coords]
        ax.set_title(", ".join(parts), fontsize=9)
        ax.set_xlabel("t")
        ax.set_ylim(-0.02, 1.02)
    axes[0][0].set_ylabel("fraction of trajectories")
    axes[0][-1].legend(fontsize=8)
    line = f"{sample_line(ds)}; bands: Wilson 95 %"
    text = f"{title}\n{line}" if title else line
    fig.suptitle(wrap(text, fig.get_figwidth(), fontsize=10.0), fontsize=10)
    return fig  # type: ignore[return-value]


def _fmt(v) -> str:
    if isinstance(v, float | np.floating):
        return f"{float(v):g}"
    return str(v).strip('"')
