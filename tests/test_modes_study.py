"""The modes study and ``attndyn modes``: CF metadata and provenance, the same numbers
whatever the chunk size and across an interruption, bad input refused by name, the
figures; and (slow) the measured growth rates against the theory at N = 4,096."""

import json
import math

import numpy as np
import pytest
import xarray as xr
from click.testing import CliRunner

import attndyn as ad
from attndyn.cli import main
from attndyn.studies import ModesRun, ModesSpec, modes as modes_module, modes_points, modes_study

# N = 400: 6 trajectories a call (modes.tile_size), so 14 trajectories are 3 calls.
SMALL = ["--n-tokens", "400", "--dim", "2", "--beta", "9", "--horizon", "0.2", "--saves", "3"]
SMALL += ["--n-trajectories", "14", "--ell-max", "6", "--no-progress"]


@pytest.fixture(scope="module")
def cli_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("modes")
    result = CliRunner().invoke(main, ["modes", *SMALL, "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    return out, json.loads(result.stdout)


def test_dataset_carries_cf_metadata_and_provenance(cli_run):
    out, payload = cli_run
    with xr.open_dataset(out / "modes.nc") as ds:
        assert ds.attrs["Conventions"] == "CF-1.10"
        assert ds.attrs["title"].startswith("attndyn modes")
        assert ds.attrs["history"].split(": ", 1)[1].startswith("attndyn")
        for name in [*ds.data_vars, *ds.coords]:
            assert ds[name].attrs.get("units") and ds[name].attrs.get("long_name"), name
        record = ad.provenance(ds)
        assert record["kind"] == "modes" and record["n_trajectories"] == 14
        assert record["arguments"]["n_tokens"] == "400"
        assert ds["n_clusters_trajectory"].dtype.kind == "i"
        # At t = 0 the mode powers of uniform tokens are ~1/N (a loose check of the
        # pipeline; the law is tested in test_many_tokens).
        assert 0.2 < float(ds["mode_power"].isel(time=0, ell=slice(1, None)).mean()) * 400 < 5
    assert (out / "modes.png").stat().st_size > 10_000
    point = payload["points"][0]
    assert point["ell_star"] == ad.theory.most_unstable_degree(9.0, 2, depth=100, n_tokens=400)


def test_same_numbers_whatever_the_chunk_size_and_across_an_interruption(
    cli_run, tmp_path, monkeypatch
):
    out, _ = cli_run
    spec = ModesSpec(horizon=0.2, saves=3)
    run = ModesRun(n_trajectories=14, ell_max=6, chunk_size=1)
    points = modes_points(dims=[2], n_tokens=[400], betas=[9.0])
    calls = {"n": 0}
    real = modes_module._observe_tile

    def stop_second_call(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    checkpoint = tmp_path / "modes.checkpoint.nc"
    monkeypatch.setattr(modes_module, "_observe_tile", stop_second_call)
    with pytest.raises(KeyboardInterrupt):
        modes_study(spec, run, points, checkpoint=checkpoint, progress=False)
    assert checkpoint.exists()
    monkeypatch.setattr(modes_module, "_observe_tile", real)
    resumed = modes_study(spec, run, points, checkpoint=checkpoint, progress=False)
    with xr.open_dataset(out / "modes.nc") as whole:
        for name in ("mode_power_trajectory", "n_clusters_trajectory", "log_energy"):
            np.testing.assert_array_equal(resumed[name].values, whole[name].values)
    # A checkpoint of another study is refused, naming the file.
    other = ModesRun(n_trajectories=14, ell_max=5)
    with pytest.raises(ad.ParameterError, match="another modes study"):
        modes_study(spec, other, points, checkpoint=checkpoint, progress=False)


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (["--n-tokens", "1"], "n_tokens"),
        (["--beta", "-1"], "beta"),
        (["--beta", "2", "--gamma", "1"], "--gamma"),
        (["--eps", "0.5"], "--noise scalar"),
        (["--noise", "matrix", "--engine", "sde"], "matrix"),
        (["--n-trajectories", "1"], "trajectories"),
        (["--ell-max", "0"], "ell_max"),
        (["--saves", "1"], "saves"),
        (["--implementation", "library", "--attention", "unnormalized"], "softmax"),
    ],
)
def test_bad_input_exits_2_with_one_line(tmp_path, args, match):
    result = CliRunner().invoke(main, ["modes", *SMALL, *args, "--out", str(tmp_path / "o")])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and match in lines[0], result.output
    assert not (tmp_path / "o").exists()


def _fake(spec: ModesSpec, points, seed: int = 0) -> xr.Dataset:
    """A modes dataset from made-up observables (through the study's own analysis): the
    figures need its variables, not a simulation."""
    from attndyn.studies._modes_analysis import analyse, attach_cf

    rng = np.random.default_rng(seed)
    run = ModesRun(n_trajectories=3, ell_max=5)
    times = np.linspace(0, spec.horizon, spec.saves)
    store = modes_module._Store(len(points), 3, len(times), 5, 7)
    shape = store.arrays["n_clusters"].shape
    store.arrays["n_clusters"][:] = rng.integers(1, 20, shape)
    store.arrays["largest"][:] = rng.integers(1, 64, shape)
    growth = np.exp(np.outer(times, np.arange(6)))[None, None] / 64
    store.arrays["mode_power"][:] = growth * rng.uniform(0.5, 2, (*shape[:2], 1, 6))
    store.arrays["log_energy"][:] = rng.normal(size=shape)
    store.arrays["min_distance"][:] = rng.uniform(size=shape)
    raw = store.to_dataset({})
    ds = analyse(raw, spec, run, points, times)
    ds.attrs["provenance"] = json.dumps({"n_trajectories": 3, "engine": "discrete"})
    return attach_cf(ds, spec)


def test_the_three_figures_fit_and_explain_their_marks():
    """The modes, noise and long-context figures: at most 1,600 px wide at the CLI's 130
    dpi, with a legend."""
    spec = ModesSpec(horizon=1.0, saves=11)
    noisy = ModesSpec(horizon=1.0, saves=11, noise="matrix")
    levels = modes_points(dims=[2], n_tokens=[64], betas=[4.0], levels=[0, 0.5], level_name="sigma")
    datasets = [
        _fake(spec, modes_points(dims=[2, 3], n_tokens=[64], betas=[4.0, 9.0])),
        _fake(noisy, levels),
        _fake(spec, modes_points(dims=[8], n_tokens=[16, 32], gammas=[0.5, 1.5])),
    ]
    for ds in datasets:
        fig = ad.plot.modes(ds)
        assert fig.get_figwidth() * 130 <= 1600
        assert fig.legends or any(ax.get_legend() for ax in fig.axes)


def test_the_plateau_marks_say_how_many_trajectories_reached_it():
    """The plateau mark averages only the trajectories that reached the plateau: each
    point's clusters panel says k/n, k from the dataset."""
    ds = _fake(
        ModesSpec(horizon=1.0, saves=11), modes_points(dims=[2], n_tokens=[64], betas=[4.0, 9.0])
    )
    fig = ad.plot.modes(ds)
    texts = {t.get_text() for ax in fig.axes for t in ax.texts}
    n = ds.sizes["trajectory"]
    for beta, k in zip(ds["beta"].values, ds["n_plateau"].values, strict=True):
        assert f"β = {beta:g}, N = 64: plateau reached {int(k)}/{n}" in texts


@pytest.mark.slow
@pytest.mark.parametrize(("dim", "beta"), [(2, 9.0), (3, 9.0)])
def test_measured_growth_rates_agree_with_the_theory(dim, beta):
    """N = 4,096 uniform tokens, softmax, Post-LN, L = 100: every degree in its linear
    window grows at 2λ_ℓ within 4 standard errors (the errors are the spread of 8
    trajectories' fitted slopes), and the fastest of them is ℓ*. About 5 min of CPU each
    (docs/guides/many-tokens.md lists the full table)."""
    spec = ModesSpec(horizon=2.5, saves=51, depth=100)
    run = ModesRun(n_trajectories=8, ell_max=12)
    ds = modes_study(
        spec, run, modes_points(dims=[dim], n_tokens=[4096], betas=[beta]), progress=False
    )
    row = ds.isel(point=0)
    linear = row["linear"].values.astype(bool)
    assert linear[1 : int(row["ell_star"]) + 2].all()  # ℓ* and its neighbours are fitted
    gap = np.abs(row["growth_rate"].values - row["growth_rate_theory"].values)
    assert np.all(gap[linear] <= 4 * row["growth_rate_se"].values[linear]), (
        row["growth_rate"].values,
        row["growth_rate_theory"].values,
    )
    assert int(row["ell_star_measured"]) == int(row["ell_star"])
    assert math.isfinite(float(row["window_end"])) and float(row["window_end"]) > 0.3
