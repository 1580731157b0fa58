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


#: The unit of every fixed-point sum field of :class:`Tallies`.
SUM_UNITS = {
    f"{_sum_prefix(mean)}{suffix}": unit
    for mean, unit in MEANS.items()
    for suffix in ("_sum", "_sumsq")
}


@dataclasses.dataclass
class Tallies:
    """Per point (P) and save time (S): class counts, trajectories valid, non-finite and
    finished, and the sums (and sums of squares) of the per-trajectory mean cosine, pair
    density and span dimension; ``seconds`` of simulation so far."""

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
    seconds: float = 0.0

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
    )

    @classmethod
    def zeros(cls, n_points: int, n_saves: int) -> "Tallies":
        z = np.zeros
        return cls(
            counts=z((n_points, n_saves, len(OUTCOMES)), np.int64),
            n_valid=z(n_points, np.int64),
            n_nonfinite=z(n_points, np.int64),
            n_done=z(n_points, np.int64),
            cosine_sum=z((n_points, n_saves), np.int64),
            cosine_sumsq=z((n_points, n_saves), np.int64),
            pair_density_sum=z((n_points, n_saves), np.int64),
            pair_density_sumsq=z((n_points, n_saves), np.int64),
            span_dim_sum=z((n_points, n_saves), np.int64),
            span_dim_sumsq=z((n_points, n_saves), np.int64),
            n_merged=z((n_points, n_saves), np.int64),
        )

    def arrays(self) -> list[np.ndarray]:
        return [getattr(self, name) for name in self.FIELDS]

    def fixed_point(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """(Σ, Σ²) of the mean called ``name`` (a key of :data:`MEANS`), int64 multiples of
        its unit (the arrays themselves: adding to them adds to the tallies)."""
        prefix = _sum_prefix(name)
        return getattr(self, f"{prefix}_sum"), getattr(self, f"{prefix}_sumsq")

    def sums(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """(Σ, Σ²) of the mean called ``name`` as float64 (one rounding of the exact totals)."""
        first, second = self.fixed_point(name)
        return first / MEANS[name], second / MEANS[name]

    def add_chunk(
        self, p: int, counts, n_valid, n_nonfinite, cosines, densities, spans, n_merged
    ) -> None:
        """Add one chunk's device results to point ``p`` (its ``n_done`` is the caller's)."""
        self.n_merged[p] += np.asarray(n_merged)
        self.counts[p] += np.asarray(counts)
        self.n_valid[p] += int(n_valid)
        self.n_nonfinite[p] += int(n_nonfinite)
        for (name, unit), values in zip(MEANS.items(), (cosines, densities, spans)):
            total, total_sq = self.fixed_point(name)
            first, second = fixed_point_sums(np.asarray(values), unit)
            total[p] += first
            total_sq[p] += second
