"""The peers' (t, β) heatmaps of the pair density and the span dimension."""

import numpy as np
import xarray as xr
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from ._figure import subplots
from ._style import MAX_WIDTH_INCHES, SYMBOLS, ordered_colors, setting_line, swept, wrap

#: Coordinates that split a dataset into panels (β and time are the axes of each panel).
GROUP_KEYS = ("model", "dim", "n_tokens", "eps")
#: The colour bar's label, in two lines: one β row makes a colour bar ~1.5 inches tall,
#: which cut a one-line label off at the figure's edge.
LABELS = {
    "pair_density": "fraction of pairs\nwith cosine > 0.999",
    "span_dim": "dimension of the span\n(Gram eigenvalues > 1e-3)",
    "mean_cosine": "mean pairwise cosine",
}


def _edges(v: np.ndarray) -> np.ndarray:
    if len(v) == 1:
        return np.array([v[0] - 0.5, v[0] + 0.5])
    mid = (v[1:] + v[:-1]) / 2
    return np.concatenate([[2 * v[0] - mid[0]], mid, [2 * v[-1] - mid[-1]]])


def _groups(ds: xr.Dataset) -> dict[tuple, list[int]]:
    """Point indices by their values of the swept :data:`GROUP_KEYS` (NaN, as ε of the
    models without it, is one value: keyed by its text)."""
    groups: dict[tuple, list[int]] = {}
    keys = swept(ds, GROUP_KEYS)
    for i in range(ds.sizes["point"]):
        label = tuple((k, _fmt(ds[k].values[i].item())) for k in keys)
        groups.setdefault(label, []).append(i)
    return groups


def plot_pair_density(ds: xr.Dataset, *, variable: str = "pair_density", ncols: int = 3) -> Figure:
    """A (t, β) heatmap of ``variable`` (``pair_density``, ``span_dim`` or ``mean_cosine``,
    the Monte Carlo mean over trajectories), one panel per (model, d, N, ε) in rows of
    ``ncols``; each simulated β is one row of cells, labelled with its value (no β axis
    between the values, where nothing was simulated).

    The peers' figure: their density of clustered pairs (cosine > 0.999) against time and
    β, in which the metastable plateaus at large β show as bands. Where every panel has one
    β (``evolution``'s default), a heatmap would be one colour strip: the means are drawn
    against time instead, one line per (model, d, N, ε, β) with its 95 % interval (± 1.96
    standard errors, the dataset's ``<variable>_se``) as a band.
    """
    groups = _groups(ds)
    if all(len(indices) == 1 for indices in groups.values()):
        return _lines(ds, variable, groups)
    columns = max(1, min(ncols, len(groups)))
    rows = -(-len(groups) // columns)
    n_betas = max(len(v) for v in groups.values())
    fig, axes = subplots(
        rows,
        columns,
        figsize=(
            min(3.6 * columns + 1.4, MAX_WIDTH_INCHES),
            max(3.0, (0.35 * n_betas + 1.6) * rows + 0.6),
        ),
        squeeze=False,
    )
    times = ds["time"].values
    top = float(np.nanmax(ds[variable].values)) if variable == "span_dim" else 1.0
    mesh = None
    for ax, (label, indices) in zip(axes.ravel(), groups.items()):
        betas = np.asarray([float(ds["beta"].values[i]) for i in indices])
        order = np.argsort(betas)
        image = np.stack([ds[variable].values[indices[j]] for j in order])
        rows_at = np.arange(len(order) + 1) - 0.5
        mesh = ax.pcolormesh(
            _edges(times), rows_at, image, shading="flat", vmin=0.0, vmax=top, cmap="viridis"
        )
        ax.set_yticks(np.arange(len(order)), [f"{b:g}" for b in betas[order]])
        ax.set_xlabel("t")
        ax.set_ylabel("β")
        title = ", ".join(f"{SYMBOLS.get(k, k)} = {v}" for k, v in label if v != "nan")
        ax.set_title(title, fontsize=9)
    for ax in axes.ravel()[len(groups) :]:
        ax.remove()
    if mesh is not None:
        fig.colorbar(
            mesh,
            ax=axes.ravel()[: len(groups)].tolist(),
            label=LABELS.get(variable, variable),
            pad=0.02,
        )
    fig.suptitle(wrap(setting_line(ds, GROUP_KEYS), fig.get_figwidth()), fontsize=9)
    return fig  # type: ignore[return-value]


def _fmt(v) -> str:
    if isinstance(v, float | np.floating):
        return f"{float(v):g}"
    return str(v).strip('"')


def _lines(ds: xr.Dataset, variable: str, groups: dict[tuple, list[int]]) -> Figure:
    """``variable`` against time, one line per point (each group holds one β), with its
    95 % interval as a band where the dataset carries the standard error."""
    fig, ax = subplots(figsize=(7.5, 4.2))
    times = ds["time"].values
    colors = ordered_colors(len(groups))
    for color, (label, (i,)) in zip(colors, groups.items()):
        mean = np.asarray(ds[variable].values[i], dtype=float)
        values = (*label, ("beta", _beta(ds, i)))
        # ε of a model without it is NaN: left out of its label.
        name = ", ".join(f"{SYMBOLS.get(k, k)} = {v}" for k, v in values if v != "nan")
        ax.plot(times, mean, color=color, lw=1.4, label=name)
        if f"{variable}_se" in ds:
            half = 1.96 * np.asarray(ds[f"{variable}_se"].values[i], dtype=float)
            ax.fill_between(times, mean - half, mean + half, color=color, alpha=0.25, lw=0)
    ax.set_xlabel("t")
    ax.set_ylabel(LABELS.get(variable, variable).replace("\n", " "))
    if variable != "span_dim":
        ax.set_ylim(-0.02, 1.02)
    handles, labels = ax.get_legend_handles_labels()
    if f"{variable}_se" in ds:
        handles.append(Patch(color="0.5", alpha=0.25))
        labels.append("95 % interval (± 1.96 SE over trajectories)")
    ax.legend(handles, labels, fontsize=8, loc="best")
    ax.set_title(wrap(setting_line(ds, (*GROUP_KEYS, "beta")), 7.0), fontsize=9)
    return fig  # type: ignore[return-value]


def _beta(ds: xr.Dataset, i: int) -> str:
    return _fmt(ds["beta"].values[i].item())
