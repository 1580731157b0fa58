"""The peers' observables: the fraction of pairs with cosine > 0.999 and the dimension of the
tokens' span, in closed form, in the estimator (exact sums, standard errors) and in the
``evolution`` command's JSON."""

import json

import jax
import numpy as np
import pytest
import xarray as xr
from click.testing import CliRunner

import attndyn as ad
from attndyn.cli import main


def _clusters(sizes, dim):
    """Tokens in groups of the given sizes, each group on its own coordinate axis."""
    rows = [np.eye(dim, dtype=np.float32)[g] for g, size in enumerate(sizes) for _ in range(size)]
    return np.stack(rows)  # made in NumPy: in JAX each operation compiles


# Both observables as one program per shape: eagerly each of their operations compiled.
_density_and_span = jax.jit(lambda x: (ad.pair_density(x), ad.span_dimension(x)))


@pytest.mark.default_case("sizes4")
@pytest.mark.parametrize("sizes", [(1,), (3,), (2, 2), (4, 1, 1), (2, 3, 1)])
def test_closed_forms_on_clustered_configurations(sizes):
    x = _clusters(sizes, 4)
    n = sum(sizes)
    pairs = n * (n - 1) / 2
    together = sum(s * (s - 1) / 2 for s in sizes)
    density, span = _density_and_span(x)
    assert float(density) == pytest.approx(together / pairs if n > 1 else 1.0)
    assert float(span) == len(sizes)
    # A pair just inside and just outside the threshold; span of a near-duplicate.
    inside = np.array([[1.0, 0.0], [np.cos(0.04), np.sin(0.04)]], np.float32)  # cos = 0.9992
    outside = np.array([[1.0, 0.0], [np.cos(0.05), np.sin(0.05)]], np.float32)  # cos = 0.9988
    inside_density, inside_span = _density_and_span(inside)
    outside_density, outside_span = _density_and_span(outside)
    assert float(inside_density) == 1.0 and float(outside_density) == 0.0
    assert float(inside_span) == 1.0  # eigenvalues 1 ± 0.9992
    assert float(outside_span) == 2.0


@pytest.mark.slow
def test_estimator_means_agree_with_the_class_counts():
    # N = 2: cos > 0.999 ⇔ "single" (cos ≥ 1 − 10⁻³, ties have probability 0), and the span
    # has dimension 1 iff the pair is single or antipodal: mean pair density = P(single)
    # and mean span dimension = 1 + P(unclustered), exactly, trajectory by trajectory.
    ds = ad.estimate_probabilities(
        lambda **p: ad.studies.phase_model(**p, depth=10, horizon=6.0, saveat=(0.0, 3.0, 6.0)),
        ad.grid(dim=[4], n_tokens=[2], beta=[3.0]),
        key=jax.random.key(3),
        n_trajectories=300,
        progress=False,
        route="full",
    )
    single = ds["probability"].sel(outcome="single").values
    unclustered = ds["probability"].sel(outcome="unclustered").values
    np.testing.assert_allclose(ds["pair_density"].values, single, atol=1e-12)
    np.testing.assert_allclose(ds["span_dim"].values, 1 + unclustered, atol=1e-12)
    # Standard errors of means of 0/1 (or 1/2) variables: √(p(1 − p)/(n − 1)).
    p = ds["pair_density"].values
    np.testing.assert_allclose(ds["pair_density_se"].values, np.sqrt(p * (1 - p) / 299), atol=1e-9)
    assert "fraction of pairs" in ds["pair_density"].attrs["description"]


@pytest.mark.slow  # the default run checks this in tests/test_distributed.py
def test_multi_token_means_are_exact_sums_whatever_the_chunking():
    def run(chunk):
        return ad.estimate_probabilities(
            lambda **p: ad.studies.phase_model(**p, depth=5, horizon=4.0, saveat=(2.0, 4.0)),
            [{"dim": 4, "n_tokens": 6, "beta": 4.0}],
            key=jax.random.key(4),
            n_trajectories=40,
            progress=False,
            chunk_size=chunk,
        )

    a, b = run(8), run(40)
    for name in ("pair_density", "span_dim", "span_dim_se"):
        np.testing.assert_array_equal(a[name].values, b[name].values)
    assert np.all((a["span_dim"].values >= 1) & (a["span_dim"].values <= 4))


@pytest.mark.slow
def test_evolution_json_has_the_series_and_the_heatmap(tmp_path):
    # One run also exercises --norm layernorm and a real --step (t = nη).
    args = ["evolution", "--beta", "1,4", "--n-tokens", "5", "--dim", "4", "--n-trajectories", "24"]
    args += ["--step", "0.25", "--horizon", "2", "--saves", "3", "--norm", "layernorm"]
    result = CliRunner().invoke(main, [*args, "--no-progress", "--json", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    for s in payload["series"]:
        assert s["time"] == pytest.approx([0.0, 1.0, 2.0])
        assert len(s["pair_density"]) == 3 and len(s["span_dim"]) == 3
        assert len(s["pair_density_se"]) == 3
        # At t = 0 five uniform tokens in R^4 are apart and span (almost always) all of it;
        # the span can never exceed min(N, d) = 4, and after a LayerNorm layer it lies in
        # the 3-dimensional mean-zero hyperplane.
        assert s["pair_density"][0] == 0.0 and 3.5 < s["span_dim"][0] <= 4.0
        assert max(s["span_dim"][1:]) <= 3.0
    figure = tmp_path / "evolution_pair_density.png"
    assert payload["pair_density_figure"] == str(figure) and figure.stat().st_size > 5_000
    ds = xr.open_dataset(tmp_path / "evolution.nc")
    prov = ad.provenance(ds)
    assert prov["norm"] == "layernorm" and prov["step"] == 0.25
    ds.close()
