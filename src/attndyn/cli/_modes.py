"""``attndyn modes``: many tokens from the uniform state (spec §7)."""

from __future__ import annotations

import functools
import os
import sys
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import click

from .._core import defaults
from .._core.names import (
    DISTRIBUTIONS,
    IMPLEMENTATIONS,
    SCHEME_NAMES,
    SDE_SOLVER_NAMES,
)
from .._lazy import attach
from ..studies._names import MODES_ENGINES, MODES_NOISES
from ._common import (
    attention_option,
    cache_options,
    check_engine_flags,
    cli_errors,
    command_line,
    command_options,
    deprecated_option,
    depth_conflicts,
    depth_option,
    emit_json,
    floats,
    given,
    ints,
    multi_host_options,
    nonempty_path,
    norm_option,
    output_bytes,
    overwrite_option,
    png_metadata,
    save_png,
    say,
    study_checkpoint,
    use_cache,
)

if TYPE_CHECKING:
    from ..studies.modes import (
        ModesRun as ModesRun,
        ModesSpec as ModesSpec,
        check_study as check_study,
        modes_points as modes_points,
        modes_study as modes_study,
        modes_summary as modes_summary,
    )
    from ._output import Output as Output

#: What the command runs, imported when it runs (a --help imports no JAX): read as
#: ``run.<name>`` (``from . import _modes as run``), so a test can replace it.
__getattr__, __dir__ = attach(__name__, __file__, globals())

NAME = "modes"
#: The mean-field engine's starts (attndyn.studies.mean_field.STARTS, without JAX).
MEAN_FIELD_STARTS = ("floor", "tokens")
#: Its default N: 10¹² (attndyn.studies.mean_field.DEFAULT_FLOOR_TOKENS).
MEAN_FIELD_FLOOR_EXPONENT = 12
#: Options of the particles' engines that the mean-field engine has no use for.
MEAN_FIELD_IGNORES = {
    "scheme": "the equation is the attention flow's (Post-LN's limit, rms tokens)",
    "norm": "the equation is on the unit sphere",
    "values": "its scalar noise is seed 003 eq. 8's Brownian motion",
    "depth": "it is the flow, solved by diffrax",
    "step": "it is the flow, solved by diffrax",
    "solver": "its noisy solves are Itô–Milstein steps of --dt",
    "implementation": "it has no tokens to attend",
    "tol": "a density has no clusters",
    "chunk_size": "its solves are seconds; it keeps no checkpoint",
    "x64": "it always runs in float64",
    "coordinator": "it runs in one process",
}
#: The points the command runs with no options (one place: attndyn._core.defaults).
GRID = defaults.COMMAND_GRIDS[NAME]


@click.command(NAME)
@click.option("--beta", default=None, help=f"β > 0: a:b:step or a,b,c [default: {GRID['beta']}].")
@click.option(
    "--gamma",
    default=None,
    help="Instead of --beta: β = γ log N per N (long context), γ > 0 (a list).",
)
@click.option("--dim", default=GRID["dim"], show_default=True, help="Dimensions d ≥ 2 (a list).")
@click.option(
    "--n-tokens", default=GRID["n_tokens"], show_default=True, help="Numbers of tokens N ≥ 2."
)
@deprecated_option("--tokens", "--n-tokens")
@attention_option("Attention kind (Q = K = V = I).")
@click.option(
    "--scheme",
    default=defaults.SCHEME,
    show_default=True,
    type=click.Choice(SCHEME_NAMES),
    help="Normalization scheme of the layer maps (the theory is Post-LN's).",
)
@norm_option(
    "Token normalisation of the scheme: rms (the unit sphere) or layernorm (centred: the unit "
    "sphere of the mean-zero hyperplane, d ≥ 3). Discrete engine only."
)
@click.option(
    "--noise",
    default=defaults.STUDY_DEFAULTS["noise"]["modes"],
    show_default=True,
    type=click.Choice(MODES_NOISES),
    help="Value noise added to the flow V = I/L: scalar (seed 003 eq. 7, --eps) or matrix "
    "(σ M/√L, --sigma).",
)
@click.option("--eps", default=None, help="Scalar noise levels ε ≥ 0 (--noise scalar).")
@click.option(
    "--sigma",
    default=None,
    help="Matrix noise scales σ ≥ 0 (--noise matrix; σ = 0 is the noiseless flow beside them).",
)
@click.option(
    "--values",
    default=None,
    type=click.Choice(DISTRIBUTIONS),
    help="Law of the noise [default: rademacher for scalar, gaussian for matrix].",
)
@click.option(
    "--engine",
    default=defaults.ENGINE,
    show_default=True,
    type=click.Choice(MODES_ENGINES),
    help="discrete: the depth-L layer maps of --scheme; sde: their L → ∞ limit for Post-LN "
    "with rms tokens, the hybrid SDE (seed 003 eq. 8; --noise none or scalar); mean-field: "
    "the N → ∞ limit, the continuity equation of the attention flow on S¹ or S² (d = 2, 3; "
    "--noise none or scalar; see --start).",
)
@click.option(
    "--start",
    default=None,
    type=click.Choice(MEAN_FIELD_STARTS),
    help="Mean-field engine: floor (the Gaussian law of N uniform tokens' Fourier or "
    "harmonic coefficients, N ≥ 10⁶: a perturbation of size N^-1/2 in every degree) or "
    "tokens (the empirical measure of the particles' own N tokens, seed for seed) "
    f"[default: floor, with N = 10^{MEAN_FIELD_FLOOR_EXPONENT} unless --n-tokens is given].",
)
@depth_option("L: layers per unit time.")
@click.option("--step", default=None, type=float, help="A real layer step η instead of --depth.")
@click.option(
    "--horizon", default=defaults.horizon_of("modes"), show_default=True, type=float, help="T."
)
@click.option(
    "--saves",
    default=defaults.STUDY_DEFAULTS["saves"]["modes"],
    show_default=True,
    type=int,
    help="Save times in [0, T].",
)
@click.option(
    "--solver",
    default=defaults.SOLVER,
    show_default=True,
    type=click.Choice(SDE_SOLVER_NAMES),
    help="SDE engine: euler (Itô), heun or spark (Stratonovich): diffrax's Euler, Heun, SPaRK.",
)
@click.option("--dt", default=defaults.DT, show_default=True, type=float, help="SDE engine: step.")
@click.option(
    "--implementation",
    default=defaults.IMPLEMENTATION,
    show_default=True,
    type=click.Choice(IMPLEMENTATIONS),
    help="Attention: auto attends in blocks above 2,048 tokens (memory block × N).",
)
@click.option(
    "--n-trajectories",
    default=defaults.STUDY_DEFAULTS["n_trajectories"]["modes"],
    show_default=True,
    type=int,
    help="Trajectories per point (≥ 2).",
)
@deprecated_option("--trajectories", "--n-trajectories", type=int)
@click.option(
    "--ell-max",
    default=defaults.ELL_MAX,
    show_default=True,
    type=int,
    help="Largest degree ℓ of the mode powers (raised, with a warning, to ℓ* + 1 where the "
    "theory's most unstable degree ℓ* is not below it; at most 512).",
)
@click.option(
    "--tol",
    default=None,
    type=float,
    help="Clustering tolerance in (0, 1) [default: from N and d, a tenth of the uniform "
    "spacing, at most 1e-3].",
)
@click.option("--seed", default=defaults.SEED, show_default=True, type=int, help="PRNG seed.")
@click.option(
    "--x64",
    is_flag=True,
    help="Run in float64 (states and observables): unnormalised attention at a β whose "
    "weights overflow float32 under a scheme that needs them whole (pre-ln, mix-ln, the "
    "sde engine), or clusters closer than float32's ~1e-7. About twice the time.",
)
@click.option(
    "--chunk-size",
    default=None,
    type=int,
    help="Trajectories between checkpoint writes. Never changes results.",
)
@click.option(
    "--out",
    default="attndyn-results",
    show_default=True,
    callback=nonempty_path,
    help="Output folder (modes.nc, modes.png; locked while a run uses it).",
)
@click.option("--fresh", is_flag=True, help="Delete the checkpoint of an interrupted run.")
@overwrite_option()
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object to stdout.")
@click.option("--no-progress", is_flag=True, help="Hide the progress bar.")
@multi_host_options
@cache_options
@cli_errors
def modes(**raw: Any) -> None:
    """N tokens uniform on S^(d-1): mode powers P_ℓ and cluster counts against time, the
    growth rate of each degree fitted over its linear window beside the theory 2λ_ℓ and the
    most unstable degree ℓ*, and the metastable plateau.

    Examples: --dim 2 --n-tokens 4096 --beta 4,9,16 --horizon 3 --saves 61 (the growth
    rates); --n-tokens 512 --beta 4 --noise scalar --eps 0,0.5,1 --horizon 100 (noise and
    the plateau); --dim 32 --n-tokens 64,256,1024 --gamma 0.5:2:0.25 --horizon 5 (long
    context, β = γ log N). Writes OUT/modes.nc (CF-1.10) and OUT/modes.png.

    Several hosts: --coordinator HOST:PORT --process-count P --process-id p (or
    ATTNDYN_COORDINATOR, ATTNDYN_PROCESS_COUNT, ATTNDYN_PROCESS_ID); each process runs its
    block of every point's trajectories and process 0 writes the outputs, the numbers of
    one process.
    """
    from . import _modes as run  # this module: its lazy names, typed
    from ._output import result_arguments

    started = time.perf_counter()
    options = command_options(raw)
    if options["engine"] == "mean-field":
        _mean_field(options, started)
        return
    if given("start"):
        from .._core.errors import ParameterError

        raise ParameterError("--start applies to --engine mean-field only (drop --start).")
    writer = _start(options)  # jax.distributed must start before other JAX work
    spec, mc, points = _parse(options)
    arguments = result_arguments(options)
    try:
        with _output(options, arguments, len(points), writer=writer) as out:
            checkpoint = study_checkpoint(out, NAME, fresh=options["fresh"])
            ds = run.modes_study(
                spec,
                mc,
                points,
                checkpoint=checkpoint,
                progress=not options["no_progress"] and writer,
                metadata={"command": command_line(), "arguments": arguments},
            )
            if writer:
                _finish(ds, out, checkpoint, options, started)
    except KeyboardInterrupt:
        _exit_interrupted()


def _mean_field(options: Mapping[str, Any], started: float) -> None:
    """``--engine mean-field``: the N → ∞ equation at every (d, N, β[, ε]) point, in the
    modes dataset's vocabulary (:func:`attndyn.studies.mean_field.mean_field_modes`); the
    same outputs, the JSON's points from :func:`~attndyn.studies.mean_field.mean_field_summary`."""
    from ..studies.mean_field import DEFAULT_FLOOR_TOKENS
    from ._output import result_arguments

    study, points = _mean_field_arguments(options, DEFAULT_FLOOR_TOKENS)
    arguments = result_arguments(options)
    use_cache(options)
    with _output(options, arguments, len(points)) as out:
        ds = run_mean_field(points, study, {"command": command_line(), "arguments": arguments})
        _finish(ds, out, None, options, started)


def _output(options: Mapping[str, Any], arguments, n_points: int, *, writer: bool = True):
    """The command's outputs (``NAME.nc``, ``NAME.png``), one for either engine."""
    from ._output import Output

    return Output(
        options["out"],
        dataset=f"{NAME}.nc",
        figures=[f"{NAME}.png"],
        arguments=arguments,
        overwrite=options["overwrite"],
        writer=writer,
        needs=output_bytes(n_points * options["saves"], n_figures=1),
    )


def run_mean_field(points, study: Mapping[str, Any], metadata: Mapping[str, Any]):
    """The mean-field study (a name of this module, so that a test can replace it)."""
    from ..studies.mean_field import mean_field_modes

    return mean_field_modes(points, **study, metadata=metadata)


def _mean_field_arguments(
    options: Mapping[str, Any], floor_tokens: int
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The mean-field study's arguments from the options, every one checked (exit 2, one
    line) before anything is made or solved."""
    from .._core.errors import ParameterError
    from ..studies.mean_field import check_mean_field_study, mean_field_points

    for name, why in {
        **MEAN_FIELD_IGNORES,
        "gamma": "give --beta (β = γ log N ties β to tokens the equation does not have)",
    }.items():
        if given(name):
            flag = name.replace("_", "-")
            raise ParameterError(
                f"--{flag} does not apply to --engine mean-field: {why} (drop --{flag})."
            )
    noise = options["noise"]
    if noise == "matrix" or given("sigma"):
        raise ParameterError(
            "--engine mean-field takes --noise none or scalar (matrix noise moves each token "
            "by its own rotation: no common transport of the measure)."
        )
    if given("eps") and noise != "scalar":
        raise ParameterError("--eps sets the level of --noise scalar (pass --noise scalar).")
    start = options["start"] or "floor"
    n_tokens = ints("n-tokens", options["n_tokens"]) if given("n_tokens") else [floor_tokens]
    points = mean_field_points(
        dims=ints("dim", options["dim"]),
        n_tokens=n_tokens,
        betas=floats("beta", options["beta"] or GRID["beta"]),
        eps=floats("eps", options["eps"] or "1") if noise == "scalar" else None,
    )
    study = {
        "horizon": options["horizon"],
        "saves": options["saves"],
        "ell_max": options["ell_max"],
        "seed": options["seed"],
        "attention": options["attention"],
        "n_trajectories": options["n_trajectories"],
        "start": start,
        "dt": options["dt"],
    }
    check_mean_field_study(points, **study)
    return study, points


def _start(options: Mapping[str, Any]) -> bool:
    """The compilation cache, and a multi-process run if asked (before any other JAX
    work); True on the process that writes the outputs. The tiles run on one device, so
    the CPU is not split into one device per core (phase-diagram's ``start_processes``)."""
    import jax

    from .._io.distributed import DistributedError, initialize_distributed

    use_cache(options)
    try:
        initialize_distributed(
            options["coordinator"],
            options["process_count"],
            options["process_id"],
            options["coordinator_timeout"],
            progress=True,
        )
    except DistributedError as error:  # a runtime failure (status 1), not bad input
        raise click.ClickException(str(error)) from None
    return jax.process_index() == 0


#: What a Ctrl-C prints (the words of every command: :func:`._common.cli_errors`).
INTERRUPTED = (
    "Interrupted. Rerun the same command to resume: a study with a checkpoint continues "
    "where it stopped, its finished work kept."
)


def _exit_interrupted() -> None:
    """Exit with status 130 now, after a Ctrl-C: a compiled call the study was waiting for
    (:func:`attndyn.studies._modes_calls.run_call`) may still run, and the interpreter's exit would
    wait for it (one layer of 65,536 tokens on the direct route: ~25 s on a loaded 2-core
    CPU), or crash (a SIGINT as a call was compiled ended in SIGSEGV 12 s later, measured
    before this exit). The study has written its checkpoint and released its lock, and the
    output folder's lock and staged files went with the ``with`` block, so nothing is left
    to clean up but the streams."""
    click.echo(INTERRUPTED, err=True)
    sys.stdout.flush()
    sys.stderr.flush()
    _hard_exit(130)


#: ``os._exit``, replaced in tests (it would end the test runner).
_hard_exit = os._exit


def _parse(options: Mapping[str, Any]) -> tuple[ModesSpec, ModesRun, list[dict[str, Any]]]:
    """Every option checked before anything runs (a ParameterError: exit 2, one line)."""
    from .._core.errors import ParameterError
    from ..studies.modes import ModesRun, ModesSpec
    from . import _modes as run_module  # this module: its lazy names

    check_engine_flags(options)  # --solver/--dt without the sde engine, --step/--values with it
    # --depth with the sde engine or with --step: refused after the models are built (as
    # phase-diagram and evolution do, so a value a model refuses is named first).
    conflicts = depth_conflicts(options)
    noise = options["noise"]
    for name, needs in (("eps", "scalar"), ("sigma", "matrix")):
        if given(name) and noise != needs:
            raise ParameterError(
                f"--{name} sets the level of --noise {needs}; this run has --noise {noise} "
                f"(drop --{name}, or pass --noise {needs})."
            )
    if given("values") and noise == "none":
        raise ParameterError("--values sets the law of the noise; --noise none has none.")
    if given("beta") and given("gamma"):
        raise ParameterError("give --beta or --gamma (β = γ log N), not both.")
    level_name = {"scalar": "eps", "matrix": "sigma"}.get(noise)
    default_level = {"eps": "1", "sigma": "1"}
    levels = [0.0]
    if level_name is not None:
        levels = floats(level_name, options[level_name] or default_level[level_name])
    spec = ModesSpec(
        attention=options["attention"],
        scheme=options["scheme"],
        norm=options["norm"],
        noise=noise,
        values=options["values"],
        engine=options["engine"],
        depth=defaults.DEPTH if conflicts else options["depth"],
        step=options["step"],
        horizon=options["horizon"],
        saves=options["saves"],
        solver=options["solver"],
        dt=options["dt"],
        implementation=options["implementation"],
    )
    run = ModesRun(
        n_trajectories=options["n_trajectories"],
        seed=options["seed"],
        tol=options["tol"],
        ell_max=options["ell_max"],
        chunk_size=options["chunk_size"],
        x64=options["x64"],
    )
    scales = (
        {"gammas": floats("gamma", options["gamma"])}
        if options["gamma"]
        else {"betas": floats("beta", options["beta"] or GRID["beta"])}
    )
    points = run_module.modes_points(
        dims=ints("dim", options["dim"]),
        n_tokens=ints("n-tokens", options["n_tokens"]),
        levels=levels,
        level_name=level_name,
        **scales,
    )
    # Every model built and checked (its dimension, an overflowing β, ℓ* past 512) before
    # anything runs or the output folder is made.
    run_module.check_study(spec, run, points)
    if conflicts:
        raise ParameterError(conflicts[0])
    return spec, run, points


def _summary(ds) -> list[dict[str, Any]]:
    """The JSON's points: the particles' (clusters, plateaus) or the mean field's."""
    from . import _modes as run

    if "n_clusters" in ds:
        return run.modes_summary(ds)
    from ..studies.mean_field import mean_field_summary

    return mean_field_summary(ds)


def _finish(ds, out: Output, checkpoint, options: Mapping[str, Any], started: float) -> None:
    """The dataset and its figure, replaced together (:meth:`Output.commit`); then the
    report."""
    from .. import plot
    from .._estimate.dataset import study_fields
    from .._io.metadata import to_netcdf

    dataset = out.stage(f"{NAME}.nc", functools.partial(to_netcdf, ds))
    save = functools.partial(save_png, dpi=130, metadata=png_metadata(ds, dataset.name))
    figure = out.stage(f"{NAME}.png", functools.partial(save, plot.modes(ds)))
    out.commit()
    if checkpoint is not None:
        checkpoint.unlink(missing_ok=True)
    seconds = time.perf_counter() - started
    if options["as_json"]:
        emit_json(
            {
                **study_fields(NAME),
                "points": _summary(ds),
                "seconds": seconds,
                "dataset": str(dataset),
                "figure": str(figure),
            }
        )
    else:
        say(f"wrote {dataset} and {figure} in {seconds:.1f} s")
