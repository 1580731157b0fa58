import json

import pytest
import xarray as xr
from click.testing import CliRunner

import attndyn as ad
from attndyn._cli import main

SMALL = [
    "--beta",
    "0.5,2",
    "--dim",
    "4",
    "--trajectories",
    "40",
    "--depth",
    "5",
    "--horizon",
    "4",
    "--no-progress",
]


def test_phase_diagram_round_trip(tmp_path):
    result = CliRunner().invoke(main, ["phase-diagram", *SMALL, "--out", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["seconds"] > 0
    assert len(payload["points"]) == 2
    for point in payload["points"]:
        for key in (
            "beta",
            "dim",
            "tokens",
            "trajectories",
            "p_single",
            "p_antipodal",
            "p_unclustered",
            "ci_antipodal",
            "p_antipodal_exact",
        ):
            assert key in point
        lo, hi = point["ci_antipodal"]
        assert lo <= point["p_antipodal"] <= hi
    assert payload["points"][1]["p_antipodal_exact"] == pytest.approx(
        ad.theory.p_antipodal_uniform(2.0, 4)
    )
    ds = xr.open_dataset(tmp_path / "phase_diagram.nc")
    prov = ad.provenance(ds)
    assert prov["seed"] == 0 and prov["depth"] == 5 and "attndyn_version" in prov
    assert prov["command"].startswith("attndyn")
    assert (tmp_path / "phase_diagram.png").stat().st_size > 10_000
    assert not (tmp_path / "phase_diagram.checkpoint.nc").exists()
    ds.close()


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (["--dim", "1"], "dim"),
        (["--tokens", "0"], "tokens"),
        (["--beta", "-1"], "beta"),
        (["--beta", "2:1:0.5"], "empty range"),
        (["--trajectories", "0"], "trajectories"),
        (["--depth", "0"], "depth"),
        (["--tol", "1.5"], "tol"),
        (["--values", "cauchy"], "values"),
        (["--sigma", "0"], "sigma"),
    ],
)
def test_bad_input_exits_nonzero_with_message(tmp_path, args, match):
    result = CliRunner().invoke(main, ["phase-diagram", *SMALL, *args, "--out", str(tmp_path)])
    assert result.exit_code != 0
    assert match in result.output
    assert not (tmp_path / "phase_diagram.nc").exists()
