"""Exact running totals of one study: integer counts and fixed-point cosine sums.

Everything is an integer (or a fixed-point sum of integers), so the totals do not depend
on the order in which chunks, devices or processes add them.
"""

import dataclasses

import numpy as np

from .._core.observables import OUTCOMES

#: Cosines are summed as integers in units of 2⁻³²: exact and order-independent; the float64
#: totals stay exact while |Σ cos| < 2²¹ (2 million trajectories per point).
FIXED_POINT = 2.0**32


def fixed_point_sums(cosines: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Σ cos and Σ cos² over the first axis, each rounded to 2⁻³² per term."""
    values = np.asarray(cosines, np.float64)
    first = np.rint(values * FIXED_POINT).astype(np.int64).sum(axis=0)
    second = np.rint(values**2 * FIXED_POINT).astype(np.int64).sum(axis=0)
    return first / FIXED_POINT, second / FIXED_POINT


@dataclasses.dataclass
class Tallies:
    """Per point (P) and save time (S): class counts, trajectories valid, non-finite and
    finished, and the cosine sums; ``seconds`` of simulation so far."""

    counts: np.ndarray  # (P, S, 4)
    n_valid: np.ndarray  # (P,)
    n_nonfinite: np.ndarray  # (P,)
    n_done: np.ndarray  # (P,)
    cosine_sum: np.ndarray  # (P, S)
    cosine_sumsq: np.ndarray  # (P, S)
    n_merged: np.ndarray  # (P, S): valid trajectories with numerically merged tokens
    seconds: float = 0.0

    FIELDS = (
        "counts",
        "n_valid",
        "n_nonfinite",
        "n_done",
        "cosine_sum",
        "cosine_sumsq",
        "n_merged",
    )

    @classmethod
    def zeros(cls, n_points: int, n_saves: int) -> "Tallies":
        z = np.zeros
        return cls(
            z((n_points, n_saves, len(OUTCOMES)), np.int64),
            z(n_points, np.int64),
            z(n_points, np.int64),
            z(n_points, np.int64),
            z((n_points, n_saves)),
            z((n_points, n_saves)),
            z((n_points, n_saves), np.int64),
        )

    def arrays(self) -> list[np.ndarray]:
        return [getattr(self, name) for name in self.FIELDS]

    def add_chunk(self, p: int, counts, n_valid, n_nonfinite, cosines, n_merged) -> None:
        """Add one chunk's device results to point ``p`` (its ``n_done`` is the caller's)."""
        cos_sum, cos_sumsq = fixed_point_sums(np.asarray(cosines))
        self.n_merged[p] += np.asarray(n_merged)
        self.counts[p] += np.asarray(counts)
        self.n_valid[p] += int(n_valid)
        self.n_nonfinite[p] += int(n_nonfinite)
        self.cosine_sum[p] += cos_sum
        self.cosine_sumsq[p] += cos_sumsq
