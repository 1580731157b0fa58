"""``attndyn schemes``: clustering speed of the six normalization schemes (seed 004)."""

import functools
import math
from typing import TYPE_CHECKING, Any

import click

from .._core import defaults
from .._core.names import SCHEME_NAMES
from .._lazy import attach
from ._common import (
    cache_options,
    cli_errors,
    command_line,
    command_options,
    deprecated_option,
    emit_json,
    floats,
    names,
    nonempty_path,
    output_bytes,
    overwrite_option,
    png_metadata,
    save_png,
    say,
    use_cache,
)

if TYPE_CHECKING:
    from ..studies.schemes import (
        check_horizon_steps as check_horizon_steps,
        check_schemes_start as check_schemes_start,
        schemes_study as schemes_study,
        schemes_summary as schemes_summary,
    )

#: What the command runs, imported when it runs (a --help imports no JAX): read as
#: ``run.<name>`` (``from . import _schemes as run``), so a test can replace it.
__getattr__, __dir__ = attach(__name__, __file__, globals())

#: The random-weights part's own size (part c; --dim, --n-tokens, --beta do not set it).
_RW = defaults.RANDOM_WEIGHTS

#: The figures ``attndyn schemes`` writes, one per part of the study.
FIGURES = ("gamma", "ngpt_alpha", "random_weights", "rates")


@click.command("schemes")
@click.option(
    "--schemes",
    "scheme_list",
    default=",".join(SCHEME_NAMES),
    show_default=True,
    help="Comma-separated scheme names.",
)
@click.option(
    "--n-tokens",
    default=defaults.SCHEMES_N_TOKENS,
    show_default=True,
    type=int,
    help="n tokens of the symmetric start (n ≤ d), parts (a), (b), (d); not the "
    f"random-weights part (c), which runs at n = {_RW['rw_n_tokens']} (256 with --full-size).",
)
@deprecated_option("--tokens", "--n-tokens", type=int)
@click.option(
    "--dim",
    default=defaults.SCHEMES_DIM,
    show_default=True,
    type=int,
    help="d of the symmetric start's n-particle solve, part (a) (γ(t) from this start does "
    "not depend on d ≥ n); not the random-weights part (c), which runs at "
    f"d = {_RW['rw_dim']} (512 with --full-size).",
)
@click.option(
    "--beta",
    default=defaults.SCHEMES_BETA,
    show_default=True,
    type=float,
    help="β ≥ 0 of parts (a), (b), (d); not the random-weights part (c), which uses β = √d "
    f"of its own d ({math.sqrt(_RW['rw_dim']):g}; √512 with --full-size).",
)
@click.option(
    "--horizon",
    default=defaults.horizon_of("schemes"),
    show_default=True,
    type=float,
    help="T of the γ(t) curves (terminal rates run to their own horizon).",
)
@click.option(
    "--alpha",
    default=",".join(f"{a:g}" for a in defaults.SCHEMES_ALPHAS),
    show_default=True,
    help="nGPT α > 0; a list: the first is used for the scheme table, all in (b).",
)
@click.option(
    "--tau", default=defaults.TAU, show_default=True, type=float, help="Mix-LN switch τ ≥ 0."
)
@click.option(
    "--r0", default=defaults.R0, show_default=True, type=float, help="Start radius r0 > 0."
)
@click.option(
    "--seed", default=defaults.SEED, show_default=True, type=int, help="PRNG seed (random weights)."
)
@click.option(
    "--full-size",
    is_flag=True,
    help="Random weights (part c) at the paper's size: d = 512, n = 256, β = √d (default "
    f"d = {_RW['rw_dim']}, n = {_RW['rw_n_tokens']}, β = √d; --dim, --n-tokens and --beta do "
    "not apply to this part).",
)
@click.option(
    "--rw-n-layers",
    default=_RW["rw_n_layers"],
    show_default=True,
    type=int,
    metavar="L",
    help="Layers of the random-weight stacks (part c).",
)
@deprecated_option("--layers", "--rw-n-layers", type=int)
@click.option(
    "--rw-n-trajectories",
    default=_RW["rw_n_trajectories"],
    show_default=True,
    type=int,
    metavar="N",
    help="Independent trajectories through random weights (part c).",
)
@deprecated_option("--runs", "--rw-n-trajectories", type=int)
@click.option(
    "--out",
    default="attndyn-results",
    show_default=True,
    callback=nonempty_path,
    help="Output folder: schemes.nc and schemes_*.png (locked while a run uses it).",
)
@overwrite_option()
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object to stdout.")
@click.option("--no-progress", is_flag=True, help="Hide the progress bar.")
@cache_options
@cli_errors
def schemes(**raw: Any) -> None:
    """Clustering speed of the normalization schemes (seed 004 Figs 2-4, rate table).

    Parts: (a) γ(t) of every scheme from the symmetric start, (b) nGPT over --alpha,
    (c) random weights layer by layer, (d) fitted terminal rates. --n-tokens, --dim and
    --beta set (a), (b) and (d); (c) runs at its own size, d = 64, n = 32, β = √d
    (--full-size: d = 512, n = 256, the size of seed 004's Fig. 4).

    Writes OUT/schemes.nc (all curves, slopes, fitted rates with intervals, provenance)
    and OUT/schemes_{gamma,ngpt_alpha,random_weights,rates}.png. OUT is checked, and
    locked, before anything is computed; results of other arguments are never replaced
    unless --overwrite is given.
    """
    options = command_options(raw)
    from .._core.errors import INT32_MAX, check_int
    from .._estimate.dataset import attach_provenance, provenance
    from .._io.metadata import to_netcdf
    from . import _schemes as run  # this module: its lazy names, typed

    check_schemes_start, schemes_summary = run.check_schemes_start, run.schemes_summary
    from ._output import Output, result_arguments

    scheme_names = names("--schemes", options["scheme_list"])
    alphas = floats("alpha", options["alpha"])
    # Checked here as the study checks them, so that the message names the options.
    for name in ("rw_n_layers", "rw_n_trajectories"):
        check_int("--" + name.replace("_", "-"), options[name], lower=1, upper=INT32_MAX)
    use_cache(options)  # before any JAX work (the closed-form checks below compile some)
    # What the study would find only mid-run (a terminal-rate fit that cannot start by
    # t = 1e7, a start radius float32 cannot hold), refused in closed form before the
    # output folder is touched, naming the options.
    run.check_horizon_steps(options["horizon"], alphas, prefix="--")
    check_schemes_start(
        scheme_names,
        alpha=alphas[0],
        prefix="--",
        **{k: options[k] for k in ("n_tokens", "dim", "beta", "tau", "r0")},
    )
    rw: dict[str, Any] = {k: options[k] for k in ("rw_n_layers", "rw_n_trajectories")}
    if options["full_size"]:
        rw.update(rw_dim=512, rw_n_tokens=256)
    arguments = result_arguments(options)
    with Output(
        options["out"],
        dataset="schemes.nc",
        figures=[f"schemes_{key}.png" for key in FIGURES],
        arguments=arguments,
        overwrite=options["overwrite"],
        needs=output_bytes(1, n_figures=len(FIGURES)),
    ) as out:
        ds = run.schemes_study(
            schemes=scheme_names,
            alphas=alphas,
            seed=options["seed"],
            progress=not options["no_progress"],
            **{k: options[k] for k in ("n_tokens", "dim", "beta", "horizon", "tau", "r0")},
            **rw,
        )
        record = {**provenance(ds), "command": command_line(), "arguments": arguments}
        attach_provenance(ds, record)
        path = out.stage("schemes.nc", functools.partial(to_netcdf, ds))
        from .. import plot

        save = functools.partial(save_png, dpi=120, metadata=png_metadata(ds, path.name))
        for key, fig in plot.schemes(ds).items():
            out.stage(f"schemes_{key}.png", functools.partial(save, fig))
        out.commit()  # the dataset and its four figures replace the old ones together
    if options["as_json"]:
        emit_json(schemes_summary(ds))
    else:
        say(f"wrote {path} and figures in {out.folder}")
