"""Test configuration: two CPU devices, strict dtype and rank promotion, set before JAX starts.

Shapes annotated with jaxtyping are checked at run time (``--jaxtyping-packages`` in
pyproject.toml).
"""

import os
import tempfile

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2"
).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# CLI tests enable the persistent compilation cache: keep it out of the user's home.
os.environ.setdefault("ATTNDYN_CACHE_DIR", os.path.join(tempfile.gettempdir(), "attndyn-test-jax"))

import jax
import pytest

jax.config.update("jax_numpy_dtype_promotion", "strict")
# No implicit rank promotion: every broadcast in attndyn is written out.
jax.config.update("jax_numpy_rank_promotion", "raise")


@pytest.fixture
def tile(monkeypatch):
    """``tile(k)``: the estimator runs tiles of at most k trajectories per device (4,096 on
    CPU and 131,072 on accelerators by default, more than the small studies of the tests
    hold), so that a test can exercise several tiles, chunks and process blocks per point,
    also when the suite runs on a GPU (``JAX_PLATFORMS=cuda``)."""
    from attndyn._estimate import runner

    def set_tile(size: int) -> None:
        monkeypatch.setattr(runner, "CPU_TILE", size)
        monkeypatch.setattr(runner, "ACCELERATOR_TILE", size)

    return set_tile
