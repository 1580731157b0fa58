"""Figures of a modes study (:func:`attndyn.studies.modes_study`).

:func:`plot_modes` picks the figure from the dataset's points:

- β = γ log N points (a ``gamma`` coordinate): the long-context figure, the largest
  cluster's share and the cluster count per token at the horizon against γ, one curve per
  N, beside the theory's critical γ;
- several noise levels (``eps`` or ``sigma``): the noise figure, cluster counts against
  time per level and the plateau's lifetime against the level;
- otherwise the modes figure: growth rates of the mode powers against ℓ beside 2λ_ℓ, the
  most unstable mode's power against time beside e^{2λ* t}, and the cluster count against
  time beside ℓ*, one column per dimension.
"""

import json

import numpy as np
import xarray as xr
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.transforms import ScaledTranslation

from ._figure import subplots
from ._style import OKABE_ITO, ordered_colors, wrap

#: At most this many error bars along a time curve (the saves between are drawn as lines).
MARKED_SAVES = 12
#: The plateau marks of the points of one clusters panel, in turn (not "o": the curves').
PLATEAU_MARKERS = ("s", "D", "^", "v", "p", "h")


def _record(ds: xr.Dataset) -> dict:
    return json.loads(ds.attrs.get("provenance", "{}"))


def _levels(ds: xr.Dataset) -> str | None:
    for name in ("eps", "sigma"):
        if name in ds.coords and len(np.unique(ds[name].values)) > 1:
            return name
    return None


def plot_modes(ds: xr.Dataset) -> Figure:
    """The figure of a modes dataset (see the module docstring for which)."""
    if "gamma" in ds.coords:
        return _long_context(ds)
    if "n_clusters" not in ds:  # the mean-field engine's: a density has no clusters
        return _mean_field(ds)
    level = _levels(ds)
    if level is not None:
        return _noise(ds, level)
    return _modes(ds)


def _marks(n: int) -> np.ndarray:
    return np.unique(np.linspace(0, n - 1, min(n, MARKED_SAVES)).round().astype(int))


def _header(ds: xr.Dataset) -> str:
    r = _record(ds)
    depth = f"L = {r.get('depth')}" if r.get("engine") == "discrete" else f"dt = {r.get('dt')}"
    return (
        f"{r.get('attention', '?')} attention, {r.get('scheme', '?')}, noise "
        f"{r.get('noise', '?')}, {r.get('engine', '?')} ({depth}); "
        f"{r.get('n_trajectories', '?')} trajectories a point, N uniform on S^(d-1)"
    )


def _modes(ds: xr.Dataset) -> Figure:
    dims = sorted({int(d) for d in ds["dim"].values})
    # At most 12.2 inches: 1,586 px at the CLI's 130 dpi.
    width = min(12.2, max(8.0, 4.6 * len(dims) + 1.2))
    fig, axes = subplots(3, len(dims), figsize=(width, 10.2), squeeze=False)
    betas = sorted({float(b) for b in ds["beta"].values})
    colors = dict(zip(betas, ordered_colors(len(betas)), strict=True))
    for column, dim in enumerate(dims):
        points = [i for i in range(ds.sizes["point"]) if int(ds["dim"].values[i]) == dim]
        entries = []
        for stack, i in enumerate(points):
            row = ds.isel(point=i)
            color = colors[float(row["beta"])]
            _rates(axes[0, column], row, color)
            _star_power(axes[1, column], row, color)
            entries.append(_clusters(axes[2, column], row, color, stack))
        # Where the curves leave room ("best"), one line per point in its colour.
        legend = axes[2, column].legend(handles=entries, loc="best", fontsize=7)
        for text, entry in zip(legend.get_texts(), entries, strict=True):
            text.set_color(entry.get_color())
        tokens = sorted({int(ds["n_tokens"].values[i]) for i in points})
        axes[0, column].set_title(
            f"d = {dim}, N = {', '.join(f'{n:,}' for n in tokens)}: growth rate of P_ℓ",
            fontsize=9,
        )
        axes[1, column].set_title(f"d = {dim}: the fastest mode's power", fontsize=9)
        axes[2, column].set_title(
            f"d = {dim}: clusters (|θ_i − θ_j|² ≤ 2 tol, connected)", fontsize=9
        )
    handles = [
        Line2D([], [], color=colors[b], marker="o", ls="-", label=f"β = {b:g}") for b in betas
    ]
    handles += [
        Line2D([], [], color="k", ls="-", label="theory: 2λ_ℓ (P_ℓ ∝ exp(2λ_ℓ t))"),
        Line2D([], [], color="k", marker="o", ls="none", label="fit, linear window (±1 SE)"),
        Line2D(
            [], [], color="k", marker="o", mfc="none", ls="none", label="fit, driven (Holm, 5 %)"
        ),
        Line2D([], [], color="k", marker="v", ls="none", label="ℓ* of the theory"),
        Line2D([], [], color="k", lw=6, alpha=0.3, label="theory: P_ℓ*(0)·exp(2λ* t)"),
        Line2D([], [], color="k", ls="--", lw=0.8, label="end of the linear window"),
        Line2D([], [], color="k", ls=":", label="ℓ* (on S¹ a degree-ℓ* mode makes ℓ* clusters)"),
        Line2D(
            [],
            [],
            color="k",
            marker="s",
            mec="k",
            ls="none",
            label=f"plateau reached (a count > 2 held\n{_hold(ds)}): clusters ± SE\nover "
            "those that reached it, at the mean\ntime reached; one shape a point (see\nits "
            "panel), drawn where ≥ half reached it",
        ),
    ]
    fig.legend(handles=handles, loc="outside right center", fontsize=8, frameon=False)
    fig.suptitle(
        wrap(
            "Many tokens from the uniform state: each degree ℓ of the empirical measure grows "
            "at the rate the linearised mean-field equation predicts, the fastest is ℓ*; the "
            "tokens then gather into clusters, and the third row marks the metastable plateau "
            "only where the trajectories reached it.\n" + _header(ds),
            width,
        ),
        fontsize=9,
    )
    return fig  # type: ignore[return-value]


def _mean_field(ds: xr.Dataset) -> Figure:
    """The mean-field engine's figure: each point's fitted rates beside 2λ_ℓ (top) and
    its fastest degree's power against the linear theory (bottom), one column per d."""
    dims = sorted({int(d) for d in ds["dim"].values})
    width = min(12.2, max(8.0, 4.6 * len(dims) + 1.2))
    fig, axes = subplots(2, len(dims), figsize=(width, 7.2), squeeze=False)
    keys = sorted(
        {(float(b), float(ds["n_tokens"].values[i])) for i, b in enumerate(ds["beta"].values)}
    )
    colors = dict(zip(keys, ordered_colors(len(keys)), strict=True))
    for column, dim in enumerate(dims):
        for i in range(ds.sizes["point"]):
            if int(ds["dim"].values[i]) != dim:
                continue
            row = ds.isel(point=i)
            color = colors[(float(row["beta"]), float(row["n_tokens"]))]
            _rates(axes[0, column], row, color)
            _star_power(axes[1, column], row, color)
        axes[0, column].set_title(f"d = {dim}: growth rate of P_ℓ", fontsize=9)
        axes[1, column].set_title(f"d = {dim}: the fastest degree's power", fontsize=9)
    handles = [
        Line2D([], [], color=colors[k], marker="o", ls="-", label=f"β = {k[0]:g}, N = {k[1]:.3g}")
        for k in keys
    ]
    handles += [
        Line2D([], [], color="k", ls="-", label="theory: 2λ_ℓ (P_ℓ ∝ exp(2λ_ℓ t))"),
        Line2D([], [], color="k", marker="o", ls="none", label="fit, linear window (±1 SE)"),
        Line2D([], [], color="k", marker="v", ls="none", label="ℓ* of the theory"),
        Line2D([], [], color="k", lw=6, alpha=0.3, label="theory: P_ℓ*(0)·exp(2λ* t)"),
        Line2D([], [], color="k", ls="--", lw=0.8, label="end of the linear window"),
    ]
    fig.legend(handles=handles, loc="outside right center", fontsize=8, frameon=False)
    r = _record(ds)
    fig.suptitle(
        wrap(
            "The mean-field equation of the attention flow (N → ∞), started from "
            + (
                "the empirical measure of N uniform tokens"
                if r.get("start") == "tokens"
                else "the Gaussian law of N uniform tokens' coefficients (size N^-1/2)"
            )
            + ": each degree grows at the linear rate 2λ_ℓ while it is small; a rate is "
            "fitted only where the nonlinear part of its derivative stays below "
            f"{r.get('linear_tolerance', '?')} of the linear part.\n"
            f"{r.get('attention', '?')} attention, {r.get('n_trajectories', '?')} starts a point",
            width,
        ),
        fontsize=9,
    )
    return fig  # type: ignore[return-value]


def _rates(ax, row: xr.Dataset, color) -> None:
    ell = row["ell"].values
    theory = row["growth_rate_theory"].values
    ax.plot(ell[1:], theory[1:], color=color, lw=1.2)
    rate, se = row["growth_rate"].values, row["growth_rate_se"].values
    linear = row["linear"].values.astype(bool)
    fitted = np.isfinite(rate)
    for chosen, face in ((linear, color), (fitted & ~linear, "none")):
        chosen = chosen.copy()
        chosen[0] = False
        ax.errorbar(
            ell[chosen],
            rate[chosen],
            yerr=se[chosen],
            fmt="o",
            ms=4,
            color=color,
            mfc=face,
            capsize=2,
            lw=0.8,
        )
    star = int(row["ell_star"])
    # ℓ* of the theory: a triangle on the top edge (x in data, y in axes units).
    ax.plot(
        [star], [1.0], "v", color=color, ms=7, clip_on=False, transform=ax.get_xaxis_transform()
    )
    ax.set_xlabel("degree ℓ")
    ax.set_ylabel("growth rate of P_ℓ")
    ax.axhline(0, color="0.8", lw=0.6)


def _star_power(ax, row: xr.Dataset, color) -> None:
    times = row["time"].values
    star = int(row["ell_star"])
    n_tokens = int(row["n_tokens"])
    if not 0 < star < row.sizes["ell"]:
        # ℓ* past the degrees computed (a dataset from before the study raised ℓ_max to
        # reach it, or one built by hand): said, not indexed out of range.
        ax.text(
            0.5,
            0.5,
            f"ℓ* = {star} is not among the degrees computed (ℓ ≤ {row.sizes['ell'] - 1})",
            transform=ax.transAxes,
            ha="center",
            fontsize=8,
            color=color,
        )
        return
    mean = row["mode_power"].values[:, star] * n_tokens
    se = row["mode_power_se"].values[:, star] * n_tokens
    ax.plot(times, mean, color=color, lw=1.0)
    marks = _marks(len(times))
    ax.errorbar(times[marks], mean[marks], yerr=se[marks], fmt="o", ms=3, color=color, capsize=2)
    end = float(row["window_end"])
    rate = float(row["growth_rate_theory"].values[star])
    inside = times <= end
    # The theory as a wide pale band under the data (which lies on it).
    ax.plot(
        times[inside],
        mean[0] * np.exp(rate * times[inside]),
        "-",
        color=color,
        lw=6,
        alpha=0.3,
        solid_capstyle="butt",
    )
    ax.axvline(end, color=color, lw=0.8, ls="--")
    ax.set_yscale("log")
    ax.set_xlabel("t")
    ax.set_ylabel("N·P_ℓ* (1 for uniform tokens)")


def _clusters(ax, row: xr.Dataset, color, stack: int = 0) -> Line2D:
    """The cluster count against time beside ℓ*, and the plateau's mark; returns the
    point's entry of the panel's legend (which says k/n)."""
    times = row["time"].values
    mean, se = row["n_clusters"].values, row["n_clusters_se"].values
    ax.plot(times, mean, color=color, lw=1.0)
    ax.fill_between(times, mean - se, mean + se, color=color, alpha=0.2, lw=0)
    marks = _marks(len(times))
    ax.errorbar(times[marks], mean[marks], yerr=se[marks], fmt="o", ms=3, color=color, capsize=2)
    ax.axhline(int(row["ell_star"]), color=color, ls=":", lw=1.0)
    ax.set_yscale("log")
    ax.set_xlabel("t")
    ax.set_ylabel("clusters (mean ± SE)")
    return _plateau_mark(ax, row, color, stack)


def _hold(ds: xr.Dataset) -> str:
    """How long a count must hold to make a plateau, as the dataset records it."""
    if "plateau_hold" not in ds:
        return "? (dataset made before 0.5)"
    return f"≥ {float(ds['plateau_hold']):g} time units and 3 saves"


def _plateau_mark(ax, row: xr.Dataset, color, stack: int) -> Line2D:
    """The plateau's mark where at least half the point's trajectories reached it
    (:func:`attndyn.studies._modes_analysis.plateau`: a count above two held for
    ``plateau_hold``), and its legend entry, which says k/n in every case (the mark
    averages only those k; the curve averages all n). Each point of a panel has its own
    shape (the entry shows it) and a sideways offset, so that one mark never hides
    another (close points reach the same count at about the same time)."""
    label = f"β = {float(row['beta']):g}, N = {int(row['n_tokens']):,}: plateau reached"
    n = row.sizes["trajectory"]
    if "n_plateau_reached" not in row:  # a dataset from before 0.5: gathered ≠ reached
        return Line2D([], [], ls="none", label=f"{label}: not assessed (dataset before 0.5)")
    reached = int(row["n_plateau_reached"])
    if reached == 0 or 2 * reached < n:
        # A mark would average under half of them: the entry says so, with no mark.
        note = ", under half: not marked" if reached else ""
        return Line2D([], [], ls="none", color=color, label=f"{label} {reached}/{n}{note}")
    marker = PLATEAU_MARKERS[stack % len(PLATEAU_MARKERS)]
    shift = ScaledTranslation(4 * (stack % 3) / 72, 0, ax.figure.dpi_scale_trans)
    style = {"marker": marker, "ms": 7 - stack % 3, "color": color, "mec": "k"}
    ax.errorbar(
        [float(row["plateau_reached_at"])],
        [float(row["plateau_reached_clusters"])],
        yerr=[float(row["plateau_reached_clusters_se"])],
        ls="none",
        capsize=2,
        zorder=3 + stack,
        transform=ax.transData + shift,
        **style,
    )
    return Line2D([], [], ls="none", label=f"{label} {reached}/{n}", **style)


def _noise(ds: xr.Dataset, level: str) -> Figure:
    fig, axes = subplots(1, 2, figsize=(11.6, 4.4), squeeze=False)
    values = ds[level].values
    order = np.argsort(values)
    colors = ordered_colors(len(order))
    left, right = axes[0]
    times = ds["time"].values
    marks = _marks(len(times))
    symbol = "ε" if level == "eps" else "σ"
    for color, i in zip(colors, order, strict=True):
        mean, se = ds["n_clusters"].values[i], ds["n_clusters_se"].values[i]
        left.plot(times, mean, color=color, lw=1.0, label=f"{symbol} = {values[i]:g}")
        left.fill_between(times, mean - se, mean + se, color=color, alpha=0.2, lw=0)
        left.errorbar(
            times[marks], mean[marks], yerr=se[marks], fmt="o", ms=3, color=color, capsize=2
        )
    star = int(ds["ell_star"].values[0])
    left.axhline(star, color="0.4", ls=":", lw=1.0, label=f"ℓ* = {star} (theory, no noise)")
    left.set_yscale("log")
    left.set_xlabel("t")
    left.set_ylabel("clusters (mean ± SE)")
    left.set_title("cluster count against time, per noise level", fontsize=9)
    left.legend(fontsize=8, title="band: ±1 SE", title_fontsize=8)
    life, err = ds["plateau_lifetime"].values[order], ds["plateau_lifetime_se"].values[order]
    ended = ds["n_plateau_ended"].values[order]
    formed = ds["n_plateau"].values[order]
    # Filled: every trajectory's plateau ended, the mean is the lifetime's; hollow: some
    # were cut at the horizon, the mean is a lower bound.
    right.plot(values[order], life, "-", color=OKABE_ITO[0], lw=1.0)
    for all_ended, face in ((ended == formed, OKABE_ITO[0]), (ended < formed, "none")):
        right.errorbar(
            values[order][all_ended],
            life[all_ended],
            yerr=err[all_ended],
            fmt="o",
            ms=6,
            color=OKABE_ITO[0],
            mfc=face,
            capsize=3,
        )
    for x, y, e, f in zip(values[order], life, ended, formed, strict=True):
        right.annotate(
            f"{e}/{f} ended", (x, y), textcoords="offset points", xytext=(4, 6), fontsize=7
        )
    right.axhline(float(times[-1]), color="0.6", ls=":", lw=1.0)
    right.set_xlabel(f"noise level {symbol}")
    right.set_ylabel("time from gathering until ≤ 2 clusters are left")
    right.set_title("does noise shorten the metastable plateau?", fontsize=9)
    right.legend(
        handles=[
            Line2D(
                [],
                [],
                color=OKABE_ITO[0],
                marker="o",
                ls="none",
                label="lifetime, mean ± SE (all ended)",
            ),
            Line2D(
                [],
                [],
                color=OKABE_ITO[0],
                marker="o",
                mfc="none",
                ls="none",
                label="some cut at the horizon: a lower bound",
            ),
            Line2D([], [], color="0.6", ls=":", label="horizon"),
        ],
        fontsize=8,
    )
    fig.suptitle(
        wrap(
            "Value noise and the metastable plateau: from the time the tokens have gathered into "
            "clusters until at most two are left (one, or an antipodal pair); 'k/n ended': "
            "trajectories left with ≤ 2 clusters before the horizon, of those that gathered.\n"
            + _header(ds)
            + f", d = {', '.join(map(str, np.unique(ds['dim'].values)))}, "
            f"N = {', '.join(map(str, np.unique(ds['n_tokens'].values)))}, "
            f"β = {', '.join(f'{b:g}' for b in np.unique(ds['beta'].values))}",
            11.6,
        ),
        fontsize=9,
    )
    return fig  # type: ignore[return-value]


def _long_context(ds: xr.Dataset) -> Figure:
    fig, axes = subplots(1, 2, figsize=(11.6, 4.4), squeeze=False)
    tokens = sorted({int(n) for n in ds["n_tokens"].values})
    colors = dict(zip(tokens, ordered_colors(len(tokens)), strict=True))
    left, right = axes[0]
    for n in tokens:
        idx = [i for i in range(ds.sizes["point"]) if int(ds["n_tokens"].values[i]) == n]
        idx = sorted(idx, key=lambda i: float(ds["gamma"].values[i]))
        gamma = ds["gamma"].values[idx]
        last = ds.isel(point=idx, time=-1)
        left.errorbar(
            gamma,
            last["largest_fraction"].values,
            yerr=last["largest_fraction_se"].values,
            fmt="o-",
            color=colors[n],
            capsize=2,
            ms=4,
            label=f"N = {n:,}",
        )
        right.errorbar(
            gamma,
            last["n_clusters"].values / n,
            yerr=last["n_clusters_se"].values / n,
            fmt="o-",
            color=colors[n],
            capsize=2,
            ms=4,
        )
        critical = float(ds["gamma_critical"].values[idx[0]])
        if np.isfinite(critical) and critical <= 2 * float(gamma.max()):
            for ax in (left, right):
                ax.axvline(critical, color=colors[n], ls="--", lw=1.0)
    left.set_xlabel("γ (β = γ log N)")
    left.set_ylabel("share of tokens in the largest cluster at T")
    right.set_xlabel("γ (β = γ log N)")
    right.set_ylabel("clusters per token at T")
    right.set_yscale("log")
    handles, _ = left.get_legend_handles_labels()
    handles += [
        Line2D([], [], color="k", ls="--", label="γ_c: the self-weight e^β/(e^β + (N−1)K̂₀) = ½"),
        Line2D([], [], color="k", marker="o", label="mean ± SE over trajectories"),
    ]
    left.legend(handles=handles, fontsize=8)
    left.set_title("below γ_c attention averages and clusters everything", fontsize=9)
    right.set_title("above γ_c each token keeps to itself: N clusters", fontsize=9)
    T = float(ds["time"].values[-1])
    fig.suptitle(
        wrap(
            f"Long context: β = γ log N, at T = {T:g}. "
            + _header(ds)
            + f", d = {', '.join(map(str, np.unique(ds['dim'].values)))}",
            11.6,
        ),
        fontsize=9,
    )
    return fig  # type: ignore[return-value]
