import json

import click
import pytest
import xarray as xr
from click.testing import CliRunner

import attndyn as ad
from attndyn.cli import main
from tests.helpers import assert_cf

SMALL = [
    "--beta",
    "0.5,2",
    "--dim",
    "4",
    "--n-trajectories",
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
            "n_tokens",
            "n_trajectories",
            "p_single",
            "p_antipodal",
            "p_unclustered",
            "ci_antipodal",
            "p_antipodal_exact",
        ):
            assert key in point
        assert point["trajectories"] == point["n_trajectories"]  # 0.4's key, through 0.5
        lo, hi = point["ci_antipodal"]
        assert lo <= point["p_antipodal"] <= hi
    assert payload["points"][1]["p_antipodal_exact"] == pytest.approx(
        ad.theory.p_antipodal_uniform(2.0, 4)
    )
    ds = xr.open_dataset(tmp_path / "phase_diagram.nc")
    prov = ad.provenance(ds)
    assert prov["random_seed"] == 0 and prov["depth"] == 5 and "attndyn_version" in prov
    assert prov["command"].startswith("attndyn")
    assert ds.attrs["history"].endswith(prov["command"])
    # Early absorption is on by default where it is quantified (two tokens, reduced route).
    assert prov["early_absorption"]["bound"] == 1e-7
    assert all(gaps is not None for gaps in prov["early_absorption"]["gaps"])
    assert (tmp_path / "phase_diagram.png").stat().st_size > 10_000
    assert not (tmp_path / "phase_diagram.checkpoint.nc").exists()
    ds.close()
    assert_cf(tmp_path / "phase_diagram.nc")
    # The Done-when of issue 32: select a point by its values.
    back = ad.open_dataset(tmp_path / "phase_diagram.nc")
    assert back.sel(beta=2.0, dim=4)["probability"].isel(time=-1).shape == (1, 4)


@pytest.mark.slow
def test_beta_n_sde_smoke(tmp_path):
    # Smoke of the test above (slow): the same CLI route (beta-n, SDE engine, merges
    # counted), at one N and 40 steps; the columns are there and consistent.
    args = ["--diagram", "beta-n", "--engine", "sde", "--beta", "6", "--n-tokens", "3"]
    args += ["--dim", "4", "--n-trajectories", "8", "--horizon", "2", "--dt", "0.05"]
    args += ["--on-merged", "count"]
    result = CliRunner().invoke(
        main, ["phase-diagram", *args, "--no-progress", "--out", str(tmp_path), "--json"]
    )
    assert result.exit_code == 0, result.output
    (point,) = json.loads(result.stdout)["points"]
    assert point["n_tokens"] == 3 and "p_antipodal_pair_three_tokens" in point
    assert point["p_has_antipodal_pair"] >= point["p_antipodal"]
    assert 0 <= point["sphere_drift"] < 1e-5


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (["--dim", "1"], "dim"),
        (["--n-tokens", "0"], "n_tokens"),
        (["--beta", "-1"], "beta"),
        (["--beta", "2:1:0.5"], "empty range"),
        (["--n-trajectories", "0"], "trajectories"),
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


@pytest.mark.slow
def test_beta_eps_round_trip(tmp_path):
    # Hybrid (β, ε) diagram, Fig. 4, tiny. Far below ε_c the pair clusters, far above it
    # splits (Prop. 1), and the JSON adds eps and the exact value to the points schema.
    args = ["--diagram", "beta-eps", "--beta", "1", "--eps", "0.2,1.5", "--dim", "3"]
    args += ["--n-trajectories", "48", "--depth", "100", "--horizon", "20", "--no-progress"]
    result = CliRunner().invoke(main, ["phase-diagram", *args, "--out", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["study"] == "phase-diagram" and payload["diagram"] == "beta-eps"
    assert payload["kind"] == "beta-eps" and len(payload["points"]) == 2  # 0.4's, kept in 0.5
    low, high = sorted(payload["points"], key=lambda p: p["eps"])
    for point in (low, high):
        for key in ("beta", "dim", "n_tokens", "eps", "n_trajectories", "p_single", "p_antipodal"):
            assert key in point
    # The exact t = ∞ value of the hybrid SDE (USA: 0 below ε_c(1) = 0.86, 1 above).
    assert low["p_antipodal_exact"] == 0.0 and high["p_antipodal_exact"] == 1.0
    # Prop. 1 (USA, the kind's default attention; ε_c(1) = 0.86): limits 1 at t = ∞, and
    # at L = 100, T = 20 200 trial paths gave 1.0 for both. With 48 paths a true 0.97 has
    # SE 0.025, so ≥ 0.8 leaves more than 4 SE while a coin flip (0.5) fails by 4 SE.
    assert low["p_single"] >= 0.8 and high["p_antipodal"] >= 0.8
    prov = ad.provenance(xr.open_dataset(tmp_path / "phase_diagram.nc"))
    assert prov["attention"] == "unnormalized" and prov["diagram"] == "beta-eps"
    assert prov["study"] == "phase-diagram" and prov["kind"] == "beta-eps"  # kind: 0.4's
    assert (tmp_path / "phase_diagram.png").stat().st_size > 10_000
    assert_cf(tmp_path / "phase_diagram.nc")
    # The points are an index: select by value. The layer step ε·e^β/(2√L) of each
    # cell is recorded, and flagged above 0.1 (ε = 1.5: 1.5·e/20 = 0.20).
    ds = ad.open_dataset(tmp_path / "phase_diagram.nc")
    high = ds.sel(beta=1.0, dim=3, n_tokens=2, eps=1.5)
    assert float(high["layer_step"]) == pytest.approx(1.5 * 2.718281828 / 20, rel=1e-6)
    assert int(high["far_from_limit"]) == 1
    assert int(ds.sel(beta=1.0, dim=3, n_tokens=2, eps=0.2)["far_from_limit"]) == 0


@pytest.mark.slow  # ~100 s CPU: 500 SDE steps at two N; the smoke follows
def test_beta_n_sde_has_antipodal_pair_positive(tmp_path):
    # Fig. 6: for N ≥ 3 at large β some trajectories end with an antipodal pair. With the
    # SDE engine the drift off the sphere is reported (projection: rounding only).
    args = ["--diagram", "beta-n", "--engine", "sde", "--beta", "6", "--n-tokens", "3,4"]
    args += ["--dim", "4", "--n-trajectories", "48", "--horizon", "10", "--dt", "0.02"]
    # Clusters at β = 6 reach float32's resolution on the N × d SDE: the default counts
    # them with their bound (no rerun: the SDE's float64 path is another path).
    result = CliRunner().invoke(
        main, ["phase-diagram", *args, "--no-progress", "--out", str(tmp_path), "--json"]
    )
    assert result.exit_code == 0, result.output
    points = json.loads(result.stdout)["points"]
    assert [p["n_tokens"] for p in points] == [3, 4]
    # The three-token reading is carried for N = 3 only: at β = 6 a split outlives T = 10,
    # so it is 3/2 of the exact two-token probability times its hover fraction.
    assert points[0]["p_antipodal_pair_three_tokens"] == pytest.approx(
        1.5 * ad.theory.p_antipodal_uniform(6.0, 4), rel=2e-3
    )
    assert "p_antipodal_pair_three_tokens" not in points[1]
    assert "n_rerun" not in points[0] and points[0]["n_counted"] == 48
    for p in points:
        assert p["p_has_antipodal_pair"] >= p["p_antipodal"]
        # Wilson lower bound of P(antipodal) > 0, and antipodal ⊂ has-antipodal-pair.
        assert p["ci_antipodal"][0] > 0
        assert 0 <= p["sphere_drift"] < 1e-5


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (["--diagram", "beta-eps", "--eps", "-1"], "eps"),
        (["--diagram", "beta-x"], "diagram"),
        (["--engine", "gpu"], "engine"),
        (["--engine", "sde", "--dt", "100"], "dt"),
        # The solvers are a fixed list of names (each a diffrax solver object).
        (["--engine", "sde", "--solver", "shark"], "'shark' is not one of 'euler', 'heun'"),
    ],
)
def test_new_flags_bad_input(tmp_path, args, match):
    result = CliRunner().invoke(main, ["phase-diagram", *SMALL, *args, "--out", str(tmp_path)])
    assert result.exit_code != 0
    assert match in result.output
    assert not (tmp_path / "phase_diagram.nc").exists()


@pytest.mark.slow
def test_unnormalised_attention_at_beta_120_runs_or_is_refused_before_running(tmp_path):
    # β = 120 overflowed float32 (every trajectory NaN, status 1, or excluded). Post-LN now
    # takes the weights with their exponent apart and runs; the SDE engine needs them whole
    # and is refused before anything is computed, naming --x64 (issue 29).
    large = ["phase-diagram", "--attention", "unnormalized", "--beta", "120", "--dim", "4"]
    large += ["--n-trajectories", "10", "--no-progress", "--out", str(tmp_path)]
    result = CliRunner().invoke(main, [*large, "--depth", "3", "--horizon", "1", "--json"])
    assert result.exit_code == 0, result.output
    point = json.loads(result.stdout.strip().splitlines()[-1])["points"][0]
    assert point["n_nonfinite"] == 0 and point["n_valid"] == 10
    refused = CliRunner().invoke(main, [*large, "--engine", "sde", "--horizon", "1", "--overwrite"])
    assert refused.exit_code == 2, refused.output
    assert "β = 120" in refused.output and "--x64" in refused.output
    assert refused.output.count("\n") == 1


@pytest.mark.slow
def test_a_numerical_merge_stops_the_cli_and_a_rerun_resumes_with_a_choice(tmp_path):
    # Post-LN with full value noise at β = 4 over T = 30 on the float32 N × d route: some
    # pairs come within float32's resolution. --on-merged raise stops (status 1, one line,
    # before any file), keeping the checkpoint; --on-merged count resumes from it, and
    # exclude gives the estimate over the other trajectories.
    merging = ["phase-diagram", "--beta", "4", "--dim", "3", "--n-tokens", "2", "--route",
               "full", "--n-trajectories", "64", "--horizon", "30", "--depth", "5",
               "--no-progress", "--out", str(tmp_path)]  # fmt: skip
    result = CliRunner().invoke(main, [*merging, "--on-merged", "raise"])
    assert result.exit_code == 1
    assert len(result.output.strip().splitlines()) == 1
    assert "merged numerically in" in result.output and "--on-merged exclude" in result.output
    assert not (tmp_path / "phase_diagram.nc").exists()
    assert (tmp_path / "phase_diagram.checkpoint.nc").exists()
    points = {}
    for choice in ("count", "exclude"):
        args = [*merging, "--on-merged", choice, "--json", "--overwrite"]
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 0, result.output
        assert "merged numerically" in result.stderr
        points[choice] = json.loads(result.stdout.strip().splitlines()[-1])["points"][0]
    counted, excluded = points["count"], points["exclude"]
    assert counted["n_merged"] == excluded["n_merged"] > 0
    assert counted["n_counted"] == 64 and excluded["n_counted"] == 64 - counted["n_merged"]
    # The interval whatever the merged trajectories' true class: one for both choices,
    # holding the counted estimate's own interval.
    bound = counted["merge_ci_antipodal"]
    assert bound == excluded["merge_ci_antipodal"]
    assert bound[0] <= counted["ci_antipodal"][0] <= counted["ci_antipodal"][1] <= bound[1]
    # The default counts them with a bound (two tokens: the two-token exponents, rigorous
    # in the diffusion limit) after rerunning in float64 those whose float32 bound is
    # weak, and says so in one line; its interval is Wilson's (the bound is far below 1e-3).
    result = CliRunner().invoke(main, [*merging, "--json", "--overwrite", "--fresh"])
    assert result.exit_code == 0, result.output
    assert "rerun in float64" in result.stderr
    auto = json.loads(result.stdout.strip().splitlines()[-1])["points"][0]
    assert auto["merge_ci_antipodal"] == auto["ci_antipodal"]
    assert auto["n_counted"] == 64


def test_version_is_the_running_source_version(monkeypatch):
    # `attndyn --version` read the installed metadata, which an editable install leaves at
    # the version it was installed with (it said 0.4.2 on 0.4.3 code): it names the
    # source's own version, as provenance does.
    import importlib.metadata

    monkeypatch.setattr(importlib.metadata, "version", lambda name: "0.0.0-stale")
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0
    assert result.output.strip() == f"attndyn, version {ad.__version__}"


# Issue 42 items 8-10: --scheme on phase-diagram, the figures of another scheme, --help.


@pytest.mark.parametrize("command", ["phase-diagram", "evolution"])
def test_help_shows_one_default_per_option(command):
    # phase-diagram's --beta showed two: its own text's and click's.
    group_context = click.Context(main)
    cmd = main.get_command(group_context, command)
    assert cmd is not None
    context = click.Context(cmd, info_name=command, parent=group_context)
    for param in cmd.params:
        record = param.get_help_record(context)
        if record is not None:
            assert record[1].count("[default:") <= 1, (param.name, record[1])
    for name in ("scheme", "tau", "alpha"):
        assert name in {p.name for p in cmd.params}


@pytest.mark.parametrize("command", ["phase-diagram", "evolution"])
@pytest.mark.parametrize(
    ("args", "match"),
    [
        (["--tau", "0.3"], "--tau is Mix-LN's switch time and applies to --scheme mix-ln only"),
        (["--scheme", "pre-ln", "--alpha", "2"], "--alpha is nGPT's step and applies to"),
        (["--scheme", "pre-ln", "--engine", "sde"], "--scheme pre-ln has no sde engine"),
        (["--scheme", "post-LN"], "'post-LN' is not one of 'post-ln', 'pre-ln'"),
        (["--scheme", "mix-ln", "--tau", "-1"], "tau"),
    ],
)
def test_scheme_options_refused_where_the_model_has_no_use_for_them(tmp_path, command, args, match):
    result = CliRunner().invoke(main, [command, *args, "--no-progress", "--out", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert match in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert not list(tmp_path.iterdir())


def test_phase_diagram_of_another_scheme(tmp_path):
    # The (β, d) diagram of a normalization scheme from the command line (it needed Python:
    # "Did you mean one of: '--cache', '--seed'?"). Its provenance names the scheme and
    # τ as fields, and it carries no exact curve: that is Post-LN's.
    args = ["--scheme", "mix-ln", "--tau", "0.25", "--beta", "1", "--dim", "4"]
    args += ["--n-trajectories", "16", "--depth", "5", "--horizon", "2", "--no-progress"]
    result = CliRunner().invoke(main, ["phase-diagram", *args, "--out", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    (point,) = json.loads(result.stdout)["points"]
    assert "p_antipodal_exact" not in point and point["n_valid"] == 16
    ds = ad.open_dataset(tmp_path / "phase_diagram.nc")
    prov = ad.provenance(ds)
    assert (prov["scheme"], prov["tau"]) == ("mix-ln", 0.25) and "alpha" not in prov
    assert prov["model_equation"].startswith("seed 004 Table 1 (mix-ln layer maps)")
    assert "MixLN(" in prov["model"]
    assert "p_antipodal_exact" not in ds
    fig = ad.plot.phase_diagram(ds)
    assert [x for x in fig.axes[0].get_lines() if x.get_linestyle() in ("-", "--")] == []
    assert "Mix-LN (τ = 0.25)" in " ".join(fig.axes[0].get_title().split())


@pytest.mark.slow  # ~8 s CPU: 10,000 layers of 200 trajectories at two β
def test_pre_ln_diagram_end_to_end(tmp_path):
    # The command (defaults L = 100, T = 100): exits 0, and neither the dataset nor
    # the figure carries Post-LN's exact curve or β_c.
    args = ["--scheme", "pre-ln", "--dim", "4", "--beta", "1,3", "--n-trajectories", "200"]
    result = CliRunner().invoke(
        main, ["phase-diagram", *args, "--no-progress", "--out", str(tmp_path)]
    )
    assert result.exit_code == 0, result.output
    ds = ad.open_dataset(tmp_path / "phase_diagram.nc")
    assert ad.provenance(ds)["scheme"] == "pre-ln" and "p_antipodal_exact" not in ds
    (ax,) = ad.plot.phase_diagram(ds).axes
    assert [x for x in ax.get_lines() if x.get_linestyle() in ("-", "--")] == []


def test_beta_eps_runs_d_3_by_default(tmp_path, monkeypatch):
    # --diagram beta-eps kept d = 4, 6, 8 (540 cells, ~12 minutes); seed 003 Fig. 4 is d = 3.
    # The study is replaced: only the points the command builds are under test.
    from attndyn.cli import _phase

    seen = []

    def study(diagram, spec, mc, points, **kwargs):
        seen.append(sorted({p["dim"] for p in points}))
        raise ad.ParameterError("stopped by the test")

    monkeypatch.setattr(_phase, "phase_diagram_study", study, raising=False)
    base = ["phase-diagram", "--diagram", "beta-eps", "--beta", "1", "--eps", "0.5"]
    for extra in ([], ["--dim", "5"]):
        result = CliRunner().invoke(main, [*base, *extra, "--out", str(tmp_path / str(len(extra)))])
        assert result.exit_code == 2 and "stopped by the test" in result.output
    assert seen == [[3], [5]]
