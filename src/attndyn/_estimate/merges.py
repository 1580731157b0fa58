"""``on_merged="auto"``: numerically merged tokens resolved where they can be, bounded where
they cannot, refused only where neither holds.

Two tokens whose coordinates agree to the float's resolution are one token to the
arithmetic from then on; the true dynamics keep a gap of at most δ
(:func:`attndyn._models.merging.resolution_gap`). For each trajectory of a tile whose
tokens merged (the estimator reads its saved states back, nothing else):

1. **Bound.** Each merged pair's exponent κ at every save time since the trajectory first
   merged (:meth:`~attndyn._models.merging.MergeLaw.exponents`, from the model's
   :meth:`~attndyn.AbstractModel.merge_law`) bounds the chance that its gap grew back to
   ``tol``: 2(δ/tol)^κ with the least κ so far. A trajectory's bound at a save time is the
   sum over its merged pairs there.
2. **Rerun.** A float32 trajectory whose bound exceeds 10⁻⁷
   (:data:`attndyn._core.defaults.CLASS_CHANGE_BOUND`) somewhere, or has none, is run
   again in float64 (every random number is a float32 number, so this is the same path
   with less rounding, :mod:`attndyn._core.random`) where the model computes
   the same path in float64 (:attr:`~attndyn.AbstractModel.same_path_in_float64`), and its
   float64 results replace its float32 ones. Only the path's precision changes: choosing
   which trajectories to rerun by their float32 merge and substituting *independent*
   float64 paths would bias the estimate; substituting the same path does not. Reruns go
   in batches of :data:`RERUN_TILE` per tile, in index order: the same numbers whatever the
   chunk size, device count or process count.
3. **Count.** Merged trajectories (float64 merges after a rerun) are counted in the class
   they have, and their bounds summed per point and save time (``merge_bound``), each
   rounded up to a multiple of 2⁻³² (:data:`BOUND_UNIT`) so that the sum is an exact integer.
4. **Refuse** where a merged pair has no bound after all that (no law derived for the
   model, or a direction in which the gap grows: the hybrid model above ε_c): the estimator
   stops with a :class:`NumericalMergeError` naming what to pass.

The same rerun serves trajectories that float32 broke (NaN or inf, or an invariant of the
model such as a row off the unit sphere), whatever ``on_merged``: float32 arithmetic, not
the dynamics, would otherwise decide that they are lost. Their float64 results replace
the float32 ones (counted, merged or not, as any other); those that float64 breaks too
stay non-finite, and the estimator reports them by index and key (``on_nonfinite``).
"""

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from .._core import defaults
from .._models.merging import RESOLUTION_ULPS, MergeLaw, pair_bound, resolution_gap

#: Trajectories a float64 rerun runs together (one compiled shape per point).
RERUN_TILE = 8
#: Bounds are summed as integers in units of 2⁻³², each trajectory's rounded up.
BOUND_UNIT = 2.0**32
#: Saved configurations whose exponents are computed at once (memory: a few N × N arrays
#: of float64 each).
EXPONENT_BLOCK = 256


class Trajectories(NamedTuple):
    """Per-trajectory results of some trajectories of one tile (host arrays): what the
    estimator tallies, and the saved states."""

    classes: np.ndarray  # (b, S, 4) bool
    valid: np.ndarray  # (b,) bool
    cosines: np.ndarray  # (b, S), 0 where not valid
    densities: np.ndarray
    spans: np.ndarray
    merged: np.ndarray  # (b, S) bool, valid and merged
    saves: np.ndarray  # (b, S, N, k)


class Resolution(NamedTuple):
    """A tile after :func:`resolve`: its per-trajectory results (reruns substituted),
    the trajectories rerun for a merge, those left with an unbounded merge, the summed
    bounds per save time (int64, units of 2⁻³²), the broken trajectories rerun, and the
    positions of those still broken after it."""

    trajectories: Trajectories
    n_rerun: int
    n_unbounded: int
    bound_units: np.ndarray
    n_broken_rerun: int = 0
    broken: np.ndarray = np.zeros(0, np.int64)


def merged_pairs(saves: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pairs i < j whose directions agree (``same``) or are opposite (``opposite``) within
    :data:`RESOLUTION_ULPS` units in the last place in every coordinate, in the saves' own
    float type: the merges the device reported (one ulp), found pair by pair, one
    coordinate at a time (as :func:`attndyn.numerically_merged` does for few
    coordinates)."""
    theta = saves / np.sqrt(np.sum(saves * saves, axis=-1, keepdims=True))
    unit = RESOLUTION_ULPS * np.spacing(np.abs(theta))
    n = saves.shape[-2]
    same = np.broadcast_to(np.triu(np.ones((n, n), dtype=bool), k=1), (*theta.shape[:-1], n))
    opposite = same
    for k in range(theta.shape[-1]):
        a, b = theta[..., :, None, k], theta[..., None, :, k]
        tolerance = np.maximum(unit[..., :, None, k], unit[..., None, :, k])
        same = same & (np.abs(a - b) <= tolerance)
        opposite = opposite & (np.abs(a + b) <= tolerance)
    return same, opposite & ~same


def trajectory_bounds(
    law: MergeLaw | None, saves: np.ndarray, merged: np.ndarray, tol: float
) -> np.ndarray:
    """(b, S): each trajectory's bound at each save time on the chance that a merged pair
    has come apart since it merged (0 where nothing is merged, NaN where no bound holds)."""
    bounds = np.zeros(merged.shape)
    rows = np.flatnonzero(merged.any(axis=1))
    if rows.size == 0:
        return bounds
    if law is None:
        return np.where(merged, np.nan, 0.0)
    bounds[rows] = _bounds(law, saves[rows], merged[rows], tol)
    return bounds


def _bounds(law: MergeLaw, saves: np.ndarray, merged: np.ndarray, tol: float) -> np.ndarray:
    """:func:`trajectory_bounds` of trajectories that merged somewhere."""
    kappa = np.full(merged.shape, np.inf)
    n_pairs = np.zeros(merged.shape, np.int64)
    where = np.argwhere(merged)
    for start in range(0, len(where), EXPONENT_BLOCK):
        r, s = where[start : start + EXPONENT_BLOCK].T
        same, opposite = merged_pairs(saves[r, s])
        found = same | opposite
        theta = saves[r, s].astype(np.float64)
        theta = theta / np.linalg.norm(theta, axis=-1, keepdims=True)
        exponents = np.where(found, law.exponents(theta, opposite), np.inf)
        # The least exponent over the merged pairs (NaN if any has none); NaN too where
        # the device saw a merge that the pair test here does not (no pair to bound).
        least = exponents.min(axis=(1, 2))
        kappa[r, s] = np.where(found.any(axis=(1, 2)), least, np.nan)
        n_pairs[r, s] = found.sum(axis=(1, 2))
    # The least exponent since the trajectory first merged (the assumption of the bound:
    # between save times it is no smaller); NaN propagates.
    kappa = np.minimum.accumulate(kappa, axis=1)
    delta = resolution_gap(saves.dtype, saves.shape[-1])
    per_pair = pair_bound(kappa, delta, tol)
    return np.where(merged, np.minimum(n_pairs * per_pair, 1.0), 0.0)


def resolve(
    trajectories: Trajectories,
    tiles: list[np.ndarray],
    *,
    law: MergeLaw | None,
    tol: float,
    rerun: Callable[[np.ndarray], Trajectories] | None,
    in_range: np.ndarray | None = None,
    bound: bool = True,
) -> Resolution:
    """Bound, rerun and count the merged trajectories of one call (module docstring), and
    rerun its broken ones.

    ``tiles``: the positions of each device tile's trajectories in the call (reruns are
    batched per tile, so a trajectory's batch does not depend on the device count);
    ``rerun(positions)``: their float64 results, or ``None`` where no rerun applies (a
    float64 study, or a model whose float64 path is another path); ``in_range``: the
    positions that are trajectories of the study (the others pad the call), whose
    invalid ones are broken; ``bound``: whether merges are bounded and weak ones rerun
    (``on_merged="auto"``), or only broken trajectories rerun."""
    t = trajectories
    in_range = np.ones(t.valid.shape, bool) if in_range is None else in_range
    broken = in_range & ~t.valid
    bounds = np.zeros(t.merged.shape)
    weak = np.zeros(t.valid.shape, bool)
    if bound:
        bounds = trajectory_bounds(law, t.saves, t.merged, tol)
        weak = ~np.all((bounds <= defaults.CLASS_CHANGE_BOUND) | ~t.merged, axis=1)
    n_rerun = n_broken = 0
    if rerun is not None and (weak | broken).any():
        redo = [tile[(weak | broken)[tile]] for tile in tiles]
        for positions in (p for p in redo if p.size):
            for start in range(0, positions.size, RERUN_TILE):
                batch = positions[start : start + RERUN_TILE]
                again = rerun(batch)
                trajectories = _substitute(trajectories, batch, again)
                if bound:
                    new = trajectory_bounds(law, again.saves, again.merged, tol)
                    bounds = _substitute_rows(bounds, batch, new)
                n_broken += int(broken[batch].sum())
                n_rerun += int((~broken[batch]).sum())
    unbounded = np.isnan(bounds).any(axis=1)
    units = np.ceil(np.nan_to_num(bounds, nan=0.0) * BOUND_UNIT).astype(np.int64)
    still = np.flatnonzero(in_range & ~trajectories.valid)
    return Resolution(
        trajectories, n_rerun, int(unbounded.sum()), units.sum(axis=0), n_broken, still
    )


def _substitute_rows(array: np.ndarray, rows: np.ndarray, values: np.ndarray) -> np.ndarray:
    array = np.array(array)
    array[rows] = values
    return array


def _substitute(old: Trajectories, rows: np.ndarray, new: Trajectories) -> Trajectories:
    """``old`` with the trajectories at ``rows`` replaced by ``new``'s (saves cast to
    ``old``'s type: only the merged ones are read again, and they are bounded already)."""
    fields = []
    for name, a, b in zip(Trajectories._fields, old, new):
        if name == "saves":
            fields.append(a)  # the rerun's own saves were bounded above
            continue
        fields.append(_substitute_rows(a, rows, b.astype(a.dtype)))
    return Trajectories(*fields)


def tallies_of(trajectories: Trajectories, in_range: np.ndarray) -> tuple:
    """The tallies of a call (what :meth:`Tallies.add_chunk` takes) from its
    per-trajectory results: the device's :func:`.runner.tally`, on the host."""
    t = trajectories
    valid = t.valid
    classes = t.classes & valid[:, None, None]
    merged = t.merged & valid[:, None]
    return (
        classes.sum(axis=0, dtype=np.int64),
        int(valid.sum()),
        int((in_range & ~valid).sum()),
        np.where(valid[:, None], t.cosines, 0),
        np.where(valid[:, None], t.densities, 0),
        np.where(valid[:, None], t.spans, 0),
        merged,
        (classes & merged[..., None]).sum(axis=0, dtype=np.int64),
    )
