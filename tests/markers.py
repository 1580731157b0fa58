"""Markers shared by test modules (kept out of conftest.py, whose import sets XLA flags:
child processes import test modules and must keep their own device count)."""

import jax
import pytest

#: The suite's default platform is two CPU devices (conftest.py). Run on a GPU
#: (``JAX_PLATFORMS=cuda``) it has one device, and tests that count the calls, devices or
#: tiles of the two-CPU layout are skipped there rather than failed.
two_cpu_devices = pytest.mark.skipif(
    jax.default_backend() != "cpu" or jax.device_count() != 2,
    reason="counts the calls, devices or tiles of the suite's two CPU devices",
)
