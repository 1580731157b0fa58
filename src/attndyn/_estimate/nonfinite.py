"""What the estimator says about trajectories that the arithmetic broke.

A trajectory is broken when a number of it turned NaN or infinite, or it broke an
invariant of its model (a row off the unit sphere, a cosine outside [−1, 1]:
:func:`.runner.observe`). In a float32 study the estimator reruns such a trajectory in
float64 from the same random numbers wherever the model computes the same path there
(:mod:`.merges`); the message here is for those that stay broken: float64 broke them too,
or no rerun applied. It names the point, the first such trajectory's index and its key,
and the causes that apply to the model (:func:`.diagnose.overflow_message`).
"""

import jax
import numpy as np
from jaxtyping import PRNGKeyArray

from .diagnose import overflow_message
from .keys import Point, trajectory_key
from .plan import Plan, PointPlan


def key_text(key: PRNGKeyArray, point: Point, index: int) -> str:
    """The key of trajectory ``index`` at ``point``, as code that rebuilds it."""
    data = np.asarray(jax.random.key_data(trajectory_key(key, point, index))).tolist()
    impl = str(jax.random.key_impl(key))
    spelled = "" if impl.endswith("threefry2x32") else f", impl={impl!r}"
    return f"jax.random.wrap_key_data(np.uint32({data}){spelled})"


def where_broken(plan: Plan, point: PointPlan) -> str:
    """In which precision the broken trajectories broke, and whether a rerun was tried."""
    if plan.x64:
        return "in float64"
    if point.model.same_path_in_float64:
        return "in float32 and again when rerun in float64 from the same random numbers"
    return (
        "in float32 (not rerun in float64: this model's float64 run draws other paths; a "
        "study with x64=True, CLI --x64, runs them all in float64)"
    )


def nonfinite_message(
    plan: Plan,
    point: PointPlan,
    *,
    bad: int,
    done: int,
    key: PRNGKeyArray,
    first: int | None,
) -> str:
    """Why the estimator stops (or warns) at ``point``: ``bad`` of ``done`` trajectories
    stayed broken, the first of those this run found being ``first`` (``None`` when it
    does not know it: a resumed run, or several processes)."""
    text = (
        f"{bad} of {done} trajectories at point {point.point} broke "
        f"{where_broken(plan, point)}: they became NaN or infinite, or broke an invariant "
        "of the model (a row off the unit sphere, a cosine outside [−1, 1]). "
        f"{overflow_message(point.user_model, radius=plan.radius)}"
    )
    if first is not None:
        text += (
            f" The first is trajectory {first}, key {key_text(key, point.point, first)} "
            f"(on the {point.route} route, {type(point.model).__name__}; its start and noise "
            "keys are jax.random.split of it: see the safety guide to run it alone)."
        )
    return text
