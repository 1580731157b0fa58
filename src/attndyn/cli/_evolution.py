"""``attndyn evolution``: clustering fractions against time (seed 003 Figs. 7-9)."""

import sys
import time
from typing import Any

import click

from .._core import defaults
from ._common import (
    attention_option,
    check_engine_flags,
    check_scheme_flags,
    cli_errors,
    command_options,
    deprecated_option,
    depth_conflicts,
    finish,
    floats,
    given,
    ints,
    lazy_names,
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

#: What the command runs, imported when it runs (a --help imports no JAX).
__getattr__ = lazy_names(
    __name__,
    {
        "evolution_points": ".studies.evolution",
        "evolution_study": ".studies.evolution",
        "series": ".studies.summary",
    },
)

#: The (t, β) heatmap of the pair density, written after the dataset and the main figure.
PAIR_DENSITY_FIGURE = "evolution_pair_density.png"
#: The points the command runs with no options (one place: attndyn._core.defaults).
GRID = defaults.COMMAND_GRIDS["evolution"]


@click.command("evolution")
@click.option(
    "--model",
    "models",
    default="full",
    show_default=True,
    help="Comma list of full, hybrid, deterministic (Fig. 9: full,deterministic).",
)
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
    help="Hybrid noise ε ≥ 0 (list; --model hybrid only).",
)
@attention_option("Attention kind.")
@click.option(
    "--depth",
    default=defaults.DEPTH,
    show_default=True,
    type=int,
    help="L: layers per unit time (discrete engine; not with --step).",
)
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
    --beta 0.25,1,3 --horizon 50 (and 100). Fig. 9: --model full,deterministic --beta 0.5
    --horizon 15, and --beta 4.5 --horizon 30. Writes OUT/evolution.nc,
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
    run = sys.modules[__name__]  # the study's names, loaded now (see __getattr__)
    check_engine_flags(options)
    check_scheme_flags(options)
    models = names("--model", options["models"])
    points = run.evolution_points(
        models,
        betas=floats("beta", options["beta"]),
        dims=ints("dim", options["dim"]),
        n_tokens=ints("n-tokens", options["n_tokens"]),
        eps=floats("eps", options["eps"]),
    )
    # Checked here as the study checks it, before the output folder (and the space the
    # saves need) is looked at.
    from .._core.errors import check_int
    from ..studies.evolution import MAX_SAVES

    check_int("saves", options["saves"], lower=2, upper=MAX_SAVES)
    spec = model_spec(options, noise="full", attention=options["attention"])
    mc = monte_carlo(options)
    refuse_unused([*depth_conflicts(options), *model_conflicts(models)], spec, points)
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
                kind="evolution",
                series=run.series(ds),
            )


def model_conflicts(models: list[str]) -> list[str]:
    """Messages for noise options given that no model in --model uses: σ scales the
    value noise of full only, ε is the noise of hybrid only, and deterministic values
    have no law."""
    listed = ",".join(models)
    problems = []
    if "full" not in models and given("sigma"):
        problems.append(
            f"--sigma scales the value noise of --model full, and --model {listed} has no "
            "full model (drop --sigma, or add full to --model)."
        )
    if "hybrid" not in models and given("eps"):
        problems.append(
            f"--eps is the noise of --model hybrid, and --model {listed} has no hybrid "
            "model (drop --eps, or add hybrid to --model)."
        )
    if set(models) <= {"deterministic"} and given("values"):
        problems.append(
            "--values sets the law of the value noise, and --model deterministic has none "
            "(drop --values, or add full or hybrid to --model)."
        )
    return problems
