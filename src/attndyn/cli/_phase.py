"""``attndyn phase-diagram``: clustering phase diagrams with Wilson intervals."""

import time

import click

from .._core.attention import ATTENTION_KINDS
from .._core.values import DISTRIBUTIONS
from ..studies.phase import DEFAULT_ATTENTION, ENGINES, KINDS, phase_diagram_study, phase_points
from ..studies.summary import json_points
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
    scale_options,
    start_processes,
    study_checkpoint,
)


@click.command("phase-diagram")
@click.option(
    "--kind",
    default="beta-d",
    show_default=True,
    type=click.Choice(KINDS),
    help="beta-d: P(antipodal) over (β, d), Fig. 3; beta-eps: hybrid (β, ε) diagram, Fig. 4; "
    "beta-n: P(has an antipodal pair) over (β, N), Fig. 6.",
)
@click.option(
    "--engine",
    default="discrete",
    show_default=True,
    type=click.Choice(ENGINES),
    help="discrete: the depth-L layer maps; sde: the L → ∞ SDE (eq. 6 / eq. 8).",
)
@click.option("--beta", default="0:4:0.5", show_default=True, help="β values: a:b:step or a,b,c.")
@click.option("--dim", default="4,6,8", show_default=True, help="Dimensions d ≥ 2.")
@click.option("--tokens", default="2", show_default=True, help="Numbers of tokens N ≥ 1.")
@click.option(
    "--trajectories",
    default=2000,
    show_default=True,
    type=int,
    help="Monte Carlo trajectories per point.",
)
@click.option("--depth", default=50, show_default=True, type=int, help="L: layers per unit time.")
@click.option(
    "--horizon", default=60.0, show_default=True, type=float, help="T: time horizon (L·T layers)."
)
@click.option(
    "--attention",
    default=None,
    type=click.Choice(ATTENTION_KINDS),
    help="Attention kind [default: softmax; unnormalized for beta-eps].",
)
@click.option(
    "--values",
    default="gaussian",
    show_default=True,
    type=click.Choice(DISTRIBUTIONS),
    help="Distribution of value-matrix entries.",
)
@click.option("--sigma", default=1.0, show_default=True, type=float, help="Value noise σ > 0.")
@click.option(
    "--eps",
    default="0.1:2:0.1",
    show_default=True,
    help="Hybrid noise ε ≥ 0 (beta-eps only): a:b:step or a,b,c.",
)
@click.option(
    "--solver",
    default="euler",
    show_default=True,
    help="SDE engine: euler (projected Euler–Maruyama), heun or spark.",
)
@click.option(
    "--dt", default=0.01, show_default=True, type=float, help="SDE engine: step in (0, T]."
)
@click.option(
    "--tol", default=1e-3, show_default=True, type=float, help="Clustering tolerance in (0, 1)."
)
@click.option("--seed", default=0, show_default=True, type=int, help="PRNG seed.")
@click.option(
    "--chunk-size",
    default=None,
    type=int,
    help="Trajectories per batch (default: from device memory). Never changes results.",
)
@click.option(
    "--out",
    default="attndyn-results",
    show_default=True,
    help="Output directory for the dataset and figure.",
)
@click.option("--fresh", is_flag=True, help="Ignore a checkpoint left by an interrupted run.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object to stdout.")
@click.option("--no-progress", is_flag=True, help="Hide the progress bar.")
@scale_options
@cli_errors
def phase_diagram(**options) -> None:
    """Clustering phase diagrams with Wilson intervals (seed 003 Figs. 3, 4, 6).

    --kind beta-d (default): P(single) / P(antipodal) over (β, d), Fig. 3: Post-LN with
    full value noise (eq. 4), or its SDE (eq. 6) with --engine sde; the figure compares
    with the exact t = ∞ two-token probability, β_c(d) dashed.
    --kind beta-eps: the hybrid model (eq. 7, or eq. 8 with --engine sde) over (β, ε),
    Fig. 4 (paper: --dim 3 --depth 100 --horizon 50); cells coloured by the dominant
    outcome and shaded by its fraction, ε_c(β) = √(2e^{−β}) dashed.
    --kind beta-n: P(has an antipodal pair) against β, one curve per N in --tokens, Fig. 6.

    Uniform starts on the sphere; writes OUT/phase_diagram.nc (probabilities, Wilson 95 %
    intervals, counts, provenance; with --engine sde also the measured drift off the
    sphere) and OUT/phase_diagram.png. An interrupted run resumes from
    OUT/phase_diagram.checkpoint.nc.

    Two-token points with Gaussian values run on the exact-in-law reduced route unless
    --route full; --early-absorption EPS stops chunks whose trajectories are all
    absorbed. Several hosts: --coordinator HOST:PORT --process-count P --process-id p (or
    ATTNDYN_COORDINATOR, ATTNDYN_PROCESS_COUNT, ATTNDYN_PROCESS_ID); process 0 writes the
    outputs.
    """
    started = time.perf_counter()
    writer = start_processes(options)  # jax.distributed must start before other JAX work
    kind = options["kind"]
    points = phase_points(
        kind,
        betas=floats("beta", options["beta"]),
        dims=ints("dim", options["dim"]),
        tokens=ints("tokens", options["tokens"]),
        eps=floats("eps", options["eps"]) if kind == "beta-eps" else (),
    )
    noise = "hybrid" if kind == "beta-eps" else "full"
    spec = model_spec(
        options, noise=noise, attention=options["attention"] or DEFAULT_ATTENTION[kind]
    )
    mc = monte_carlo(options)
    out_dir = output_dir(options["out"])
    checkpoint = study_checkpoint(out_dir, "phase_diagram", fresh=options["fresh"])
    ds = phase_diagram_study(
        kind,
        spec,
        mc,
        points,
        checkpoint=checkpoint,
        progress=not options["no_progress"] and writer,
        metadata={"command": command_line()},
    )
    if writer:
        _write(ds, kind, out_dir, checkpoint, options["as_json"], started)


def _write(ds, kind: str, out_dir, checkpoint, as_json: bool, started: float) -> None:
    from .. import plot

    dataset_path = save_study(ds, out_dir, "phase_diagram", checkpoint)
    draw = {"beta-d": plot.phase_diagram, "beta-eps": plot.beta_eps, "beta-n": plot.beta_n}
    figure_path = out_dir / "phase_diagram.png"
    draw[kind](ds).savefig(figure_path, dpi=130)
    seconds = time.perf_counter() - started
    if as_json:
        emit_json(
            {
                "kind": kind,
                "engine": ds.attrs["engine"],
                "points": json_points(ds),
                "seconds": seconds,
                "dataset": str(dataset_path),
                "figure": str(figure_path),
            }
        )
    else:
        say(f"wrote {dataset_path} and {figure_path} in {seconds:.1f} s")
