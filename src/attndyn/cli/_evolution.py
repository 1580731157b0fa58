"""``attndyn evolution``: clustering fractions against time (seed 003 Figs. 7-9)."""

import time
from typing import TYPE_CHECKING, Any

import click

from .._core import defaults
from .._core.names import NOISE_NAMES
from .._lazy import attach
from ._common import (
    attention_option,
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
    names,
    refuse_unused,
    start_processes,
    study_checkpoint,
    study_metadata,
    study_options,
    study_output,
)

if TYPE_CHECKING:
    from ..studies.evolution import (
        evolution_points as evolution_points,
        evolution_study as evolution_study,
    )
    from ..studies.summary import series as series

#: What the command runs, imported when it runs (a --help imports no JAX): read as
#: ``run.<name>`` (``from . import _evolution as run``), so a test can replace it.
__getattr__, __dir__ = attach(__name__, __file__, globals())

#: The (t, β) heatmap of the pair density, written after the dataset and the main figure.
PAIR_DENSITY_FIGURE = "evolution_pair_density.png"
#: The points the command runs with no options (one place: attndyn._core.defaults).
GRID = defaults.COMMAND_GRIDS["evolution"]


@click.command("evolution")
@click.option(
    "--noise",
    default=defaults.NOISE,
    show_default=True,
    help="The value noise, a comma list of matrix (σ: seed 003 eq. 4, its SDE eq. 6), "
    "scalar (ε: eq. 7 / eq. 8) and none (the attention flow, Lemma 2); each is a model of "
    "the dataset, full, hybrid and deterministic (Fig. 9: matrix,none).",
)
@deprecated_option("--model", "--noise", "models")
@click.option(
    "--beta", default=GRID["beta"], show_default=True, help="β values: a:b:step or a,b,c."
)
@click.option("--dim", default=GRID["dim"], show_default=True, help="Dimensions d ≥ 2.")
@click.option(
    "--n-tokens", default=GRID["n_tokens"], show_default=True, help="Numbers of tokens N ≥ 1."
)
@deprecated_option("--tokens", "--n-tokens")
@click.option(
    "--eps",
    default=GRID["eps"],
    show_default=True,
    help="Scalar noise ε ≥ 0 (list; --noise scalar only).",
)
@attention_option("Attention kind.")
@depth_option()
@click.option(
    "--horizon",
    default=defaults.horizon_of("evolution"),
    show_default=True,
    type=float,
    help="T: time horizon.",
)
@click.option(
    "--saves",
    default=defaults.STUDY_DEFAULTS["saves"]["evolution"],
    show_default=True,
    type=int,
    help="Save times in [0, T].",
)
@study_options
@cli_errors
def evolution(**raw: Any) -> None:
    """Fractions of single / antipodal / unclustered (and has-an-antipodal-pair) against
    time, with Wilson 95 % error bars (seed 003 Figs. 7-9).

    Fig. 7: --beta 5 --dim 4 --n-tokens 50 --horizon 50. Fig. 8: --n-tokens 2 --dim 4,6,8,10
    --beta 0.25,1,3 --horizon 50 (and 100). Fig. 9: --noise matrix,none --beta 0.5
    --horizon 15, and --beta 4.5 --horizon 30. (--model full,hybrid,deterministic, 0.4's
    spelling of --noise matrix,scalar,none, still works until 0.6.) Writes OUT/evolution.nc,
    OUT/evolution.png and OUT/evolution_pair_density.png (the (t, β) heatmap of the
    fraction of pairs with cosine > 0.999). The --json series also give, at every time, the
    mean pair density and span dimension (Gram eigenvalues > 1e-3) with standard errors.

    --scheme runs the models with another normalization scheme's layer maps (seed 004:
    pre-ln, mix-ln with --tau, peri-ln, ngpt with --alpha, sqrt-scaling; discrete engine);
    the exact t = ∞ levels drawn for two tokens are Post-LN's, and drawn for it only.
    """
    started = time.perf_counter()
    options = command_options(raw)
    writer = start_processes(options)  # jax.distributed must start before other JAX work
    from .._core.errors import check_choice, check_int
    from . import _evolution as run  # this module: its lazy names, typed

    check_engine_flags(options)
    check_scheme_flags(options)
    noises = names("--noise", options["noise"])
    for noise in noises:
        check_choice("--noise", noise, NOISE_NAMES)
    points = run.evolution_points(
        noises=noises,
        betas=floats("beta", options["beta"]),
        dims=ints("dim", options["dim"]),
        n_tokens=ints("n-tokens", options["n_tokens"]),
        eps=floats("eps", options["eps"]),
    )
    # Checked here as the study checks it, before the output folder (and the space the
    # saves need) is looked at.
    from ..studies.evolution import MAX_SAVES

    check_int("saves", options["saves"], lower=2, upper=MAX_SAVES)
    spec = model_spec(options, noise="matrix", attention=options["attention"])
    mc = monte_carlo(options)
    refuse_unused([*depth_conflicts(options), *noise_conflicts(noises)], spec, points)
    with study_output(
        options,
        "evolution",
        writer=writer,
        n_cells=len(points) * options["saves"],
        more_figures=[PAIR_DENSITY_FIGURE],
    ) as out:
        checkpoint = study_checkpoint(out, "evolution", fresh=options["fresh"])
        ds = run.evolution_study(
            spec,
            mc,
            points,
            saves=options["saves"],
            checkpoint=checkpoint,
            progress=not options["no_progress"] and writer,
            metadata=study_metadata(out),
        )
        if writer:
            from .. import plot

            def draw(ds):
                return plot.evolution(ds)

            finish(
                ds,
                "evolution",
                out,
                checkpoint,
                draw,
                options,
                started,
                more_figures={PAIR_DENSITY_FIGURE: plot.pair_density},
                study="evolution",
                series=run.series(ds),
            )


def noise_conflicts(noises: list[str]) -> list[str]:
    """Messages for noise options given that no noise in --noise uses: σ scales the
    matrix noise only, ε is the scalar noise only, and no noise has no law."""
    listed = ",".join(noises)
    problems = []
    if "matrix" not in noises and given("sigma"):
        problems.append(
            f"--sigma scales the matrix value noise, and --noise {listed} has none (drop "
            "--sigma, or add matrix to --noise)."
        )
    if "scalar" not in noises and given("eps"):
        problems.append(
            f"--eps is the size of the scalar value noise, and --noise {listed} has none "
            "(drop --eps, or add scalar to --noise)."
        )
    if set(noises) <= {"none"} and given("values"):
        problems.append(
            "--values sets the law of the value noise, and --noise none has none (drop "
            "--values, or add matrix or scalar to --noise)."
        )
    return problems
