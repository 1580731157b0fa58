"""Pieces shared by the CLI commands."""

import functools
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import jax
import numpy as np

from ._errors import NonFiniteError, ParameterError, check_bound, check_int
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
    click.echo(json.dumps(payload, default=_json_default))


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"not JSON serialisable: {type(value)}")


def finite_or_none(x: float) -> float | None:
    return None if not np.isfinite(x) else float(x)


def say(message: str) -> None:
    click.echo(message, err=True)


def command_line() -> str:
    return " ".join(["attndyn", *sys.argv[1:]])


def scale_options(func: Callable) -> Callable:
    """``--route``, ``--early-absorption`` and the multi-host flags of the estimator.

    The command receives ``route``, ``early_absorption`` (a float bound or ``None``),
    ``coordinator``, ``process_count``, ``process_id`` and ``exclude_nonfinite``; it should call
    :func:`attndyn._distributed.initialize` with the last three before any other JAX work
    and pass ``route`` and ``early_absorption or False`` to ``estimate_probabilities``.
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


def parse_study_axes(
    *, beta: str, dim: str, tokens: str
) -> tuple[list[float], list[int], list[int]]:
    """Parse and check the (β, d, N) axes every study takes."""
    betas = floats("beta", beta)
    dims = ints("dim", dim)
    token_counts = ints("tokens", tokens)
    check_bound("beta", np.asarray(betas), lower=0.0)
    for d in dims:
        check_int("dim", d, lower=2)
    for n in token_counts:
        check_int("tokens", n, lower=1)
    return betas, dims, token_counts


def check_study_options(
    *,
    trajectories: int,
    depth: int,
    horizon: float,
    sigma: float,
    tol: float,
    chunk_size: int | None,
    engine: str,
    dt: float,
) -> None:
    """Check the Monte Carlo and engine options shared by the study commands."""
    check_int("trajectories", trajectories, lower=1)
    check_int("depth", depth, lower=1)
    check_bound("horizon", horizon, lower=0.0, lower_open=True)
    check_bound("sigma", sigma, lower=0.0, lower_open=True)
    check_bound("tol", tol, lower=0.0, upper=1.0, lower_open=True, upper_open=True)
    if chunk_size is not None:
        check_int("chunk-size", chunk_size, lower=1)
    if engine == "sde":
        check_bound("dt", dt, lower=0.0, lower_open=True)
        if dt > horizon:
            raise ParameterError(
                f"dt={dt} is larger than the horizon={horizon}; the step must lie in (0, horizon]."
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
