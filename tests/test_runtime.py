"""Process set-up for speed: every core, the persistent compilation cache, compile timing,
and the CLI's report of numerically merged tokens."""

import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import xarray as xr
from click.testing import CliRunner

import attndyn as ad
from attndyn._io import runtime
from attndyn.cli import main
from attndyn.cli._common import warn_merged
from tests.helpers import sphere_points
from tests.markers import two_cpu_devices


@two_cpu_devices
def test_use_all_cores_before_jax_starts_gives_one_device_per_core():
    code = "import attndyn as ad, jax; n = ad.use_all_cores(3); print(n, jax.local_device_count())"
    env = {"PATH": "", "JAX_PLATFORMS": "cpu"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    )
    assert out.stdout.split() == ["3", "3"]


def test_use_all_cores_after_jax_started_is_refused_when_it_would_differ():
    # The test process runs two devices (conftest): asking for three now cannot be honoured.
    import jax

    jax.numpy.zeros(1)
    if "xla_force_host_platform_device_count" in __import__("os").environ.get("XLA_FLAGS", ""):
        assert ad.use_all_cores(3) == 3  # the user's XLA_FLAGS win, silently by design
    else:
        with pytest.raises(ad.ParameterError, match="before JAX starts"):
            ad.use_all_cores(jax.local_device_count() + 1)


def test_compilation_cache_folder_and_switch(tmp_path, monkeypatch):
    import jax

    previous = jax.config.values["jax_compilation_cache_dir"]
    try:
        folder = ad.enable_compilation_cache(tmp_path / "cache")
        assert folder is not None and folder == tmp_path / "cache" and folder.is_dir()
        assert jax.config.values["jax_compilation_cache_dir"] == str(folder)
        monkeypatch.setenv(runtime.ENV_CACHE, "0")
        assert ad.enable_compilation_cache(tmp_path / "other") is None
    finally:
        jax.config.update("jax_compilation_cache_dir", previous)


def test_the_command_line_lets_the_cache_keep_ode_and_sde_programs(monkeypatch):
    # Its own process's equinox mode, before equinox loads (attndyn.cli.cacheable_solves);
    # a value the user set is kept.
    monkeypatch.delenv("EQX_ON_ERROR", raising=False)
    assert CliRunner().invoke(main, ["--help"]).exit_code == 0
    assert os.environ["EQX_ON_ERROR"] == "nan"
    monkeypatch.setenv("EQX_ON_ERROR", "raise")
    assert CliRunner().invoke(main, ["--help"]).exit_code == 0
    assert os.environ["EQX_ON_ERROR"] == "raise"


def test_every_command_keeps_its_compiled_programs():
    # One pair of options, the same help and default, on every command (schemes had none).
    helps = set()
    for command in main.commands.values():
        options = {p.name: p for p in command.params}
        assert options["cache"].default is True, command.name
        assert options["cache_dir"].envvar == "ATTNDYN_CACHE_DIR", command.name
        helps.add((options["cache"].help, options["cache_dir"].help))
    assert len(helps) == 1


def _lowered_text(model, x0):
    keys = jax.random.split(jax.random.key(0), 1)
    simulate = jax.jit(lambda x, k: model.simulate(x[None], k))
    return simulate.lower(x0, keys).as_text()


def test_ode_and_sde_programs_have_no_host_callback():
    """JAX's persistent cache keeps no program with a host callback: under the command
    line's equinox mode (the suite runs in it, see conftest.py) the diffrax solves have
    none, so a second run of an ODE or SDE study loads them instead of compiling."""
    x0 = sphere_points(0, 3, 4)
    saveat = ad.SaveAt(1.0, (0.5, 1.0))
    for model in (
        ad.NormalizedAttentionODE(ad.Attention(1.0), saveat=saveat),
        ad.TransformerSDE(ad.Attention(1.0), saveat=saveat),
        ad.HybridSDE(ad.Attention(1.0), eps=0.5, saveat=saveat),
    ):
        assert "callback" not in _lowered_text(model, x0), type(model).__name__
    # The check sees a callback where there is one.
    probe = jax.jit(lambda x: jax.pure_callback(np.negative, jax.ShapeDtypeStruct((), x.dtype), x))
    assert "callback" in probe.lower(jnp.float32(1)).as_text()


@pytest.mark.slow
def test_a_second_sde_run_of_the_command_line_compiles_nothing(tmp_path):
    """End to end, in fresh processes with equinox's default mode in the environment: the
    first `attndyn phase-diagram --engine sde` keeps its programs, the second loads them
    all (no new cache entry, the tile's programs among those kept) and writes the same
    numbers."""
    env = {k: v for k, v in os.environ.items() if k != "EQX_ON_ERROR"}
    env |= {"JAX_PLATFORMS": "cpu", "ATTNDYN_CACHE_DIR": str(tmp_path / "cache")}
    args = ["--engine", "sde", "--dim", "4", "--beta", "1,3", "--n-trajectories", "64"]
    outputs = []
    for run in ("first", "second"):
        command = [sys.executable, "-m", "attndyn.cli", "phase-diagram", *args]
        command += ["--out", str(tmp_path / run), "--no-progress"]
        subprocess.run(command, env=env, check=True, capture_output=True, timeout=600)
        outputs.append(sorted(p.name for p in (tmp_path / "cache").iterdir()))
    assert outputs[0] == outputs[1]
    assert any(name.startswith("jit__begin-") for name in outputs[0])
    with (
        xr.open_dataset(tmp_path / "first" / "phase_diagram.nc") as a,
        xr.open_dataset(tmp_path / "second" / "phase_diagram.nc") as b,
    ):
        for name in a.data_vars:
            np.testing.assert_array_equal(a[name].values, b[name].values, name)


@pytest.mark.slow
def test_provenance_reports_compile_seconds():
    import jax

    def make(beta, dim, n_tokens):
        del dim, n_tokens
        return ad.DiscreteTransformer(ad.Attention(beta), ad.MatrixValues(1.3), depth=3)

    ds = ad.estimate_probabilities(
        make, [{"dim": 5, "n_tokens": 3, "beta": 0.37}], key=jax.random.key(9),
        n_trajectories=7, progress=False, route="full",
    )  # fmt: skip
    assert ad.provenance(ds)["compile_seconds"] > 0


def test_merged_tokens_are_reported_on_stderr(capsys):
    ds = xr.Dataset(
        {
            "n_merged": (("point", "time"), np.array([[0, 3], [0, 0]])),
            "n_valid": ("point", np.array([10, 10])),
        },
        coords={"beta": ("point", [1.0, 2.0]), "dim": ("point", [3, 3])},
        # Counted as the arithmetic left them (on_merged="count"); "auto" reports what it
        # resolved instead (its own test).
        attrs={"provenance": json.dumps({"on_merged": "count"})},
    )
    warn_merged(ds)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "3 of 10 trajectories at beta=1.0, dim=3" in err[0] and "--x64" in err[0]
