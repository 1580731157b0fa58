"""Exact running totals of one study: integer counts and fixed-point sums of the means.

Everything is an integer (or a fixed-point sum of integers), so the totals do not depend
on the order in which chunks, devices or processes add them.
"""

import dataclasses

import numpy as np

from .._core.observables import OUTCOMES

#: Cosines are summed as integers in units of 2⁻³²: exact and order-independent. The totals
#: stay int64 (|Σ| < 2³¹ cosines: 2 billion trajectories per point) and become floats only
#: when the dataset is written, so they do not depend on how chunks were added.
FIXED_POINT = 2.0**32


def fixed_point_sums(
    values: np.ndarray, unit: float = FIXED_POINT
) -> tuple[np.ndarray, np.ndarray]:
    """Σ v and Σ v² over the first axis as int64 multiples of 1/``unit`` (2⁻³²; 1 for
    integer-valued observables such as the span dimension), each term rounded first."""
    values = np.asarray(values, np.float64)
    first = np.rint(values * unit).astype(np.int64).sum(axis=0)
    second = np.rint(values**2 * unit).astype(np.int64).sum(axis=0)
    return first, second


#: The per-(point, time) means besides the class counts, with the unit they are summed in.
MEANS = {"mean_cosine": FIXED_POINT, "pair_density": FIXED_POINT, "span_dim": 1.0}


def _sum_prefix(mean: str) -> str:
    """The prefix of the tally fields that sum the mean called ``mean``."""
    return "cosine" if mean == "mean_cosine" else mean


#: The unit of every fixed-point sum field of :class:`Tallies` (the sums over all valid
#: trajectories, and the same sums over the numerically merged ones).
SUM_UNITS = {
    f"{merged}{_sum_prefix(mean)}{suffix}": unit
    for mean, unit in MEANS.items()
    for suffix in ("_sum", "_sumsq")
    for merged in ("", "merged_")
}


@dataclasses.dataclass
class Tallies:
    """Per point (P) and save time (S): class counts, trajectories valid, non-finite and
    finished, and the sums (and sums of squares) of the per-trajectory mean cosine, pair
    density and span dimension; ``seconds`` of simulation so far, and ``runs``, where they ran.

    The same counts and sums are kept over the valid trajectories whose tokens merged
    numerically (``merged_*``), so that how merged trajectories enter the estimates
    (``on_merged``: counted or excluded) is decided when the dataset is made, not while
    the study runs: a checkpoint serves either choice."""

    counts: np.ndarray  # (P, S, 4)
    n_valid: np.ndarray  # (P,)
    n_nonfinite: np.ndarray  # (P,)
    n_done: np.ndarray  # (P,)
    cosine_sum: np.ndarray  # (P, S)
    cosine_sumsq: np.ndarray  # (P, S)
    pair_density_sum: np.ndarray  # (P, S)
    pair_density_sumsq: np.ndarray  # (P, S)
    span_dim_sum: np.ndarray  # (P, S)
    span_dim_sumsq: np.ndarray  # (P, S)
    n_merged: np.ndarray  # (P, S): valid trajectories with numerically merged tokens
    merged_counts: np.ndarray  # (P, S, 4): class counts over those trajectories
    merged_cosine_sum: np.ndarray  # (P, S), and the means' sums over them
    merged_cosine_sumsq: np.ndarray
    merged_pair_density_sum: np.ndarray
    merged_pair_density_sumsq: np.ndarray
    merged_span_dim_sum: np.ndarray
    merged_span_dim_sumsq: np.ndarray
    # on_merged="auto" (see .merges): trajectories rerun in float64, those left with a
    # merge that no bound covers (the study then stops), and the summed per-trajectory
    # bounds of the counted merges, in units of 2⁻³² (each rounded up).
    n_rerun: np.ndarray  # (P,)
    n_unbounded: np.ndarray  # (P,)
    merge_bound: np.ndarray  # (P, S)
    # Trajectories that float32 broke (NaN, inf, a broken invariant) rerun in float64 from
    # the same random numbers (see .merges); those broken there too are in n_nonfinite.
    n_nonfinite_rerun: np.ndarray  # (P,)
    seconds: float = 0.0
    # One record per process run that added trajectories (a study resumed from a
    # checkpoint, possibly on another machine, lists each), written by the estimator
    # (`_Study.stamp`): start, backend, device kind and count, trajectories, seconds.
    runs: list[dict] = dataclasses.field(default_factory=list)

    FIELDS = (
        "counts",
        "n_valid",
        "n_nonfinite",
        "n_done",
        "cosine_sum",
        "cosine_sumsq",
        "pair_density_sum",
        "pair_density_sumsq",
        "span_dim_sum",
        "span_dim_sumsq",
        "n_merged",
        "merged_counts",
        "merged_cosine_sum",
        "merged_cosine_sumsq",
        "merged_pair_density_sum",
        "merged_pair_density_sumsq",
        "merged_span_dim_sum",
        "merged_span_dim_sumsq",
        "n_rerun",
        "n_unbounded",
        "merge_bound",
        "n_nonfinite_rerun",
    )

    @classmethod
    def zeros(cls, n_points: int, n_saves: int) -> "Tallies":
        per_point: tuple[int, ...] = (n_points,)
        per_outcome: tuple[int, ...] = (n_points, n_saves, len(OUTCOMES))
        shapes: dict[str, tuple[int, ...]] = dict.fromkeys(
            ("n_valid", "n_nonfinite", "n_done", "n_rerun", "n_unbounded", "n_nonfinite_rerun"),
            per_point,
        )
        shapes.update(dict.fromkeys(("counts", "merged_counts"), per_outcome))
        arrays = {
            name: np.zeros(shapes.get(name, (n_points, n_saves)), np.int64) for name in cls.FIELDS
        }
        return cls(**arrays)  # pyright: ignore[reportArgumentType]

    def arrays(self) -> list[np.ndarray]:
        return [getattr(self, name) for name in self.FIELDS]

    def fixed_point(self, name: str, merged: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """(Σ, Σ²) of the mean called ``name`` (a key of :data:`MEANS`), int64 multiples of
        its unit (the arrays themselves: adding to them adds to the tallies); over the
        merged trajectories only with ``merged``."""
        prefix = ("merged_" if merged else "") + _sum_prefix(name)
        return getattr(self, f"{prefix}_sum"), getattr(self, f"{prefix}_sumsq")

    def sums(self, name: str, exclude_merged: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """(Σ, Σ²) of the mean called ``name`` as float64 (one rounding of the exact
        totals), over the valid trajectories, or over those whose tokens did not merge."""
        first, second = self.fixed_point(name)
        if exclude_merged:
            merged_first, merged_second = self.fixed_point(name, merged=True)
            first, second = first - merged_first, second - merged_second
        return first / MEANS[name], second / MEANS[name]

    def add_resolution(
        self, p: int, n_rerun: int, n_unbounded: int, bound_units, n_nonfinite_rerun: int = 0
    ) -> None:
        """Add what the estimator did with one call's merges (``on_merged="auto"``) and
        broken trajectories at point ``p``."""
        self.n_rerun[p] += int(n_rerun)
        self.n_unbounded[p] += int(n_unbounded)
        self.merge_bound[p] += np.asarray(bound_units, np.int64)
        self.n_nonfinite_rerun[p] += int(n_nonfinite_rerun)

    def add_chunk(
        self,
        p: int,
        counts,
        n_valid,
        n_nonfinite,
        cosines,
        densities,
        spans,
        merged,
        merged_counts,
    ) -> None:
        """Add one chunk's device results to point ``p`` (its ``n_done`` is the caller's).
        ``merged``: (trajectories, S), the valid trajectories whose tokens merged, and
        ``merged_counts`` their class counts; the means are already 0 where a trajectory
        is not valid."""
        merged = np.asarray(merged)
        self.n_merged[p] += merged.sum(axis=0)
        self.merged_counts[p] += np.asarray(merged_counts)
        self.counts[p] += np.asarray(counts)
        self.n_valid[p] += int(n_valid)
        self.n_nonfinite[p] += int(n_nonfinite)
        for (name, unit), values in zip(MEANS.items(), (cosines, densities, spans)):
            values = np.asarray(values)
            for subset, kept in ((False, values), (True, np.where(merged, values, 0))):
                total, total_sq = self.fixed_point(name, merged=subset)
                first, second = fixed_point_sums(kept, unit)
                total[p] += first
                total_sq[p] += second
