"""Process set-up for speed: every core, the persistent compilation cache, compile timing,
and the CLI's report of numerically merged tokens."""

import json
import subprocess
import sys

import numpy as np
import pytest
import xarray as xr

import attndyn as ad
from attndyn._estimate import runtime
from attndyn.cli._common import warn_merged
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
