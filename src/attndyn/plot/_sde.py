"""Figures for the (β, ε), (β, N) and time-resolved studies (seed 003 Figs. 4, 6-9)."""

import numpy as np
import xarray as xr
from matplotlib.colors import to_rgb
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from .._core.errors import check_int
from ..theory import eps_critical
from ._figure import subplots
from ._style import OUTCOME_COLORS, ordered_colors, sample_line, values_line, wrap

#: Colour-blind-safe outcome colours (Okabe–Ito): blue = single cluster, vermillion =
#: antipodal, grey = unclustered (seed 003 draws magenta and violet, hard to tell apart).
SINGLE_COLOR = OUTCOME_COLORS["single"]
ANTIPODAL_COLOR = OUTCOME_COLORS["antipodal"]
UNCLUSTERED_COLOR = OUTCOME_COLORS["unclustered"]


def _edges(v: np.ndarray) -> np.ndarray:
    if len(v) == 1:
        return np.array([v[0] - 0.5, v[0] + 0.5])
    mid = (v[1:] + v[:-1]) / 2
    return np.concatenate([[2 * v[0] - mid[0]], mid, [2 * v[-1] - mid[-1]]])


def _grid(last: xr.Dataset, values) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(β, ε, image[ε, β]) of a per-point quantity ``values(row)``."""
    betas = np.unique(last["beta"].values)
    epss = np.unique(last["eps"].values)
    image = np.full((len(epss), len(betas)), np.nan)
    for i in range(last.sizes["point"]):
        row = last.isel(point=i)
        b = np.searchsorted(betas, float(row["beta"]))
        e = np.searchsorted(epss, float(row["eps"]))
        image[e, b] = values(row)
    return betas, epss, image


def _boundaries(ax, betas: np.ndarray, attention: str) -> None:
    """ε_c(β) for USA (003 Prop. 1); the two SA boundaries ε² = 2 and ε² = 1 + e^{−2β}."""
    fine = np.linspace(max(_edges(betas)[0], 0), _edges(betas)[-1], 200)
    if attention == "softmax":
        ax.plot(
            fine, np.full_like(fine, np.sqrt(2)), "k--", lw=1.1, label="ε² = 2 (+1 repels above)"
        )
        ax.plot(fine, np.sqrt(1 + np.exp(-2 * fine)), "k:", lw=1.3, label="ε² = 1 + e^{−2β}")
    else:
        ax.plot(fine, [eps_critical(b) for b in fine], "k--", lw=1.2, label="ε_c(β) = √(2e^{−β})")


def _dominant_panel(ax, last: xr.Dataset, attention: str) -> None:
    single_rgb, anti_rgb = np.array(to_rgb(SINGLE_COLOR)), np.array(to_rgb(ANTIPODAL_COLOR))

    def colour(row):
        ps = float(row["probability"].sel(outcome="single"))
        pa = float(row["probability"].sel(outcome="antipodal"))
        return ps if ps >= pa else -pa  # sign: which outcome; magnitude: its fraction

    betas, epss, signed = _grid(last, colour)
    image = np.ones((*signed.shape, 3))
    for rgb, mask in ((single_rgb, signed >= 0), (anti_rgb, signed < 0)):
        frac = np.abs(np.where(mask, signed, 0.0))[..., None]
        image = np.where(mask[..., None], 1 - frac * (1 - rgb), image)
    ax.pcolormesh(_edges(betas), _edges(epss), np.nan_to_num(image, nan=1.0), shading="flat")
    _boundaries(ax, betas, attention)
    handles = [
        Patch(color=SINGLE_COLOR, label="single dominant"),
        Patch(color=ANTIPODAL_COLOR, label="antipodal dominant"),
        *ax.get_legend_handles_labels()[0],
    ]
    ax.legend(handles=handles, fontsize=7, loc="upper right")
    ax.set(xlabel="β", ylabel="ε", title="dominant outcome (shade: its fraction)")
    ax.set_ylim(_edges(epss)[0], _edges(epss)[-1])


def _unclustered_panel(fig, ax, last: xr.Dataset, attention: str) -> None:
    betas, epss, image = _grid(
        last, lambda row: float(row["probability"].sel(outcome="unclustered"))
    )
    mesh = ax.pcolormesh(
        _edges(betas), _edges(epss), image, shading="flat", cmap="cividis", vmin=0, vmax=1
    )
    fig.colorbar(mesh, ax=ax, label="P(unclustered)")
    _boundaries(ax, betas, attention)
    ax.set(xlabel="β", ylabel="ε", title="still unclustered at T (slow approach near ε_c)")
    ax.set_ylim(_edges(epss)[0], _edges(epss)[-1])


def _exact_panel(ax, last: xr.Dataset) -> None:
    """P(antipodal) against ε for four β, with Wilson bands and the exact t = ∞ curve."""
    betas = np.unique(last["beta"].values)
    chosen = betas[np.unique(np.linspace(0, len(betas) - 1, min(4, len(betas))).astype(int))]
    colors = ordered_colors(len(chosen))
    for color, beta in zip(colors, chosen):
        sel = last.where(last["beta"] == beta, drop=True).sortby("eps")
        sel = sel.sel(outcome="antipodal")
        eps = sel["eps"].values
        ax.fill_between(
            eps, sel["ci_lower"].values, sel["ci_upper"].values, color=color, alpha=0.25, lw=0
        )
        ax.plot(eps, sel["probability"].values, "o", ms=3, color=color, label=f"β = {beta:g}")
        if "p_antipodal_exact" in sel:
            ax.plot(eps, sel["p_antipodal_exact"].values, "-", color=color, lw=1)
    ax.set(
        xlabel="ε",
        ylabel="P(antipodal)",
        title="Monte Carlo (dots, 95 % bands) vs exact t = ∞ (lines)",
    )
    ax.legend(fontsize=7)


def plot_beta_eps(ds: xr.Dataset, *, title: str | None = None) -> Figure:
    """Seed 003 Fig. 4 in three panels: (a) each (β, ε) cell coloured by its dominant
    outcome (single or antipodal) and shaded by its fraction, as the paper draws it; (b)
    P(unclustered), which a dominant-outcome map hides (just above ε_c the approach to −1 is
    slow); (c) P(antipodal) against ε for a few β with Wilson bands and the exact t = ∞
    two-token probability. Boundaries dashed: ε_c(β) = √(2e^{−β}) for USA; ε² = 2 and
    ε² = 1 + e^{−2β} for SA."""
    last = ds.isel(time=-1)
    attention = str(ds.attrs.get("attention", "unnormalized"))
    fig, axes = subplots(1, 3, figsize=(17, 4.8))
    _dominant_panel(axes[0], last, attention)
    _unclustered_panel(fig, axes[1], last, attention)
    _exact_panel(axes[2], last)
    t = float(ds["time"].values[-1])
    n = int(last["n_valid"].max())
    default = (
        f"hybrid model (003 eq. 7/8), {attention}, d = {int(last['dim'].values[0])}, "
        f"N = 2, T = {t:g}, {n} trajectories per cell"
    )
    fig.suptitle(title or default, fontsize=10)
    return fig  # type: ignore[return-value]


def plot_beta_n(
    ds: xr.Dataset, *, outcome: str = "has_antipodal_pair", title: str | None = None
) -> Figure:
    """Seed 003 Fig. 6: P(outcome) at the last save time against β, one curve per N
    (viridis, ordered by N), with Wilson 95 % bands; where the dataset carries them, the
    exact t = ∞ two-token curve (N = 2, thin) and the three-token reading
    (3/2)·P₂·F·e^{−T/τ} (N = 3, dashed). ``title`` replaces the first line of the title;
    the second gives d, the sample size, L and T."""
    last = ds.isel(time=-1).sel(outcome=outcome)
    tokens = np.unique(last["tokens"].values)
    fig, ax = subplots(figsize=(7, 4.6))
    for color, n in zip(ordered_colors(len(tokens)), tokens):
        sel = last.where(last["tokens"] == n, drop=True).sortby("beta")
        beta = sel["beta"].values
        ax.fill_between(beta, sel["ci_lower"], sel["ci_upper"], color=color, alpha=0.25, lw=0)
        ax.plot(beta, sel["probability"], "o", color=color, ms=4, label=f"N = {int(n)}")
        _beta_n_references(ax, sel, color, outcome)
    name = outcome.replace("_", " ")
    ax.set_xlabel("β (inverse temperature)")
    ax.set_ylabel(f"P({name}) at T")
    headline = title or f"P({name}) against β, one colour per number of tokens N"
    text = f"{headline}\nd = {values_line(last, 'dim')}, {sample_line(ds)}; bands: Wilson 95 %"
    ax.set_title(wrap(text, fig.get_figwidth()), fontsize=9)
    ax.legend(fontsize=8, title="tokens", title_fontsize=8)
    return fig  # type: ignore[return-value]


#: The references plot_beta_n draws where a dataset carries them: (variable, outcomes it
#: predicts, line style, legend label).
_BETA_N_REFERENCES = (
    ("p_antipodal_exact", ("antipodal", "has_antipodal_pair"), "-", "exact t = ∞ (N = 2)"),
    (
        "p_antipodal_pair_three_tokens",
        ("has_antipodal_pair",),
        "--",
        "N = 3: (3/2)·P₂·F·exp(−T/τ) (reading)",
    ),
)


def _beta_n_references(ax, sel: xr.Dataset, color, outcome: str) -> None:
    """One N's theory lines, where the dataset has finite values for them; else the data
    joined by a thin line."""
    drawn = False
    for name, outcomes, style, label in _BETA_N_REFERENCES:
        if name in sel and outcome in outcomes and np.isfinite(sel[name].values).any():
            ax.plot(sel["beta"], sel[name], style, color=color, lw=1.2, label=label)
            drawn = True
    if not drawn:
        ax.plot(sel["beta"], sel["probability"], "-", color=color, lw=0.8, alpha=0.7)


def plot_evolution(
    ds: xr.Dataset,
    *,
    label_keys: tuple[str, ...] = ("beta",),
    title: str | None = None,
    ncols: int | None = None,
) -> Figure:
    """Seed 003 Figs. 7-9: fractions of single (blue) / antipodal (vermillion) /
    unclustered (grey) against time, one panel per point, with Wilson 95 % bands. The
    figure's title gives the sample size, L and T (``title`` adds a first line). Panels
    fill rows of ``ncols`` (default: all in one row up to 6 points, else rows of 6)."""
    n = ds.sizes["point"]
    if ncols is not None:
        check_int("ncols", ncols, lower=1)
    ncols = min(int(ncols) if ncols is not None else 6, n)
    nrows = -(-n // ncols)
    fig, axes = subplots(nrows, ncols, figsize=(4.2 * ncols, 3.6 * nrows + 0.4), squeeze=False)
    flat = axes.ravel()
    for i in range(n):
        _evolution_panel(flat[i], ds.isel(point=i), label_keys)
    for ax in flat[n:]:
        ax.remove()
    for row in axes:
        row[0].set_ylabel("fraction of trajectories")
    flat[n - 1].legend(fontsize=8)
    line = f"{sample_line(ds)}; bands: Wilson 95 %"
    text = f"{title}\n{line}" if title else line
    fig.suptitle(wrap(text, fig.get_figwidth(), fontsize=10.0), fontsize=10)
    return fig  # type: ignore[return-value]


def _evolution_panel(ax, row: xr.Dataset, label_keys: tuple[str, ...]) -> None:
    """One point's fractions against time, with their bands."""
    times = row["time"].values
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
        ax.plot(times, sel["probability"], ":", color=ANTIPODAL_COLOR, label="has antipodal pair")
    parts = [f"{k} = {_fmt(row[k].item())}" for k in label_keys if k in row.coords]
    ax.set_title(", ".join(parts), fontsize=9)
    ax.set_xlabel("t")
    ax.set_ylim(-0.02, 1.02)


def _fmt(v) -> str:
    if isinstance(v, float | np.floating):
        return f"{float(v):g}"
    return str(v).strip('"')
