"""Figures of a :func:`attndyn.studies.schemes_study` dataset (seed 004 Figs. 2-4, rates)."""

from typing import Any

import numpy as np
import xarray as xr
from matplotlib.lines import Line2D
from scipy import stats

from .._estimate.dataset import provenance
from ._figure import subplots
from ._style import MAX_WIDTH_INCHES, category_colors, ordered_colors, wrap

#: The model of every part of the schemes study, as the titles name it: softmax attention
#: (Q = K = I, or random Q, K in part c) and the layer maps' value V = I (the ODEs'), or
#: random V (part c).
ODE_MODEL = "softmax attention, V = I"

#: 1 − γ below this is float32 rounding, not dynamics (γ is stored from float32 solves:
#: its spacing near 1 is 6e-8), so the log panels stop here.
GAP_FLOOR = 1e-6
#: Curves closer than this everywhere are drawn as one (named together in the legend).
SAME_CURVE = 1e-4


def plot_schemes(ds: xr.Dataset) -> dict[str, Any]:
    """Figures of a :func:`schemes_study` dataset: {"gamma", "ngpt_alpha", "random_weights",
    "rates"} → matplotlib Figure. Schemes are told apart by the Okabe–Ito palette (the same
    colour for a scheme in every figure), nGPT's α values by viridis; every title states
    the setting (β, n, d, the numbers of runs) and every legend explains each line and
    mark."""
    names = [str(s) for s in ds["scheme"].values]
    colors = category_colors(names)
    params = provenance(ds)["params"]
    return {
        "gamma": _gamma(ds, names, colors, params),
        "ngpt_alpha": _ngpt_alpha(ds, params),
        "random_weights": _random_weights(ds, names, colors, params),
        "rates": _rates(ds, names, colors),
    }


def _settled_time(t: np.ndarray, curves: np.ndarray, level: float = 0.99) -> float:
    """The time by which every curve has reached ``level`` (where the interesting part of
    γ(t) ends), with a margin; the whole horizon if one never does."""
    reached = [t[np.argmax(c >= level)] if (c >= level).any() else t[-1] for c in curves]
    return float(min(t[-1], 1.25 * max(reached)))


def _gamma(ds: xr.Dataset, names, colors, params):
    fig, axes = subplots(1, 2, figsize=(11, 4.6))
    t = ds["time"].values
    reduced = ds["gamma_reduced"].values
    end = _settled_time(t, reduced)
    every = max(1, int(np.sum(t <= end)) // 20)
    for name in names:
        row = ds.sel(scheme=name)
        red, full = row["gamma_reduced"].values, row["gamma_full"].values
        axes[0].plot(t, red, color=colors[name], label=name)
        axes[0].plot(t[::every], full[::every], "o", ms=3.5, mfc="none", color=colors[name])
        gap, full_gap = _gap(red), _gap(full)
        axes[1].plot(t, gap, color=colors[name])
        axes[1].plot(t[::6], full_gap[::6], "o", ms=3.5, mfc="none", color=colors[name])
    axes[0].set(xlabel="t", ylabel="γ(t): cosine between any two tokens", xlim=(0, end))
    axes[0].set_title(f"γ(t) up to t = {end:.3g} (every scheme ≥ 0.99 by then)", fontsize=9)
    axes[1].set(xlabel="t", ylabel="1 − γ(t)", yscale="log", ylim=(GAP_FLOOR, 2))
    axes[1].set_title(
        f"clustering gap 1 − γ, to t = {t[-1]:g} (cut at {GAP_FLOOR:g}: float32 rounding)",
        fontsize=9,
    )
    handles, labels = axes[0].get_legend_handles_labels()
    handles += [
        Line2D([], [], color="0.3"),
        Line2D([], [], color="0.3", marker="o", mfc="none", lw=0, ms=4),
    ]
    labels += ["reduced ODE (Thm 4.1)", "n-particle ODE"]
    fig.legend(handles, labels, loc="outside right upper", fontsize=8)
    fig.suptitle(
        f"Symmetric start: β = {params['beta']}, n = {params['n']}, d = {params['d']}, "
        f"r0 = {params['r0']} (deterministic ODEs: {ODE_MODEL})",
        fontsize=10,
    )
    return fig


def _gap(gamma: np.ndarray) -> np.ndarray:
    """1 − γ, NaN below :data:`GAP_FLOOR` (rounding, not dynamics)."""
    gap = 1 - np.asarray(gamma, dtype=float)
    return np.where(gap >= GAP_FLOOR, gap, np.nan)


def _ngpt_alpha(ds: xr.Dataset, params):
    fig, axes = subplots(1, 2, figsize=(10, 4.4))
    t = ds["time"].values
    alphas = ds["alpha"].values
    curves = ds["ngpt_gamma"].values
    end = _settled_time(t, curves)
    order = np.argsort(alphas)
    for color, i in zip(ordered_colors(len(alphas)), order):
        axes[0].plot(t, curves[i], color=color, label=f"α = {alphas[i]:g}")
        axes[1].plot(t, _gap(curves[i]), color=color)
    axes[0].set(xlabel="t", ylabel="γ(t)", xlim=(0, end))
    axes[0].set_title(f"γ(t) up to t = {end:.3g}", fontsize=9)
    resolved = np.isfinite(np.stack([_gap(c) for c in curves]))
    last = float(t[min(len(t) - 1, int(np.max(np.nonzero(resolved.any(0))[0])) + 2)])
    axes[1].set(xlabel="t", ylabel="1 − γ(t)", yscale="log", ylim=(GAP_FLOOR, 2), xlim=(0, last))
    axes[1].set_title(f"1 − γ until it drops below {GAP_FLOOR:g} (float32 rounding)", fontsize=9)
    fig.legend(loc="outside right upper", fontsize=8, title="nGPT step", title_fontsize=8)
    fig.suptitle(
        f"nGPT, reduced ODE, {ODE_MODEL}, symmetric start: β = {params['beta']}, "
        f"n = {params['n']}, d = {params['d']}",
        fontsize=10,
    )
    return fig


def _same_curves(curves: dict[str, np.ndarray]) -> dict[str, list[str]]:
    """Names grouped by curves that agree within :data:`SAME_CURVE` everywhere (each group
    keyed by its first name)."""
    groups: dict[str, list[str]] = {}
    for name, curve in curves.items():
        for first in groups:
            if np.nanmax(np.abs(curve - curves[first])) < SAME_CURVE:
                groups[first].append(name)
                break
        else:
            groups[name] = [name]
    return groups


def _random_weights(ds: xr.Dataset, names, colors, params):
    fig, ax = subplots(figsize=(8.4, 4.6))
    layers = ds["layer"].values
    runs = {n: ds["random_weights_cosine"].sel(scheme=n).values for n in names}
    groups = _same_curves({n: r.mean(0) for n, r in runs.items()})
    n_runs = next(iter(runs.values())).shape[0]
    # A 95 % interval of the mean over the runs (Student t), as error bars at sampled
    # layers (every layer when few): the same 95 % as every other figure.
    half = stats.t.ppf(0.975, max(n_runs - 1, 1))
    every = max(1, len(layers) // 12)
    for k, (first, members) in enumerate(groups.items()):
        r = runs[first]
        mean = r.mean(0)
        sem = r.std(0, ddof=1) / np.sqrt(n_runs) if n_runs > 1 else np.zeros_like(mean)
        label = " = ".join(members) + (" (equal within 1e-4)" if len(members) > 1 else "")
        ax.plot(layers, mean, color=colors[first], label=label)
        shift = (k - len(groups) / 2) * 0.08 * every  # bars of the schemes side by side
        ax.errorbar(
            layers[::every] + shift,
            mean[::every],
            yerr=half * sem[::every],
            fmt="none",
            ecolor=colors[first],
            elinewidth=0.9,
            capsize=2,
        )
    rw = params["random_weights"]
    ax.set(xlabel="layer", ylabel="mean pairwise cosine")
    handles, labels = ax.get_legend_handles_labels()
    handles.append(Line2D([], [], color="0.3", lw=0, marker="|", ms=8))
    labels.append(f"95 % interval of the mean of {n_runs} runs")
    ax.legend(handles, labels, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.set_title(
        wrap(
            f"Random weights re-drawn per layer (Kaiming Q, K, V; softmax attention): "
            f"d = {rw['d']}, n = {rw['n']}, β = {rw['beta']:.3g}, {n_runs} runs",
            6.0,
        ),
        fontsize=9,
    )
    return fig


def _interval(value: float, lower: float, upper: float) -> str:
    """``value ± half-width`` of the interval [lower, upper] (a tight interval printed as
    bounds reads "[2, 2]" at any sensible precision)."""
    return f"{value:.6g} ± {(upper - lower) / 2:.2g}"


#: Line styles of the fitted law and of the theory's law on the rates figure.
FIT_STYLES = ("--", ":")


def fitted_line(t, log_gap, *, law: str, rate: float) -> np.ndarray | None:
    """The law ``log(1 − γ) = −(rate·s(t) + b)`` over the times ``t`` of a terminal-rate
    curve, s the law's clock (t, log t or √(t + 1): :func:`attndyn.theory._symmetric.rate_clock`),
    its offset b by least squares on the later half of the curve in s (where the fit took
    its slope): the straight line the fitted rate claims, drawn beside the curve. ``None``
    where the curve has fewer than two finite points there."""
    from ..theory._symmetric import rate_clock as clock

    t, log_gap = np.asarray(t, dtype=float), np.asarray(log_gap, dtype=float)
    keep = np.isfinite(t) & np.isfinite(log_gap) & ((t > 0) | (law != "power"))
    if keep.sum() < 2 or not np.isfinite(rate):
        return None
    s = clock(t[keep], law)
    later = s >= 0.5 * (s[0] + s[-1])
    if later.sum() < 2:
        return None
    offset = float(np.mean(-log_gap[keep][later] - rate * s[later]))
    with np.errstate(divide="ignore", invalid="ignore"):
        return -(rate * clock(t, law) + offset)


def _rates(ds: xr.Dataset, names, colors):
    columns = min(3, len(names))
    rows = -(-len(names) // columns)
    fig, axes = subplots(
        rows,
        columns,
        figsize=(min(3.9 * columns, MAX_WIDTH_INCHES), 3.2 * rows + 1.1),
        squeeze=False,
    )
    for ax, name in zip(axes.ravel(), names):
        row = ds.sel(scheme=name)
        tt, lg = row["rate_time"].values, row["rate_log_gap"].values
        # terminal_rate_kind: its name in the datasets of attndyn 0.4.
        law_name = "terminal_rate_law" if "terminal_rate_law" in row else "terminal_rate_kind"
        law = str(row[law_name].values)
        variable = (
            str(row["terminal_rate_variable"].values) if "terminal_rate_variable" in row else "t"
        )
        ax.plot(tt, lg / np.log(10), color=colors[name], lw=2.2, alpha=0.55)
        rates = (float(row["terminal_rate"]), float(row["terminal_rate_theory"]))
        for rate, style in zip(rates, FIT_STYLES):
            line = fitted_line(tt, lg, law=law, rate=rate)
            if line is not None:
                ax.plot(tt, line / np.log(10), color="k", lw=1.0, ls=style)
        ax.set_xscale("log" if law == "power" else "linear")
        fit = _interval(
            float(row["terminal_rate"]),
            float(row["terminal_rate_lower"]),
            float(row["terminal_rate_upper"]),
        )
        ax.set_title(
            f"{name}: fit {fit} per {variable}\ntheory {row['terminal_law'].values} = "
            f"{float(row['terminal_rate_theory']):.4g}",
            fontsize=8,
        )
        ax.set_xlabel("t")
    for ax in axes.ravel()[len(names) :]:
        ax.remove()
    for r in axes:
        r[0].set_ylabel("log10(1 − γ)")
    fig.legend(
        [
            Line2D([], [], color="0.3", lw=2.2, alpha=0.55),
            Line2D([], [], color="k", lw=1.0, ls=FIT_STYLES[0]),
            Line2D([], [], color="k", lw=1.0, ls=FIT_STYLES[1]),
        ],
        [
            "log10(1 − γ(t)) of the reduced ODE in the fit window (log t for power laws)",
            "fitted law (the fitted rate)",
            "law of Thm 4.1 (the theory's rate)",
        ],
        loc="outside lower center",
        ncols=3,
        fontsize=8,
    )
    fig.suptitle(
        f"Terminal rates of 1 − γ (reduced ODE, {ODE_MODEL}, deep in the terminal regime): "
        "fitted rate with its interval, and the rate of Thm 4.1",
        fontsize=10,
    )
    return fig
