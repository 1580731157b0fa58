"""Metastable plateaus of a cluster count against time (issue 45 item 3).

A trajectory of many tokens from a uniform start first forms clusters (the linear phase,
degree ℓ* growing fastest) and then merges them one pair at a time, each merge after an
exponentially long wait (Geshkovski, Koubbi, Polyanskiy, Rigollet, arXiv:2410.06833):
the cluster count against log t is a staircase. :func:`plateaus` finds its steps in one
trajectory's saves; :func:`plateau_summary` puts several trajectories together, with
standard errors across them.

Definitions (the docstrings say why):

- the staircase starts at a given save (where the caller knows the clusters have
  formed), by default at the save where the count is largest (the formation peak):
  before the clusters form, the count is that of the single-linkage graph of a still
  nearly uniform cloud (on S¹, N tokens 2π/N apart chain into one component; on S², 10³
  tokens are mostly alone within 0.045 rad), not of clusters;
- a *plateau* is a run of saves with one count whose first and last saves are at least a
  factor ``factor`` apart in t (observed at both ends, so the count held at least that
  long);
- its *entry* and *exit* are the geometric midpoints between the save before the run and
  its first save, and between its last save and the save after (the count changed
  somewhere in between; on a log-spaced grid the midpoint is off by at most half a save
  in log t); a run that lasts to the last save is *censored*: its exit is unknown, its
  lifetime at least ``t_last − entry``.
"""

from typing import NamedTuple

import numpy as np

from .._core.errors import ParameterError

#: A count must hold over at least this factor in t to be a plateau: half a decade. The
#: flow's own time scales are O(1) (the within-cluster contraction rate 1, the linear rates
#: 2λ_ℓ ≤ 1.5), so from the formation on (t ≳ 10) a factor 3 is ≥ 20 units of t; the
#: metastable states last factors of 10 to 10³. It is a convention: in the run of
#: experiments/metastable_staircase.py a factor 2 adds a plateau to 16 of 85 trajectories
#: (runs spanning a factor 2-3), and 10 drops those shorter than a decade.
PLATEAU_FACTOR = 3.0


class Plateau(NamedTuple):
    """One step of the staircase: ``value`` clusters from ``entry`` to ``exit``."""

    value: int
    entry: float
    exit: float
    #: Still on the plateau at the last save: ``exit`` is that save's time, a lower bound.
    censored: bool

    @property
    def lifetime(self) -> float:
        """``exit − entry`` (a lower bound where :attr:`censored`)."""
        return self.exit - self.entry


def _checked(times, counts, factor: float) -> tuple[np.ndarray, np.ndarray]:
    t = np.asarray(times, dtype=np.float64)
    c = np.asarray(counts)
    if t.ndim != 1 or t.size < 2 or c.shape != t.shape:
        raise ParameterError(
            f"times and counts must be 1-D of one length ≥ 2; got shapes {t.shape}, {c.shape}."
        )
    if not (np.all(np.isfinite(t)) and t[0] > 0 and np.all(np.diff(t) > 0)):
        raise ParameterError("times must be finite, positive and strictly increasing.")
    if not np.issubdtype(c.dtype, np.integer) or np.any(c < 1):
        raise ParameterError(
            "counts must be integers ≥ 1 (a −1 is attndyn.clusters' sentinel of a "
            "non-finite configuration: report that trajectory, do not pass it)."
        )
    if not (np.isfinite(factor) and factor > 1):
        raise ParameterError(f"factor={factor!r} must be a real number > 1.")
    return t, c


def plateaus(
    times, counts, *, factor: float = PLATEAU_FACTOR, start: int | None = None
) -> list[Plateau]:
    """The plateaus of one trajectory's cluster counts ``counts`` at save times ``times``
    (the module docstring defines them), in order of time.

    ``start``: the index of the save where the staircase starts (the clusters formed);
    ``None``: the formation peak (the first save of the largest count); 0 for counts that
    need no formation, e.g. a start already in clusters. Raises :class:`ParameterError`
    for times that are not positive and increasing, counts that are not integers ≥ 1 (the
    −1 sentinel of :func:`attndyn.clusters` included), ``factor ≤ 1`` or a ``start``
    outside the saves."""
    t, c = _checked(times, counts, factor)
    if start is not None and not (isinstance(start, int | np.integer) and 0 <= start < t.size):
        raise ParameterError(f"start={start!r} must be a save index in 0 … {t.size - 1}.")
    first = int(np.argmax(c)) if start is None else int(start)
    found = []
    i = first
    while i < t.size:
        j = i
        while j + 1 < t.size and c[j + 1] == c[i]:
            j += 1
        if t[j] / t[i] >= factor:
            entry = t[i] if i == 0 else float(np.sqrt(t[i - 1] * t[i]))
            censored = j == t.size - 1
            exit_ = t[j] if censored else float(np.sqrt(t[j] * t[j + 1]))
            found.append(Plateau(int(c[i]), float(entry), float(exit_), bool(censored)))
        i = j + 1
    return found


def _mean_se(values) -> tuple[float, float]:
    """The mean and its standard error (NaN for the SE of fewer than two values)."""
    v = np.asarray(values, dtype=np.float64)
    se = float(v.std(ddof=1) / np.sqrt(v.size)) if v.size > 1 else float("nan")
    return float(v.mean()), se


def _value_row(found: list[Plateau], n_trajectories: int) -> dict:
    """The statistics of one plateau value over the trajectories that reached it."""
    closed = [p for p in found if not p.censored]
    row = {
        "reached": len(found),
        "of": n_trajectories,
        "censored": len(found) - len(closed),
        "log10_entry": _mean_se([np.log10(p.entry) for p in found]),
    }
    if closed:
        row["log10_exit"] = _mean_se([np.log10(p.exit) for p in closed])
        row["log10_lifetime"] = _mean_se([np.log10(p.lifetime) for p in closed])
    return row


def plateau_summary(times, counts, *, factor: float = PLATEAU_FACTOR, starts=None) -> dict:
    """Plateaus of several trajectories (``counts`` shaped (trajectories, saves)) put
    together, with standard errors across trajectories; ``starts``: each trajectory's
    ``start`` (:func:`plateaus`), or ``None`` for the formation peak of each.

    Returns ``{"first": ..., "by_value": {k: ...}, "per_trajectory": [...]}``:

    - ``first``: the first plateau of each trajectory (the metastable state that forms
      out of the uniform start): how many trajectories reached one, its value's mean and
      SE, and the values themselves;
    - ``by_value[k]``: over the trajectories with a plateau at k clusters, ``reached`` (of
      ``of``), ``censored`` (still there at the last save), the mean and SE of log10 of
      the entry time, and over the uncensored ones of log10 of the exit time and of the
      lifetime (means of logs: the times spread over decades);
    - ``per_trajectory``: each trajectory's plateaus as ``(value, entry, exit, censored)``.

    A trajectory with several plateaus at one value (a count that rose again) counts
    once there, with its first such plateau."""
    c = np.asarray(counts)
    if c.ndim != 2:
        raise ParameterError(f"counts must be (trajectories, saves); got shape {c.shape}.")
    starts = [None] * len(c) if starts is None else list(starts)
    if len(starts) != len(c):
        raise ParameterError(f"starts must give one start per trajectory ({len(c)}).")
    each = [plateaus(times, row, factor=factor, start=s) for row, s in zip(c, starts)]
    firsts = [found[0].value for found in each if found]
    by_value = {}
    for k in sorted({p.value for found in each for p in found}, reverse=True):
        by_value[k] = _value_row(_first_at(each, k), len(each))
    first = {"reached": len(firsts), "of": len(each), "values": firsts}
    if firsts:
        first["value"] = _mean_se(firsts)
    return {
        "first": first,
        "by_value": by_value,
        "per_trajectory": [[tuple(p) for p in found] for found in each],
    }


def _first_at(each: list[list[Plateau]], value: int) -> list[Plateau]:
    """Each trajectory's first plateau at ``value``, for those that have one."""
    out = []
    for found in each:
        match = [p for p in found if p.value == value]
        if match:
            out.append(match[0])
    return out
