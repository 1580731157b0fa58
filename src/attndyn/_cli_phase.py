"""``attndyn phase-diagram``: clustering phase diagrams with Wilson intervals."""

import functools
import time

import click
import jax
import numpy as np

from ._attention import ATTENTION_KINDS, Attention
from ._cli_common import (
    cli_errors,
    command_line,
    emit_json,
    finite_or_none,
    floats,
    ints,
    output_dir,
    say,
)
from ._discrete import DiscreteTransformer
from ._errors import ParameterError, check_bound, check_int
from ._estimate import estimate_probabilities, grid
from ._plot import plot_phase_diagram
from ._theory import p_antipodal_uniform
from ._values import DISTRIBUTIONS, MatrixValues


def discrete_phase_model(
    *,
    beta: float,
    dim: int,
    tokens: int,
    attention: str,
    values: str,
    sigma: float,
    depth: int,
    horizon: float,
) -> DiscreteTransformer:
    """Post-LN with full value noise (003 eq. 4), uniform start, Q = K = I."""
    del dim, tokens
    return DiscreteTransformer(
        Attention(beta, kind=attention),  # type: ignore[arg-type]
        MatrixValues(sigma, distribution=values),  # type: ignore[arg-type]
        depth=depth,
        horizon=horizon,
    )


@click.command("phase-diagram")
@click.option("--beta", default="0:4:0.5", show_default=True, help="β values: a:b:step or a,b,c.")
@click.option("--dim", default="4,6,8", show_default=True, help="Dimensions d ≥ 2.")
@click.option("--tokens", default="2", show_default=True, help="Numbers of tokens N ≥ 1.")
@click.option(
    "--trajectories",
    default=1000,
    show_default=True,
    type=int,
    help="Monte Carlo trajectories per point.",
)
@click.option("--depth", default=20, show_default=True, type=int, help="L: layers per unit time.")
@click.option(
    "--horizon", default=40.0, show_default=True, type=float, help="T: time horizon (L·T layers)."
)
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
    help="Distribution of value-matrix entries.",
)
@click.option("--sigma", default=1.0, show_default=True, type=float, help="Value noise σ > 0.")
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
@cli_errors
def phase_diagram(
    beta,
    dim,
    tokens,
    trajectories,
    depth,
    horizon,
    attention,
    values,
    sigma,
    tol,
    seed,
    chunk_size,
    out,
    fresh,
    as_json,
    no_progress,
) -> None:
    """P(single) / P(antipodal) over a (β, d) grid: seed 003 Fig. 3.

    Each point simulates Post-LN with full value noise (003 eq. 4) from uniform starts on
    the sphere and writes OUT/phase_diagram.nc (probabilities, Wilson 95 % intervals,
    counts, provenance) and OUT/phase_diagram.png (Monte Carlo against the exact t = ∞
    two-token probability, β_c(d) dashed). An interrupted run resumes from
    OUT/phase_diagram.checkpoint.nc.
    """
    started = time.perf_counter()
    betas = floats("beta", beta)
    dims = ints("dim", dim)
    token_counts = ints("tokens", tokens)
    check_bound("beta", np.asarray(betas), lower=0.0)
    for d in dims:
        check_int("dim", d, lower=2)
    for n in token_counts:
        check_int("tokens", n, lower=1)
    check_int("trajectories", trajectories, lower=1)
    check_int("depth", depth, lower=1)
    check_bound("horizon", horizon, lower=0.0, lower_open=True)
    check_bound("sigma", sigma, lower=0.0, lower_open=True)
    check_bound("tol", tol, lower=0.0, upper=1.0, lower_open=True, upper_open=True)
    if chunk_size is not None:
        check_int("chunk-size", chunk_size, lower=1)

    out_dir = output_dir(out)
    dataset_path = out_dir / "phase_diagram.nc"
    checkpoint = out_dir / "phase_diagram.checkpoint.nc"
    if fresh and checkpoint.exists():
        checkpoint.unlink()
    points = grid(dim=dims, tokens=token_counts, beta=betas)
    model_fn = functools.partial(
        discrete_phase_model,
        attention=attention,
        values=values,
        sigma=sigma,
        depth=depth,
        horizon=horizon,
    )
    try:
        ds = estimate_probabilities(
            model_fn,
            points,
            key=jax.random.key(seed),
            n_trajectories=trajectories,
            tol=tol,
            chunk_size=chunk_size,
            checkpoint=checkpoint,
            progress=not no_progress,
            metadata={
                "command": command_line(),
                "seed": seed,
                "kind": "beta-d",
                "engine": "discrete",
                "model_equation": "seed 003 eq. 4 (Post-LN, full value noise)",
                "attention": attention,
                "values": values,
                "sigma": sigma,
                "depth": depth,
                "horizon": horizon,
            },
        )
    except ParameterError:
        raise
    exact = [
        p_antipodal_uniform(p["beta"], p["dim"]) if p["tokens"] == 2 else float("nan")
        for p in points
    ]
    ds["p_antipodal_exact"] = ("point", np.asarray(exact))
    ds["p_antipodal_exact"].attrs["description"] = (
        "exact t = ∞ probability for two uniform tokens (scale-function quadrature)"
    )
    ds.to_netcdf(dataset_path)
    checkpoint.unlink(missing_ok=True)
    fig = plot_phase_diagram(ds)
    figure_path = out_dir / "phase_diagram.png"
    fig.savefig(figure_path, dpi=130)
    seconds = time.perf_counter() - started
    if as_json:
        emit_json(
            {
                "points": json_points(ds),
                "seconds": seconds,
                "dataset": str(dataset_path),
                "figure": str(figure_path),
            }
        )
    else:
        say(f"wrote {dataset_path} and {figure_path} in {seconds:.1f} s")


def json_points(ds) -> list[dict]:
    """One JSON record per grid point, at the last save time."""
    last = ds.isel(time=-1)
    records = []
    for i in range(ds.sizes["point"]):
        row = last.isel(point=i)

        def p(outcome, row=row):
            return finite_or_none(float(row["probability"].sel(outcome=outcome)))

        record = {
            name: row[name].item()
            for name in ("beta", "dim", "tokens", "eps", "sigma")
            if name in row.coords
        }
        record.update(
            trajectories=int(row["n_valid"]) + int(row["n_nonfinite"]),
            n_valid=int(row["n_valid"]),
            n_nonfinite=int(row["n_nonfinite"]),
            p_single=p("single"),
            p_antipodal=p("antipodal"),
            p_unclustered=p("unclustered"),
            ci_antipodal=[
                finite_or_none(float(row["ci_lower"].sel(outcome="antipodal"))),
                finite_or_none(float(row["ci_upper"].sel(outcome="antipodal"))),
            ],
        )
        if int(record.get("tokens", 2)) > 2:
            record["p_has_antipodal_pair"] = p("has_antipodal_pair")
        if "p_antipodal_exact" in row and np.isfinite(float(row["p_antipodal_exact"])):
            record["p_antipodal_exact"] = float(row["p_antipodal_exact"])
        records.append(record)
    return records
