"""Pieces shared by the CLI commands."""

import functools
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import jax

from .._core.errors import NonFiniteError, ParameterError
from .._core.serialize import plain
from .._estimate.distributed import initialize_distributed
from ..studies.phase import ModelSpec, MonteCarlo
from ._ranges import parse_range


def cli_errors(func: Callable) -> Callable:
    """Turn parameter and overflow errors into clean CLI errors (non-zero exit, no traceback)."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except ParameterError as error:
            raise click.UsageError(str(error)) from None
        except NonFiniteError as error:
            raise click.ClickException(str(error)) from None

    return wrapper


def floats(name: str, text: str) -> list[float]:
    return parse_range(name, text)


def ints(name: str, text: str) -> list[int]:
    return parse_range(name, text, integer=True)


def output_dir(path: str) -> Path:
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    return out


def emit_json(payload: dict[str, Any]) -> None:
    click.echo(json.dumps(plain(payload)))


def say(message: str) -> None:
    click.echo(message, err=True)


def command_line() -> str:
    return " ".join(["attndyn", *sys.argv[1:]])


def scale_options(func: Callable) -> Callable:
    """``--route``, ``--early-absorption`` and the multi-host flags of the estimator.

    The command receives ``route``, ``early_absorption`` (a float bound or ``None``),
    ``coordinator``, ``process_count``, ``process_id`` and ``exclude_nonfinite``;
    :func:`start_processes` and :func:`monte_carlo` read them.
    """
    options = [
        click.option(
            "--route",
            type=click.Choice(["auto", "full"]),
            default="auto",
            show_default=True,
            help="auto: simulate the N×N token Gram/frame where exact in law (Q=K=I, "
            "Gaussian values, N<d); full: always the N×d model.",
        ),
        click.option(
            "--early-absorption",
            type=float,
            default=None,
            help="Stop a chunk once every two-token trajectory is within δ of ±1, δ from "
            "the scale function for this per-trajectory bound (e.g. 1e-7).",
        ),
        click.option(
            "--coordinator",
            envvar="ATTNDYN_COORDINATOR",
            default=None,
            help="HOST:PORT of process 0 for a multi-host run (jax.distributed).",
        ),
        click.option("--process-count", envvar="ATTNDYN_PROCESS_COUNT", type=int, default=None),
        click.option(
            "--exclude-nonfinite",
            is_flag=True,
            help="Drop trajectories that overflow (NaN/inf) from the probabilities, with a "
            "warning and their count in n_nonfinite, instead of stopping with an error.",
        ),
        click.option("--process-id", envvar="ATTNDYN_PROCESS_ID", type=int, default=None),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def start_processes(options: dict[str, Any]) -> bool:
    """Join a multi-process run if asked (before any other JAX work); True on the writer."""
    initialize_distributed(options["coordinator"], options["process_count"], options["process_id"])
    return jax.process_index() == 0


def monte_carlo(options: dict[str, Any]) -> MonteCarlo:
    """The estimator options shared by the study commands."""
    return MonteCarlo(
        trajectories=options["trajectories"],
        seed=options["seed"],
        tol=options["tol"],
        chunk_size=options["chunk_size"],
        route=options.get("route", "auto"),
        early_absorption=options.get("early_absorption"),
        exclude_nonfinite=options.get("exclude_nonfinite", False),
    )


def model_spec(options: dict[str, Any], *, noise: str, attention: str) -> ModelSpec:
    """The model options shared by the study commands."""
    return ModelSpec(
        noise=noise,
        engine=options["engine"],
        attention=attention,
        values=options["values"],
        sigma=options["sigma"],
        depth=options["depth"],
        horizon=options["horizon"],
        solver=options["solver"],
        dt=options["dt"],
    )


def study_checkpoint(out_dir: Path, name: str, *, fresh: bool) -> Path | None:
    """Where a study keeps its resumable tallies (``None`` in a multi-process run, where
    each process holds only its own chunks and a shared file would mix them)."""
    if jax.process_count() > 1:
        return None
    checkpoint = out_dir / f"{name}.checkpoint.nc"
    if fresh:
        checkpoint.unlink(missing_ok=True)
    return checkpoint


def save_study(ds, out_dir: Path, name: str, checkpoint: Path | None) -> Path:
    """Write the finished dataset and drop the checkpoint it supersedes."""
    dataset_path = out_dir / f"{name}.nc"
    ds.to_netcdf(dataset_path)
    if checkpoint is not None:
        checkpoint.unlink(missing_ok=True)
    return dataset_path
