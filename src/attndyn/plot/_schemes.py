"""Figures of a :func:`attndyn.studies.schemes_study` dataset (seed 004 Figs. 2-4, rates)."""

from typing import Any

import numpy as np
import xarray as xr

from .._estimate.dataset import provenance
from ._figure import subplots
from ._style import category_colors, ordered_colors


def plot_schemes(ds: xr.Dataset) -> dict[str, Any]:
    """Figures of a :func:`schemes_study` dataset: {"gamma", "ngpt_alpha", "random_weights",
    "rates"} → matplotlib Figure. Schemes are told apart by the Okabe–Ito palette (the same
    colour for a scheme in every figure), nGPT's α values by viridis; every title says what
    to look for and gives β, n, d and the numbers of runs."""
    names = [str(s) for s in ds["scheme"].values]
    colors = category_colors(names)
    params = provenance(ds)["params"]
    return {
        "gamma": _gamma(ds, names, colors, params),
        "ngpt_alpha": _ngpt_alpha(ds, params),
        "random_weights": _random_weights(ds, names, colors, params),
        "rates": _rates(ds, names, colors),
    }


def _gamma(ds: xr.Dataset, names, colors, params):
    fig, axes = subplots(1, 2, figsize=(11, 4.4))
    t = ds["time"].values
    for name in names:
        row = ds.sel(scheme=name)
        for ax, transform in ((axes[0], lambda g: g), (axes[1], lambda g: 1 - g)):
            ax.plot(t, transform(row["gamma_reduced"]), color=colors[name], label=name)
            full = transform(row["gamma_full"])[::6]
            ax.plot(t[::6], full, "o", ms=3, mfc="none", color=colors[name])
    axes[0].set(xlabel="t", ylabel="γ(t): cosine between any two tokens")
    axes[0].set_title("γ(t): reduced ODE (lines) over the n-particle ODE (circles)", fontsize=9)
    axes[1].set(xlabel="t", ylabel="1 − γ(t)", yscale="log")
    axes[1].set_title("clustering gap: exponential (straight) or slower (bending)", fontsize=9)
    axes[0].legend(fontsize=8)
    headline = "Symmetric start: every scheme drives γ to 1, at its own speed"
    if {"peri-ln", "ngpt", "post-ln"} <= set(names):
        headline = (
            "Symmetric start: Peri-LN and nGPT move first (largest γ'(0)); Post-LN and nGPT "
            "close the gap exponentially"
        )
    fig.suptitle(
        f"{headline}\nβ = {params['beta']}, n = {params['n']}, "
        f"d = {params['d']}, r0 = {params['r0']} (deterministic ODEs)",
        fontsize=10,
    )
    return fig


def _ngpt_alpha(ds: xr.Dataset, params):
    fig, ax = subplots(figsize=(6.2, 4.4))
    t = ds["time"].values
    alphas = ds["alpha"].values
    order = np.argsort(alphas)
    colors = ordered_colors(len(alphas))
    for color, i in zip(colors, order):
        ax.plot(t, ds["ngpt_gamma"].values[i], color=color, label=f"α = {alphas[i]:g}")
    ax.set(xlabel="t", ylabel="γ(t)")
    ax.set_title(
        "nGPT: a larger step α clusters faster (1 − γ ~ e^{−2αt})\n"
        f"symmetric start, β = {params['beta']}, n = {params['n']}, d = {params['d']}",
        fontsize=9,
    )
    ax.legend(fontsize=8)
    return fig


def _random_weights(ds: xr.Dataset, names, colors, params):
    fig, ax = subplots(figsize=(6.8, 4.4))
    layers = ds["layer"].values
    for name in names:
        runs = ds["random_weights_cosine"].sel(scheme=name).values
        ax.plot(layers, runs.mean(0), color=colors[name], label=name)
        lo, hi = np.quantile(runs, [0.05, 0.95], axis=0)
        ax.fill_between(layers, lo, hi, color=colors[name], alpha=0.15, lw=0)
    rw = params["random_weights"]
    ax.set(xlabel="layer", ylabel="mean cosine similarity")
    headline = "Random weights: mean cosine similarity against depth, per scheme"
    if {"peri-ln", "ngpt"} <= set(names):
        headline = "Random weights: Peri-LN and nGPT move tokens most in the first layer"
    ax.set_title(
        f"{headline}\n"
        f"Q, K, V re-drawn per layer (Kaiming): d = {rw['d']}, n = {rw['n']}, "
        f"β = {rw['beta']:.3g}; mean of {rw['runs']} runs, 90 % band",
        fontsize=9,
    )
    ax.legend(fontsize=8)
    return fig


def _rates(ds: xr.Dataset, names, colors):
    fig, axes = subplots(1, len(names), figsize=(3.2 * len(names), 3.6), squeeze=False)
    for ax, name in zip(axes[0], names):
        row = ds.sel(scheme=name)
        tt, lg = row["rate_time"].values, row["rate_log_gap"].values
        kind = str(row["terminal_rate_kind"].values)
        variable = (
            str(row["terminal_rate_variable"].values) if "terminal_rate_variable" in row else "t"
        )
        ax.plot(tt, lg / np.log(10), color=colors[name])
        ax.set_xscale("log" if kind == "power" else "linear")
        ax.set(
            title=f"{name}\nfit {float(row['terminal_rate']):.4g} "
            f"[{float(row['terminal_rate_lower']):.4g}, "
            f"{float(row['terminal_rate_upper']):.4g}] per unit of {variable}\n"
            f"theory {row['terminal_law'].values}",
            xlabel="t",
        )
        ax.title.set_fontsize(8)
    axes[0][0].set_ylabel("log10(1 − γ)")
    fig.suptitle(
        "Terminal rates of 1 − γ: each fitted interval (reduced ODE, deep in the terminal "
        "regime) should contain the theory of Thm 4.1",
        fontsize=10,
    )
    return fig
