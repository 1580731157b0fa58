"""Figures state their parameters and sample sizes and use colour-blind-safe colours.

The datasets here are built by hand (no simulation): only the plotting is under test.
"""

import json

import numpy as np
import pytest
import xarray as xr
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_hex
from matplotlib.container import ErrorbarContainer

import attndyn as ad
from attndyn import plot
from attndyn.plot._sde import shown_betas
from attndyn.plot._style import DEFAULT_DPI


def _dataset(*, n_tokens: int = 2, model: str = "", **provenance) -> xr.Dataset:
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
            "n_tokens": ("point", [n_tokens] * len(betas)),
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


def _grid_position(ax) -> tuple[int, int]:
    spec = ax.get_subplotspec()
    assert spec is not None
    return spec.rowspan.start, spec.colspan.start


def _estimates(ax) -> list:
    """The error-bar containers (Monte Carlo estimates with their intervals) of an axes."""
    return [c for c in ax.containers if isinstance(c, ErrorbarContainer)]


def _legend_labels(fig) -> list[str]:
    legends = [*fig.legends, *(ax.get_legend() for ax in fig.axes)]
    return [t.get_text() for leg in legends if leg is not None for t in leg.get_texts()]


def _width_px(fig) -> float:
    return fig.get_figwidth() * DEFAULT_DPI


def test_ordered_values_use_viridis_and_categories_stay_distinct():
    fig = plot.phase_diagram(_dataset(), theory=False)
    dots = _estimates(fig.axes[0])
    viridis = [to_hex(c) for c in plot.ordered_colors(2)]
    assert [to_hex(c.lines[0].get_color()) for c in dots] == viridis
    names = list(ad.SCHEME_NAMES)
    assert len(set(plot.category_colors(names).values())) == len(names)


def test_phase_diagram_structure():
    # One set of error bars per d (at the sampled β, not a band between them), the exact
    # curve and β_c(d) line per d, and a legend naming every mark and line.
    fig = plot.phase_diagram(_dataset())
    (ax,) = fig.axes
    bars = _estimates(ax)
    assert len(bars) == 2 and len(bars[0].lines[0].get_xdata()) == 2
    assert all(type(c).__name__ == "LineCollection" for c in ax.collections)  # no bands
    dashed = [line for line in ax.get_lines() if line.get_linestyle() == "--"]
    assert len(dashed) == 2  # β_c(4), β_c(6)
    solid = [line for line in ax.get_lines() if line.get_linestyle() == "-"]
    assert len(solid) == 2  # the exact t = ∞ curves
    labels = _legend_labels(fig)
    for text in ("d = 4", "d = 6", "Monte Carlo ± Wilson 95 %", "exact t = ∞", "β_c(d)"):
        assert text in labels
    assert _width_px(fig) <= 1600


def _hybrid_dataset(*, far: bool = True) -> xr.Dataset:
    """A (β, ε) grid of two tokens: 3 β × 2 ε, probabilities built by hand."""
    betas, epss = [0.0, 2.0, 4.0], [0.5, 1.5]
    points = [(b, e) for e in epss for b in betas]
    n = len(points)
    prob = np.tile(np.array([0.5, 0.3, 0.3, 0.2]), (n, 1, 1))
    prob[0, 0] = [0.0, 0.01, 0.01, 0.99]  # a mostly unclustered cell
    dims3 = ("point", "time", "outcome")
    ds = xr.Dataset(
        {
            "probability": (dims3, prob),
            "ci_lower": (dims3, prob * 0.9),
            "ci_upper": (dims3, np.minimum(prob * 1.1, 1)),
            "n_valid": ("point", [100] * n),
            "far_from_limit": ("point", np.array([far and b == 4.0 for b, _ in points], np.int8)),
        },
        coords={
            "point": np.arange(n),
            "time": [10.0],
            "outcome": list(ad.OUTCOMES),
            "dim": ("point", [3] * n),
            "n_tokens": ("point", [2] * n),
            "eps": ("point", [e for _, e in points]),
            "beta": ("point", [b for b, _ in points]),
        },
    )
    ds.attrs["provenance"] = json.dumps({"n_trajectories": 100, "depth": 100})
    ds.attrs["attention"] = "unnormalized"
    return ds


def test_beta_eps_structure():
    fig = plot.beta_eps(_hybrid_dataset())
    maps, unclustered, lines = fig.axes[0], fig.axes[1], fig.axes[2]
    # Every β is drawn (none dropped), each with error bars and its exact curve.
    assert len(_estimates(lines)) == 3
    solid = [line for line in lines.get_lines() if line.get_linestyle() == "-"]
    assert len(solid) == 3
    # The exact curve steps at ε_c vertically (two abscissae at ε_c), not as a ramp.
    x = np.asarray(solid[1].get_xdata())
    assert np.sum(np.abs(x - ad.theory.eps_critical(2.0)) < 1e-6) == 2
    # The cells far from their SDE limit (β = 4) are hatched on both maps, and their
    # estimates drawn open.
    for ax in (maps, unclustered):
        hatched = [c for c in ax.collections if c.get_hatch()]
        assert len(hatched) == 1 and np.ma.count(np.ma.asarray(hatched[0].get_array())) == 2
    opened = [line for line in lines.get_lines() if str(line.get_markerfacecolor()) == "white"]
    assert sum(np.size(line.get_xdata()) for line in opened) == 2
    labels = _legend_labels(fig)
    for text in (
        "single most likely",
        "antipodal most likely",
        "unclustered most likely",
        "Monte Carlo ± Wilson 95 %",
        "exact t = ∞ (two tokens)",
        "layer step > 0.1: far from the SDE limit",
        "β = 0",
        "β = 2",
        "β = 4",
    ):
        assert text in labels, text
    assert _width_px(fig) <= 1600
    # The mostly unclustered cell takes its class's grey, not white.
    colours = np.asarray(maps.collections[0].get_facecolor())
    assert not np.allclose(colours[0][:3], 1.0)


def test_beta_eps_names_the_betas_its_line_panel_draws():
    # Seventeen β (the paper's 0 … 4 by 0.25): five curves, every fourth, the last drawn,
    # and the panel says so (it silently dropped β = 3 before).
    betas = np.arange(0, 4.01, 0.25)
    np.testing.assert_allclose(shown_betas(betas), [0, 1, 2, 3, 4])
    np.testing.assert_allclose(shown_betas(np.arange(0, 4.01, 0.5)), [0, 1, 2, 3, 4])
    assert len(shown_betas(np.arange(7.0))) <= 6
    ds = _hybrid_dataset()
    parts = [ds.assign_coords(beta=ds["beta"] + 6 * k) for k in range(3)]
    fig = plot.beta_eps(xr.concat(parts, dim="point").assign_coords(point=np.arange(18)))
    assert "of the 9 β; all in the maps" in fig.axes[2].get_title()


def test_beta_eps_without_far_cells_has_no_cross_entry():
    labels = _legend_labels(plot.beta_eps(_hybrid_dataset(far=False)))
    assert "layer step > 0.1: far from the SDE limit" not in labels


def test_evolution_panels_form_a_grid_by_the_swept_parameters():
    ds = _dataset()  # three points: (d, β) = (4, 0.25), (4, 0.5), (6, 1.0)
    fig = plot.evolution(ds)
    assert [_grid_position(ax) for ax in fig.axes] == [(0, 0), (0, 1), (0, 2)]
    assert [ax.get_title() for ax in fig.axes] == [
        "d = 4, β = 0.25",
        "d = 4, β = 0.5",
        "d = 6, β = 1",
    ]
    fig = plot.evolution(ds, ncols=2)
    # Two rows: the unused fourth axis is removed, every point keeps its own panel.
    assert [_grid_position(ax) for ax in fig.axes] == [(0, 0), (0, 1), (1, 0)]
    assert fig.axes[2].get_ylabel() == "fraction of trajectories"
    labels = _legend_labels(fig)
    for text in ("single", "antipodal", "unclustered", "Wilson 95 % (bars)"):
        assert text in labels
    # Two tokens with full noise: the exact t = ∞ levels of antipodal and single, dotted.
    assert "exact t = ∞ (two tokens)" in labels
    dotted = [line for line in fig.axes[0].get_lines() if line.get_linestyle() not in ("-", "None")]
    assert len(dotted) == 2
    assert _width_px(fig) <= 1600


def test_evolution_of_six_points_fits_a_page():
    # The case: --dim 4,8 --beta 0.25,1,3 drew six panels in a row, 3,276 px wide.
    base = _dataset().isel(point=[0])
    parts = [
        base.assign_coords(dim=("point", [d]), beta=("point", [b]))
        for d in (4, 8)
        for b in (0.25, 1.0, 3.0)
    ]
    ds = xr.concat(parts, dim="point").assign_coords(point=np.arange(6))
    fig = plot.evolution(ds)
    positions = sorted(_grid_position(ax) for ax in fig.axes)
    assert positions == [(r, c) for r in range(2) for c in range(3)]
    assert _width_px(fig) <= 1600
    assert "nan" not in fig.get_suptitle()


def test_pair_density_rows_are_the_simulated_betas():
    ds = _dataset().assign(pair_density=(("point", "time"), np.full((3, 2), 0.5)))
    fig = plot.pair_density(ds)
    panels = [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]
    assert [ax.get_title() for ax in panels] == ["d = 4", "d = 6"]
    lower, upper = panels[0].get_ylim()
    assert lower >= -0.5 and upper <= 1.5  # two rows of cells: no β axis below 0
    assert [t.get_text() for t in panels[0].get_yticklabels()] == ["0.25", "0.5"]
    assert _width_px(fig) <= 1600


@pytest.mark.parametrize("variable", ["pair_density", "span_dim"])
def test_pair_density_colour_bar_label_fits_one_beta(variable):
    # The evolution command's default (one β): the one-line label ran off the figure's top.
    ds = _dataset().isel(point=[0]).assign({variable: (("point", "time"), [[0.5, 0.9]])})
    fig = plot.pair_density(ds, variable=variable)
    canvas = FigureCanvasAgg(fig)  # what savefig draws with
    canvas.draw()
    # Everything drawn (the colour bar's label included) lies inside the figure, in inches.
    drawn = fig.get_tightbbox(canvas.get_renderer())
    width, height = fig.get_size_inches()
    assert drawn.x0 >= -0.01 and drawn.y0 >= -0.01, drawn
    assert drawn.x1 <= width + 0.01 and drawn.y1 <= height + 0.01, (drawn, width, height)


def test_evolution_refuses_a_bad_ncols():
    with pytest.raises(ad.ParameterError, match="ncols"):
        plot.evolution(_dataset(), ncols=0)


def test_beta_n_draws_the_references_the_dataset_carries():
    # N = 2: the exact t = ∞ curve (solid); N = 3: the three-token reading (dashed); no
    # reference (N = 5 here): the estimates alone.
    nan = [np.nan] * 3
    references = ((2, [0.1, 0.2, 0.3], nan), (3, nan, [0.0, 0.1, 0.4]), (5, nan, nan))
    parts = [
        _dataset(n_tokens=n).assign(
            p_antipodal_exact=("point", exact), p_antipodal_pair_three_tokens=("point", three)
        )
        for n, exact, three in references
    ]
    ds = xr.concat(parts, dim="point").assign_coords(point=np.arange(9))
    fig = plot.beta_n(ds)
    lines = [line for line in fig.axes[0].get_lines() if line.get_linestyle() in ("-", "--")]
    assert sorted(line.get_linestyle() for line in lines) == ["-", "--"]
    assert len(_estimates(fig.axes[0])) == 3
    labels = _legend_labels(fig)
    for text in (
        "N = 2",
        "N = 3",
        "N = 5",
        "Monte Carlo ± Wilson 95 %",
        "exact t = ∞ (N = 2)",
        "N = 3: (3/2)·P₂·F·exp(−T/τ) (reading)",
    ):
        assert text in labels
    assert _width_px(fig) <= 1600


def _schemes_dataset() -> xr.Dataset:
    """A schemes-study dataset by hand: three schemes, two of them equal (as Post-LN and
    Mix-LN are over the random-weight stack), γ rising to 1 at different speeds."""
    names = ["post-ln", "mix-ln", "ngpt"]
    t = np.linspace(0.0, 60.0, 121)
    rates = np.array([[1.0], [0.1], [3.0]])
    gamma = 1 - np.exp(-rates * t)
    layers, runs = np.arange(9), 4
    rng = np.random.default_rng(0)
    cos = np.stack([np.tile(np.linspace(0, 0.9, 9), (runs, 1))] * 2 + [rng.random((runs, 9))])
    ds = xr.Dataset(
        {
            "gamma_reduced": (("scheme", "time"), gamma),
            "gamma_full": (("scheme", "time"), gamma),
            "ngpt_gamma": (("alpha", "time"), 1 - np.exp(-np.array([[1.0], [2.0]]) * t)),
            "random_weights_cosine": (("scheme", "run", "layer"), cos),
            "rate_time": (("scheme", "rate_point"), np.tile(np.linspace(5, 25, 5), (3, 1))),
            "rate_log_gap": (("scheme", "rate_point"), -np.tile(np.linspace(5, 45, 5), (3, 1))),
            "terminal_rate": ("scheme", [2.0, 2.0009, 2.0]),
            "terminal_rate_lower": ("scheme", [2.0 - 2e-8, 1.99, 2.0 - 1e-8]),
            "terminal_rate_upper": ("scheme", [2.0 + 2e-8, 2.01, 2.0 + 1e-8]),
            "terminal_rate_theory": ("scheme", [2.0, 2.0, 2.0]),
            "terminal_rate_kind": ("scheme", ["exponential", "power", "exponential"]),
            "terminal_rate_variable": ("scheme", ["t", "log t", "t"]),
            "terminal_law": ("scheme", ["exp(-2t)", "t^-2", "exp(-2t)"]),
        },
        coords={"scheme": names, "time": t, "alpha": [1.0, 2.0], "layer": layers},
    )
    params = {"beta": 3.0, "n": 32, "d": 32, "r0": 1.0}
    params["random_weights"] = {"d": 64, "n": 32, "beta": 8.0, "runs": runs}
    ds.attrs["provenance"] = json.dumps({"params": params})
    return ds


def test_schemes_figures_structure():
    figures = plot.schemes(_schemes_dataset())
    assert set(figures) == {"gamma", "ngpt_alpha", "random_weights", "rates"}
    for name, fig in figures.items():
        assert _width_px(fig) <= 1600, name
        assert "first" not in fig.get_suptitle()  # the setting, not a claim
    gamma = figures["gamma"]
    labels = _legend_labels(gamma)
    assert {"post-ln", "mix-ln", "ngpt", "reduced ODE (Thm 4.1)", "n-particle ODE"} <= set(labels)
    # γ(t) is shown where it moves (to 1.25× the time the slowest reaches 0.99), not 0-60.
    assert gamma.axes[0].get_xlim()[1] < 60
    assert gamma.axes[1].get_ylim()[0] >= 1e-6  # float32 rounding left out
    # Equal curves are drawn once and named together; every interval is a 95 % one.
    labels = _legend_labels(figures["random_weights"])
    assert "post-ln = mix-ln (equal within 1e-4)" in labels
    assert "95 % interval of the mean of 4 runs" in labels
    rates = figures["rates"]
    assert [_grid_position(ax) for ax in rates.axes] == [(0, 0), (0, 1), (0, 2)]
    assert "2 ± 2e-08" in rates.axes[0].get_title()  # not "[2, 2]"
    assert rates.axes[1].get_xscale() == "log"


def test_every_committed_figure_fits_a_page():
    # The figures the experiments write and the docs show: at most 1,600 px wide (PNG
    # header: width and height are the two big-endian words after the signature).
    import struct
    from pathlib import Path

    figures = Path(__file__).resolve().parents[1] / "figures"
    widths = {}
    for path in sorted(figures.glob("*.png")):
        with path.open("rb") as file:
            header = file.read(24)
        widths[path.name] = struct.unpack(">II", header[16:24])[0]
    assert widths and all(w <= 1600 for w in widths.values()), {
        k: w for k, w in widths.items() if w > 1600
    }
