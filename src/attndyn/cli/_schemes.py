"""``attndyn schemes``: clustering speed of the six normalization schemes (seed 004)."""

from typing import Any

import click

from .._core.schemes import SCHEME_NAMES
from .._estimate.dataset import attach_provenance, provenance
from ..studies.schemes import schemes_study, schemes_summary
from ._common import cli_errors, command_line, emit_json, floats, output_dir, say


@click.command("schemes")
@click.option(
    "--schemes",
    "scheme_list",
    default=",".join(SCHEME_NAMES),
    show_default=True,
    help="Comma-separated scheme names.",
)
@click.option(
    "--tokens",
    default=32,
    show_default=True,
    type=int,
    help="n tokens of the symmetric start (n ≤ d).",
)
@click.option("--dim", default=32, show_default=True, type=int, help="d.")
@click.option("--beta", default=3.0, show_default=True, type=float, help="β ≥ 0.")
@click.option(
    "--horizon",
    default=60.0,
    show_default=True,
    type=float,
    help="T of the γ(t) curves (terminal rates run to their own horizon).",
)
@click.option(
    "--alpha",
    default="1,0.5,2,4",
    show_default=True,
    help="nGPT α > 0; a list: the first is used for the scheme table, all in (b).",
)
@click.option("--tau", default=0.5, show_default=True, type=float, help="Mix-LN switch τ ≥ 0.")
@click.option("--r0", default=1.0, show_default=True, type=float, help="Start radius r0 > 0.")
@click.option("--seed", default=0, show_default=True, type=int, help="PRNG seed (random weights).")
@click.option(
    "--full-size",
    is_flag=True,
    help="Random weights at the paper's size: d = 512, n = 256, β = √d.",
)
@click.option(
    "--layers", default=48, show_default=True, type=int, help="Random-weight stack depth (part c)."
)
@click.option(
    "--runs",
    default=8,
    show_default=True,
    type=int,
    help="Independent random-weight runs (part c).",
)
@click.option(
    "--out",
    default="attndyn-results",
    show_default=True,
    help="Output directory: schemes.nc and schemes_*.png.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object to stdout.")
@cli_errors
def schemes(
    scheme_list,
    tokens,
    dim,
    beta,
    horizon,
    alpha,
    tau,
    r0,
    seed,
    full_size,
    layers,
    runs,
    out,
    as_json,
) -> None:
    """Clustering speed of the normalization schemes (seed 004 Figs 2-4, rate table).

    Writes OUT/schemes.nc (all curves, slopes, fitted rates with intervals, provenance)
    and OUT/schemes_{gamma,ngpt_alpha,random_weights,rates}.png.
    """
    names = [s.strip() for s in scheme_list.split(",") if s.strip()]
    alphas = floats("alpha", alpha)
    rw: dict[str, Any] = {"rw_layers": layers, "rw_runs": runs}
    if full_size:
        rw.update(rw_dim=512, rw_tokens=256)
    ds = schemes_study(
        schemes=names,
        tokens=tokens,
        dim=dim,
        beta=beta,
        horizon=horizon,
        alphas=alphas,
        tau=tau,
        r0=r0,
        seed=seed,
        **rw,
    )
    attach_provenance(ds, {**provenance(ds), "command": command_line()})
    out_dir = output_dir(out)
    ds.to_netcdf(out_dir / "schemes.nc")
    from .. import plot

    for key, fig in plot.schemes(ds).items():
        fig.savefig(out_dir / f"schemes_{key}.png", dpi=120)
    if as_json:
        emit_json(schemes_summary(ds))
    else:
        say(f"wrote {out_dir / 'schemes.nc'} and figures in {out_dir}")
