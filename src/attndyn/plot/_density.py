"""The peers' (t, β) heatmaps of the pair density and the span dimension."""

import numpy as np
import xarray as xr
from matplotlib.figure import Figure

from ._figure import subplots
from ._style import MAX_WIDTH_INCHES, SYMBOLS, setting_line, swept

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
    β, in which the metastable plateaus at large β show as bands.
    """
    groups = _groups(ds)
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
        ax.set_title(", ".join(f"{SYMBOLS.get(k, k)} = {v}" for k, v in label), fontsize=9)
    for ax in axes.ravel()[len(groups) :]:
        ax.remove()
    if mesh is not None:
        fig.colorbar(
            mesh,
            ax=axes.ravel()[: len(groups)].tolist(),
            label=LABELS.get(variable, variable),
            pad=0.02,
        )
    fig.suptitle(setting_line(ds, GROUP_KEYS), fontsize=9)
    return fig  # type: ignore[return-value]


def _fmt(v) -> str:
    if isinstance(v, float | np.floating):
        return f"{float(v):g}"
    return str(v).strip('"')
