"""The process a command runs in, set up before any JAX work: the CPU devices, the
persistent compilation cache and a multi-process run."""

import os
from collections.abc import Mapping
from typing import Any

import click
from click.core import ParameterSource


def start_processes(options: Mapping[str, Any]) -> bool:
    """Set the process up before any other JAX work: one CPU device per core, the
    persistent compilation cache (unless --no-cache), and a multi-process run if asked.
    True on the process that writes the outputs."""
    import jax

    from .._io.distributed import DistributedError, initialize_distributed
    from .._io.runtime import use_all_cores

    use_all_cores()
    use_cache(options)
    # How long to wait never changes the numbers: not one of the recorded arguments
    # (RUN_OPTIONS).
    timeout = options.get("coordinator_timeout")
    try:
        initialize_distributed(
            options["coordinator"],
            options["process_count"],
            options["process_id"],
            timeout,
            progress=True,
        )
    except DistributedError as error:  # a runtime failure (status 1), not bad input
        raise click.ClickException(str(error)) from None
    return jax.process_index() == 0


def use_cache(options: Mapping[str, Any]) -> None:
    """The persistent compilation cache, unless --no-cache (before any JAX work): the
    folder of --cache-dir, else of ATTNDYN_CACHE_DIR, else the default; a folder asked
    for that cannot be written is refused naming where it came from."""
    from .._io.runtime import enable_compilation_cache

    if options.get("cache", True):
        source = click.get_current_context().get_parameter_source("cache_dir")
        name = "ATTNDYN_CACHE_DIR" if source == ParameterSource.ENVIRONMENT else "--cache-dir"
        enable_compilation_cache(options.get("cache_dir"), name=name)


def cacheable_solves() -> None:
    """Let JAX's persistent compilation cache keep the ODE and SDE programs.

    diffrax checks some inputs inside the compiled program (save times in order and in
    [t0, t1], Brownian times in range) with equinox's ``error_if``, which under equinox's
    default ``EQX_ON_ERROR=raise`` is a host callback; JAX never writes a program with a
    host callback to its cache, so every ODE and SDE study compiled again on every run
    (``attndyn schemes``: ~60 s of its ~100 s). The models validate those inputs where
    they enter, so the checks never fire; under ``EQX_ON_ERROR=nan`` one that did would
    give NaN states, which the studies report as a failed solve or a non-finite
    trajectory and never write as a result. The same numbers either way. Set for the
    command's own process, before equinox is imported; a value the user set is kept."""
    os.environ.setdefault("EQX_ON_ERROR", "nan")
