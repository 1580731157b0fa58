"""What a finished (or stopped) probability study tells its user: the merge and
non-finite messages, the arguments refused before it runs (metadata, checkpoint path),
and its provenance record."""

import dataclasses
import os
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from .._core import defaults
from .._core.errors import NumericalMergeWarning, ParameterError
from .._io.files import writable_folder
from .._io.runtime import compile_seconds
from .._models.merging import resolution_gap
from .dataset import provenance_record, study_fields
from .merges import BOUND_UNIT
from .plan import Plan
from .tallies import Tallies

#: The provenance fields the estimator records itself (:func:`provenance`): ``metadata``
#: may not name them. ``study``, ``diagram`` and ``kind`` (:func:`study_fields`) are not
#: among them: a study names itself.
ESTIMATOR_FIELDS = (
    "key_data",
    "n_trajectories",
    "tol",
    "radius",
    "chunk_size",
    "tiles",
    "devices",
    "prng_impl",
    "route",
    "routes",
    "simulated",
    "route_requested",
    "early_absorption",
    "process_count",
    "dtype",
    "compile_seconds",
    "on_nonfinite",
    "nonfinite_rerun",
    "on_merged",
    "merges",
    "model",
    "signature",
    "runs",
)


def merge_message(plan: Plan, tallies: Tallies, index: int) -> str:
    """Where and how often tokens merged at point ``index``, and the ways out."""
    merged = tallies.n_merged[index]
    first = int(np.argmax(merged > 0))
    dtype = "float64" if plan.x64 else "float32"
    ways_out = "a reduced route (route='auto', where one applies)" + (
        "" if plan.x64 else " or x64=True (CLI: --x64)"
    )
    return (
        f"tokens merged numerically in {int(merged.max())} of {int(tallies.n_valid[index])} "
        f"trajectories at {plan.points[index].point} (first at t = "
        f"{plan.save_times[first]:.4g}): {dtype} cannot resolve their gap, so the "
        f"arithmetic, not the dynamics, fixes their class; {ways_out} resolves far smaller "
        "gaps."
    )


def warn_merged(plan: Plan, tallies: Tallies) -> None:
    """Tell the user where tokens merged numerically (``on_merged`` "count" or "exclude":
    "raise" stopped at the first merge, and "auto" bounded them); ``n_merged`` says how
    many."""
    points = [i for i, n in enumerate(tallies.n_merged.max(axis=1)) if n > 0]
    if not points or plan.on_merged == "auto":
        return
    done = "counted in their class" if plan.on_merged == "count" else "excluded"
    warnings.warn(
        f"at {len(points)} of {len(plan.points)} points: "
        f"{merge_message(plan, tallies, points[0])} They are {done} (on_merged="
        f"{plan.on_merged!r}); n_merged says how many at each point and save time.",
        NumericalMergeWarning,
        stacklevel=3,
    )


def unbounded_message(plan: Plan, tallies: Tallies, index: int) -> str:
    """Why ``on_merged="auto"`` stops at point ``index``, and what to pass instead."""
    point = plan.points[index]
    law = point.model.merge_law(point.dim)
    why = (
        f"no law of a merged pair's gap is derived for {type(point.user_model).__name__} "
        "with these options"
        if law is None
        else "their gap can grow back there (e.g. the hybrid model above ε_c, where +1 "
        "repels), so no bound on a changed class holds"
    )
    precision = "" if plan.x64 or not point.model.same_path_in_float64 else " in float64"
    return (
        f"tokens stayed merged numerically{precision} in {int(tallies.n_unbounded[index])} "
        f"of {int(tallies.n_valid[index])} trajectories at {point.point} and {why}: the "
        "arithmetic, not the dynamics, would fix their class. Pass on_merged='count' "
        "(CLI: --on-merged count, with --fresh) to count them in that class, or 'exclude' "
        "to drop them; n_merged and merge_ci report them either way."
    )


def check_metadata(metadata: Mapping[str, Any] | None) -> None:
    """Refuse, before anything runs, metadata keys that the provenance records itself: they
    would either fail after the simulation (a key passed twice) or overwrite the record of
    what ran (the package version, the trajectory count...)."""
    if metadata is None:
        return
    if not isinstance(metadata, Mapping):
        raise ParameterError(
            f"metadata must be a dict of extra provenance; got {type(metadata).__name__}."
        )
    reserved = sorted({*provenance_record(0.0), *ESTIMATOR_FIELDS})
    taken = [k for k in metadata if k in reserved]
    if taken:
        raise ParameterError(
            f"metadata names {', '.join(map(repr, taken))}, which the provenance records "
            f"itself; use other keys than {', '.join(reserved)}."
        )


def check_checkpoint_path(checkpoint: str | os.PathLike) -> Path:
    """A checkpoint path that can be written: not a folder, in an existing writable folder
    (a mistyped folder is refused rather than created, wherever it would land)."""
    if not isinstance(checkpoint, str | os.PathLike) or not str(checkpoint):
        raise ParameterError(
            f"checkpoint={checkpoint!r} must be a file path (a str or pathlib.Path, e.g. "
            "'runs/study.nc'), or None for no checkpoint."
        )
    path = Path(checkpoint)
    if path.is_dir():
        raise ParameterError(
            f"checkpoint={str(path)!r} is a folder; give a file path (e.g. {str(path / 'x.nc')!r})."
        )
    if not path.parent.exists():
        raise ParameterError(
            f"checkpoint={str(path)!r} is in a folder that does not exist "
            f"({str(path.parent)!r}); create it first, or give a path in an existing folder."
        )
    writable_folder(path.parent, "the checkpoint's folder")
    return path


def merge_provenance(plan: Plan, tallies: Tallies) -> dict[str, Any] | None:
    """What ``on_merged="auto"`` did and assumed (``None`` under the other choices): the
    bound it rests on, and per point the trajectories rerun in float64, the largest summed
    bound over save times and the merge law (``None`` where the model has none)."""
    if plan.on_merged != "auto":
        return None
    laws = [p.model.merge_law(p.dim) for p in plan.points]
    return {
        "bound": (
            "a merged pair's gap returns to tol with probability <= 2 (delta/tol)^kappa, "
            "kappa the least exponent of its gap's diffusion (worst over the gap's "
            "direction) at the save times since it merged, delta the float's resolution"
        ),
        "assumes": (
            "the diffusion limit of the model (finite L close to it), and an exponent "
            "between save times no smaller than at them"
        ),
        "rerun_above": defaults.CLASS_CHANGE_BOUND,
        "resolution_gap": {
            "float32": resolution_gap(np.float32, 1),
            "float64": resolution_gap(np.float64, 1),
            "per": "coordinate",
        },
        "n_rerun": tallies.n_rerun.tolist(),
        "merge_bound_max": (tallies.merge_bound.max(axis=1) / BOUND_UNIT).tolist(),
        "laws": [None if law is None else dataclasses.asdict(law) for law in laws],
    }


def provenance(
    plan: Plan, study: Any, tallies: Tallies, metadata: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The provenance record of a finished ``estimate_probabilities`` study: the
    estimator's fields, then the models' own (:func:`model_fields`), then the study's
    (its names, :func:`study_fields`, and ``metadata``, which name a model field again
    where they record it)."""
    estimator = estimator_fields(plan, study, tallies)
    models = {k: v for k, v in model_fields(plan).items() if k not in estimator}
    fields: dict[str, Any] = {**study_fields("probabilities"), **(dict(metadata or {}))}
    return provenance_record(tallies.seconds, **estimator, **{**models, **fields})


def model_fields(plan: Plan) -> dict[str, Any]:
    """The fields the points' models record themselves (:meth:`AbstractModel.provenance`:
    a layer map's ``depth`` or ``step``), so that a dataset of a direct
    ``estimate_probabilities`` call carries them as a study's does (its figures' titles
    read ``depth``): a field every point's model gives alike once, one they give
    differently as a list, point by point (``None`` where a model does not give it)."""
    per_point = [p.user_model.provenance() for p in plan.points]
    names = dict.fromkeys(name for fields in per_point for name in fields)
    recorded: dict[str, Any] = {}
    for name in names:
        values = [fields.get(name) for fields in per_point]
        shared = all(repr(v) == repr(values[0]) for v in values)
        recorded[name] = values[0] if shared else values
    return recorded


def estimator_fields(plan: Plan, study: Any, tallies: Tallies) -> dict[str, Any]:
    """What the estimator records of how it ran."""
    routes = plan.routes
    gaps = [p.model.absorption_gaps() for p in plan.points]
    return dict(
        key_data=study.key_data,
        n_trajectories=plan.n_trajectories,
        tol=plan.tol,
        radius=plan.radius,
        chunk_size=max(study.chunks) if study.chunks else plan.chunk_size,
        tiles=study.tiles,
        devices=[str(d) for d in study.devices],
        prng_impl=study.prng_impl,
        route=routes[0] if len(set(routes)) == 1 else "mixed",
        routes=routes,
        simulated=[type(p.model).__name__ for p in plan.points],
        route_requested=plan.route,
        early_absorption=None
        if plan.absorption_bound is None
        else {"bound": plan.absorption_bound, "gaps": [list(g) if g else None for g in gaps]},
        process_count=study.process[1],
        dtype="float64" if plan.x64 else "float32",
        compile_seconds=compile_seconds() - study.compile_before,
        on_nonfinite=plan.on_nonfinite,
        # Per point: trajectories float32 broke, rerun in float64 (those float64 ran
        # through are counted; the others are in n_nonfinite).
        nonfinite_rerun=tallies.n_nonfinite_rerun.tolist(),
        on_merged=plan.on_merged,
        merges=merge_provenance(plan, tallies),
        model=repr(plan.points[0].user_model),
        signature=study.signature,
        runs=tallies.runs,
    )
