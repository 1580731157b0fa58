"""``attndyn evolution``: clustering fractions against time (seed 003 Figs. 7-9)."""

import time

import click

from .._core.attention import ATTENTION_KINDS
from .._core.values import DISTRIBUTIONS
from ..studies.evolution import evolution_points, evolution_study
from ..studies.phase import ENGINES
from ..studies.summary import json_points, series
from ._common import (
    cli_errors,
    command_line,
    emit_json,
    floats,
    ints,
    model_spec,
    monte_carlo,
    output_dir,
    save_study,
    say,
    study_checkpoint,
)


@click.command("evolution")
@click.option(
    "--model",
    "models",
    default="full",
    show_default=True,
    help="Comma list of full, hybrid, deterministic (Fig. 9: full,deterministic).",
)
@click.option("--beta", default="5", show_default=True, help="β values: a:b:step or a,b,c.")
@click.option("--dim", default="4", show_default=True, help="Dimensions d ≥ 2.")
@click.option("--tokens", default="50", show_default=True, help="Numbers of tokens N ≥ 1.")
@click.option("--eps", default="1.0", show_default=True, help="Hybrid noise ε ≥ 0 (list).")
@click.option("--sigma", default=1.0, show_default=True, type=float, help="Value noise σ > 0.")
@click.option(
    "--attention",
    default="softmax",
    show_default=True,
    type=click.Choice(ATTENTION_KINDS),
    help="Attention kind.",
)
@click.option(
    "--values",
    default="gaussian",
    show_default=True,
    type=click.Choice(DISTRIBUTIONS),
    help="Distribution of the value noise.",
)
@click.option(
    "--engine",
    default="discrete",
    show_default=True,
    type=click.Choice(ENGINES),
    help="discrete layer maps or the SDE limit.",
)
@click.option("--depth", default=100, show_default=True, type=int, help="L: layers per unit time.")
@click.option("--horizon", default=50.0, show_default=True, type=float, help="T: time horizon.")
@click.option("--saves", default=51, show_default=True, type=int, help="Save times in [0, T].")
@click.option("--solver", default="euler", show_default=True, help="SDE engine: euler/heun/spark.")
@click.option("--dt", default=0.01, show_default=True, type=float, help="SDE engine: step.")
@click.option(
    "--trajectories", default=2000, show_default=True, type=int, help="Trajectories per point."
)
@click.option(
    "--tol", default=1e-3, show_default=True, type=float, help="Clustering tolerance in (0, 1)."
)
@click.option("--seed", default=0, show_default=True, type=int, help="PRNG seed.")
@click.option("--chunk-size", default=None, type=int, help="Trajectories per batch.")
@click.option("--out", default="attndyn-results", show_default=True, help="Output directory.")
@click.option("--fresh", is_flag=True, help="Ignore a checkpoint left by an interrupted run.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object to stdout.")
@click.option("--no-progress", is_flag=True, help="Hide the progress bar.")
@cli_errors
def evolution(**options) -> None:
    """Fractions of single / antipodal / unclustered (and has-an-antipodal-pair) against
    time, with Wilson 95 % bands (seed 003 Figs. 7-9).

    Fig. 7: --beta 5 --dim 4 --tokens 50 --horizon 50. Fig. 8: --tokens 2 --dim 4,6,8,10
    --beta 0.25,1,3 --horizon 50 (and 100). Fig. 9: --model full,deterministic --beta 0.5
    --horizon 15, and --beta 4.5 --horizon 30. Writes OUT/evolution.nc and
    OUT/evolution.png.
    """
    started = time.perf_counter()
    points = evolution_points(
        [m.strip() for m in options["models"].split(",") if m.strip()],
        betas=floats("beta", options["beta"]),
        dims=ints("dim", options["dim"]),
        tokens=ints("tokens", options["tokens"]),
        eps=floats("eps", options["eps"]),
    )
    spec = model_spec(options, noise="full", attention=options["attention"])
    mc = monte_carlo(options)
    out_dir = output_dir(options["out"])
    checkpoint = study_checkpoint(out_dir, "evolution", fresh=options["fresh"])
    ds = evolution_study(
        spec,
        mc,
        points,
        saves=options["saves"],
        checkpoint=checkpoint,
        progress=not options["no_progress"],
        metadata={"command": command_line()},
    )
    _write(ds, out_dir, checkpoint, options["as_json"], started)


def _write(ds, out_dir, checkpoint, as_json: bool, started: float) -> None:
    from .. import plot

    dataset_path = save_study(ds, out_dir, "evolution", checkpoint)
    figure_path = out_dir / "evolution.png"
    keys = ("model", "beta", "dim", "tokens", "eps")
    plot.evolution(ds, label_keys=keys).savefig(figure_path, dpi=130)
    seconds = time.perf_counter() - started
    if as_json:
        emit_json(
            {
                "kind": "evolution",
                "engine": ds.attrs["engine"],
                "points": json_points(ds),
                "series": series(ds),
                "seconds": seconds,
                "dataset": str(dataset_path),
                "figure": str(figure_path),
            }
        )
    else:
        say(f"wrote {dataset_path} and {figure_path} in {seconds:.1f} s")
