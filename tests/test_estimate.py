import json
import re
import shutil

import jax
import numpy as np
import pytest

import attndyn as ad
from attndyn._estimate import estimator as _estimator
from tests.helpers import binomial_se
from tests.markers import two_cpu_devices


def _post_ln(
    beta, dim, n_tokens, sigma=1.0, depth=10, horizon=10.0, kind: ad.AttentionKind = "softmax"
):
    del dim, n_tokens
    return ad.DiscreteTransformer(
        ad.Attention(beta, kind=kind),
        ad.MatrixValues(sigma),
        depth=depth,
        saveat=ad.SaveAt(horizon),
    )


def _estimate_small(points, **kwargs):
    kwargs = {"key": jax.random.key(7), "n_trajectories": 50, "progress": False, **kwargs}
    return ad.estimate_probabilities(_post_ln, points, **kwargs)


POINTS = ad.grid(dim=[3, 4], n_tokens=[2], beta=[1.0, 3.0])


@pytest.mark.slow
def test_chunk_size_does_not_change_results():
    a = _estimate_small(POINTS, chunk_size=8)
    b = _estimate_small(POINTS, chunk_size=50)
    c = _estimate_small(POINTS)
    np.testing.assert_array_equal(a["count"].values, b["count"].values)
    np.testing.assert_array_equal(a["count"].values, c["count"].values)
    for name in a.data_vars:  # bit for bit: the same tile program whatever the chunk
        np.testing.assert_array_equal(a[name].values, b[name].values, name)
        np.testing.assert_array_equal(a[name].values, c[name].values, name)


@pytest.mark.slow
def test_point_results_do_not_depend_on_the_rest_of_the_grid():
    full = _estimate_small(POINTS)
    alone = _estimate_small(POINTS[3:])
    np.testing.assert_array_equal(full["count"].values[3], alone["count"].values[0])


def test_sweeping_beta_and_sigma_does_not_recompile():
    traces = []

    class Counting(ad.AbstractTrajectoryModel):
        # A wrapper (concrete models are final): it has no reduced form, so the sweep runs
        # on the full route.
        inner: ad.DiscreteTransformer

        @property
        def save_times(self):
            return self.inner.save_times

        def trajectory(self, x0, *, key):
            traces.append(1)  # runs once per trace, i.e. once per compilation
            return self.inner.trajectory(x0, key=key)

    def make(beta, dim, n_tokens, sigma):
        del dim, n_tokens
        inner = ad.DiscreteTransformer(
            ad.Attention(beta), ad.MatrixValues(sigma), depth=5, saveat=ad.SaveAt(1.0)
        )
        return Counting(inner)

    points = ad.grid(dim=[3], n_tokens=[2], beta=[0.5, 1.0, 2.0, 4.0], sigma=[0.5, 1.0])
    ad.estimate_probabilities(
        make, points, key=jax.random.key(0), n_trajectories=10, progress=False
    )
    assert len(traces) == 1


def test_probabilities_intervals_and_provenance():
    ds = _estimate_small(POINTS[:1], metadata={"note": "x"})
    p = ds["probability"].isel(point=0, time=-1)
    assert float(
        p.sel(outcome="single") + p.sel(outcome="antipodal") + p.sel(outcome="unclustered")
    ) == pytest.approx(1.0)
    assert bool((ds["ci_lower"] <= ds["probability"]).all())
    assert bool((ds["probability"] <= ds["ci_upper"]).all())
    prov = ad.provenance(ds)
    for key in (
        "attndyn_version",
        "seconds",
        "key_data",
        "n_trajectories",
        "tol",
        "model",
        "devices",
        "created",
        "note",
        "jaxlib_version",
        "python_version",
        "platform",
        "xla_flags",
    ):
        assert key in prov
    # The tests run from a git checkout: the source commit is recorded (40 hex digits).
    if shutil.which("git"):
        assert re.fullmatch(r"[0-9a-f]{40}(-dirty)?", prov["source_commit"])
    assert "xla_force_host_platform_device_count=2" in prov["xla_flags"]
    assert list(ds["beta"].values) == [1.0]


def test_provenance_names_the_running_source_version(monkeypatch):
    # An editable install keeps the metadata of the day it was installed: after a version
    # bump without a reinstall, importlib.metadata named the old version. Provenance names
    # the running source's own.
    import importlib.metadata

    monkeypatch.setattr(importlib.metadata, "version", lambda name: "0.0.0-stale")
    ds = _estimate_small(POINTS[:1])
    assert ad.provenance(ds)["attndyn_version"] == ad.__version__
    assert ds.attrs["attndyn_version"] == ad.__version__


def test_the_version_is_written_once():
    # pyproject.toml reads the version from attndyn/_version.py (hatchling's dynamic
    # version): the built package and the running source cannot disagree.
    import tomllib
    from pathlib import Path

    project = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["hatch"]["version"]["path"] == "src/attndyn/_version.py"


@pytest.mark.parametrize("second", [1.0, 1, np.float32(1.0)])
def test_a_point_given_twice_is_refused_before_it_runs(second):
    # Both rows would hold the same key's trajectories (not twice the statistics); with 1
    # and 1.0 they held different trajectories under one coordinate value 1.0.
    first = {"beta": 1.0, "dim": 3, "n_tokens": 2}
    with pytest.raises(ad.ParameterError, match="points 0 and 2 are the same point"):
        _estimate_small([first, {**first, "beta": 2.0}, {**first, "beta": second}])
    with pytest.raises(ad.ParameterError, match="different random numbers") as error:
        _estimate_small([first, {**first, "beta": 1}])
    assert "\n" not in str(error.value)


def test_phase_points_take_real_parameters_as_floats():
    # The CLI writes β and ε as floats; the API's integers must name the same points, so
    # that both draw the same trajectories (a point's key hashes its values as written).
    from attndyn._estimate.keys import point_id
    from attndyn.studies.phase import phase_points

    api = phase_points("beta-eps", betas=[1, 2], dims=[4], n_tokens=[2], eps=[0])
    cli = phase_points("beta-eps", betas=[1.0, 2.0], dims=[4], n_tokens=[2], eps=[0.0])
    assert [point_id(p) for p in api] == [point_id(p) for p in cli]
    assert all(type(p["beta"]) is float and type(p["dim"]) is int for p in api)
    with pytest.raises(ad.ParameterError, match="same point"):
        phase_points("beta-d", betas=[1, 1.0], dims=[4], n_tokens=[2])
    evolution = ad.studies.evolution_points(
        ["full", "hybrid"], betas=[1], dims=[4], n_tokens=[2], eps=[0]
    )
    assert all(type(p["beta"]) is float and type(p["eps"]) is float for p in evolution)
    with pytest.raises(ad.ParameterError, match="same point"):
        ad.studies.evolution_points(["hybrid"], betas=[1.0], dims=[4], n_tokens=[2], eps=[0, 0.0])


@pytest.mark.slow
def test_below_threshold_no_antipodal():
    # d = 6: β_c = 1.03. At β = 0.2 the antipodal state repels, so every one of 400 trajectories
    # clusters (the interval of the zero count includes zero).
    ds = _estimate_small(ad.grid(dim=[6], n_tokens=[2], beta=[0.2]), n_trajectories=400)
    last = ds.isel(point=0, time=-1).sel(outcome="antipodal")
    assert int(last["count"]) == 0
    assert float(last["ci_lower"]) == 0.0


@pytest.mark.default_case("auto")
@pytest.mark.parametrize("route", ["auto", "full"])  # auto picks the reduced chain here
def test_monte_carlo_matches_exact_quadrature_above_threshold(route):
    # L = 20, T = 40, 4000 trajectories per point. SE = sqrt(p(1-p)/4000) ≈ 0.0071; the
    # tolerance is 4 SE ≈ 0.028. The discretisation bias at L = 20 was measured at ≈ −0.012
    # (d = 4, β = 2, 20000 trajectories): the remaining room is still > 2 SE of noise. The
    # slow test below repeats this at L = 100 with 40000 trajectories.
    points = [{"dim": 4, "n_tokens": 2, "beta": 2.0}, {"dim": 3, "n_tokens": 2, "beta": 1.0}]
    ds = ad.estimate_probabilities(
        lambda **p: _post_ln(**p, depth=20, horizon=40.0),
        points,
        key=jax.random.key(11),
        n_trajectories=4000,
        progress=False,
        route=route,
        # On the float32 N × d route pairs merge at ±1, both attracting above β_c: counting
        # them is right, and the exact curve checks it (the default would stop the run).
        on_merged="count",
    )
    assert ad.provenance(ds)["route"] == ("full" if route == "full" else "reduced")
    for i, p in enumerate(points):
        exact = ad.theory.p_antipodal_uniform(p["beta"], p["dim"])
        got = float(ds["probability"].isel(point=i, time=-1).sel(outcome="antipodal"))
        assert abs(got - exact) < 4 * binomial_se(exact, 4000), (p, got, exact)


@pytest.mark.slow
def test_monte_carlo_matches_exact_quadrature_paper_depth():
    # L = 100, T = 60, 40000 trajectories: SE ≈ 0.0022, tolerance 4 SE ≈ 0.009.
    points = [
        {"dim": 4, "n_tokens": 2, "beta": 2.0},
        {"dim": 3, "n_tokens": 2, "beta": 1.0},
        {"dim": 6, "n_tokens": 2, "beta": 2.5},
    ]
    ds = ad.estimate_probabilities(
        lambda **p: _post_ln(**p, depth=100, horizon=60.0),
        points,
        key=jax.random.key(12),
        n_trajectories=40000,
        progress=False,
    )
    for i, p in enumerate(points):
        exact = ad.theory.p_antipodal_uniform(p["beta"], p["dim"])
        got = float(ds["probability"].isel(point=i, time=-1).sel(outcome="antipodal"))
        assert abs(got - exact) < 4 * binomial_se(exact, 40000), (p, got, exact)


def test_overflow_is_reported_not_averaged():
    # One token and V_n = −I with probability ½ (Rademacher v_n, ε = (L + 1)/√L): the
    # Post-LN layer normalises a zero vector, and a trajectory that draws it turns NaN
    # (unnormalised attention at β = 120, which used to overflow here, now runs: the
    # Post-LN layer takes its output with the exponent apart).
    points = ad.grid(dim=[3], n_tokens=[1], beta=[1.0])

    def make(beta, dim, n_tokens):
        del dim, n_tokens
        values = ad.ScalarValues(5 / 2)  # (L + 1)/√L at L = 4
        return ad.DiscreteTransformer(ad.Attention(beta), values, depth=4, saveat=ad.SaveAt(1.0))

    with pytest.raises(ad.NonFiniteError, match="NaN or infinite"):
        ad.estimate_probabilities(
            make, points, key=jax.random.key(0), n_trajectories=20, progress=False
        )
    with pytest.warns(UserWarning, match="excluded"):
        ds = ad.estimate_probabilities(
            make,
            points,
            key=jax.random.key(0),
            n_trajectories=20,
            progress=False,
            on_nonfinite="exclude",
        )
    assert int(ds["n_nonfinite"][0]) + int(ds["n_valid"][0]) == 20
    assert int(ds["n_nonfinite"][0]) > 0
    assert int(ds["count"].isel(point=0, time=-1).sum()) <= 2 * int(ds["n_valid"][0])


@pytest.mark.slow
@two_cpu_devices
def test_interrupted_run_resumes_without_losing_work(tmp_path, monkeypatch, tile):
    tile(5)  # a tile of 5 on each of the 2 devices: one call per chunk of 10
    path = tmp_path / "ck.nc"
    reference = _estimate_small(POINTS, chunk_size=10)
    calls = {"n": 0}
    original = _estimator.chunk_statistics

    def interrupting(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 7:
            raise KeyboardInterrupt
        return original(*args, **kwargs)

    monkeypatch.setattr(_estimator, "chunk_statistics", interrupting)
    with pytest.raises(KeyboardInterrupt):
        _estimate_small(POINTS, chunk_size=10, checkpoint=path)
    assert path.exists()
    calls["n"] = -1000
    resumed = _estimate_small(POINTS, chunk_size=10, checkpoint=path)
    # 6 chunks were finished before the interrupt; 20 in all.
    assert calls["n"] == -1000 + 14
    np.testing.assert_array_equal(resumed["count"].values, reference["count"].values)
    # Provenance names both runs and what each added (a resume on another machine would
    # name that machine); the uninterrupted study is one run of every trajectory.
    runs = json.loads(resumed.attrs["provenance"])["runs"]
    assert [r["trajectories"] for r in runs] == [60, 140]
    assert {r["backend"] for r in runs} == {jax.default_backend()}
    assert all(r["n_devices"] == len(jax.local_devices()) for r in runs)
    [whole] = json.loads(reference.attrs["provenance"])["runs"]
    assert whole["trajectories"] == 200 and whole["process_count"] == 1
    # Reading a finished checkpoint back adds no run.
    again = _estimate_small(POINTS, chunk_size=10, checkpoint=path)
    read_back = json.loads(again.attrs["provenance"])["runs"]
    assert [(r["started"], r["trajectories"]) for r in read_back] == [
        (r["started"], r["trajectories"]) for r in runs
    ]


def test_checkpoint_of_another_run_is_refused(tmp_path):
    path = tmp_path / "ck.nc"
    _estimate_small(POINTS[:1], checkpoint=path)
    with pytest.raises(ad.ParameterError, match="the grid has 1 point there and 2"):
        _estimate_small(POINTS[:2], checkpoint=path)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"n_trajectories": 0}, "n_trajectories"),
        ({"tol": 0.0}, "tol"),
        ({"tol": 1.0}, "tol"),
        ({"points": [{"dim": 1, "n_tokens": 2, "beta": 1.0}]}, "dim"),
        ({"points": [{"dim": 3, "n_tokens": 0, "beta": 1.0}]}, "n_tokens"),
        ({"points": [{"dim": 3, "n_tokens": 2, "beta": -1.0}]}, "beta"),
        ({"points": []}, "points"),
    ],
)
def test_bad_input_is_named(kwargs, match):
    points = kwargs.pop("points", POINTS[:1])
    with pytest.raises(ad.ParameterError, match=match):
        _estimate_small(points, **kwargs)


def test_empty_grid_axis():
    with pytest.raises(ad.ParameterError, match="beta"):
        ad.grid(beta=[], dim=[3])


@pytest.mark.default_case("many tokens")
@pytest.mark.parametrize(
    "family",
    ["many tokens", "two heads", "reduced three tokens", "ode", "sde"],
)
def test_every_number_is_bit_identical_across_chunk_sizes(family, tile):
    # XLA compiles each batch shape differently (vector remainders, dot blockings,
    # fusions): before tiles, these families' mean cosines differed in their last bits
    # between chunk sizes. Now every trajectory runs in one compiled tile program.
    tile(8)  # several tiles of 8 per point, on the 2 devices of the tests

    def model(beta, dim, n_tokens):
        del dim, n_tokens
        save = ad.SaveAt(1.0)
        if family == "ode":
            return ad.NormalizedAttentionODE(ad.Attention(beta), ad.PreLN(), saveat=save)
        if family == "sde":
            return ad.TransformerSDE(ad.Attention(beta), saveat=save)
        heads = 2 if family == "two heads" else 1
        return ad.DiscreteTransformer(
            ad.Attention(beta, n_heads=heads), ad.MatrixValues(1.0), depth=10, saveat=save
        )

    shape = {"many tokens": (8, 12), "two heads": (8, 5), "reduced three tokens": (6, 3)}
    dim, n_tokens = shape.get(family, (4, 5))
    point = [{"dim": dim, "n_tokens": n_tokens, "beta": 2.0}]
    runs = [
        ad.estimate_probabilities(
            model,
            point,
            key=jax.random.key(1),
            n_trajectories=60,
            chunk_size=chunk,
            progress=False,
        )
        for chunk in (16, 48, None)
    ]
    for other in runs[1:]:
        for name in runs[0].data_vars:
            np.testing.assert_array_equal(runs[0][name].values, other[name].values, name)
