"""Test configuration: two CPU devices, strict dtype and rank promotion, set before JAX starts.

Shapes annotated with jaxtyping are checked at run time (``--jaxtyping-packages`` in
pyproject.toml).
"""

import json
import os
import resource
import tempfile

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2"
).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# The suite runs equinox's error checks as the command line does (attndyn.cli's
# `cacheable_solves`, before equinox is imported): diffrax's in-program checks give NaN
# instead of a host callback, so the ODE and SDE programs are kept in the persistent cache
# too (~20 s of CPU a run otherwise); the programs compute the same numbers either way.
os.environ.setdefault("EQX_ON_ERROR", "nan")
# CLI tests enable the persistent compilation cache: keep it out of the user's home.
os.environ.setdefault("ATTNDYN_CACHE_DIR", os.path.join(tempfile.gettempdir(), "attndyn-test-jax"))

import jax
import pytest

jax.config.update("jax_numpy_dtype_promotion", "strict")
# No implicit rank promotion: every broadcast in attndyn is written out.
jax.config.update("jax_numpy_rank_promotion", "raise")
# Most of the suite's CPU time is XLA compiling. Every test keeps its compiled programs in
# the persistent cache from its first compile (what `enable_compilation_cache` does for the
# CLI, and did before only once a worker had run a CLI test): a rerun of unchanged code
# loads them. The same HLO gives the same executable, so the programs tested are the ones
# users run; ATTNDYN_CACHE=0 times a cold suite.
if os.environ.get("ATTNDYN_CACHE", "1") != "0":
    os.makedirs(os.environ["ATTNDYN_CACHE_DIR"], exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", os.environ["ATTNDYN_CACHE_DIR"])
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


# The default run's selection of cases (`@pytest.mark.default_case`): tests/_default_case.py.
pytest_plugins = ["tests._default_case"]


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


# --- `--compile-report PATH`: per-test XLA compilations, to find what makes the suite slow.
_compiles = {"n": 0, "seconds": 0.0}


def pytest_addoption(parser):
    parser.addoption(
        "--compile-report",
        default=None,
        metavar="PATH",
        help="write each test's XLA compile count and seconds, and its CPU seconds (user + "
        "sys, with the child processes it waited for), as JSON (one file per worker)",
    )


def _count_compile(event: str, duration_secs: float, **_: str | int) -> None:
    if event == "/jax/core/compile/backend_compile_duration":
        _compiles["n"] += 1
        _compiles["seconds"] += duration_secs


def pytest_configure(config):
    if config.getoption("--compile-report"):
        from jax._src import monitoring

        monitoring.register_event_duration_secs_listener(_count_compile)
        config._compile_rows = []  # pyright: ignore[reportAttributeAccessIssue]


def _cpu_seconds() -> float:
    """User + system CPU seconds of this process and of the children it has waited for
    (the budget of the suite is CPU time: a subprocess's start-up counts)."""
    own, children = (
        resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    rows = getattr(item.config, "_compile_rows", None)
    _compiles.update(n=0, seconds=0.0)
    cpu = _cpu_seconds()
    yield
    if rows is not None:
        rows.append(
            {
                "test": item.nodeid,
                "compiles": _compiles["n"],
                "seconds": _compiles["seconds"],
                "cpu": _cpu_seconds() - cpu,
            }
        )


def pytest_sessionfinish(session):
    rows = getattr(session.config, "_compile_rows", None)
    path = session.config.getoption("--compile-report")
    if rows is None or not path:
        return
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with open(f"{path}.{worker}.json", "w") as f:
        json.dump(sorted(rows, key=lambda r: -r["cpu"]), f, indent=1)
