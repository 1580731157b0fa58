"""Figures of a :func:`attndyn.studies.schemes_study` dataset (seed 004 Figs. 2-4, rates)."""

from typing import Any

import matplotlib
import numpy as np
import xarray as xr

from .._estimate.dataset import provenance
from ._figure import subplots


def plot_schemes(ds: xr.Dataset) -> dict[str, Any]:
    """Figures of a :func:`schemes_study` dataset: {"gamma", "ngpt_alpha", "random_weights",
    "rates"} → matplotlib Figure."""
    names = [str(s) for s in ds["scheme"].values]
    colors = dict(zip(names, matplotlib.colormaps.get_cmap("tab10")(np.arange(len(names)))))
    params = provenance(ds)["params"]
    figs: dict[str, Any] = {}

    fig, axes = subplots(1, 2, figsize=(11, 4.2))
    t = ds["time"].values
    for name in names:
        row = ds.sel(scheme=name)
        for ax in axes:
            ax.plot(
                t,
                row["gamma_reduced"] if ax is axes[0] else 1 - row["gamma_reduced"],
                color=colors[name],
                label=name,
            )
            ax.plot(
                t[::6],
                (row["gamma_full"] if ax is axes[0] else 1 - row["gamma_full"])[::6],
                "o",
                ms=3,
                mfc="none",
                color=colors[name],
            )
    axes[0].set(
        xlabel="t",
        ylabel="γ(t)",
        title=f"symmetric start: reduced ODE (lines), n-particle ODE (circles)\n"
        f"β={params['beta']}, n={params['n']}, d={params['d']}, r0={params['r0']}",
    )
    axes[1].set(xlabel="t", ylabel="1 − γ(t)", yscale="log", title="clustering gap")
    axes[0].legend(fontsize=8)
    figs["gamma"] = fig

    fig, ax = subplots(figsize=(6, 4.2))
    for a, row in zip(ds["alpha"].values, ds["ngpt_gamma"].values):
        ax.plot(t, row, label=f"α = {a:g}")
    ax.set(xlabel="t", ylabel="γ(t)", title=f"nGPT, symmetric start, β={params['beta']}")
    ax.legend()
    figs["ngpt_alpha"] = fig

    fig, ax = subplots(figsize=(6.5, 4.2))
    layers = ds["layer"].values
    for name in names:
        runs = ds["random_weights_cosine"].sel(scheme=name).values
        ax.plot(layers, runs.mean(0), color=colors[name], label=name)
        lo, hi = np.quantile(runs, [0.05, 0.95], axis=0)
        ax.fill_between(layers, lo, hi, color=colors[name], alpha=0.15)
    rw = params["random_weights"]
    ax.set(
        xlabel="layer",
        ylabel="mean cosine similarity",
        title=f"random weights (Kaiming, re-drawn per layer): d={rw['d']}, n={rw['n']}, "
        f"β={rw['beta']:.3g}\nmean of {rw['runs']} runs, 90 % band",
    )
    ax.legend(fontsize=8)
    figs["random_weights"] = fig

    fig, axes = subplots(1, len(names), figsize=(3.2 * len(names), 3.4), squeeze=False)
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
    figs["rates"] = fig
    return figs
