"""Shared helpers of the figure scripts (public API only)."""

import argparse
import functools
import json
import time
from pathlib import Path

import jax
import numpy as np

import attndyn as ad

ROOT = Path(__file__).resolve().parents[1]
FIGURES = ROOT / "figures"


def parser(doc: str | None, *, x64: bool = False) -> argparse.ArgumentParser:
    """The shared flags; ``x64=True`` adds ``--x64`` for the scripts that pass it on to
    :func:`run` (the others must not accept a flag they would ignore)."""
    p = argparse.ArgumentParser(description=(doc or "").splitlines()[0])
    p.add_argument("--full", action="store_true", help="the paper's scale (slow: use a GPU)")
    p.add_argument("--engine", default="discrete", choices=("discrete", "sde"))
    p.add_argument("--seed", type=int, default=0)
    if x64:
        p.add_argument(
            "--x64",
            action="store_true",
            help="float64 throughout: tokens merge numerically only ~10⁹ times closer "
            "(a check of the float32 run's merged trajectories)",
        )
        p.add_argument(
            "--checkpoint-dir",
            type=Path,
            default=None,
            metavar="DIR",
            help="save progress to DIR/<output name>.ckpt.nc and resume from it: a run "
            "stopped by a time limit goes on where it stopped, with the same numbers",
        )
    return p


def figure_stem(base: str, args) -> str:
    """The output name of a figure script: ``base``, with ``_full`` at the paper's scale
    and ``_x64`` in float64, so runs at another scale or precision never overwrite each
    other's files."""
    return base + ("_full" if args.full else "") + ("_x64" if getattr(args, "x64", False) else "")


def checkpoint_of(args, stem: str) -> Path | None:
    """The checkpoint of the study written as ``stem`` under ``--checkpoint-dir`` (one file
    per study, so a script's several studies never share one)."""
    folder = getattr(args, "checkpoint_dir", None)
    if folder is None:
        return None
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{stem}.ckpt.nc"


def run(points, *, n_trajectories, seed, saveat=None, x64=False, checkpoint=None, **model_kwargs):
    """Estimate class probabilities at ``points`` with :func:`attndyn.studies.phase_model`
    (resumable from ``checkpoint``, a netCDF path, where given)."""
    started = time.perf_counter()

    def model_fn(model="full", **p):
        noise = {"full": "matrix", "hybrid": "scalar", "deterministic": "none"}[model]
        return ad.studies.phase_model(noise=noise, saveat=saveat, **model_kwargs, **p)

    ds = ad.estimate_probabilities(
        functools.partial(model_fn),
        points,
        key=jax.random.key(seed),
        n_trajectories=n_trajectories,
        progress=False,
        on_nonfinite="exclude",
        x64=x64,
        checkpoint=checkpoint,
        # Figs. 6-9 run N ≥ 3 tokens on the float32 N × d route, where tokens of one
        # cluster merge numerically (every trajectory of Fig. 7 by t ≈ 7): the default
        # (on_merged="auto") counts them with a bound on a changed class (merge_bound),
        # reruns in float64 those it cannot bound well, and n_merged reports how many.
    )
    print(
        f"{len(points)} points x {n_trajectories} trajectories in "
        f"{time.perf_counter() - started:.0f} s",
        flush=True,
    )
    return ds


def evolution_run(points, args, stem, *, n_trajectories, depth, horizon, n_saves):
    """Class fractions against time (seed 003 Figs. 7-9): softmax attention, ``n_saves``
    evenly spaced saves on [0, horizon], the SDE engine at dt = 0.01; the study written as
    ``stem`` (its checkpoint's name)."""
    saveat = tuple(np.linspace(0, horizon, n_saves).tolist())
    return run(
        points,
        n_trajectories=n_trajectories,
        seed=args.seed,
        saveat=saveat,
        x64=args.x64,
        checkpoint=checkpoint_of(args, stem),
        engine=args.engine,
        attention="softmax",
        depth=depth,
        horizon=horizon,
        dt=0.01,
    )


def write_evolution(
    ds, stem: str, *, title: str, label_keys, dpi: int = 130, ncols: int | None = None
) -> None:
    """FIGURES/stem.png (fractions against time, panels in rows of ``ncols``) and
    FIGURES/stem.json (:func:`summary`)."""
    FIGURES.mkdir(exist_ok=True)
    fig = ad.plot.evolution(ds, label_keys=label_keys, title=title, ncols=ncols)
    fig.savefig(FIGURES / f"{stem}.png", dpi=dpi)
    summary(ds, FIGURES / f"{stem}.json")


def read_summary(path: Path) -> list[dict]:
    """The rows of a written :func:`summary`, in today's names: summaries written before
    0.5 name N ``tokens`` (the committed Fig. 6 summaries are such)."""
    return [
        {("n_tokens" if key == "tokens" else key): value for key, value in row.items()}
        for row in json.loads(path.read_text())
    ]


def summary(ds, path: Path) -> None:
    """Last-time probabilities with Wilson intervals, printed and written as JSON."""
    last = ds.isel(time=-1)
    rows = []
    for i in range(ds.sizes["point"]):
        r = last.isel(point=i)
        row = {
            k: _plain(r[k].item())
            for k in ("model", "beta", "dim", "n_tokens", "eps")
            if k in r.coords
        }
        for o in ("single", "antipodal", "has_antipodal_pair", "unclustered"):
            row[o] = [
                float(r["probability"].sel(outcome=o)),
                float(r["ci_lower"].sel(outcome=o)),
                float(r["ci_upper"].sel(outcome=o)),
            ]
        # Trajectories whose tokens merged numerically by the last save (counted), those
        # rerun in float64, the bound on merged ones in a wrong class, and the interval
        # that holds with it.
        row["n_merged"] = int(r["n_merged"])
        row["n_rerun"] = int(r["n_rerun"]) if "n_rerun" in r else 0
        if row["n_merged"]:
            row["merge_bound"] = _plain(float(r["merge_bound"]))
            row["merge_ci"] = {
                o: [
                    float(r["merge_ci_lower"].sel(outcome=o)),
                    float(r["merge_ci_upper"].sel(outcome=o)),
                ]
                for o in ("single", "antipodal", "has_antipodal_pair", "unclustered")
            }
        for name in ("p_antipodal_exact", "p_antipodal_pair_three_tokens"):  # theory, where given
            if name in r and np.isfinite(float(r[name])):
                row[name] = float(r[name])
        rows.append(row)
    path.write_text(json.dumps(rows, indent=1))
    for row in rows:
        print(row)


def _plain(v):
    if isinstance(v, str):
        return v.strip('"')
    if isinstance(v, float) and not np.isfinite(v):
        return None
    return v
