"""Command-line input handling: empty environment variables and paths, options the run
would ignore, one-line warnings and failures, option names in messages, and the
precision of a checkpoint.

Bad input exits with status 2 and one line naming the option before anything is computed
or written; a failed run exits with status 1 and one line. Only the checkpoint test runs a
(tiny) study; the others stop before the study or replace it by a stand-in.
"""

import warnings
from pathlib import Path

import jax
import pytest
from click.testing import CliRunner

from attndyn import ParameterError
from attndyn._io.distributed import initialize_distributed
from attndyn.cli import _evolution, _phase, _schemes, main

PHASE = ["phase-diagram", "--beta", "1", "--dim", "4", "--n-trajectories", "8"]
PHASE += ["--horizon", "1", "--no-progress"]
EVOLUTION = ["evolution", "--beta", "1", "--dim", "4", "--n-tokens", "2", "--n-trajectories", "8"]
EVOLUTION += ["--horizon", "1", "--saves", "2", "--no-progress"]


class Reached(Exception):
    """Raised by the stand-in studies: the command got past its checks."""


@pytest.fixture
def no_study(monkeypatch):
    """Replace the studies by stand-ins that raise :class:`Reached`."""

    def reached(*args, **kwargs):
        raise Reached

    for module, name in ((_phase, "phase_diagram_study"), (_evolution, "evolution_study")):
        monkeypatch.setattr(module, name, reached)
    monkeypatch.setattr(_schemes, "schemes_study", reached)


def _one_line(result, status: int) -> str:
    assert result.exit_code == status, result.output
    assert "Traceback" not in result.output, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    return lines[0]


def _refused(args, tmp_path, *needles) -> str:
    """Status 2, one line holding every needle, and no --out folder made."""
    out = tmp_path / "out"
    line = _one_line(CliRunner().invoke(main, [*args, "--out", str(out)]), 2)
    for needle in needles:
        assert needle in line, line
    assert not out.exists()
    return line


# --- empty multi-host environment variables -----------------------------------------------


@pytest.mark.parametrize(
    ("name", "option"),
    [
        ("ATTNDYN_PROCESS_COUNT", "--process-count"),
        ("ATTNDYN_PROCESS_ID", "--process-id"),
        ("ATTNDYN_COORDINATOR", "--coordinator"),
    ],
)
def test_an_empty_multi_host_variable_is_refused_in_one_line(tmp_path, monkeypatch, name, option):
    # `ATTNDYN_PROCESS_COUNT= attndyn …` ended in int('') and a traceback, status 1 (audit).
    monkeypatch.setenv(name, "")
    _refused(PHASE, tmp_path, f"{name} is set but empty", option, "or unset it")


@pytest.mark.parametrize("name", ["ATTNDYN_PROCESS_COUNT", "ATTNDYN_PROCESS_ID"])
def test_initialize_distributed_names_a_malformed_variable(monkeypatch, name):
    # The API reads the variables too (the CLI's own parsing never sees these values).
    monkeypatch.delenv("ATTNDYN_COORDINATOR", raising=False)
    monkeypatch.setenv(name, "two")
    with pytest.raises(ParameterError, match=f"{name}='two' is not an integer"):
        initialize_distributed()
    monkeypatch.setenv(name, "  ")
    with pytest.raises(ParameterError, match=f"{name} is set but empty"):
        initialize_distributed()


# --- empty paths ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        [*PHASE, "--out", ""],
        [*PHASE, "--out", "  "],
        [*PHASE, "--out", "unused", "--cache-dir", ""],
        [*EVOLUTION, "--out", ""],
        ["schemes", "--out", ""],
    ],
)
def test_an_empty_path_is_refused(tmp_path, monkeypatch, no_study, args):
    # `--out ''` wrote the results into the current folder, `--cache-dir ''` filled it with
    # compiled programs (audit).
    monkeypatch.chdir(tmp_path)
    line = _one_line(CliRunner().invoke(main, args), 2)
    option = "--cache-dir" if "--cache-dir" in args else "--out"
    assert f"Invalid value for '{option}': an empty path" in line
    assert list(tmp_path.iterdir()) == []


# --- options that the run would ignore ------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        ([*PHASE, "--eps", "0.5"], ["--eps", "--diagram beta-eps", "drop --eps"]),
        (
            [*PHASE, "--diagram", "beta-n", "--eps", "0.5"],
            ["--eps", "--diagram beta-n", "drop --eps"],
        ),
        ([*PHASE, "--engine", "sde", "--depth", "5"], ["--depth", "--engine sde", "drop --depth"]),
        ([*PHASE, "--depth", "5", "--step", "0.2"], ["--depth", "--step", "give one of them"]),
        # Provenance said values "uniform" while the (Brownian) SDE ran (audit).
        (
            [*PHASE, "--engine", "sde", "--values", "uniform"],
            ["--values", "--engine sde", "drop --values"],
        ),
        (
            [*PHASE, "--diagram", "beta-eps", "--eps", "0.5", "--sigma", "2"],
            ["--sigma", "--diagram beta-eps", "drop --sigma"],
        ),
        ([*EVOLUTION, "--noise", "none", "--sigma", "2"], ["--sigma", "--noise"]),
        ([*EVOLUTION, "--noise", "scalar", "--sigma", "2"], ["--sigma", "add matrix to --noise"]),
        (
            [*EVOLUTION, "--noise", "none", "--values", "uniform"],
            ["--values", "--noise none", "drop --values"],
        ),
        (
            [*EVOLUTION, "--noise", "matrix,none", "--eps", "0.5"],
            ["--eps", "--noise matrix,none", "add scalar to --noise"],
        ),
        ([*EVOLUTION, "--engine", "sde", "--depth", "5"], ["--depth", "--engine sde"]),
    ],
)
def test_an_option_the_run_ignores_is_refused(tmp_path, no_study, args, needles):
    _refused(args, tmp_path, *needles)


@pytest.mark.parametrize(
    "args",
    [
        [*PHASE, "--engine", "sde", "--dt", "0.5"],
        [*PHASE, "--diagram", "beta-eps", "--eps", "0.5", "--values", "uniform"],
        [*PHASE, "--step", "0.25"],
        [*PHASE, "--sigma", "2", "--depth", "5"],
        [*EVOLUTION, "--noise", "matrix,none", "--sigma", "2", "--values", "uniform"],
        [*EVOLUTION, "--noise", "scalar,none", "--eps", "0.5", "--values", "uniform"],
        [*EVOLUTION, "--noise", "none", "--engine", "sde", "--dt", "0.5"],
    ],
)
def test_options_that_apply_are_accepted(tmp_path, no_study, args):
    # Defaults never count as given: --depth's default with --engine sde, --eps's outside
    # beta-eps, --sigma's with the deterministic model.
    result = CliRunner().invoke(main, [*args, "--out", str(tmp_path / "out")])
    assert isinstance(result.exception, Reached), result.output


def test_a_bad_value_is_named_before_an_ignored_option(tmp_path, no_study):
    # The model's own refusal is the more specific one: the step, not --depth.
    args = [*PHASE, "--engine", "sde", "--depth", "5", "--dt", "1000"]
    line = _refused(args, tmp_path, "dt=1000")
    assert "--depth" not in line


# --- warnings ---------------------------------------------------------------------------------


def test_warnings_are_one_line_each_and_only_in_the_cli(tmp_path, monkeypatch):
    # They came in Python's format: "click/core.py:911: UserWarning: …" and the code line.
    def study(*args, **kwargs):
        for _ in range(2):  # shown once
            warnings.warn("horizon=1 is not a multiple\n of the layer step", stacklevel=2)
        warnings.warn("another", RuntimeWarning, stacklevel=2)
        raise Reached

    monkeypatch.setattr(_phase, "phase_diagram_study", study)
    before = warnings.showwarning
    result = CliRunner().invoke(main, [*PHASE, "--out", str(tmp_path / "out")])
    assert isinstance(result.exception, Reached), result.output
    assert result.stderr.splitlines() == [
        "warning: horizon=1 is not a multiple of the layer step",
        "warning: another",
    ]
    assert warnings.showwarning is before  # restored: never installed by `import attndyn`


# --- failures of the JAX runtime --------------------------------------------------------------


def _raise(error):
    def study(*args, **kwargs):
        raise error

    return study


def test_out_of_memory_is_one_line(tmp_path, monkeypatch):
    # A 47-line traceback ending in JaxRuntimeError: RESOURCE_EXHAUSTED (audit: --dim 1500
    # --tokens 1500 --route full); simulated here.
    error = jax.errors.JaxRuntimeError(
        "RESOURCE_EXHAUSTED: Out of memory allocating 6882750464 bytes.\nmore detail"
    )
    monkeypatch.setattr(_phase, "phase_diagram_study", _raise(error))
    line = _one_line(CliRunner().invoke(main, [*PHASE, "--out", str(tmp_path)]), 1)
    assert "ran out of memory (RESOURCE_EXHAUSTED: Out of memory allocating" in line
    assert "lower --chunk-size" in line and "--n-tokens or --dim" in line
    # schemes has no --chunk-size: the hint names only its options.
    monkeypatch.setattr(_schemes, "schemes_study", _raise(MemoryError()))
    result = CliRunner().invoke(main, ["schemes", "--no-progress", "--out", str(tmp_path)])
    line = _one_line(result, 1)
    assert "ran out of memory (MemoryError); lower --n-tokens or --dim" in line


def test_other_jax_runtime_errors_are_one_line(tmp_path, monkeypatch):
    error = jax.errors.JaxRuntimeError("INTERNAL: something broke\ndetails")
    monkeypatch.setattr(_phase, "phase_diagram_study", _raise(error))
    line = _one_line(CliRunner().invoke(main, [*PHASE, "--out", str(tmp_path)]), 1)
    assert line == "Error: the computation failed in JAX: INTERNAL: something broke"


# --- option names in messages -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--rw-n-layers", "0"], "--rw-n-layers=0 must be an integer in [1, 2147483647]"),
        (["--rw-n-trajectories", "0"], "--rw-n-trajectories=0 must be an integer in [1, "),
        (["--rw-n-trajectories", str(2**31)], "--rw-n-trajectories=2147483648 must be an"),
    ],
)
def test_schemes_names_its_random_weight_options(tmp_path, no_study, args, needle):
    # The study's names rw_n_layers= and rw_n_trajectories= reached the user (audit).
    line = _refused(["schemes", *args], tmp_path, needle)
    assert "rw_" not in line


# --- the precision of a checkpoint ------------------------------------------------------------


@pytest.mark.slow
def test_a_checkpoint_of_the_other_precision_names_x64(tmp_path, monkeypatch):
    # The mismatch named "the model's attention.beta … is 1.0 there and 1.0 in this run"
    # (the dtypes differed, not the values): the checkpoint names the precision first.
    monkeypatch.setattr(_phase, "finish", lambda *args, **kwargs: None)  # keep the checkpoint
    run = [*PHASE, "--depth", "5", "--out", str(tmp_path)]
    assert CliRunner().invoke(main, [*run, "--x64"]).exit_code == 0
    assert (tmp_path / "phase_diagram.checkpoint.nc").exists()
    line = _one_line(CliRunner().invoke(main, run), 2)
    assert "the precision, x64 (CLI: --x64), is true there and false in this run" in line
    assert "--fresh" in line
    assert CliRunner().invoke(main, [*run, "--x64"]).exit_code == 0  # resumes


# --- issue 29: messages that name the real cause, and nothing before a refusal ----------------


def test_a_warning_is_not_shown_before_the_refusal_it_leads_to(tmp_path):
    # "warning: horizon=0.3 is not a multiple of the layer step" came before the status-2
    # error of the same run (audit): two lines for one refused command.
    args = [*PHASE, "--horizon", "0.3", "--depth", "5", "--route", "full"]
    line = _refused([*args, "--early-absorption", "0.5"], tmp_path, "early_absorption")
    assert "warning" not in line


def test_a_bad_environment_variable_is_named_not_its_option(tmp_path, no_study, monkeypatch):
    monkeypatch.setenv("ATTNDYN_PROCESS_ID", "abc")
    line = _refused(PHASE, tmp_path, "ATTNDYN_PROCESS_ID", "'abc' is not an integer")
    assert "--process-id" not in line
    monkeypatch.delenv("ATTNDYN_PROCESS_ID")
    line = _refused([*PHASE, "--process-id", "abc"], tmp_path, "--process-id")


def test_a_dimension_too_small_for_layernorm_names_the_norm(tmp_path):
    # "dim=2 must be an integer >= 3", without --norm (audit). Refused as the study builds
    # its models, before anything is computed.
    _refused([*PHASE, "--dim", "2", "--norm", "layernorm"], tmp_path, "dim=2", "--norm layernorm")


def test_the_merge_warning_under_x64_does_not_advise_x64(capsys):
    import json

    import xarray as xr

    from attndyn.cli._common import warn_merged

    for dtype, advice in (("float32", "--x64 or a reduced route"), ("float64", "A reduced route")):
        ds = xr.Dataset(
            {"n_merged": (("point", "time"), [[3]]), "n_valid": ("point", [10])},
            coords={"beta": ("point", [1.0]), "dim": ("point", [4])},
            attrs={"provenance": json.dumps({"on_merged": "count", "dtype": dtype})},
        )
        warn_merged(ds)
        line = capsys.readouterr().err.strip()
        assert f"({dtype} cannot resolve" in line and f"{advice} resolves" in line, line
        assert ("--x64" in line) == (dtype == "float32")


@pytest.mark.parametrize("where", ["file", "proc"])
def test_a_cache_folder_that_cannot_be_written_is_refused(tmp_path, no_study, monkeypatch, where):
    # It was ignored silently: JAX skips every write to an unusable cache (audit).
    target = tmp_path / "a-file" if where == "file" else Path("/proc/attndyn-cache")
    if where == "file":
        target.write_text("not a folder")
    _refused([*PHASE, "--cache-dir", str(target)], tmp_path, "--cache-dir", str(target))
    monkeypatch.setenv("ATTNDYN_CACHE_DIR", str(target))
    _refused(PHASE, tmp_path, "ATTNDYN_CACHE_DIR", str(target))


def test_a_folder_where_the_dataset_goes_is_refused_before_computing(tmp_path, no_study):
    # --overwrite computed everything and then failed to write, every time (audit).
    (tmp_path / "phase_diagram.nc").mkdir()
    args = [*PHASE, "--overwrite", "--out", str(tmp_path)]
    line = _one_line(CliRunner().invoke(main, args), 2)
    assert "'phase_diagram.nc', which is a folder" in line


def test_an_out_path_too_long_is_bad_input(tmp_path, no_study):
    # A 300-character folder name exited with status 1 (the machine) instead of 2 (audit).
    out = tmp_path / ("x" * 300)
    line = _one_line(CliRunner().invoke(main, [*PHASE, "--out", str(out)]), 2)
    assert "--out" in line and "File name too long" in line
    assert "…" in line  # the long path is shortened in the message


def test_schemes_refuses_a_horizon_beyond_its_solver_budget_before_solving(tmp_path, no_study):
    # --horizon 1e300 was solved for tens of seconds and then refused (audit).
    _refused(["schemes", "--horizon", "1e300"], tmp_path, "--horizon=1e+300", "budget")
