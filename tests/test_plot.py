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

#: The model fields a study's provenance records (ModelSpec.metadata): what the figures
#: read to name the model and to decide whether seed 003's theory is its theory.
POST_LN = {"scheme": "post-ln", "engine": "discrete", "attention": "softmax", "values": "gaussian"}


def _dataset(*, n_tokens: int = 2, model: str = "", **provenance) -> xr.Dataset:
    provenance = {**POST_LN, **provenance}
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
    fig = draw(_dataset(depth=50))
    text = _title_text(fig).replace("\n", " ")
    assert "1,234 trajectories a point" in text
    assert "L = 50" in text and "T = 5" in text


def test_depth_left_at_its_default_is_still_stated():
    # equinox's repr leaves out fields at their default (DiscreteTransformer: depth=100):
    # the figures read the model's fields (AbstractModel.provenance), never its repr.
    model = ad.DiscreteTransformer(ad.Attention(1.0), saveat=ad.SaveAt(5.0))
    assert "depth" not in repr(model)
    assert model.provenance() == {"depth": 100}
    text = _title_text(plot.beta_n(_dataset(model=repr(model), **model.provenance())))
    assert "L = 100" in text
    # A repr alone names no L: nothing is parsed out of it.
    assert "L = " not in _title_text(plot.beta_n(_dataset(model="DiscreteTransformer(depth=50)")))


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


def _hybrid_dataset(*, far: bool = True, **provenance) -> xr.Dataset:
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
    record = {**POST_LN, "attention": "unnormalized", "values": "rademacher", **provenance}
    ds.attrs["provenance"] = json.dumps({"n_trajectories": 100, "depth": 100, **record})
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
    assert "of the 9 β; all in the maps" in " ".join(fig.axes[2].get_title().split())


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
            "terminal_rate_law": ("scheme", ["exponential", "power", "exponential"]),
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


# Issue 42 item 8: figures that mislead. Each test below fails on 9f5b4a1.


def _exact_lines(ax) -> list:
    """The solid and dashed lines of an axes: exact curves and thresholds."""
    return [line for line in ax.get_lines() if line.get_linestyle() in ("-", "--")]


@pytest.mark.parametrize(
    ("provenance", "named"),
    [
        ({"scheme": "pre-ln"}, "Pre-LN"),
        ({"scheme": "mix-ln", "tau": 0.3}, "Mix-LN (τ = 0.3)"),
        # No model fields at all (an estimate of a model the dataset does not name).
        ({"scheme": None, "engine": None, "attention": None, "values": None}, None),
    ],
)
def test_phase_diagram_draws_post_ln_theory_for_post_ln_only(provenance, named):
    # A Pre-LN run drew Post-LN's exact curve and β_c(d): it looked like a failed Post-LN
    # run. Theory only where it is the model's; the title says why there is none.
    record = {k: v for k, v in {**POST_LN, **provenance}.items() if v is not None}
    ds = _dataset()
    ds.attrs["provenance"] = json.dumps({"n_trajectories": 1234, **record})
    fig = plot.phase_diagram(ds)
    (ax,) = fig.axes
    assert _exact_lines(ax) == []
    assert len(_estimates(ax)) == 2  # the estimates are all still there
    labels = _legend_labels(fig)
    assert "exact t = ∞" not in labels and "β_c(d)" not in labels
    text = " ".join(_title_text(fig).split())
    assert "no exact curve: the t = ∞ theory (seed 003) is Post-LN's" in text
    if named:
        assert named in text


def test_theory_of_old_study_datasets_is_post_ln():
    # A study dataset written before the scheme was recorded ran Post-LN (its equation is
    # seed 003's): its curves stay.
    ds = _dataset()
    record = json.loads(ds.attrs["provenance"])
    del record["scheme"]
    ds.attrs["provenance"] = json.dumps({**record, "model_equation": "seed 003 eq. 4"})
    assert len(_exact_lines(plot.phase_diagram(ds).axes[0])) == 4


@pytest.mark.parametrize("draw", [plot.phase_diagram, plot.beta_n, plot.evolution])
def test_every_title_names_the_model(draw):
    for provenance, words in (
        ({}, ("Post-LN", "softmax attention", "gaussian values")),
        (
            {"scheme": "ngpt", "alpha": 2.0, "attention": "unnormalized", "values": "uniform"},
            ("nGPT (α = 2)", "unnormalized attention", "uniform values"),
        ),
        ({"engine": "sde", "values": None}, ("Post-LN SDE (L → ∞)", "Brownian noise")),
    ):
        text = " ".join(_title_text(draw(_dataset(**provenance))).split())
        for word in words:
            assert word in text, (draw.__name__, word, text)


def test_pair_density_and_beta_eps_titles_name_the_model():
    ds = _dataset(scheme="peri-ln").assign(pair_density=(("point", "time"), np.full((3, 2), 0.5)))
    assert "Peri-LN, softmax attention" in " ".join(_title_text(plot.pair_density(ds)).split())
    text = " ".join(_title_text(plot.beta_eps(_hybrid_dataset())).split())
    assert "Post-LN, unnormalized attention, rademacher values" in text


def test_evolution_draws_exact_levels_for_post_ln_only():
    for scheme, dotted in (("post-ln", 2), ("sqrt-scaling", 0)):
        fig = plot.evolution(_dataset(scheme=scheme))
        lines = fig.axes[0].get_lines()
        assert len([x for x in lines if x.get_linestyle() not in ("-", "None")]) == dotted
        assert ("exact t = ∞ (two tokens)" in _legend_labels(fig)) == bool(dotted)


def _beta_n_dataset(pairs) -> xr.Dataset:
    """Points (N, d) at the three β of :func:`_dataset`, each N = 2 one with the exact
    curve of its own d (as the study records it)."""
    parts = []
    for n, d in pairs:
        part = _dataset(n_tokens=n).assign_coords(dim=("point", [d] * 3))
        betas = part["beta"].values.tolist()
        exact = [ad.theory.p_antipodal_uniform(b, d) if n == 2 else np.nan for b in betas]
        parts.append(part.assign(p_antipodal_exact=("point", exact)))
    return xr.concat(parts, dim="point").assign_coords(point=np.arange(3 * len(pairs)))


def test_beta_n_draws_one_series_per_d_against_its_own_curve():
    # The default d = 4, 6, 8 at N = 2 drew every point as one "N = 2" series against
    # d = 4's curve.
    fig = plot.beta_n(_beta_n_dataset([(2, 4), (2, 6), (2, 8)]))
    (ax,) = fig.axes
    assert len(_estimates(ax)) == 3
    labels = _legend_labels(fig)
    assert {"d = 4", "d = 6", "d = 8", "exact t = ∞ (N = 2)"} <= set(labels)
    assert "N = 2" not in labels and "N = 2" in fig.axes[0].get_title()
    curves = [line for line in ax.get_lines() if line.get_linestyle() == "-"]
    assert len(curves) == 3
    for line, d in zip(curves, (4, 6, 8)):  # each its own d's exact curve
        x, y = np.asarray(line.get_xdata()), np.asarray(line.get_ydata())
        np.testing.assert_allclose(y[::20], ad.theory.p_antipodal_curve(x[::20], d), atol=1e-9)
        # The series and its curve share a colour.
    colours = [to_hex(c.lines[0].get_color()) for c in _estimates(ax)]
    assert colours == [to_hex(line.get_color()) for line in curves]
    assert len(set(colours)) == 3


def test_beta_n_with_several_n_and_d_draws_a_panel_per_d():
    fig = plot.beta_n(_beta_n_dataset([(2, 4), (3, 4), (2, 6), (3, 6)]))
    assert [ax.get_title() for ax in fig.axes] == ["d = 4", "d = 6"]
    for ax in fig.axes:
        assert len(_estimates(ax)) == 2  # N = 2 and N = 3
        assert len([x for x in ax.get_lines() if x.get_linestyle() == "-"]) == 1  # N = 2's
    assert fig.axes[0].get_ylim() == fig.axes[1].get_ylim()
    assert {"N = 2", "N = 3"} <= set(_legend_labels(fig))
    assert _width_px(fig) <= 1600


def test_beta_eps_titles_fit_their_panels():
    # Two (d, N) rows: each row's first title ("d = 3, N = 2: most likely …") was wider
    # than its panel at 12 pt and cut off at the figure's left edge.
    ds = _hybrid_dataset()
    rows = [ds, ds.assign_coords(dim=("point", [4] * ds.sizes["point"]))]
    fig = plot.beta_eps(xr.concat(rows, dim="point").assign_coords(point=np.arange(12)))
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    panels = [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]
    assert len(panels) == 6
    for ax in panels:
        title = ax.title.get_window_extent(renderer)
        assert title.x0 >= 0 and title.x1 <= fig.bbox.width, ax.get_title()
        assert title.width <= ax.get_window_extent(renderer).width * 1.1, ax.get_title()
    assert panels[3].get_title().startswith("d = 4, N = 2: ")


def test_beta_eps_beta_curves_take_distinct_colours():
    # Five β (the default grid's 0, 0.8, 2, 3, 4): along viridis β = 3 and 4 were two
    # greens. Along plasma they run blue, purple, magenta, salmon, orange.
    ds = _hybrid_dataset()  # β = 0, 2, 4; with β = 6, 8 beside them: five β
    more = ds.assign_coords(beta=ds["beta"] + 6)
    more = more.isel(point=np.flatnonzero(more["beta"].values < 9))
    five = xr.concat([ds, more], dim="point")
    fig = plot.beta_eps(five.assign_coords(point=np.arange(five.sizes["point"])))
    colours = [to_hex(c.lines[0].get_color()) for c in _estimates(fig.axes[2])]
    assert len(colours) == 5 and len(set(colours)) == 5
    assert colours == [to_hex(c) for c in plot.ordered_colors(5, "plasma")]


def test_beta_eps_of_another_scheme_draws_no_theory():
    fig = plot.beta_eps(_hybrid_dataset(scheme="pre-ln"))
    for ax in fig.axes:
        assert [line for line in ax.get_lines() if line.get_linestyle() in ("-", "--", ":")] == []
    labels = _legend_labels(fig)
    assert "exact t = ∞ (two tokens)" not in labels
    assert not any("varepsilon" in label for label in labels)
    assert "seed 003's theory is Post-LN's" in " ".join(fig.get_suptitle().split())


def test_pair_density_with_one_beta_is_a_curve_with_its_interval():
    # Evolution's default (one β) drew one colour strip: the mean against time now, with
    # its 95 % interval (± 1.96 SE) as a band.
    mean, se = np.array([[0.1, 0.6]]), np.array([[0.01, 0.05]])
    ds = (
        _dataset()
        .isel(point=[0])
        .assign(pair_density=(("point", "time"), mean), pair_density_se=(("point", "time"), se))
    )
    fig = plot.pair_density(ds)
    (ax,) = fig.axes
    assert not [c for c in ax.collections if type(c).__name__ == "QuadMesh"]
    (line,) = ax.get_lines()
    np.testing.assert_allclose(np.asarray(line.get_ydata()), mean[0])
    (band,) = [
        c
        for c in ax.collections
        if type(c).__name__ in ("PolyCollection", "FillBetweenPolyCollection")
    ]
    heights = np.asarray(band.get_paths()[0].vertices)[:, 1]
    np.testing.assert_allclose(heights.min(), 0.1 - 1.96 * 0.01)
    np.testing.assert_allclose(heights.max(), 0.6 + 1.96 * 0.05)
    assert "95 % interval (± 1.96 SE over trajectories)" in _legend_labels(fig)
    assert "β = 0.25" in " ".join(_title_text(fig).split())


def test_a_schemes_dataset_of_04_still_plots_its_rates():
    # 0.4 wrote the terminal law as terminal_rate_kind; its datasets keep plotting.
    old = _schemes_dataset().rename({"terminal_rate_law": "terminal_rate_kind"})
    new = plot.schemes(_schemes_dataset())["rates"]
    for before, after in zip(plot.schemes(old)["rates"].axes, new.axes):
        assert before.get_xscale() == after.get_xscale()
        assert len(before.get_lines()) == len(after.get_lines()) == 3


def test_schemes_rates_draws_the_fitted_and_theory_laws():
    # schemes_rates.png stated its fits in the titles only.
    from attndyn.studies.rates import clock

    ds = _schemes_dataset()
    rates = plot.schemes(ds)["rates"]
    for ax, name in zip(rates.axes, ds["scheme"].values):
        row = ds.sel(scheme=name)
        t = row["rate_time"].values
        law = str(row["terminal_rate_law"].values)
        for style, rate in (("--", row["terminal_rate"]), (":", row["terminal_rate_theory"])):
            (line,) = [x for x in ax.get_lines() if x.get_linestyle() == style]
            # A straight line in the law's clock, of the stated slope.
            slope = np.polyfit(clock(t, law), -np.log(10) * np.asarray(line.get_ydata()), 1)[0]
            assert slope == pytest.approx(float(rate), rel=1e-9)
    labels = _legend_labels(rates)
    assert "fitted law (the fitted rate)" in labels
    assert "law of Thm 4.1 (the theory's rate)" in labels
