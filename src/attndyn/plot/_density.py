"""The peers' (t, β) heatmaps of the pair density and the span dimension."""

import numpy as np
import xarray as xr
from matplotlib.figure import Figure

from ._figure import subplots

#: Coordinates that split a dataset into panels (β and time are the axes of each panel).
GROUP_KEYS = ("model", "dim", "tokens", "eps")
LABELS = {
    "pair_density": "fraction of pairs with cosine > 0.999",
    "span_dim": "dimension of the span (Gram eigenvalues > 1e-3)",
    "mean_cosine": "mean pairwise cosine",
}


def _edges(v: np.ndarray) -> np.ndarray:
    if len(v) == 1:
        return np.array([v[0] - 0.5, v[0] + 0.5])
    mid = (v[1:] + v[:-1]) / 2
    return np.concatenate([[2 * v[0] - mid[0]], mid, [2 * v[-1] - mid[-1]]])


def _groups(ds: xr.Dataset) -> dict[tuple, list[int]]:
    groups: dict[tuple, list[int]] = {}
    keys = [k for k in GROUP_KEYS if k in ds.coords]
    for i in range(ds.sizes["point"]):
        label = tuple((k, ds[k].values[i].item()) for k in keys)
        groups.setdefault(label, []).append(i)
    return groups


def plot_pair_density(ds: xr.Dataset, *, variable: str = "pair_density") -> Figure:
    """A (t, β) heatmap of ``variable`` (``pair_density``, ``span_dim`` or ``mean_cosine``,
    the Monte Carlo mean over trajectories), one panel per (model, d, N, ε).

    The peers' figure: their density of clustered pairs (cosine > 0.999) against time and
    β, in which the metastable plateaus at large β show as bands.
    """
    groups = _groups(ds)
    fig, axes = subplots(1, len(groups), figsize=(4.6 * len(groups), 3.8), squeeze=False)
    times = ds["time"].values
    top = float(np.nanmax(ds[variable].values)) if variable == "span_dim" else 1.0
    mesh = None
    for ax, (label, indices) in zip(axes[0], groups.items()):
        betas = np.asarray([float(ds["beta"].values[i]) for i in indices])
        order = np.argsort(betas)
        image = np.stack([ds[variable].values[indices[j]] for j in order])
        mesh = ax.pcolormesh(
            _edges(times), _edges(betas[order]), image, shading="flat", vmin=0.0, vmax=top
        )
        ax.set_xlabel("t")
        ax.set_ylabel("β")
        ax.set_title(", ".join(f"{k} = {_fmt(v)}" for k, v in label), fontsize=9)
    if mesh is not None:
        fig.colorbar(mesh, ax=axes[0].tolist(), label=LABELS.get(variable, variable))
    return fig  # type: ignore[return-value]


def _fmt(v) -> str:
    if isinstance(v, float | np.floating):
        return f"{float(v):g}"
    return str(v).strip('"')
