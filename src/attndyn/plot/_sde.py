"""Figures for the (β, ε), (β, N) and time-resolved studies (seed 003 Figs. 4, 6-9)."""

from typing import Any

import numpy as np
import xarray as xr
from matplotlib.colors import to_rgb
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from .._core.errors import check_int
from ..theory import (
    EXACT_BETA_MAX,
    beta_critical,
    effective_dim,
    eps_critical,
    p_antipodal_curve,
    p_antipodal_hybrid_uniform,
    p_antipodal_uniform,
)
from ._figure import subplots
from ._style import (
    MAX_WIDTH_INCHES,
    OUTCOME_COLORS,
    SYMBOLS,
    errorbars,
    key,
    ordered_colors,
    point_label,
    post_ln_theory,
    setting_line,
    swept,
    wrap,
)

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


#: How the cells far from their SDE limit are marked on the maps.
FAR_HATCH = "////"


def _hatch_far(ax, last: xr.Dataset) -> None:
    """Hatch the map cells where the discrete model is far from its SDE limit."""
    if "far_from_limit" not in last:
        return
    betas, epss, far = _grid(last, lambda row: float(row["far_from_limit"]))
    if not np.nansum(far):
        return
    masked = np.ma.masked_where(~(far > 0.5), far)
    ax.pcolor(
        _edges(betas), _edges(epss), masked, hatch=FAR_HATCH, facecolor="none",
        edgecolor=(0, 0, 0, 0.45), linewidth=0.0,
    )  # fmt: skip


def _mark_far(ax, x: np.ndarray, y: np.ndarray, color) -> None:
    """The estimates far from their SDE limit as open markers."""
    if len(x):
        ax.plot(x, y, "o", ms=4, mfc="white", mec=color, mew=1.1, lw=0, zorder=5)


def _boundaries(ax, betas: np.ndarray, attention: str) -> None:
    """ε_c(β) for USA (003 Prop. 1); the two SA boundaries ε² = 2 and ε² = 1 + e^{−2β}."""
    fine = np.linspace(max(_edges(betas)[0], 0), _edges(betas)[-1], 200)
    if attention == "softmax":
        ax.plot(fine, np.full_like(fine, np.sqrt(2)), "k--", lw=1.1)
        ax.plot(fine, np.sqrt(1 + np.exp(-2 * fine)), "k:", lw=1.3)
    else:
        ax.plot(fine, [eps_critical(b) for b in fine], "k--", lw=1.2)


def _boundary_keys(attention: str) -> list[tuple[Line2D, str]]:
    if attention == "softmax":
        return [
            (Line2D([], [], color="k", ls="--", lw=1.1), r"$\varepsilon^2 = 2$ (+1 repels above)"),
            (Line2D([], [], color="k", ls=":", lw=1.3), r"$\varepsilon^2 = 1 + e^{-2\beta}$"),
        ]
    return [(Line2D([], [], color="k", ls="--", lw=1.2), r"$\varepsilon_c = \sqrt{2e^{-\beta}}$")]


#: The classes of the dominant-outcome map, with their colours.
_DOMINANT = (
    ("single", SINGLE_COLOR),
    ("antipodal", ANTIPODAL_COLOR),
    ("unclustered", UNCLUSTERED_COLOR),
)


#: The width of a (β, ε) panel in inches once laid out: a third of the figure, less its
#: axis labels (the axes' own width is not known before the layout runs).
PANEL_INCHES = MAX_WIDTH_INCHES / 3 - 0.9


def _panel_title(ax, text: str) -> None:
    """A panel's title at 9 pt, wrapped to the panel's width (a row label before it made
    one line wider than the panel, cut off at the figure's edge)."""
    ax.set_title(wrap(text, PANEL_INCHES), fontsize=9)


def _dominant_panel(ax, last: xr.Dataset, attention: str | None) -> None:
    """Each cell coloured by its most likely class (single, antipodal or unclustered) and
    shaded by that class's probability, so no cell is left white; the boundaries of seed
    003's theory where it is the model's (``attention`` given)."""

    def probabilities(row):
        return [float(row["probability"].sel(outcome=o)) for o, _ in _DOMINANT]

    betas, epss, _ = _grid(last, lambda row: 0.0)
    image = np.ones((len(epss), len(betas), 3))
    for i in range(last.sizes["point"]):
        row = last.isel(point=i)
        p = probabilities(row)
        if not np.isfinite(p).all():
            continue
        k = int(np.argmax(p))
        rgb = np.array(to_rgb(_DOMINANT[k][1]))
        b = np.searchsorted(betas, float(row["beta"]))
        e = np.searchsorted(epss, float(row["eps"]))
        image[e, b] = 1 - p[k] * (1 - rgb)
    ax.pcolormesh(_edges(betas), _edges(epss), image, shading="flat")
    if attention is not None:
        _boundaries(ax, betas, attention)
    _hatch_far(ax, last)
    ax.set(xlabel="β", ylabel="ε")
    ax.set_ylim(_edges(epss)[0], _edges(epss)[-1])
    ax.set_xlim(_edges(betas)[0], _edges(betas)[-1])


def _unclustered_panel(fig, ax, last: xr.Dataset, attention: str | None) -> None:
    betas, epss, image = _grid(
        last, lambda row: float(row["probability"].sel(outcome="unclustered"))
    )
    mesh = ax.pcolormesh(
        _edges(betas), _edges(epss), image, shading="flat", cmap="cividis", vmin=0, vmax=1
    )
    fig.colorbar(mesh, ax=ax, label="P(unclustered)", pad=0.02)
    if attention is not None:
        _boundaries(ax, betas, attention)
    _hatch_far(ax, last)
    ax.set(xlabel="β", ylabel="ε")
    ax.set_ylim(_edges(epss)[0], _edges(epss)[-1])
    ax.set_xlim(_edges(betas)[0], _edges(betas)[-1])


def _exact_eps_curve(beta: float, epss: np.ndarray, dim: int, attention: str):
    """The exact t = ∞ two-token probability of the hybrid SDE against ε on a fine grid
    (USA: its jump from 0 to 1 at ε_c drawn vertical, not as a ramp between grid points;
    SA: a continuous curve across the band where both ends attract)."""
    top = float(epss.max())
    fine = np.linspace(0.0, top, 81 if attention == "softmax" else 241)
    if attention != "softmax":
        jump = eps_critical(beta)
        if 0 < jump < top:
            fine = np.union1d(fine, [jump * (1 - 1e-9), jump * (1 + 1e-9)])
    p = [p_antipodal_hybrid_uniform(beta, e, dim, attention) if e > 0 else 0.0 for e in fine]
    return fine, np.asarray(p)


#: The most β curves the P(antipodal)-against-ε panel draws (more would not read).
MAX_CURVES = 6


def shown_betas(betas: np.ndarray) -> np.ndarray:
    """The β the line panel draws: all of them up to :data:`MAX_CURVES`, else every k-th
    from the first, with k chosen (where one exists) so the last is drawn too."""
    n = len(betas)
    if n <= MAX_CURVES:
        return betas
    for step in range(2, n):
        if (n - 1) % step == 0 and (n - 1) // step + 1 <= MAX_CURVES:
            return betas[::step]
    step = -(-(n - 1) // (MAX_CURVES - 1))
    return betas[::step]


#: The colour map of the β curves: plasma runs through blue, purple, magenta, salmon and
#: orange, where viridis gave the last two of five β (3 and 4 of the default grid) two
#: greens; perceptually uniform and colour-blind safe, like viridis.
BETA_CMAP = "plasma"


def _exact_panel(
    ax, last: xr.Dataset, attention: str | None, norm: str = "rms"
) -> tuple[list[tuple[object, str]], str]:
    """P(antipodal) against ε per β (:func:`shown_betas`, named in the panel's title when
    not all): the estimates with Wilson 95 % error bars and, for two tokens where
    ``attention`` is given (the theory is the model's), the exact t = ∞ curve; returns the
    β legend entries and the panel's title."""
    all_betas = np.unique(last["beta"].values)
    betas = shown_betas(all_betas)
    tokens = int(last["n_tokens"].values[0])
    # A centred-LayerNorm study's curves are those of d − 1 dimensions (one d a row).
    dim = effective_dim(int(last["dim"].values[0]), norm) if attention is not None else 0
    entries = []
    for color, beta in zip(ordered_colors(len(betas), BETA_CMAP), betas):
        sel = last.where(last["beta"] == beta, drop=True).sortby("eps")
        sel = sel.sel(outcome="antipodal")
        bars = errorbars(ax, sel["eps"].values, sel, color=color, ms=3.5)
        entries.append((bars, f"β = {beta:g}"))
        if tokens == 2 and attention is not None:
            ax.plot(
                *_exact_eps_curve(float(beta), sel["eps"].values, dim, attention),
                "-",
                color=color,
                lw=1,
            )
        if "far_from_limit" in sel:
            far = np.asarray(sel["far_from_limit"].values).astype(bool)
            _mark_far(ax, sel["eps"].values[far], sel["probability"].values[far], color)
    title = "P(antipodal) against ε, per β"
    if len(betas) < len(all_betas):
        title += f" ({len(betas)} of the {len(all_betas)} β; all in the maps)"
    ax.set(xlabel="ε", ylabel="P(antipodal) at t = T")
    ax.set_ylim(-0.03, 1.03)
    return entries, title


def plot_beta_eps(ds: xr.Dataset, *, title: str | None = None) -> Figure:
    """Seed 003 Fig. 4, one row of three panels per (d, N): (a) each (β, ε) cell coloured
    by its most likely class (single, antipodal or unclustered) and shaded by its
    probability; (b) P(unclustered), which a dominant-class map hides (just above ε_c the
    approach to −1 is slow); (c) P(antipodal) against ε for every β with Wilson 95 % error
    bars and, for two tokens, the exact t = ∞ probability of the hybrid SDE (its steps at
    the thresholds drawn vertical). Boundaries dashed: ε_c(β) = √(2e^{−β}) for USA; ε² = 2
    and ε² = 1 + e^{−2β} for SA. Cells where the layer step exceeds 0.1 (the dataset's
    ``far_from_limit``: the discrete model is far from its SDE limit) are crossed in every
    panel. The thresholds and exact curves are Post-LN's (seed 003): drawn where the
    provenance's ``scheme`` field says the points ran it (:func:`._style.post_ln_theory`),
    and for centred-LayerNorm tokens those of d − 1 dimensions. β's curves are coloured
    along plasma (:data:`BETA_CMAP`). With several (d, N), each row's panels name their
    (d, N) first. One legend, below, explains every colour, line and mark; the title names
    the model and states the setting (``title`` adds a first line)."""
    last = ds.isel(time=-1)
    theory = post_ln_theory(ds)
    attention = str(ds.attrs.get("attention", "unnormalized")) if theory else None
    norm = str(ds.attrs.get("norm", "rms"))
    groups = _groups(last, ("dim", "n_tokens"))
    fig, axes = subplots(
        len(groups), 3, figsize=(MAX_WIDTH_INCHES, 3.9 * len(groups) + 1.3), squeeze=False
    )
    entries: list[tuple[object, str]] = []
    for row_axes, (label, sel) in zip(axes, groups):
        _dominant_panel(row_axes[0], sel, attention)
        _unclustered_panel(fig, row_axes[1], sel, attention)
        entries, line_title = _exact_panel(row_axes[2], sel, attention, norm)
        titles = (
            "most likely class at t = T (shade: its probability)",
            "P(unclustered) at t = T",
            line_title,
        )
        for ax, text in zip(row_axes, titles):
            _panel_title(ax, f"{label}: {text}" if len(groups) > 1 else text)
    _beta_eps_legend(fig, ds, attention, entries)
    setting = setting_line(ds, ("dim", "n_tokens"))
    head = f"hybrid (scalar) value noise; {setting}"
    if not theory:
        head += "; no thresholds or exact curves: seed 003's theory is Post-LN's"
    fig.suptitle(wrap(f"{title}\n{head}" if title else head, MAX_WIDTH_INCHES, 10.0), fontsize=10)
    return fig  # type: ignore[return-value]


def _groups(last: xr.Dataset, names: tuple[str, ...]) -> list[tuple[str, xr.Dataset]]:
    """The points split by the values of ``names`` (each group's label and points)."""
    keys = [tuple(last[n].values[i].item() for n in names) for i in range(last.sizes["point"])]
    out = []
    for value in dict.fromkeys(keys):
        mask = np.array([k == value for k in keys])
        label = ", ".join(f"{SYMBOLS[n]} = {v}" for n, v in zip(names, value))
        out.append((label, last.isel(point=np.flatnonzero(mask))))
    return out


def _beta_eps_legend(fig, ds: xr.Dataset, attention: str | None, entries) -> None:
    items: list[tuple[Any, str]] = [(Patch(color=c), f"{o} most likely") for o, c in _DOMINANT]
    if attention is not None:
        items += _boundary_keys(attention)
    items.append((key("estimate"), "Monte Carlo ± Wilson 95 %"))
    if int(ds["n_tokens"].values.min()) == 2 and attention is not None:
        items.append((key("exact"), "exact t = ∞ (two tokens)"))
    if "far_from_limit" in ds and bool(np.asarray(ds["far_from_limit"].values).any()):
        far = (
            Patch(facecolor="none", edgecolor="0.4", hatch=FAR_HATCH),
            Line2D([], [], marker="o", ms=4, mfc="white", mec="0.3", lw=0),
        )
        items.append((far, "layer step > 0.1: far from the SDE limit"))
    items += list(entries)
    handles, labels = zip(*items)
    fig.legend(handles, labels, loc="outside lower center", ncols=min(6, len(items)), fontsize=8)


def plot_beta_n(
    ds: xr.Dataset, *, outcome: str = "has_antipodal_pair", title: str | None = None
) -> Figure:
    """Seed 003 Fig. 6: P(outcome) at the last save time against β, one series per (N, d)
    with Wilson 95 % error bars at the sampled β: coloured by N (viridis, ordered) in one
    panel per d, or by d where N takes one value (the default N = 2 at d = 4, 6, 8: one
    series and one exact curve per d, not all points as one series against one d's curve).
    Where the dataset carries them and they are the model's theory (Post-LN:
    :func:`._style.post_ln_theory`), each series' exact t = ∞ two-token curve (N = 2,
    solid, of its own d) and three-token reading (3/2)·P₂·F·e^{−T/τ} (N = 3, dashed). The
    legend explains every mark and line; the title names the model and states the setting
    (``title`` adds a first line)."""
    last = ds.isel(time=-1).sel(outcome=outcome)
    tokens = np.unique(last["n_tokens"].values)
    dims = np.unique(last["dim"].values)
    by_dim = len(tokens) == 1 and len(dims) > 1  # the series are the d
    panels = list(dims) if len(dims) > 1 and not by_dim else [None]
    width = 7.5 if len(panels) == 1 else min(3.4 * len(panels) + 2.2, MAX_WIDTH_INCHES)
    fig, axes = subplots(1, len(panels), figsize=(width, 4.8), squeeze=False)
    theory = post_ln_theory(ds)
    norm = str(ds.attrs.get("norm", "rms"))
    series, symbol = (dims, "d") if by_dim else (tokens, "N")
    colors = dict(zip(series.tolist(), ordered_colors(len(series))))
    styles: dict[str, str] = {}
    entries: dict[str, Any] = {}
    for ax, d in zip(axes[0], panels):
        panel = last if d is None else last.where(last["dim"] == d, drop=True)
        key_name = "dim" if by_dim else "n_tokens"
        for value in np.unique(panel[key_name].values):
            sel = panel.where(panel[key_name] == value, drop=True).sortby("beta")
            color = colors[value.item()]
            label = f"{symbol} = {int(value)}"
            entries[label] = errorbars(ax, sel["beta"].values, sel, color=color, label=label)
            if theory:
                styles.update(_beta_n_references(ax, sel, color, outcome, norm))
        ax.set_xlabel("β (inverse temperature)")
        if d is not None:
            ax.set_title(f"d = {int(d)}", fontsize=9)
    name = outcome.replace("_", " ")
    axes[0][0].set_ylabel(f"P({name}) at t = T")
    _same_ylim(axes[0])
    handles, labels = list(entries.values()), list(entries)
    handles.append(key("estimate"))
    labels.append("Monte Carlo ± Wilson 95 %")
    for label, style in styles.items():
        handles.append(Line2D([], [], ls=style, color="0.25", lw=1.2))
        labels.append(label)
    setting = setting_line(ds, ("dim", "n_tokens"))
    if not theory:
        setting += "; no exact curve: the t = ∞ theory (seed 003) is Post-LN's"
    text = wrap(f"{title}\n{setting}" if title else setting, width - 1.8)
    if len(panels) == 1:
        axes[0][0].set_title(text, fontsize=9)
    else:
        fig.suptitle(text, fontsize=9)
    axes[0][-1].legend(handles, labels, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig  # type: ignore[return-value]


def _same_ylim(axes) -> None:
    """One y range over every panel (probabilities read across panels)."""
    lows, highs = zip(*(ax.get_ylim() for ax in axes))
    for ax in axes:
        ax.set_ylim(min(lows), max(highs))


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


def _beta_n_references(ax, sel: xr.Dataset, color, outcome: str, norm: str) -> dict[str, str]:
    """One N's theory lines, where the dataset has finite values for them: the exact
    two-token curve on a fine β grid (its kink at β_c drawn where it is), the three-token
    reading at the sampled β (a quadrature per β, recorded in the dataset); returns label
    → style of the lines drawn."""
    drawn = {}
    for name, outcomes, style, label in _BETA_N_REFERENCES:
        if name in sel and outcome in outcomes and np.isfinite(sel[name].values).any():
            if name == "p_antipodal_exact":
                d = int(np.unique(sel["dim"].values)[0])
                top = min(float(np.nanmax(sel["beta"].values)), EXACT_BETA_MAX)
                fine = np.union1d(np.linspace(0, top, 81), [min(beta_critical(d, norm), top)])
                ax.plot(fine, p_antipodal_curve(fine, d, norm), style, color=color, lw=1.2)
            else:
                ax.plot(sel["beta"], sel[name], style, color=color, lw=1.2)
            drawn[label] = style
    return drawn


#: The point coordinates an evolution figure splits into panels, rows first.
_EVOLUTION_KEYS = ("model", "dim", "n_tokens", "eps", "beta")


def plot_evolution(
    ds: xr.Dataset,
    *,
    label_keys: tuple[str, ...] | None = None,
    title: str | None = None,
    ncols: int | None = None,
) -> Figure:
    """Seed 003 Figs. 7-9: fractions of single (blue) / antipodal (vermillion) /
    unclustered (grey) against time, with Wilson 95 % error bars at the save times, one
    panel per point in a grid by the swept parameters (a row per value of the others, a
    column per β; ``ncols`` columns at most, default 4). For two tokens the exact t = ∞
    probabilities are drawn as dotted lines: of antipodal (and of single, its complement)
    for the full-noise model (Thm 2) and the hybrid model (Prop. 1), where they are the
    model's theory (Post-LN: the provenance's ``scheme``, :func:`._style.post_ln_theory`).
    Each panel is titled by its swept values (``label_keys``: which coordinates, default
    the swept ones); the figure's title names the model and states the shared setting and
    the sample (``title`` adds a first line).
    One legend explains every line and mark."""
    n = ds.sizes["point"]
    if ncols is not None:
        check_int("ncols", ncols, lower=1)
    keys = list(label_keys) if label_keys is not None else swept(ds, _EVOLUTION_KEYS)
    order = _panel_order(ds, keys)
    columns = _columns(ds, keys, ncols)
    nrows = -(-n // columns)
    fig, axes = subplots(
        nrows, columns, figsize=(3.0 * columns + 1.2, 2.6 * nrows + 1.6), squeeze=False
    )
    flat = axes.ravel()
    exact_drawn = False
    theory = post_ln_theory(ds)
    for ax, i in zip(flat, order):
        exact_drawn |= _evolution_panel(ax, ds.isel(point=i), keys, ds.attrs, theory)
    for ax in flat[n:]:
        ax.remove()
    for row in axes:
        row[0].set_ylabel("fraction of trajectories")
    _evolution_legend(fig, ds, exact_drawn)
    shared = [k for k in _EVOLUTION_KEYS if k not in keys]
    line = setting_line(ds, shared)
    text = f"{title}\n{line}" if title else line
    fig.suptitle(wrap(text, fig.get_figwidth(), fontsize=10.0), fontsize=10)
    return fig  # type: ignore[return-value]


def _panel_order(ds: xr.Dataset, keys: list[str]) -> list[int]:
    """Point indices sorted by the swept coordinates (rows by the first, …, β last):
    numbers ascending (NaN last), names (the models) in the order the points give them."""
    ranks = {k: _ranks(np.asarray(ds[k].values)) for k in keys}
    return sorted(range(ds.sizes["point"]), key=lambda i: tuple(ranks[k][i] for k in keys))


def _ranks(values: np.ndarray) -> list:
    if values.dtype.kind in "biuf":
        return [(1, 0.0) if np.isnan(v) else (0, float(v)) for v in values.astype(float)]
    first = {v: i for i, v in reversed(list(enumerate(values.tolist())))}
    return [(0, first[v]) for v in values.tolist()]


def _columns(ds: xr.Dataset, keys: list[str], ncols: int | None) -> int:
    """One column per value of the last swept coordinate among ``keys`` (β, usually), at
    most ``ncols`` (4)."""
    limit = int(ncols) if ncols is not None else 4
    n = ds.sizes["point"]
    varying = swept(ds, keys)
    if varying:
        values = np.asarray(ds[varying[-1]].values)
        per_row = len(np.unique(values.astype(str)))
        return max(1, min(per_row, limit, n))
    return max(1, min(limit, n))


def _evolution_panel(ax, row: xr.Dataset, keys: list[str], attrs, theory: bool) -> bool:
    """One point's fractions against time with their error bars; returns whether an exact
    t = ∞ reference was drawn (``theory``: the dataset ran Post-LN)."""
    times = row["time"].values
    for outcome, color in (
        ("single", SINGLE_COLOR),
        ("antipodal", ANTIPODAL_COLOR),
        ("unclustered", UNCLUSTERED_COLOR),
    ):
        sel = row.sel(outcome=outcome)
        ax.plot(times, sel["probability"], color=color, lw=1.2, label=outcome)
        errorbars(ax, times, sel, color=color, ms=0, capsize=0, elinewidth=0.8, alpha=0.7)
    if int(row["n_tokens"]) > 2:
        sel = row.sel(outcome="has_antipodal_pair")
        ax.plot(times, sel["probability"], ":", color=ANTIPODAL_COLOR, label="has antipodal pair")
    exact = _exact_evolution(row, attrs, theory)
    if exact is not None:
        ax.axhline(exact, color=ANTIPODAL_COLOR, ls=(0, (1, 1.5)), lw=1.2)
        ax.axhline(1 - exact, color=SINGLE_COLOR, ls=(0, (1, 1.5)), lw=1.2)
    ax.set_title(point_label(row, keys), fontsize=9)
    ax.set_xlabel("t")
    ax.set_ylim(-0.03, 1.03)
    return exact is not None


def _exact_evolution(row: xr.Dataset, attrs, theory: bool) -> float | None:
    """The exact t = ∞ probability that two tokens end antipodal, where the theory module
    has one and it is the model's (``theory``: Post-LN): full value noise or the hybrid
    model (centred LayerNorm tokens: the RMS one of d − 1 dimensions)."""
    if int(row["n_tokens"]) != 2 or not theory:
        return None
    model = str(row["model"].item()).strip('"') if "model" in row.coords else "full"
    beta, dim = float(row["beta"]), int(row["dim"])
    norm = str(attrs.get("norm", "rms"))
    if model == "full" and beta <= EXACT_BETA_MAX:
        return float(p_antipodal_uniform(beta, dim, norm))
    if model == "hybrid" and float(row["eps"]) > 0:
        attention = str(attrs.get("attention", "softmax"))
        space = effective_dim(dim, norm)
        return float(p_antipodal_hybrid_uniform(beta, float(row["eps"]), space, attention))
    return None


def _evolution_legend(fig, ds: xr.Dataset, exact: bool) -> None:
    items = [
        (Line2D([], [], color=SINGLE_COLOR, lw=1.2), "single"),
        (Line2D([], [], color=ANTIPODAL_COLOR, lw=1.2), "antipodal"),
        (Line2D([], [], color=UNCLUSTERED_COLOR, lw=1.2), "unclustered"),
    ]
    if int(np.max(ds["n_tokens"].values)) > 2:
        items.append((Line2D([], [], color=ANTIPODAL_COLOR, ls=":"), "has antipodal pair"))
    items.append((Line2D([], [], color="0.3", lw=0, marker="|", ms=8), "Wilson 95 % (bars)"))
    if exact:
        items.append(
            (Line2D([], [], color="0.3", ls=(0, (1, 1.5)), lw=1.2), "exact t = ∞ (two tokens)")
        )
    handles, labels = zip(*items)
    # As many columns as the figure's width holds (a one-panel figure wraps the legend).
    columns = max(1, min(len(items), int(fig.get_figwidth() / 2.0)))
    fig.legend(handles, labels, loc="outside lower center", ncols=columns, fontsize=8)
