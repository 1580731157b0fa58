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
        ["evolution", *SMALL, "--model", "full,deterministic", "--out", str(tmp_path), "--json"],
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
        (["--model", "stochastic"], "model"),
        (["--eps", "-0.5", "--model", "hybrid"], "eps"),
        (["--engine", "sde", "--dt", "10"], "dt"),
        (["--saves", "0"], "saves"),
        # One save was t = 0 alone, after simulating the whole horizon (audit).
        (["--saves", "1"], "saves"),
        (["--model", "full,full"], "--model lists full more than once"),
        # The discrete engine refuses SDE flags, naming the flag (the message lacked an f).
        (["--dt", "0.5"], "(drop --dt, or add --engine sde)"),
    ],
)
def test_evolution_bad_input(tmp_path, args, match):
    result = CliRunner().invoke(main, ["evolution", *SMALL, *args, "--out", str(tmp_path)])
    assert result.exit_code != 0
    assert match in result.output
    assert not (tmp_path / "evolution.nc").exists()
