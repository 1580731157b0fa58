"""``--norm`` and ``--step`` on the study commands."""

import json

import pytest
import xarray as xr
from click.testing import CliRunner

import attndyn as ad
from attndyn.cli import main

SMALL = ["--beta", "2", "--dim", "5", "--n-trajectories", "16", "--horizon", "2", "--no-progress"]


@pytest.mark.slow  # the default run checks --norm and --step in tests/test_pair_density.py
def test_phase_diagram_with_layernorm(tmp_path):
    result = CliRunner().invoke(
        main, ["phase-diagram", *SMALL, "--depth", "5", "--norm", "layernorm", "--json",
               "--out", str(tmp_path)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    point = json.loads(result.stdout)["points"][0]
    # The exact curve is the RMS one of d − 1 = 4 dimensions.
    assert point["p_antipodal_exact"] == pytest.approx(ad.theory.p_antipodal_uniform(2.0, 4))
    ds = xr.open_dataset(tmp_path / "phase_diagram.nc")
    assert ad.provenance(ds)["norm"] == "layernorm" and ad.provenance(ds)["route"] == "reduced"
    ds.close()


@pytest.mark.slow
def test_evolution_with_a_real_step(tmp_path):
    result = CliRunner().invoke(
        main, ["evolution", *SMALL, "--n-tokens", "3", "--step", "0.25", "--saves", "3",
               "--json", "--out", str(tmp_path)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    series = json.loads(result.stdout)["series"][0]
    assert series["time"] == pytest.approx([0.0, 1.0, 2.0])
    ds = xr.open_dataset(tmp_path / "evolution.nc")
    assert ad.provenance(ds)["step"] == 0.25
    ds.close()


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (["--norm", "batchnorm"], "norm"),
        (["--norm", "layernorm", "--dim", "2"], "dim"),
        (["--norm", "layernorm", "--engine", "sde"], "norm"),
        (["--step", "0"], "step"),
        (["--step", "0.1", "--engine", "sde"], "step"),
    ],
)
def test_bad_mechanism_options_exit_with_a_message(tmp_path, args, match):
    result = CliRunner().invoke(main, ["phase-diagram", *SMALL, *args, "--out", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert match in result.output
    assert not (tmp_path / "phase_diagram.nc").exists()
