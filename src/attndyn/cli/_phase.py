"""``attndyn phase-diagram``: clustering phase diagrams with Wilson intervals."""

import time
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import click

from .._core import defaults
from .._core.defaults import COMMAND_GRIDS
from .._core.names import ATTENTION_KINDS
from .._lazy import attach
from ..studies._names import DEFAULT_ATTENTION, DIAGRAMS, NOISE_OF_DIAGRAM
from ._common import (
    check_engine_flags,
    check_scheme_flags,
    cli_errors,
    command_options,
    deprecated_option,
    depth_conflicts,
    depth_option,
    finish,
    floats,
    given,
    ints,
    model_spec,
    monte_carlo,
    refuse_unused,
    say,
    start_processes,
    study_checkpoint,
    study_metadata,
    study_options,
    study_output,
)

#: The points the command runs with no options (one place: attndyn._core.defaults).
GRID = COMMAND_GRIDS["phase-diagram"]
#: What --diagram beta-eps runs where it differs from GRID (seed 003 Fig. 4's d = 3).
BETA_EPS_GRID = COMMAND_GRIDS["phase-diagram --diagram beta-eps"]

if TYPE_CHECKING:
    from ..studies.phase import (
        phase_diagram_study as phase_diagram_study,
        phase_points as phase_points,
    )
    from ..theory import EXACT_BETA_MAX as EXACT_BETA_MAX

#: What the command runs, imported when it runs (a --help imports no JAX): read as
#: ``run.<name>`` (``from . import _phase as run``), so a test can replace it.
__getattr__, __dir__ = attach(__name__, __file__, globals())


@click.command("phase-diagram")
@click.option(
    "--diagram",
    default=defaults.DIAGRAM,
    show_default=True,
    type=click.Choice(DIAGRAMS),
    help="beta-d: P(antipodal) over (β, d), Fig. 3; beta-eps: hybrid (β, ε) diagram, Fig. 4; "
    "beta-n: P(has an antipodal pair) over (β, N), Fig. 6.",
)
@deprecated_option("--kind", "--diagram", type=click.Choice(DIAGRAMS))
@click.option(
    "--beta",
    default=GRID["beta"],
    help=f"β values: a:b:step or a,b,c [default: {GRID['beta']}: both sides of β_c(d) for "
    "d = 4, 6, 8, none within 0.14 of one, where a finite horizon cannot settle].",
)
@click.option(
    "--dim",
    default=GRID["dim"],
    help=f"Dimensions d ≥ 2 [default: {GRID['dim']}; {BETA_EPS_GRID['dim']} for --diagram "
    "beta-eps, as seed 003 Fig. 4].",
)
@click.option(
    "--n-tokens", default=GRID["n_tokens"], show_default=True, help="Numbers of tokens N ≥ 1."
)
@deprecated_option("--tokens", "--n-tokens")
@depth_option()
@click.option(
    "--horizon",
    default=defaults.horizon_of("phase-diagram"),
    show_default=True,
    type=float,
    help="T: time horizon (L·T layers).",
)
@click.option(
    "--attention",
    default=None,
    type=click.Choice(ATTENTION_KINDS),
    help="Attention kind [default: softmax; unnormalized for beta-eps].",
)
@click.option(
    "--eps",
    default=GRID["eps"],
    show_default=True,
    help="Hybrid noise ε ≥ 0 (beta-eps only): a:b:step or a,b,c.",
)
@study_options
@cli_errors
def phase_diagram(**raw: Any) -> None:
    """Clustering phase diagrams with Wilson intervals (seed 003 Figs. 3, 4, 6).

    --diagram beta-d (default): P(single) / P(antipodal) over (β, d), Fig. 3: Post-LN with
    full value noise (eq. 4), or its SDE (eq. 6) with --engine sde; the figure compares
    with the exact t = ∞ two-token probability, β_c(d) dashed.
    --diagram beta-eps: the hybrid model (eq. 7, or eq. 8 with --engine sde) over (β, ε),
    Fig. 4 (paper: --depth 100 --horizon 50; d = 3 by default); cells coloured by their
    most likely class and shaded by its probability, ε_c(β) = √(2·exp(−β)) dashed, cells
    whose layer step exceeds 0.1 hatched (the dataset's far_from_limit).
    --diagram beta-n: P(has an antipodal pair) against β, one curve per N and d, Fig. 6.

    --scheme runs the same diagram for another normalization scheme of seed 004 (pre-ln,
    mix-ln with --tau, peri-ln, ngpt with --alpha, sqrt-scaling; discrete engine): the
    value noise is the diagram's, and the figure draws no exact curve or threshold, which are
    Post-LN's.

    Uniform starts on the sphere; writes OUT/phase_diagram.nc (probabilities, Wilson 95 %
    intervals, counts, provenance; with --engine sde also the measured drift off the
    sphere) and OUT/phase_diagram.png. An interrupted run resumes from
    OUT/phase_diagram.checkpoint.nc (with any --chunk-size; --fresh starts afresh). OUT is
    locked while a run uses it, and results of other arguments are never replaced unless
    --overwrite is given.

    Two-token points with Gaussian values run on the exact-in-law reduced route unless
    --route full; there, trajectories whose class can change later only with probability
    below 1e-7 stop early (--early-absorption auto, the default; a bound EPS, or off).
    Several hosts: --coordinator HOST:PORT --process-count P --process-id p (or
    ATTNDYN_COORDINATOR, ATTNDYN_PROCESS_COUNT, ATTNDYN_PROCESS_ID); process 0 writes the
    outputs.
    """
    started = time.perf_counter()
    options = command_options(raw)
    writer = start_processes(options)  # jax.distributed must start before other JAX work
    from . import _phase as run  # this module: its lazy names, typed

    phase_points, EXACT_BETA_MAX = run.phase_points, run.EXACT_BETA_MAX
    check_engine_flags(options)
    check_scheme_flags(options)
    diagram = options["diagram"]
    # beta-eps's own d grid (seed 003 Fig. 4) where --dim is left out.
    beta_eps = diagram == "beta-eps"
    dims = BETA_EPS_GRID["dim"] if beta_eps and not given("dim") else options["dim"]
    points = phase_points(
        diagram,
        betas=floats("beta", options["beta"]),
        dims=ints("dim", dims),
        n_tokens=ints("n-tokens", options["n_tokens"]),
        eps=floats("eps", options["eps"]) if beta_eps else (),
    )
    if diagram == "beta-d" and writer and any(p["beta"] > EXACT_BETA_MAX for p in points):
        say(
            f"note: the exact t = ∞ curve is left out (NaN) for β > {EXACT_BETA_MAX:g}, beyond "
            "its quadrature (it is within 1e-3 of its limit 1/2 there)."
        )
    attention = options["attention"] or DEFAULT_ATTENTION[diagram]
    # The arguments recorded with the results (and compared with those already in --out)
    # are the ones in effect: the diagram's default attention, no ε outside beta-eps.
    in_effect: dict[str, Any] = {
        **options,
        "dim": dims,
        "attention": attention,
        "eps": options["eps"] if beta_eps else None,
    }
    options = MappingProxyType(in_effect)
    spec = model_spec(options, noise=NOISE_OF_DIAGRAM[diagram], attention=attention)
    mc = monte_carlo(options)
    refuse_unused([*depth_conflicts(options), *diagram_conflicts(diagram)], spec, points)
    # One save time (T) a point.
    with study_output(options, "phase_diagram", writer=writer, n_cells=len(points)) as out:
        checkpoint = study_checkpoint(out, "phase_diagram", fresh=options["fresh"])
        ds = run.phase_diagram_study(
            diagram,
            spec,
            mc,
            points,
            checkpoint=checkpoint,
            progress=not options["no_progress"] and writer,
            metadata=study_metadata(out),
        )
        if writer:
            from .. import plot

            draw = {"beta-d": plot.phase_diagram, "beta-eps": plot.beta_eps, "beta-n": plot.beta_n}
            figure = draw[diagram]
            finish(
                ds,
                "phase_diagram",
                out,
                checkpoint,
                figure,
                options,
                started,
                study="phase-diagram",
                diagram=diagram,
            )


def diagram_conflicts(diagram: str) -> list[str]:
    """Messages for noise options given that ``diagram`` ignores: ε is the scalar noise of
    beta-eps only, and σ scales the full value noise of beta-d and beta-n only."""
    if diagram != "beta-eps" and given("eps"):
        return [
            f"--eps applies to --diagram beta-eps only; --diagram {diagram} has full value "
            "noise, scaled by --sigma (drop --eps, or add --diagram beta-eps)."
        ]
    if diagram == "beta-eps" and given("sigma"):
        return [
            "--sigma applies to --diagram beta-d and beta-n only; --diagram beta-eps has scalar "
            "value noise of size --eps (drop --sigma, and set the noise with --eps)."
        ]
    return []
