"""How a process runs JAX: every CPU core, a persistent compilation cache, compile timing.

These touch process-wide JAX settings, so the library never applies them by itself: the
CLI calls :func:`use_all_cores` and :func:`enable_compilation_cache` before any JAX work,
and an API user may call them first thing in a script.
"""

import os
import warnings
from pathlib import Path

import jax
from jax._src import xla_bridge

from .._core.errors import ParameterError, check_int
from .files import writable_folder

#: Environment overrides: the cache folder, and "0" to switch the cache off.
ENV_CACHE_DIR = "ATTNDYN_CACHE_DIR"
ENV_CACHE = "ATTNDYN_CACHE"
#: The JAX events whose durations count as compilation (tracing, lowering, XLA).
COMPILE_EVENTS = (
    "/jax/core/compile/jaxpr_trace_duration",
    "/jax/core/compile/jaxpr_to_mlir_module_duration",
    "/jax/core/compile/backend_compile_duration",
)

_compile_seconds = [0.0]


def _record(event: str, duration_secs: float, **_) -> None:
    if event in COMPILE_EVENTS:
        _compile_seconds[0] += duration_secs


jax.monitoring.register_event_duration_secs_listener(_record)


def compile_seconds() -> float:
    """Seconds this process has spent tracing, lowering and compiling so far."""
    return _compile_seconds[0]


def use_all_cores(n_devices: int | None = None) -> int:
    """One XLA CPU device per core (or ``n_devices`` ≥ 1), so the estimator's sharding uses
    every core. Call before JAX starts its backend (before any array is created); the
    results do not depend on the device count. Respects ``XLA_FLAGS`` that already set
    ``--xla_force_host_platform_device_count``. Returns the device count asked for."""
    # Checked against None, not by truth: 0 must be refused, not read as "every core".
    if n_devices is not None:
        check_int("n_devices", n_devices, lower=1)
    count = int(n_devices) if n_devices is not None else (os.cpu_count() or 1)
    if "xla_force_host_platform_device_count" in os.environ.get("XLA_FLAGS", ""):
        return count
    if xla_bridge.backends_are_initialized():
        if jax.default_backend() == "cpu" and jax.local_device_count() != count:
            raise ParameterError(
                "use_all_cores must be called before JAX starts (before any array is created); "
                f"it already runs with {jax.local_device_count()} CPU device(s)."
            )
        return count
    jax.config.update("jax_num_cpu_devices", count)
    return count


def default_cache_dir() -> Path:
    """``$ATTNDYN_CACHE_DIR``, else ``$XDG_CACHE_HOME/attndyn/jax`` (``~/.cache/...``)."""
    if os.environ.get(ENV_CACHE_DIR):
        return Path(os.environ[ENV_CACHE_DIR])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "attndyn" / "jax"


def enable_compilation_cache(
    path: str | os.PathLike | None = None, *, name: str | None = None
) -> Path | None:
    """Keep compiled programs on disk, so a process compiles each study shape once per
    machine (JAX's persistent compilation cache). ``ATTNDYN_CACHE=0`` switches it off.
    Returns the folder, or ``None`` when off.

    A folder that was asked for (``path``, or ``$ATTNDYN_CACHE_DIR``) must be a folder
    this user can write to: anything else (a file, a read-only place) is refused with a
    :class:`ParameterError` naming ``name`` (the option that gave it). The default folder
    (``~/.cache/attndyn/jax``, or ``$XDG_CACHE_HOME/attndyn/jax``) is only wished for: if
    it cannot be written, a warning says so and the cache stays off (JAX would skip every
    write to it silently).

    JAX keeps no program with a host callback, and equinox's default
    ``EQX_ON_ERROR=raise`` makes diffrax's in-program input checks callbacks: the ODE and
    SDE models' programs are kept only when ``EQX_ON_ERROR=nan`` is set before equinox is
    imported (``os.environ.setdefault("EQX_ON_ERROR", "nan")`` before ``import attndyn``,
    as the command line does). The numbers are the same; the models validate those inputs
    themselves, and a check that fired would give NaN states, which the estimator reports.
    The discrete models' programs are kept either way."""
    if os.environ.get(ENV_CACHE, "1") == "0":
        return None
    asked = path is not None or bool(os.environ.get(ENV_CACHE_DIR))
    folder = Path(path) if path is not None else default_cache_dir()
    what = name or ("the compilation cache folder" if path is not None else ENV_CACHE_DIR)
    try:
        writable_folder(folder, what)
    except ParameterError as error:
        if asked:
            raise ParameterError(f"{error} (Or switch the cache off: {ENV_CACHE}=0.)") from None
        warnings.warn(
            f"{str(error).replace('give a folder this user can write to.', '')}"
            f"the compilation cache is off (set {ENV_CACHE_DIR} to a writable folder).",
            stacklevel=2,
        )
        return None
    jax.config.update("jax_compilation_cache_dir", str(folder))
    # Every program of a study is worth keeping: the small ones compile in a second too.
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return folder
