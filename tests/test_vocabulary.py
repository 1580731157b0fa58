"""One vocabulary (issue 30 item 1): each parameter under one name with one default, the
docs' reference table generated from the one place that holds them, and 0.4's spellings
still working for one release with a deprecation warning (API) or note (CLI).

All cheap: no study runs; the CLI tests stop at option parsing or at the first check.
"""

import json
import re
import warnings
import zlib
from pathlib import Path
from typing import Any

import click
import numpy as np
import pytest
import xarray as xr
from click.testing import CliRunner

import attndyn as ad
from attndyn import studies
from attndyn._core import defaults
from attndyn._estimate.keys import point_id
from attndyn.cli import _evolution, _modes, _phase, _schemes, main

ROOT = Path(__file__).resolve().parents[1]


def test_the_reference_page_is_the_defaults_table():
    page = (ROOT / "docs" / "reference" / "parameters.md").read_text()
    assert defaults.reference_table() in page
    # Every documented parameter once.
    names = [p.name for p in defaults.PARAMETERS]
    assert len(names) == len(set(names))


def _default(command, name):
    return next(p.default for p in command.params if p.name == name)


def test_the_command_line_reads_the_one_place():
    assert _default(_phase.phase_diagram, "depth") == defaults.DEPTH
    assert _default(_evolution.evolution, "depth") == defaults.DEPTH
    assert _default(_modes.modes, "depth") == defaults.DEPTH
    for command, study in (
        (_phase.phase_diagram, "phase-diagram"),
        (_evolution.evolution, "evolution"),
        (_modes.modes, "modes"),
        (_schemes.schemes, "schemes"),
    ):
        assert _default(command, "horizon") == defaults.horizon_of(study)
    assert _default(_phase.phase_diagram, "n_trajectories") == defaults.N_TRAJECTORIES
    assert _default(_modes.modes, "n_trajectories") == studies.ModesRun().n_trajectories
    assert _default(_evolution.evolution, "saves") == defaults.STUDY_DEFAULTS["saves"]["evolution"]
    assert _default(_modes.modes, "saves") == studies.ModesSpec().saves
    for name in ("sigma", "dt", "solver", "tol", "seed", "on_nonfinite", "on_merged"):
        assert _default(_phase.phase_diagram, name) == getattr(defaults, name.upper())
    # The grids a command runs with no options (modes' --beta is optional beside --gamma:
    # its grid is read when neither is given, tests/test_cli_inputs.py runs it).
    for command, grid in (
        (_phase.phase_diagram, defaults.COMMAND_GRIDS["phase-diagram"]),
        (_evolution.evolution, defaults.COMMAND_GRIDS["evolution"]),
        (_modes.modes, {k: v for k, v in defaults.COMMAND_GRIDS["modes"].items() if k != "beta"}),
    ):
        for name, value in grid.items():
            assert _default(command, name) == value, (command.name, name)


def test_the_schemes_command_and_study_share_their_defaults():
    """The schemes study's own choices (n = d = 32, β = 3, its α list, the random-weight
    stacks) and the schemes' τ, α, r0: one value each, read by the study, its command, the
    scheme classes and the theory alike."""
    import inspect

    from attndyn.studies.schemes import schemes_study
    from attndyn.theory import initial_slope

    study = inspect.signature(schemes_study).parameters
    for name in ("n_tokens", "dim", "beta"):
        assert _default(_schemes.schemes, name) == study[name].default
        assert study[name].default == getattr(defaults, f"SCHEMES_{name.upper()}")
        assert study[name].default == defaults.STUDY_DEFAULTS[name]["schemes"]
    assert _default(_schemes.schemes, "alpha") == "1,0.5,2,4"
    assert tuple(study["alphas"].default) == defaults.SCHEMES_ALPHAS
    for name in ("rw_n_layers", "rw_n_trajectories"):  # one name each: API and CLI
        assert _default(_schemes.schemes, name) == study[name].default
        assert study[name].default == defaults.RANDOM_WEIGHTS[name]
    for name in ("tau", "r0", "seed"):
        assert _default(_schemes.schemes, name) == study[name].default
    assert float(ad.MixLN().tau) == study["tau"].default == defaults.TAU
    assert float(ad.NGPT().alpha) == defaults.ALPHA
    assert inspect.signature(initial_slope).parameters["r0"].default == defaults.R0


def test_the_python_api_reads_the_one_place():
    spec, mc = studies.ModelSpec(), studies.MonteCarlo()
    # The models' depth when none is given.
    assert ad.DiscreteTransformer(ad.Attention(beta=1.0)).layers_per_unit == defaults.DEPTH
    assert (spec.depth, spec.sigma, spec.dt, spec.solver) == (
        defaults.DEPTH,
        defaults.SIGMA,
        defaults.DT,
        defaults.SOLVER,
    )
    assert spec.for_study("phase-diagram").horizon == defaults.horizon_of("phase-diagram")
    assert spec.for_study("evolution").horizon == defaults.horizon_of("evolution")
    assert (mc.n_trajectories, mc.tol, mc.seed, mc.on_nonfinite) == (
        defaults.N_TRAJECTORIES,
        defaults.TOL,
        defaults.SEED,
        defaults.ON_NONFINITE,
    )
    assert studies.ModesSpec().depth == defaults.DEPTH
    assert studies.ModesSpec().horizon == defaults.horizon_of("modes")


def test_the_main_job_keeps_its_numbers():
    # README: `attndyn phase-diagram --out results` runs L = 100, T = 100, 2,000
    # trajectories a point on this β grid; changing any of them changes its numbers.
    assert _default(_phase.phase_diagram, "depth") == 100
    assert _default(_phase.phase_diagram, "horizon") == 100.0
    assert _default(_phase.phase_diagram, "n_trajectories") == 2000
    assert _default(_phase.phase_diagram, "beta") == "0,0.4,0.8,1.5,2,2.5,3,3.5,4"


@pytest.mark.parametrize(
    ("make", "old", "new"),
    [
        (
            lambda **kw: studies.phase_points("beta-d", betas=[1.0], dims=[3], **kw),
            {"tokens": [2, 3]},
            {"n_tokens": [2, 3]},
        ),
        (
            lambda **kw: studies.evolution_points(
                ["full", "deterministic"], betas=[1.0], dims=[3], eps=[0.5], **kw
            ),
            {"tokens": [2]},
            {"n_tokens": [2]},
        ),
        (
            lambda **kw: studies.modes_points(dims=[2], betas=[4.0], **kw),
            {"tokens": [64]},
            {"n_tokens": [64]},
        ),
        (studies.MonteCarlo, {"trajectories": 5}, {"n_trajectories": 5}),
        (studies.MonteCarlo, {"exclude_nonfinite": True}, {"on_nonfinite": "exclude"}),
        (studies.MonteCarlo, {"exclude_nonfinite": False}, {"on_nonfinite": "raise"}),
        (studies.ModesRun, {"trajectories": 4}, {"n_trajectories": 4}),
        (studies.ModelSpec, {"save_at": (0.5, 1.0)}, {"saveat": (0.5, 1.0)}),
    ],
)
def test_old_spellings_still_work_with_a_warning(make, old, new):
    with pytest.warns(DeprecationWarning, match=f"'{next(iter(old))}' is deprecated"):
        before = make(**old)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new spelling warns of nothing
        after = make(**new)
    assert repr(before) == repr(after)  # repr: NaN (evolution's eps) equals itself there


def test_both_spellings_at_once_are_refused():
    with pytest.raises(ad.ParameterError, match="give n_trajectories only"):
        studies.MonteCarlo(trajectories=5, n_trajectories=5)  # pyright: ignore[reportCallIssue]


def test_old_attribute_names_read_with_a_warning():
    with pytest.warns(DeprecationWarning, match="'trajectories' is deprecated"):
        old = studies.MonteCarlo(n_trajectories=7).trajectories  # pyright: ignore[reportAttributeAccessIssue]
        assert old == 7
    with pytest.warns(DeprecationWarning, match="'save_at' is deprecated"):
        assert studies.ModesSpec(horizon=1.0, saves=3).save_at == (0.0, 0.5, 1.0)


def test_a_saveat_of_the_spec_horizon_is_read_as_its_times():
    spec = studies.ModelSpec(horizon=2.0, saveat=ad.SaveAt(2.0, (1.0, 2.0)))
    assert spec.saveat == (1.0, 2.0)
    with pytest.raises(ad.ParameterError, match="another horizon"):
        studies.ModelSpec(horizon=3.0, saveat=ad.SaveAt(2.0, (1.0, 2.0)))


def test_a_point_keeps_its_random_numbers_under_the_new_name():
    # 0.4 hashed the canonical JSON of the point with N under "tokens" (frozen formula).
    old = {"beta": 1.5, "dim": 4, "tokens": 2}
    text = json.dumps(dict(sorted(old.items())), sort_keys=True)
    expected = zlib.crc32(text.encode()) & 0x7FFFFFFF
    new = {"beta": 1.5, "dim": 4, "n_tokens": 2}
    assert point_id(new) == point_id(old) == expected


def test_old_point_keys_are_read_in_todays_names():
    points = [{"dim": 3, "tokens": 2, "beta": 1.0}]
    with pytest.warns(DeprecationWarning, match="'tokens' is deprecated"):
        checked = _phase_checked(points)
    assert checked == [{"dim": 3, "n_tokens": 2, "beta": 1.0}]


def _phase_checked(points):
    from attndyn.studies.phase import check_study

    return check_study("beta-d", studies.ModelSpec(), points)


def test_a_04_dataset_opens_in_todays_names(tmp_path):
    ds = xr.Dataset(
        {"p": ("point", np.array([0.25, 0.5]))},
        coords={"dim": ("point", [3, 3]), "tokens": ("point", [2, 3])},
        attrs={"provenance": "{}", "point_index": "dim tokens"},
    )
    ds.to_netcdf(tmp_path / "old.nc")
    read = ad.open_dataset(tmp_path / "old.nc")
    assert "n_tokens" in read.coords and "tokens" not in read.coords
    assert float(read["p"].sel(dim=3, n_tokens=3)) == 0.5


def test_recorded_arguments_of_04_read_in_todays_names():
    from attndyn.cli._output import _in_todays_names

    old = {"tokens": "2", "trajectories": 64, "exclude_nonfinite": True, "beta": "1"}
    old["kind"] = "beta-eps"  # a phase diagram's
    assert _in_todays_names(old) == {
        "diagram": "beta-eps",
        "n_tokens": "2",
        "n_trajectories": 64,
        "on_nonfinite": "exclude",
        "beta": "1",
    }


def test_help_shows_the_new_flags_only():
    result = CliRunner().invoke(main, ["phase-diagram", "--help"])
    assert result.exit_code == 0
    assert "--n-tokens" in result.output and "--n-trajectories" in result.output
    assert "--on-nonfinite" in result.output
    assert not re.search(r"--tokens\b|--trajectories\b|--exclude-nonfinite", result.output)
    assert "--diagram" in result.output and "--kind" not in result.output


def test_every_shown_option_of_every_command_says_what_it_does():
    # `attndyn modes --help` listed --norm and --engine with their choices and nothing else.
    # The hidden 0.4 spellings are the only options without help.
    unexplained = [
        f"{name} {param.opts[0]}"
        for name, command in main.commands.items()
        for param in command.params
        if isinstance(param, click.Option) and not param.hidden and not param.help
    ]
    assert unexplained == []


def test_an_old_flag_still_works_with_a_note(monkeypatch, tmp_path):
    seen = {}

    def stand_in(kind, spec, mc, points, **kwargs):
        seen.update(mc=mc, points=points)
        raise KeyboardInterrupt  # stop before anything runs (status 130)

    monkeypatch.setattr(_phase, "phase_diagram_study", stand_in)
    args = ["phase-diagram", "--beta", "1", "--dim", "3", "--tokens", "2"]
    args += ["--trajectories", "8", "--exclude-nonfinite", "--out", str(tmp_path / "o")]
    result = CliRunner().invoke(main, [*args, "--no-progress", "--no-cache"])
    assert result.exit_code == 130, result.output
    for old, new in (
        ("--tokens", "--n-tokens"),
        ("--trajectories", "--n-trajectories"),
        ("--exclude-nonfinite", "--on-nonfinite exclude"),
    ):
        assert f"note: {old} is deprecated, use {new}" in result.output
    assert seen["mc"].n_trajectories == 8 and seen["mc"].on_nonfinite == "exclude"
    assert [p["n_tokens"] for p in seen["points"]] == [2]


def test_the_phase_diagram_kind_is_its_diagram(monkeypatch, tmp_path):
    """`kind` meant three things (issue 44 item 3); a phase diagram's is its `diagram`:
    --kind still works for one release, with a note, and gives what --diagram gives."""
    seen = []

    def stand_in(diagram, spec, mc, points, **kwargs):
        seen.append((diagram, spec.noise, spec.attention, sorted(points[0])))
        raise KeyboardInterrupt  # stop before anything runs (status 130)

    monkeypatch.setattr(_phase, "phase_diagram_study", stand_in)
    base = ["phase-diagram", "--beta", "1", "--eps", "0.5", "--no-progress", "--no-cache"]
    for flag in ("--kind", "--diagram"):
        out = str(tmp_path / flag.strip("-"))
        result = CliRunner().invoke(main, [*base, flag, "beta-eps", "--out", out])
        assert result.exit_code == 130, result.output
        noted = "note: --kind is deprecated, use --diagram" in result.output
        assert noted == (flag == "--kind")
    assert (
        seen[0]
        == seen[1]
        == ("beta-eps", "scalar", "unnormalized", ["beta", "dim", "eps", "n_tokens"])
    )
    both = [*base, "--kind", "beta-n", "--diagram", "beta-eps", "--out", str(tmp_path / "b")]
    result = CliRunner().invoke(main, both)
    assert result.exit_code == 2
    assert "give --diagram only (--kind is its deprecated name)" in result.output


def test_the_study_functions_take_the_diagram_and_still_read_kind():
    from attndyn.studies.phase import check_study

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new spellings warn of nothing
        new = studies.phase_points(diagram="beta-d", betas=[1.0], dims=[3], n_tokens=[2])
        assert studies.DIAGRAMS == ("beta-d", "beta-eps", "beta-n")
    with pytest.warns(DeprecationWarning, match="'kind' is deprecated, use 'diagram'"):
        old = studies.phase_points(kind="beta-d", betas=[1.0], dims=[3], n_tokens=[2])  # pyright: ignore[reportCallIssue]
    assert old == new
    with pytest.warns(DeprecationWarning, match="'KINDS' is deprecated, use 'DIAGRAMS'"):
        assert studies.KINDS == studies.DIAGRAMS  # pyright: ignore[reportAttributeAccessIssue]
    with pytest.raises(ad.ParameterError, match="diagram='beta-x' is not allowed"):
        check_study("beta-x", studies.ModelSpec(), new)
    # The study function's keyword: refused before anything runs, in the new name.
    with pytest.warns(DeprecationWarning, match="'kind' is deprecated, use 'diagram'"):
        with pytest.raises(ad.ParameterError, match="diagram='beta-x'"):
            old_spelling: dict[str, Any] = {"kind": "beta-x"}  # not in the signature any more
            studies.phase_diagram_study(
                spec=studies.ModelSpec(), mc=studies.MonteCarlo(), points=new, **old_spelling
            )


def test_the_provenance_names_the_study_and_still_its_kind():
    """A dataset's (and --json's) `study`, a phase diagram's `diagram` beside it, and 0.4's
    `kind` (the diagram of a phase diagram, else the study) still written in 0.5."""
    from attndyn._estimate.dataset import study_fields
    from attndyn._io.metadata import history_line

    assert study_fields("evolution") == {"study": "evolution", "kind": "evolution"}
    assert study_fields("phase-diagram", "beta-n") == {
        "study": "phase-diagram",
        "diagram": "beta-n",
        "kind": "beta-n",
    }
    assert history_line({"study": "schemes", "kind": "schemes"}).endswith(
        "attndyn.schemes (Python API)"
    )
    assert history_line({"kind": "modes"}).endswith("attndyn.modes (Python API)")  # a 0.4 record


def test_an_old_and_a_new_flag_together_are_refused(tmp_path):
    args = ["phase-diagram", "--tokens", "2", "--n-tokens", "3", "--out", str(tmp_path / "o")]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2
    assert "Error: give --n-tokens only (--tokens is its deprecated name)." in result.output
    assert not (tmp_path / "o").exists()


def test_a_command_reads_its_options_and_never_edits_them():
    """The commands build their typed objects from one read-only mapping of the options
    (issue 30: no dict edited in place); 0.4's flags arrive under their new names."""
    import click

    from attndyn.cli._common import command_options

    raw = {"n_tokens": 2, "tokens": 3, "trajectories": None, "seed": 0}
    with click.Context(_phase.phase_diagram):
        options = command_options(raw)
    assert dict(options) == {"n_tokens": 3, "seed": 0}
    assert raw == {"n_tokens": 2, "tokens": 3, "trajectories": None, "seed": 0}  # untouched
    with pytest.raises(TypeError):
        options["seed"] = 1  # pyright: ignore[reportIndexIssue]


def test_the_modes_command_and_its_specs_share_their_defaults():
    spec, run = studies.ModesSpec(), studies.ModesRun()
    for name in ("attention", "scheme", "norm", "noise", "engine", "solver", "implementation"):
        assert _default(_modes.modes, name) == getattr(spec, name), name
    assert _default(_modes.modes, "ell_max") == run.ell_max == defaults.ELL_MAX
    assert (spec.scheme, spec.implementation) == (defaults.SCHEME, defaults.IMPLEMENTATION)
    assert ad.Attention(1.0).implementation == defaults.IMPLEMENTATION
