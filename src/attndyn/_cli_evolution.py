"""``attndyn evolution``: clustering fractions against time (seed 003 Figs. 7-9)."""

import time

import click
import jax
import numpy as np

from ._attention import ATTENTION_KINDS
from ._cli_common import (
    check_study_options,
    cli_errors,
    command_line,
    emit_json,
    finite_or_none,
    floats,
    output_dir,
    parse_study_axes,
    save_study,
    say,
    study_checkpoint,
)
from ._cli_phase import ENGINES, json_points, phase_model, sphere_drift_of
from ._errors import ParameterError, check_bound, check_choice, check_int
from ._estimate import estimate_probabilities, grid
from ._observables import OUTCOMES
from ._plot_sde import plot_evolution
from ._values import DISTRIBUTIONS

#: full: Post-LN with full value noise (eq. 4 / eq. 6); hybrid: scalar noise ε (eq. 7 /
#: eq. 8); deterministic: ε = 0 (Lemma 2's attention flow).
MODELS = ("full", "hybrid", "deterministic")


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
def evolution(
    models,
    beta,
    dim,
    tokens,
    eps,
    sigma,
    attention,
    values,
    engine,
    depth,
    horizon,
    saves,
    solver,
    dt,
    trajectories,
    tol,
    seed,
    chunk_size,
    out,
    fresh,
    as_json,
    no_progress,
) -> None:
    """Fractions of single / antipodal / unclustered (and has-an-antipodal-pair) against
    time, with Wilson 95 % bands (seed 003 Figs. 7-9).

    Fig. 7: --beta 5 --dim 4 --tokens 50 --horizon 50. Fig. 8: --tokens 2 --dim 4,6,8,10
    --beta 0.25,1,3 --horizon 50 (and 100). Fig. 9: --model full,deterministic --beta 0.5
    --horizon 15, and --beta 4.5 --horizon 30. Writes OUT/evolution.nc and
    OUT/evolution.png.
    """
    started = time.perf_counter()
    model_names = [m.strip() for m in models.split(",") if m.strip()]
    if not model_names:
        raise ParameterError("--model is empty; give one or more of " + ", ".join(MODELS) + ".")
    for m in model_names:
        check_choice("model", m, MODELS)
    betas, dims, token_counts = parse_study_axes(beta=beta, dim=dim, tokens=tokens)
    eps_values = floats("eps", eps)
    check_bound("eps", np.asarray(eps_values), lower=0.0)
    check_int("saves", saves, lower=1)
    check_study_options(
        trajectories=trajectories,
        depth=depth,
        horizon=horizon,
        sigma=sigma,
        tol=tol,
        chunk_size=chunk_size,
        engine=engine,
        dt=dt,
    )

    points = []
    for m in model_names:
        # ε is NaN (reported as null) for the models without scalar noise, so every point
        # has the same numeric coordinates.
        eps_axis = eps_values if m == "hybrid" else [float("nan")]
        for p in grid(dim=dims, tokens=token_counts, eps=eps_axis, beta=betas):
            points.append({"model": m, **p})
    save_at = tuple(np.linspace(0.0, horizon, saves).tolist())

    def model_fn(model, **p):
        noise = {"full": "full", "hybrid": "hybrid", "deterministic": "none"}[model]
        return phase_model(
            noise=noise,
            engine=engine,
            attention=attention,
            values=values,
            sigma=sigma,
            depth=depth,
            horizon=horizon,
            solver=solver,
            dt=dt,
            save_at=save_at,
            **p,
        )

    for p in points:
        model_fn(**p)
    out_dir = output_dir(out)
    checkpoint = study_checkpoint(out_dir, "evolution", fresh=fresh)
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
            "kind": "evolution",
            "engine": engine,
            "attention": attention,
            "values": values,
            "sigma": sigma,
            "depth": depth,
            "horizon": horizon,
            "solver": solver,
            "dt": dt,
        },
    )
    if engine == "sde":
        ds["sphere_drift"] = ("point", np.asarray(sphere_drift_of(model_fn, points, seed=seed)))
    dataset_path = save_study(ds, out_dir, "evolution", checkpoint)
    keys = ("model", "beta", "dim", "tokens", "eps")
    fig = plot_evolution(ds, label_keys=keys)
    figure_path = out_dir / "evolution.png"
    fig.savefig(figure_path, dpi=130)
    seconds = time.perf_counter() - started
    if as_json:
        emit_json(
            {
                "kind": "evolution",
                "engine": engine,
                "points": json_points(ds),
                "series": series(ds),
                "seconds": seconds,
                "dataset": str(dataset_path),
                "figure": str(figure_path),
            }
        )
    else:
        say(f"wrote {dataset_path} and {figure_path} in {seconds:.1f} s")


def series(ds) -> list[dict]:
    """Per point: the save times and each outcome's fraction at every time."""
    out = []
    for i in range(ds.sizes["point"]):
        row = ds.isel(point=i)
        record = {k: _plain(row[k].item()) for k in ("model", "beta", "dim", "tokens", "eps")}
        record["time"] = [float(t) for t in ds["time"].values]
        for outcome in OUTCOMES:
            probs = row["probability"].sel(outcome=outcome).values
            record[f"p_{outcome}"] = [finite_or_none(float(v)) for v in probs]
        out.append(record)
    return out


def _plain(value):
    if isinstance(value, str):
        return value.strip('"')
    if isinstance(value, float):
        return finite_or_none(value)
    return value
