"""Pieces shared by the CLI commands."""

import functools
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import jax

from .._core.errors import NonFiniteError, ParameterError
from .._core.norms import NORM_NAMES
from .._core.serialize import plain
from .._core.values import DISTRIBUTIONS
from .._estimate.distributed import initialize_distributed
from ..studies.phase import ENGINES, ModelSpec, MonteCarlo
from ..studies.summary import json_points
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


def _apply(func: Callable, options: list[Callable]) -> Callable:
    for option in reversed(options):
        func = option(func)
    return func


def study_options(func: Callable) -> Callable:
    """The options every Monte Carlo study command takes: the value noise, the engine, the
    sample, the output folder, and the estimator's route, absorption, non-finite policy
    and multi-host flags. :func:`start_processes`, :func:`model_spec` and
    :func:`monte_carlo` read them."""
    options = [
        click.option(
            "--engine",
            default="discrete",
            show_default=True,
            type=click.Choice(ENGINES),
            help="discrete: the depth-L layer maps; sde: the L → ∞ SDE (eq. 6 / eq. 8).",
        ),
        click.option(
            "--values",
            default="gaussian",
            show_default=True,
            type=click.Choice(DISTRIBUTIONS),
            help="Distribution of the value noise (matrix entries, or the scalar v_n).",
        ),
        click.option("--sigma", default=1.0, show_default=True, type=float, help="σ > 0."),
        click.option(
            "--norm",
            default="rms",
            show_default=True,
            type=click.Choice(NORM_NAMES),
            help="Token normalisation of Post-LN: rms (the unit sphere) or layernorm "
            "(centred: the unit sphere of the mean-zero hyperplane, d ≥ 3; its law is the "
            "rms model in d − 1 dimensions). Discrete engine only.",
        ),
        click.option(
            "--step",
            default=None,
            type=float,
            help="Discrete engine: a real layer step η > 0 instead of --depth (t = nη; a "
            "horizon off the layer grid is rounded with a warning).",
        ),
        click.option(
            "--solver",
            default="euler",
            show_default=True,
            help="SDE engine: euler (projected Euler–Maruyama), heun or spark.",
        ),
        click.option(
            "--dt", default=0.01, show_default=True, type=float, help="SDE engine: step in (0, T]."
        ),
        click.option(
            "--trajectories", default=2000, show_default=True, type=int, help="Per point."
        ),
        click.option(
            "--tol", default=1e-3, show_default=True, type=float, help="Clustering tolerance."
        ),
        click.option("--seed", default=0, show_default=True, type=int, help="PRNG seed."),
        click.option(
            "--chunk-size",
            default=None,
            type=int,
            help="Trajectories per batch (default: from device memory). Never changes results.",
        ),
        click.option(
            "--out",
            default="attndyn-results",
            show_default=True,
            help="Output directory for the dataset and figure.",
        ),
        click.option("--fresh", is_flag=True, help="Ignore a checkpoint of an interrupted run."),
        click.option("--json", "as_json", is_flag=True, help="Print one JSON object to stdout."),
        click.option("--no-progress", is_flag=True, help="Hide the progress bar."),
    ]
    return scale_options(_apply(func, options))


def scale_options(func: Callable) -> Callable:
    """``--route``, ``--early-absorption``, ``--exclude-nonfinite`` and the multi-host flags."""
    options = [
        click.option(
            "--route",
            type=click.Choice(["auto", "full"]),
            default="auto",
            show_default=True,
            help="auto: simulate the N×N token frame where exact in law (Q=K=I, "
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
            "--exclude-nonfinite",
            is_flag=True,
            help="Drop trajectories that overflow (NaN/inf) from the probabilities, with a "
            "warning and their count in n_nonfinite, instead of stopping with an error.",
        ),
        click.option(
            "--coordinator",
            envvar="ATTNDYN_COORDINATOR",
            default=None,
            help="HOST:PORT of process 0 for a multi-host run (jax.distributed).",
        ),
        click.option("--process-count", envvar="ATTNDYN_PROCESS_COUNT", type=int, default=None),
        click.option("--process-id", envvar="ATTNDYN_PROCESS_ID", type=int, default=None),
    ]
    return _apply(func, options)


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
        norm=options.get("norm", "rms"),
        step=options.get("step"),
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


def finish(
    ds, name: str, out_dir: Path, checkpoint: Path | None, figure, options: dict[str, Any], **extra
) -> None:
    """Write the dataset and its figure (``figure(ds)``), then report: one JSON object on
    stdout with ``--json``, else one line on stderr."""
    dataset_path = save_study(ds, out_dir, name, checkpoint)
    figure_path = out_dir / f"{name}.png"
    figure(ds).savefig(figure_path, dpi=130)
    seconds = time.perf_counter() - options["started"]
    if options["as_json"]:
        payload = {"kind": extra.pop("kind"), "engine": ds.attrs["engine"]}
        payload.update(points=json_points(ds), **extra)
        payload.update(seconds=seconds, dataset=str(dataset_path), figure=str(figure_path))
        emit_json(payload)
    else:
        say(f"wrote {dataset_path} and {figure_path} in {seconds:.1f} s")
