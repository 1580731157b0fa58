"""Clustering fractions against time (seed 003 Figs. 7-9) as a typed study function."""

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
from .._core.names import EVOLUTION_MODELS
from .._core.renamed import renamed, translate
from .._estimate.dataset import study_fields
from .._estimate.plan import BuiltModels, CheckedPoints
from .._io.metadata import describe, index_points
from .._models.base import AbstractModel
from .phase import (
    ModelSpec,
    MonteCarlo,
    add_layer_step,
    add_sphere_drift,
    drift_models,
    phase_points,
)
from .spec import NOISE_CLASSES, StudyModel, noise_name

#: The models, by name: full, Post-LN with matrix value noise (eq. 4 / eq. 6); hybrid,
#: scalar noise ε (eq. 7 / eq. 8); deterministic, no noise (Lemma 2's attention flow). A
#: point's ``model`` coordinate (its random numbers depend on it, so the names stay); the
#: noise each runs: :data:`attndyn._core.names.EVOLUTION_MODELS`.
MODELS = tuple(EVOLUTION_MODELS)
#: At most this many save times (each one is a plotted curve point and a dataset row).
MAX_SAVES = 100_000


def models_of(noises: Sequence[str]) -> list[str]:
    """The models that run ``noises`` (none, scalar, matrix; 0.4's full and hybrid read
    with a deprecation warning), in their order."""
    check_sequence("noises", noises)
    model_of = {noise: model for model, noise in EVOLUTION_MODELS.items()}
    return [model_of[noise_name(n, where="noises", stacklevel=4)] for n in noises]


@renamed(tokens="n_tokens")
def evolution_points(
    models: Sequence[str] | None = None,
    *,
    betas: Sequence[float | int],
    dims: Sequence[int],
    n_tokens: Sequence[int],
    eps: Sequence[float | int],
    noises: Sequence[str] | None = None,
) -> list[dict[str, Any]]:
    """Points (model, d, N, ε, β) of the ``models`` (full, hybrid, deterministic), or of
    the models that run ``noises`` (matrix, scalar, none; give one of the two). ε is NaN
    (reported as null) for the models without scalar noise, so every point has the same
    numeric coordinates. β and ε are written as floats, as the CLI writes them (see
    :func:`phase_points`); a point given twice is refused (a model given twice, or a value
    twice in a model's grid)."""
    if (models is None) == (noises is None):
        raise ParameterError("give models (full, hybrid, deterministic) or noises, not both.")
    if noises is not None:
        models = models_of(noises)
    assert models is not None
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
        noise = NOISE_CLASSES[EVOLUTION_MODELS[m]].of_fields(sigma=defaults.SIGMA, law=None)
        if noise.point_level() == "eps":  # ε is a grid axis of the noise that takes it
            axes = phase_points("beta-eps", betas=betas, dims=dims, n_tokens=n_tokens, eps=eps)
        else:
            axes = [
                {"dim": p["dim"], "n_tokens": p["n_tokens"], "eps": float("nan"), "beta": p["beta"]}
                for p in phase_points("beta-d", betas=betas, dims=dims, n_tokens=n_tokens)
            ]
        points += [{"model": m, **p} for p in axes]
    # Each model's grid was refused a repeated point by phase_points, and the models
    # differ: no point repeats (the estimator trusts them, as phase_points's).
    return CheckedPoints(points)


def study_models(spec: ModelSpec, models: Sequence[str]) -> dict[str, StudyModel]:
    """Each model's :class:`~attndyn.studies.spec.StudyModel`: ``spec``'s, with the noise
    of the model (σ and the value law ``spec``'s)."""
    return {m: spec.model.with_noise(spec.noises[EVOLUTION_MODELS[m]]) for m in models}


def point_model(models: Mapping[str, StudyModel], point: Mapping[str, Any]) -> AbstractModel:
    """The model of one evolution point (its ``model`` picks the noise)."""
    p = dict(point)
    return models[p.pop("model", "full")].model(**p)


def models_metadata(spec: ModelSpec, models: Sequence[str]) -> dict[str, Any]:
    """:meth:`ModelSpec.metadata` of the models the points run: a field the models share
    once, one that differs (the equation, the value law) per model, and a field only some
    have (σ, for matrix noise) for those only. Recording ``spec``'s own would claim matrix
    noise (and σ) for deterministic points."""
    per_model = {m: model.metadata() for m, model in study_models(spec, models).items()}
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
    checked = isinstance(points, CheckedPoints)  # evolution_points's: trusted
    points = [
        translate(dict(p), {"tokens": "n_tokens"}, "a point's key", stacklevel=3) for p in points
    ]
    points = CheckedPoints(points) if checked else points
    spec = spec.for_study("evolution")
    saveat = tuple(np.linspace(0.0, spec.study_horizon("evolution"), saves).tolist())
    timed = spec.with_saveat(saveat)
    models = list(dict.fromkeys(p.get("model", "full") for p in points))
    per_model = study_models(timed, models)

    def model_fn(**p):
        return point_model(per_model, p)

    built = BuiltModels(model_fn, points, x64=mc.x64)  # once per point, before anything runs
    record = {**study_fields("evolution"), **models_metadata(timed, models), **(metadata or {})}
    ds = mc.estimate(built, points, checkpoint=checkpoint, progress=progress, metadata=record)
    if timed.model.engine.leaves_sphere:
        add_sphere_drift(ds, drift_models(built, mc), points, seed=mc.seed)
    # The layer step of seed 003 eq. 7 (Post-LN's): another scheme's step is not that one.
    if any(model.has_layer_step for model in per_model.values()):
        add_layer_step(ds, points, timed)
    describe(ds, title=TITLE)
    return index_points(ds)


#: The ``title`` of the dataset.
TITLE = "attndyn evolution: fractions of the clustering classes against time (seed 003 Figs. 7-9)"
