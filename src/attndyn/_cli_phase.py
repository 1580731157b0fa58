"""``attndyn phase-diagram``: clustering phase diagrams with Wilson intervals."""

import functools
import time

import click
import jax
import numpy as np

from ._attention import ATTENTION_KINDS, Attention
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
    scale_options,
    study_checkpoint,
)
from ._discrete import DiscreteTransformer
from ._distributed import initialize
from ._dynamics import AbstractDynamics
from ._errors import check_bound
from ._estimate import estimate_probabilities, grid
from ._plot import plot_phase_diagram
from ._plot_sde import plot_beta_eps, plot_beta_n
from ._sde import HybridSDE, TransformerSDE
from ._sphere import uniform_sphere
from ._theory import p_antipodal_uniform
from ._values import DISTRIBUTIONS, MatrixValues, ScalarValues

KINDS = ("beta-d", "beta-eps", "beta-n")
ENGINES = ("discrete", "sde")
#: The attention each kind uses unless --attention says otherwise. Fig. 4 tests Prop. 1,
#: which holds for unnormalised attention (ε_c = √(2e^{−β})); Figs. 3 and 6 use softmax.
DEFAULT_ATTENTION = {"beta-d": "softmax", "beta-eps": "unnormalized", "beta-n": "softmax"}


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


def phase_model(
    *,
    beta: float,
    dim: int,
    tokens: int,
    eps: float | None = None,
    noise: str = "full",
    engine: str = "discrete",
    attention: str = "softmax",
    values: str = "gaussian",
    sigma: float = 1.0,
    depth: int = 20,
    horizon: float = 40.0,
    solver: str = "euler",
    dt: float = 0.01,
    save_at: tuple[float, ...] | None = None,
) -> AbstractDynamics:
    """The model of one phase-diagram point.

    ``noise="full"``: Post-LN with full value noise (003 eq. 4) or its SDE (eq. 6);
    ``noise="hybrid"``: scalar value noise ε (eq. 7) or its SDE (eq. 8);
    ``noise="none"``: deterministic values (ε = 0 of eq. 7; the ODE of Lemma 2 for the SDE
    engine, solved by the same fixed-step solver).
    """
    del dim, tokens
    att = Attention(beta, kind=attention)  # type: ignore[arg-type]
    if engine == "discrete":
        if noise == "full":
            vals = MatrixValues(sigma, distribution=values)  # type: ignore[arg-type]
        elif noise == "hybrid":
            vals = ScalarValues(eps, distribution=values)  # type: ignore[arg-type]
        else:
            vals = ScalarValues(0.0)
        return DiscreteTransformer(att, vals, depth=depth, horizon=horizon, save_at=save_at)
    if noise == "full":
        return TransformerSDE(
            att, sigma=sigma, horizon=horizon, dt=dt, solver=solver, save_at=save_at
        )
    return HybridSDE(
        att,
        eps=eps if noise == "hybrid" else 0.0,
        horizon=horizon,
        dt=dt,
        solver=solver,
        save_at=save_at,
    )


def sphere_drift_of(model_fn, points, *, seed: int, n: int = 32) -> list[float]:
    """Max | |Y_i| − 1 | over ``n`` trajectories per point of an SDE model (saved states)."""
    out = []
    for p in points:
        model = model_fn(**p)

        def one(key, model=model, p=p):
            k1, k2 = jax.random.split(key)
            x0 = uniform_sphere(key=k1, n_tokens=int(p["tokens"]), dim=int(p["dim"]))
            return model.solve(x0, key=k2).sphere_drift

        keys = jax.random.split(jax.random.key(seed + 7919), n)
        out.append(float(np.nanmax(np.asarray(jax.jit(jax.vmap(one))(keys)))))
    return out


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
def phase_diagram(
    kind,
    engine,
    beta,
    dim,
    tokens,
    trajectories,
    depth,
    horizon,
    attention,
    values,
    sigma,
    eps,
    solver,
    dt,
    tol,
    seed,
    chunk_size,
    out,
    fresh,
    as_json,
    no_progress,
    route,
    early_absorption,
    coordinator,
    process_count,
    process_id,
    exclude_nonfinite,
) -> None:
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
    # jax.distributed must be set up before any other JAX work.
    initialize(coordinator, process_count, process_id)
    writer = jax.process_index() == 0
    betas, dims, token_counts = parse_study_axes(beta=beta, dim=dim, tokens=tokens)
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
    attention = attention or DEFAULT_ATTENTION[kind]
    if kind == "beta-eps":
        eps_values = floats("eps", eps)
        check_bound("eps", np.asarray(eps_values), lower=0.0)
        points = grid(dim=dims, tokens=token_counts, eps=eps_values, beta=betas)
        noise = "hybrid"
    else:
        points = grid(dim=dims, tokens=token_counts, beta=betas)
        noise = "full"

    out_dir = output_dir(out)
    checkpoint = study_checkpoint(out_dir, "phase_diagram", fresh=fresh)
    model_fn = functools.partial(
        phase_model,
        noise=noise,
        engine=engine,
        attention=attention,
        values=values,
        sigma=sigma,
        depth=depth,
        horizon=horizon,
        solver=solver,
        dt=dt,
    )
    # Build (and so validate) every model before anything runs or is written.
    for p in points:
        model_fn(**p)
    equation = {
        ("full", "discrete"): "seed 003 eq. 4 (Post-LN, full value noise)",
        ("full", "sde"): "seed 003 eq. 6 (Transformer SDE)",
        ("hybrid", "discrete"): "seed 003 eq. 7 (Post-LN, scalar value noise)",
        ("hybrid", "sde"): "seed 003 eq. 8 (hybrid SDE)",
    }[(noise, engine)]
    metadata = {
        "command": command_line(),
        "seed": seed,
        "kind": kind,
        "engine": engine,
        "model_equation": equation,
        "attention": attention,
        "values": values,
        "horizon": horizon,
    }
    if noise == "full":
        metadata["sigma"] = sigma
    if engine == "discrete":
        metadata["depth"] = depth
    else:
        metadata.update(solver=solver, dt=dt, sphere_scheme="projection after each step")
    ds = estimate_probabilities(
        model_fn,
        points,
        key=jax.random.key(seed),
        n_trajectories=trajectories,
        tol=tol,
        chunk_size=chunk_size,
        checkpoint=checkpoint,
        progress=not no_progress and writer,
        metadata=metadata,
        route="full" if engine == "sde" else route,
        early_absorption=early_absorption or False,
        on_nonfinite="exclude" if exclude_nonfinite else "raise",
    )
    if not writer:
        return
    if kind == "beta-d":
        exact = [
            p_antipodal_uniform(p["beta"], p["dim"]) if p["tokens"] == 2 else float("nan")
            for p in points
        ]
        ds["p_antipodal_exact"] = ("point", np.asarray(exact))
        ds["p_antipodal_exact"].attrs["description"] = (
            "exact t = ∞ probability for two uniform tokens (scale-function quadrature)"
        )
    if engine == "sde":
        ds["sphere_drift"] = ("point", np.asarray(sphere_drift_of(model_fn, points, seed=seed)))
        ds["sphere_drift"].attrs["description"] = (
            "max | |Y_i| − 1 | over saved states of 32 trajectories (solver error left)"
        )
    dataset_path = save_study(ds, out_dir, "phase_diagram", checkpoint)
    if kind == "beta-d":
        fig = plot_phase_diagram(ds)
    elif kind == "beta-eps":
        fig = plot_beta_eps(ds)
    else:
        fig = plot_beta_n(ds)
    figure_path = out_dir / "phase_diagram.png"
    fig.savefig(figure_path, dpi=130)
    seconds = time.perf_counter() - started
    if as_json:
        emit_json(
            {
                "kind": kind,
                "engine": engine,
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
            name: _plain_coordinate(row[name].item())
            for name in ("model", "beta", "dim", "tokens", "eps", "sigma")
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
        if int(row["tokens"].item()) > 2:
            record["p_has_antipodal_pair"] = p("has_antipodal_pair")
        if "p_antipodal_exact" in row and np.isfinite(float(row["p_antipodal_exact"])):
            record["p_antipodal_exact"] = float(row["p_antipodal_exact"])
        if "sphere_drift" in row:
            record["sphere_drift"] = finite_or_none(float(row["sphere_drift"]))
        records.append(record)
    return records


def _plain_coordinate(value):
    """A coordinate value for JSON: strings unquoted, non-finite floats as null."""
    if isinstance(value, str):
        return value.strip('"')
    if isinstance(value, float):
        return finite_or_none(value)
    return value
