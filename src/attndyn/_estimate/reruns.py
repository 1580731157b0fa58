"""A probability study's merged and broken trajectories, per call: float64 reruns from
the same random numbers, the merge bounds and the stops (:mod:`.merges` has the
mathematics; this is the estimator's side of it)."""

import functools
from collections.abc import Callable
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import PRNGKeyArray

from .._core.errors import NumericalMergeError
from .._models.base import AbstractModel
from .merges import RERUN_TILE, Resolution, Trajectories, resolve, tallies_of
from .plan import Plan, to_float64
from .reports import merge_message, unbounded_message
from .runner import Blocks, TileResults
from .tallies import Tallies


def host_trajectories(results: TileResults, saves: np.ndarray) -> Trajectories:
    """A call's per-trajectory results on the host (with ``saves`` for its states)."""
    _, _, _, cosines, densities, spans, merged, _ = results.tallied
    return Trajectories(
        np.asarray(results.classes),
        np.asarray(results.valid),
        np.asarray(cosines),
        np.asarray(densities),
        np.asarray(spans),
        np.asarray(merged),
        saves,
    )


def merged_states(saves: jax.Array, rows: np.ndarray) -> np.ndarray:
    """The saved states of the trajectories ``rows`` on the host. A CPU's arrays are host
    memory already; an accelerator sends only those rows, gathered in a batch padded to a
    power of two (a handful of compiled shapes, not one per count)."""
    if all(d.platform == "cpu" for d in saves.devices()):
        return np.asarray(saves)[rows]
    size = 1 << max(0, int(rows.size - 1).bit_length())
    padded = np.resize(rows, size)
    return np.asarray(jnp.take(saves, jnp.asarray(padded), axis=0))[: rows.size]


class MergeHandling:
    """The probability study's (:class:`.estimator._Study`) handling of one call's merged
    and broken trajectories. It runs float64 reruns through the study's ``simulate``."""

    # What it reads of the study.
    plan: Plan
    tiles: list[int]
    tallies: Tallies
    checkpoint: Path | None
    models64: dict[int, tuple[AbstractModel, Blocks]]
    simulate: Callable[..., TileResults]
    save: Callable[[], None]

    def resolve_call(
        self, index: int, results: TileResults, key: PRNGKeyArray, first: int, stop: int
    ) -> tuple[tuple, Resolution]:
        """The call's tallies after rerunning its broken trajectories in float64 and, with
        ``on_merged="auto"``, bounding, rerunning and counting its merged ones
        (:func:`.merges.resolve`), and what that did (for the tallies)."""
        plan, point = self.plan, self.plan.points[index]
        tallied = results.tallied
        saves = results.saves
        merged = np.asarray(tallied[6])
        auto = plan.on_merged == "auto"
        rows = np.flatnonzero(merged.any(axis=1)) if auto else np.zeros(0, np.int64)
        saves_host = np.zeros((merged.shape[0], *saves.shape[1:]), saves.dtype)
        if rows.size:
            saves_host[rows] = merged_states(saves, rows)
        trajectories = host_trajectories(results, saves_host)
        tile = self.tiles[index]
        tiles = [np.arange(i, min(i + tile, merged.shape[0])) for i in range(0, len(merged), tile)]
        rerun = None
        if not plan.x64 and point.model.same_path_in_float64:
            rerun = functools.partial(self.rerun_float64, index, key, first=first, stop=stop)
        in_range = first + np.arange(merged.shape[0]) < stop
        law = point.model.merge_law(point.dim) if auto else None
        resolution = resolve(
            trajectories, tiles, law=law, tol=plan.tol, rerun=rerun, in_range=in_range, bound=auto
        )
        return tallies_of(resolution.trajectories, in_range), resolution

    def rerun_float64(
        self, index: int, key, positions: np.ndarray, *, first: int, stop: int
    ) -> Trajectories:
        """The trajectories at ``positions`` of the call starting at index ``first`` of
        point ``index``, in float64 from the same random numbers (at most
        :data:`.merges.RERUN_TILE` of them, run as one tile on one device), its steps in
        blocks with a check for Ctrl-C after each (the same numbers whatever the blocks)."""
        plan, point = self.plan, self.plan.points[index]
        indices = first + positions
        padded = np.resize(indices, RERUN_TILE)  # repeats: their rows are dropped below
        with jax.enable_x64(True):
            if index not in self.models64:
                model64 = to_float64(point.model)
                self.models64[index] = model64, Blocks(model64.stepping()[1])
            model64, blocks = self.models64[index]
            results = self.simulate(
                model64,
                key,
                jnp.asarray(padded, jnp.int32),
                jnp.asarray(stop, jnp.int32),
                jnp.asarray(plan.tol, jnp.float64),
                jnp.asarray(plan.radius, jnp.float64),
                point.n_tokens,
                point.dim,
                blocks=blocks,
            )
            rows = host_trajectories(results, np.asarray(results.saves))
            return Trajectories(*(a[: indices.size] for a in rows))

    def check_merged(self, index: int, tallies: Tallies | None = None) -> None:
        """Under ``on_merged="raise"``, stop at the end of the first chunk in which tokens
        merged, once the checkpoint holds it: a rerun with ``"exclude"`` or ``"count"``
        resumes there (their tallies are the same). Under ``"auto"``, stop at the end of
        the first chunk with a merge that no bound covers."""
        tallies = self.tallies if tallies is None else tallies
        if self.plan.on_merged == "auto" and tallies.n_unbounded[index]:
            raise NumericalMergeError(unbounded_message(self.plan, tallies, index))
        if self.plan.on_merged != "raise" or not tallies.n_merged[index].any():
            return
        self.save()
        raise NumericalMergeError(
            merge_message(self.plan, tallies, index) + " Pass on_merged='exclude' "
            "(CLI: --on-merged exclude) to drop such trajectories from the estimates, or "
            "'count' to keep them in the class the arithmetic fixed (right inside clusters "
            "that contract, wrong where a cluster can come apart)"
            + (": a rerun resumes from the checkpoint." if self.checkpoint else ".")
        )
