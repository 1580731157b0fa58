import json

import pytest
import xarray as xr
from click.testing import CliRunner

import attndyn as ad
from attndyn.cli import main
from tests.helpers import assert_cf

SMALL = ["--beta", "4.5", "--n-tokens", "6", "--dim", "4", "--n-trajectories", "32"]
SMALL += ["--depth", "10", "--horizon", "4", "--saves", "5", "--no-progress"]


def test_evolution_round_trip(tmp_path):
    result = CliRunner().invoke(
        main,
        ["evolution", *SMALL, "--noise", "matrix,none", "--out", str(tmp_path), "--json"],
    )
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert [p["model"] for p in payload["points"]] == ["full", "deterministic"]
    for s in payload["series"]:
        assert s["time"] == pytest.approx([0, 1, 2, 3, 4])
        # At t = 0 uniform tokens are unclustered; fractions always sum to 1.
        assert s["p_unclustered"][0] == 1.0
        for t in range(5):
            total = s["p_single"][t] + s["p_antipodal"][t] + s["p_unclustered"][t]
            assert total == pytest.approx(1.0)
        assert s["eps"] is None
    ds = xr.open_dataset(tmp_path / "evolution.nc")
    assert ds.sizes["time"] == 5 and ds.sizes["point"] == 2
    # Provenance describes each model the points ran: it claimed full noise, σ and the
    # SDE's solver and dt for deterministic points of a discrete run (audit).
    prov = ad.provenance(ds)
    ds.close()
    assert set(prov["model_equation"]) == {"full", "deterministic"}
    assert prov["values"] == {"full": "gaussian", "deterministic": None}
    assert prov["sigma"] == {"full": 1.0} and "solver" not in prov and "dt" not in prov
    assert (tmp_path / "evolution.png").stat().st_size > 10_000
    assert_cf(tmp_path / "evolution.nc")
    back = ad.open_dataset(tmp_path / "evolution.nc")  # the point index restored
    assert back.sel(model="deterministic").sizes["point"] == 1
    assert payload["pair_density_figure"] == str(tmp_path / "evolution_pair_density.png")
    assert (tmp_path / "evolution_pair_density.png").stat().st_size > 10_000


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (["--noise", "stochastic"], "--noise='stochastic' is not allowed"),
        (["--eps", "-0.5", "--noise", "scalar"], "eps"),
        (["--engine", "sde", "--dt", "10"], "dt"),
        (["--saves", "0"], "saves"),
        # One save was t = 0 alone, after simulating the whole horizon (audit).
        (["--saves", "1"], "saves"),
        (["--noise", "matrix,matrix"], "--noise lists matrix more than once"),
        # 0.4's --model, for one release: its names only, and never beside another --noise.
        (["--model", "stochastic"], "--model='stochastic' must be one of full, hybrid"),
        (
            ["--model", "full,deterministic", "--noise", "matrix"],
            "--model full,deterministic is --noise matrix,none, not matrix; give --noise only",
        ),
        # The noises are named one way on the command line (0.4's full is --model's).
        (["--noise", "full"], "--noise='full' is not allowed"),
        # The discrete engine refuses SDE flags, naming the flag (the message lacked an f).
        (["--dt", "0.5"], "(drop --dt, or add --engine sde)"),
    ],
)
def test_evolution_bad_input(tmp_path, args, match):
    result = CliRunner().invoke(main, ["evolution", *SMALL, *args, "--out", str(tmp_path)])
    assert result.exit_code != 0
    assert match in result.output
    assert not (tmp_path / "evolution.nc").exists()


def test_the_old_model_flag_reads_as_the_noise_with_a_note(tmp_path, monkeypatch):
    # `--model full,hybrid,deterministic` (0.4) is `--noise matrix,scalar,none`: the same
    # points (so the same random numbers), a note naming the new flag, and the arguments
    # recorded in today's names.
    from attndyn.cli import _evolution

    seen = []

    def study(spec, mc, points, **kwargs):
        seen.append(points)
        raise ad.ParameterError("stopped by the test")

    monkeypatch.setattr(_evolution, "evolution_study", study, raising=False)
    for flags in (["--model", "full,hybrid,deterministic"], ["--noise", "matrix,scalar,none"]):
        result = CliRunner().invoke(main, ["evolution", *SMALL, *flags, "--out", str(tmp_path)])
        assert result.exit_code == 2 and "stopped by the test" in result.output
        noted = "note: --model is deprecated, use --noise" in result.output
        assert noted == (flags[0] == "--model")
    old, new = seen
    assert repr(old) == repr(new)  # repr: the points' NaN ε equals itself there
    assert [p["model"] for p in new] == ["full", "hybrid", "deterministic"]


def test_evolution_last_line_names_every_file(tmp_path):
    # The last line left out the pair-density figure. (The round trip's full model: its
    # program is compiled already.)
    result = CliRunner().invoke(main, ["evolution", *SMALL, "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    last = result.stderr.strip().splitlines()[-1]
    for name in ("evolution.nc", "evolution.png", "evolution_pair_density.png"):
        assert str(tmp_path / name) in last, last


def test_evolution_runs_the_scheme_it_is_given(tmp_path, monkeypatch):
    # --scheme and nGPT's --alpha reach the study's spec (the study is replaced: the models
    # it would build are built here), and its provenance records them as fields.
    from attndyn.cli import _evolution
    from attndyn.studies.evolution import models_metadata
    from attndyn.studies.phase import phase_model

    specs = []

    def study(spec, mc, points, **kwargs):
        specs.append(spec)
        raise ad.ParameterError("stopped by the test")

    monkeypatch.setattr(_evolution, "evolution_study", study, raising=False)
    args = ["--scheme", "ngpt", "--alpha", "2", "--noise", "matrix,none"]
    result = CliRunner().invoke(main, ["evolution", *SMALL, *args, "--out", str(tmp_path)])
    assert result.exit_code == 2 and "stopped by the test" in result.output
    (spec,) = specs
    assert (spec.scheme, spec.alpha) == ("ngpt", 2.0)
    record = models_metadata(spec, ["full", "deterministic"])
    assert (record["scheme"], record["alpha"]) == ("ngpt", 2.0) and "tau" not in record
    assert record["model_equation"]["full"].startswith("seed 004 Table 1 (ngpt layer maps)")
    model = phase_model(beta=1.0, dim=4, n_tokens=6, scheme="ngpt", alpha=2.0, depth=5)
    assert isinstance(model, ad.DiscreteTransformer) and isinstance(model.scheme, ad.NGPT)
    assert float(model.scheme.alpha) == 2.0
