"""Figures state their parameters and sample sizes and use colour-blind-safe colours.

The datasets here are built by hand (no simulation): only the plotting is under test.
"""

import json

import numpy as np
import pytest
import xarray as xr
from matplotlib.colors import to_hex

import attndyn as ad
from attndyn import plot


def _dataset(*, tokens: int = 2, model: str = "", **provenance) -> xr.Dataset:
    betas, times = [0.25, 0.5, 1.0], [1.0, 5.0]  # small β: cheap exact curves
    prob = np.tile(np.array([0.6, 0.3, 0.3, 0.1]), (len(betas), len(times), 1))
    dims3 = ("point", "time", "outcome")
    ds = xr.Dataset(
        {
            "probability": (dims3, prob),
            "ci_lower": (dims3, prob - 0.05),
            "ci_upper": (dims3, prob + 0.05),
        },
        coords={
            "point": np.arange(len(betas)),
            "time": times,
            "outcome": list(ad.OUTCOMES),
            "dim": ("point", [4, 4, 6]),
            "tokens": ("point", [tokens] * len(betas)),
            "beta": ("point", betas),
        },
    )
    ds.attrs["provenance"] = json.dumps({"n_trajectories": 1234, "model": model, **provenance})
    return ds


def _title_text(fig) -> str:
    return "\n".join([fig.get_suptitle(), *(ax.get_title() for ax in fig.axes)])


@pytest.mark.parametrize("draw", [plot.phase_diagram, plot.beta_n, plot.evolution])
def test_titles_state_sample_size_depth_and_horizon(draw):
    fig = draw(_dataset(model="DiscreteTransformer(depth=50, ...)"))
    text = _title_text(fig).replace("\n", " ")
    assert "1,234 trajectories a point" in text
    assert "L = 50" in text and "T = 5" in text


def test_depth_left_at_its_default_is_still_stated():
    # equinox's repr leaves out fields at their default (DiscreteTransformer: depth=100).
    model = repr(ad.DiscreteTransformer(ad.Attention(1.0), saveat=ad.SaveAt(5.0)))
    assert "depth" not in model
    text = _title_text(plot.beta_n(_dataset(model=model)))
    assert "L = 100" in text


def test_titles_fit_the_figure():
    long = "a headline that says what the reader should see " * 4
    fig = plot.evolution(_dataset(), title=long)
    lines = _title_text(fig).splitlines()
    assert len(lines) > 2  # wrapped, not cut off at the figure's edge
    width = int(fig.get_figwidth() * 72 / (0.55 * 10))
    assert max(len(line) for line in lines) <= width


def test_outcomes_use_the_okabe_ito_palette():
    fig = plot.evolution(_dataset())
    colors = {line.get_label(): to_hex(line.get_color()) for line in fig.axes[0].get_lines()}
    assert colors["single"] == plot.OUTCOME_COLORS["single"].lower()
    assert colors["antipodal"] == plot.OUTCOME_COLORS["antipodal"].lower()
    assert colors["single"] in {c.lower() for c in plot.OKABE_ITO}


def test_ordered_values_use_viridis_and_categories_stay_distinct():
    fig = plot.phase_diagram(_dataset(), theory=False)
    dots = [line for line in fig.axes[0].get_lines() if str(line.get_label()).startswith("d =")]
    viridis = [to_hex(c) for c in plot.ordered_colors(2)]
    assert [to_hex(line.get_color()) for line in dots] == viridis
    names = list(ad.SCHEME_NAMES)
    assert len(set(plot.category_colors(names).values())) == len(names)


def _grid_position(ax) -> tuple[int, int]:
    spec = ax.get_subplotspec()
    assert spec is not None
    return spec.rowspan.start, spec.colspan.start


def test_evolution_panels_fill_rows_of_ncols():
    ds = _dataset()  # three points
    assert [_grid_position(ax) for ax in plot.evolution(ds).axes] == [(0, 0), (0, 1), (0, 2)]
    fig = plot.evolution(ds, ncols=2)
    # Two rows: the unused fourth axis is removed, every point keeps its own panel.
    assert [_grid_position(ax) for ax in fig.axes] == [(0, 0), (0, 1), (1, 0)]
    assert [ax.get_title() for ax in fig.axes] == [f"beta = {b:g}" for b in (0.25, 0.5, 1.0)]
    assert fig.axes[2].get_ylabel() == "fraction of trajectories"
    assert fig.axes[2].get_legend() is not None


def test_evolution_refuses_a_bad_ncols():
    with pytest.raises(ad.ParameterError, match="ncols"):
        plot.evolution(_dataset(), ncols=0)


def test_beta_n_draws_the_references_the_dataset_carries():
    # N = 2: the exact t = ∞ curve (thin); N = 3: the three-token reading (dashed); no
    # reference (N = 5 here): the data joined by a thin line.
    nan = [np.nan] * 3
    references = ((2, [0.1, 0.2, 0.3], nan), (3, nan, [0.0, 0.1, 0.4]), (5, nan, nan))
    parts = [
        _dataset(tokens=n).assign(
            p_antipodal_exact=("point", exact), p_antipodal_pair_three_tokens=("point", three)
        )
        for n, exact, three in references
    ]
    ds = xr.concat(parts, dim="point").assign_coords(point=np.arange(9))
    lines = plot.beta_n(ds).axes[0].get_lines()
    styles = [(str(line.get_label()), line.get_linestyle()) for line in lines]
    # Each reference drawn once (NaN elsewhere), in its own style.
    assert styles.count(("exact t = ∞ (N = 2)", "-")) == 1
    assert styles.count(("N = 3: (3/2)·P₂·F·exp(−T/τ) (reading)", "--")) == 1
