"""``attndyn schemes``: dataset, figures, JSON summary and clear errors."""

import json

import pytest
import xarray as xr
from click.testing import CliRunner

from attndyn.cli._schemes import schemes
from tests.helpers import assert_cf

SMALL = [
    "--n-tokens",
    "4",
    "--dim",
    "5",
    "--beta",
    "1",
    "--horizon",
    "8",
    "--alpha",
    "1,2",
    "--rw-n-layers",
    "4",
    "--rw-n-trajectories",
    "2",
]


@pytest.mark.slow
@pytest.mark.parametrize(
    "names",
    [
        # The smoke run: one scheme (Mix-LN's switch alone costs 12 s here; its rates are
        # checked against theory in test_rates.py).
        "post-ln",
        pytest.param("post-ln,pre-ln,mix-ln,peri-ln,ngpt,sqrt-scaling", marks=pytest.mark.slow),
    ],
    ids=["one", "all-six"],
)
def test_json_dataset_and_figures(tmp_path, names):
    result = CliRunner().invoke(
        schemes, [*SMALL, "--schemes", names, "--out", str(tmp_path), "--json"]
    )
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout.strip().splitlines()[-1])
    assert payload["params"] == {"beta": 1.0, "n": 4, "d": 5, "r0": 1.0, "alpha": 1.0, "tau": 0.5}
    assert list(payload["schemes"]) == names.split(",")
    for name, row in payload["schemes"].items():
        # The measured slope (full n-particle solve) matches the closed form.
        assert row["initial_slope"] == pytest.approx(row["initial_slope_theory"], rel=2e-3)
        rate = row["terminal_rate"]
        assert rate["law"] in ("exponential", "power", "sqrt-exponential")
        assert rate["kind"] == rate["law"] and rate["formula"]  # kind: 0.4's, kept in 0.5
        lo, hi = rate["interval"]
        assert lo <= rate["value"] <= hi
        # Theory inside the fitted interval for the schemes the issue names (and Mix-LN).
        assert lo <= row["terminal_rate_theory"] <= hi, name
    ds = xr.open_dataset(tmp_path / "schemes.nc")
    prov = json.loads(ds.attrs["provenance"])
    assert prov["random_seed"] == 0 and prov["params"]["alphas"] == [1.0, 2.0]
    assert "seconds" in prov and "attndyn_version" in prov and "command" in prov
    assert ds["random_weights_cosine"].shape == (len(payload["schemes"]), 2, 5)
    assert float(abs(ds["gamma_full"] - ds["gamma_reduced"]).max()) < 1e-4
    ds.close()
    assert_cf(tmp_path / "schemes.nc")
    for key in ("gamma", "ngpt_alpha", "random_weights", "rates"):
        assert (tmp_path / f"schemes_{key}.png").stat().st_size > 0
    # A bar over the study's stages (3 per scheme and nGPT over α), run to its end.
    n_stages = 3 * len(payload["schemes"]) + 1
    assert "attndyn schemes" in result.stderr
    assert f"{n_stages}/{n_stages}" in result.stderr


@pytest.mark.parametrize("progress", [True, False])
def test_the_progress_bar_counts_stages_and_can_be_hidden(progress, capsys):
    from attndyn.studies.schemes import _Stages

    stages = _Stages(3, progress)
    for label in ("a", "b", "c"):
        stages.begin(label)
    stages.close()
    err = capsys.readouterr().err
    assert ("3/3" in err and "c" in err) if progress else err == ""


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--schemes", "layer-norm"], "scheme"),
        (["--tau", "-1"], "tau"),
        (["--alpha", "0"], "alpha"),
        (["--r0", "0"], "r0"),
        (["--n-tokens", "6", "--dim", "5"], "n_tokens <= dim"),
        # A repeat ran the whole study, wrote it, then crashed in the figures (audit).
        (["--schemes", "post-ln,pre-ln,post-ln"], "--schemes lists post-ln more than once"),
    ],
)
def test_bad_input(args, needle, tmp_path):
    result = CliRunner().invoke(schemes, [*SMALL, *args, "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert needle in result.output


def test_a_failed_solve_is_an_error_not_nan_in_the_dataset(tmp_path, monkeypatch):
    # A horizon the ODE solver cannot reach in max_steps: the solve returns NaN states
    # (diffrax's error would be a traceback); the study stops with one line, status 1,
    # instead of writing NaN curves (audit: `--horizon 1e300`). Such a horizon is refused
    # before solving now (its step count is known: tests/test_cli_inputs.py); with that
    # check off, the failed solve is still caught.
    import attndyn.cli._schemes as schemes_cli
    import attndyn.studies._schemes_checks as schemes_checks

    for module in (schemes_cli, schemes_checks):
        monkeypatch.setattr(module, "check_horizon_steps", lambda *args, **kwargs: None)
    result = CliRunner().invoke(schemes, [*SMALL, "--horizon", "1e300", "--out", str(tmp_path)])
    assert result.exit_code == 1, result.output
    assert "failed (NaN states) before horizon=1e+300" in result.output
    assert not (tmp_path / "schemes.nc").exists()
