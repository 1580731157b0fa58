"""Clustering fractions against time (seed 003 Figs. 7-9) as a typed study function."""

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from .._core import defaults
from .._core.errors import (
    ParameterError,
    check_bound,
    check_choice,
    check_int,
    check_sequence,
)
from .._core.renamed import renamed, translate
from .._estimate.metadata import describe, index_points
from .._estimate.plan import BuiltModels
from .phase import (
    ModelSpec,
    MonteCarlo,
    add_layer_step,
    add_sphere_drift,
    drift_models,
    phase_model,
    phase_points,
)

#: The models, by name: full: Post-LN with full value noise (eq. 4 / eq. 6); hybrid: scalar
#: noise ε (eq. 7 / eq. 8); deterministic: ε = 0 (Lemma 2's attention flow), the model
#: whose value noise is ``"none"`` (:data:`NOISE_OF`). A model name, not a noise value.
MODELS = ("full", "hybrid", "deterministic")
#: At most this many save times (each one is a plotted curve point and a dataset row).
MAX_SAVES = 100_000
NOISE_OF = {"full": "full", "hybrid": "hybrid", "deterministic": "none"}


@renamed(tokens="n_tokens")
def evolution_points(
    models: Sequence[str],
    *,
    betas: Sequence[float | int],
    dims: Sequence[int],
    n_tokens: Sequence[int],
    eps: Sequence[float | int],
) -> list[dict[str, Any]]:
    """Points (model, d, N, ε, β). ε is NaN (reported as null) for the models without
    scalar noise, so every point has the same numeric coordinates. β and ε are written as
    floats, as the CLI writes them (see :func:`phase_points`); a point given twice is
    refused (a model given twice, or a value twice in a model's grid)."""
    axes = {"models": models, "betas": betas, "dims": dims, "n_tokens": n_tokens, "eps": eps}
    for name, values in axes.items():
        check_sequence(name, values)
    if not models:
        raise ParameterError("model is empty; give one or more of " + ", ".join(MODELS) + ".")
    for i, m in enumerate(models):
        check_choice("model", m, MODELS)
        if m in models[:i]:  # the only way two models' grids could share a point
            raise ParameterError(f"model gives {m!r} twice; give each model once.")
    check_bound("eps", np.asarray(eps, dtype=np.float64), lower=0.0)
    points = []
    for m in models:
        if m == "hybrid":
            axes = phase_points("beta-eps", betas=betas, dims=dims, n_tokens=n_tokens, eps=eps)
        else:
            axes = [
                {"dim": p["dim"], "n_tokens": p["n_tokens"], "eps": float("nan"), "beta": p["beta"]}
                for p in phase_points("beta-d", betas=betas, dims=dims, n_tokens=n_tokens)
            ]
        points += [{"model": m, **p} for p in axes]
    # Each model's grid was refused a repeated point by phase_points, and the models
    # differ: no point repeats.
    return points


def models_metadata(spec: ModelSpec, models: Sequence[str]) -> dict[str, Any]:
    """:meth:`ModelSpec.metadata` of the models the points run: a field the models share
    once, one that differs (the equation, the value law) per model, and a field only some
    have (σ, for full noise) for those only. Recording ``spec``'s own would claim full
    noise (and σ) for deterministic points."""
    per_model = {m: dataclasses.replace(spec, noise=NOISE_OF[m]).metadata() for m in models}
    record: dict[str, Any] = {}
    for key in dict.fromkeys(k for fields in per_model.values() for k in fields):
        values = {m: fields[key] for m, fields in per_model.items() if key in fields}
        shared = len(values) == len(per_model) and len({repr(v) for v in values.values()}) == 1
        record[key] = next(iter(values.values())) if shared else values
    return record


def evolution_study(
    spec: ModelSpec,
    mc: MonteCarlo,
    points: Sequence[Mapping[str, Any]],
    *,
    saves: int = defaults.STUDY_DEFAULTS["saves"]["evolution"],
    checkpoint: Path | None = None,
    progress: bool = True,
    metadata: Mapping[str, Any] | None = None,
) -> xr.Dataset:
    """Fractions of every class at ``saves`` evenly spaced times in [0, T], per point;
    each point's ``model`` picks the noise of ``spec``'s equation, and ``spec.scheme`` the
    layer map (Post-LN by default). ``spec.horizon=None`` is evolution's T = 50 (seed 003
    Figs. 7-8; :mod:`attndyn._core.defaults`)."""
    # One save would be t = 0 alone: the start, after the whole horizon was simulated.
    check_int("saves", saves, lower=2, upper=MAX_SAVES)
    points = [
        translate(dict(p), {"tokens": "n_tokens"}, "a point's key", stacklevel=3) for p in points
    ]
    spec = spec.for_study("evolution")
    saveat = tuple(np.linspace(0.0, spec.study_horizon("evolution"), saves).tolist())
    spec = dataclasses.replace(spec, saveat=saveat)
    fields = dataclasses.asdict(spec)
    del fields["noise"]

    def model_fn(model, **p):
        return phase_model(noise=NOISE_OF[model], **fields, **p)

    built = BuiltModels(model_fn, points, x64=mc.x64)  # once per point, before anything runs
    models = list(dict.fromkeys(p.get("model", "full") for p in points))
    record = {"kind": "evolution", **models_metadata(spec, models), **(metadata or {})}
    ds = mc.estimate(built, points, checkpoint=checkpoint, progress=progress, metadata=record)
    if spec.engine == "sde":
        add_sphere_drift(ds, drift_models(built, mc), points, seed=mc.seed)
    # The layer step of seed 003 eq. 7 (Post-LN's): another scheme's step is not that one.
    if "hybrid" in models and spec.engine == "discrete" and spec.scheme == "post-ln":
        add_layer_step(ds, points, spec)
    describe(ds, title=TITLE)
    return index_points(ds)


#: The ``title`` of the dataset.
TITLE = "attndyn evolution: fractions of the clustering classes against time (seed 003 Figs. 7-9)"
