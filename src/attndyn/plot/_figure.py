"""Figures without pyplot: no global state, and the user's matplotlib backend untouched."""

from typing import Any

from matplotlib.figure import Figure


def subplots(nrows: int = 1, ncols: int = 1, *, figsize, squeeze: bool = True) -> Any:
    """``(figure, axes)`` like ``pyplot.subplots``, with constrained layout, but a plain
    :class:`~matplotlib.figure.Figure` that ``savefig`` writes with the Agg renderer."""
    fig = Figure(figsize=figsize, layout="constrained")
    return fig, fig.subplots(nrows, ncols, squeeze=squeeze)
