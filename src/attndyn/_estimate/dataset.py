"""The last stage: probabilities with Wilson intervals, and the one provenance format."""

import functools
import json
import os
import platform
import subprocess
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jax
import numpy as np
import xarray as xr

from .._core.observables import OUTCOMES
from .._io.metadata import describe, history_line
from .._version import __version__
from .keys import canonical
from .stats import wilson_bounds
from .tallies import MEANS, Tallies

#: ``merge_bound`` is tallied in units of 2⁻³² (:data:`.merges.BOUND_UNIT`).
MERGE_UNIT = 2.0**32


def package_version() -> str:
    """The version of the running source (never the install's metadata, which an editable
    install leaves at the version it was installed with)."""
    return __version__


@functools.cache
def source_commit() -> str | None:
    """The git commit of the attndyn source when it runs from a git checkout (an editable
    install), with ``-dirty`` for uncommitted changes; ``None`` otherwise."""
    folder = Path(__file__).resolve().parent
    try:
        run = functools.partial(
            subprocess.run, cwd=folder, capture_output=True, text=True, timeout=5, check=True
        )
        commit = run(["git", "rev-parse", "HEAD"]).stdout.strip()
        dirty = run(["git", "status", "--porcelain", "--", str(folder.parent)]).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return commit + ("-dirty" if dirty else "")


def study_fields(study: str, diagram: str | None = None) -> dict[str, str]:
    """The names of what made a dataset, in its provenance and the ``--json`` object: its
    ``study`` (``"phase-diagram"``, ``"evolution"``, ``"modes"``, ``"schemes"``, or
    ``"probabilities"`` for a direct :func:`~attndyn.estimate_probabilities` call), a phase
    diagram's ``diagram``, and beside them 0.4's ``kind`` (the diagram of a phase diagram,
    else the study), still written in 0.5 and gone in 0.6."""
    names = {"study": study} if diagram is None else {"study": study, "diagram": diagram}
    return {**names, "kind": diagram or study}


def provenance_record(seconds: float, **fields: Any) -> dict[str, Any]:
    """The provenance every attndyn dataset carries: what made it, when, with which
    versions and platform (the source commit where known, the XLA flags), how long it
    took, and the study's own ``fields`` (:func:`study_fields` among them)."""
    from jaxlib import version as jaxlib_version

    return {
        "package": "attndyn",
        "attndyn_version": package_version(),
        "source_commit": source_commit(),
        "jax_version": jax.__version__,
        "jaxlib_version": jaxlib_version.__version__,
        "python_version": platform.python_version(),
        "platform": platform.platform(),
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "seconds": seconds,
        **fields,
    }


def attach_provenance(ds: xr.Dataset, record: Mapping[str, Any]) -> xr.Dataset:
    """Store ``record`` as JSON in ``attrs["provenance"]``, its scalars as attributes (so
    netCDF tools show them), and the CF ``history`` line it implies."""
    ds.attrs["history"] = history_line(record)
    ds.attrs["provenance"] = json.dumps(record, default=str)
    for name, value in record.items():
        if isinstance(value, str | int | float) and not isinstance(value, bool):
            ds.attrs[name] = value
    return ds


def provenance(ds: xr.Dataset) -> dict[str, Any]:
    """The provenance record stored in a results dataset."""
    return json.loads(ds.attrs["provenance"])


def coordinates(points: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One coordinate per parameter along ``point``: numbers as numbers, strings as
    themselves (``ds.sel(model="full")``), the rest as JSON."""
    names: list[str] = []
    for p in points:
        names += [k for k in p if k not in names]
    coords: dict[str, Any] = {}
    for name in names:
        values = [canonical(p.get(name)) for p in points]
        if all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
            coords[name] = ("point", np.asarray(values))
        elif all(isinstance(v, str) for v in values):
            coords[name] = ("point", np.asarray(values, dtype=str))
        else:
            coords[name] = ("point", np.asarray([json.dumps(v) for v in values]))
    return coords


#: The title of a dataset of :func:`attndyn.estimate_probabilities` (a study sets its own).
PROBABILITIES_TITLE = (
    "attndyn: probabilities of the clustering classes with Wilson 95 % intervals, per "
    "point and save time"
)


def mean_and_se(total: np.ndarray, total_sq: np.ndarray, n: np.ndarray):
    """Sample mean and its standard error from Σ, Σ² over ``n`` trajectories (per point
    and save time, or per point)."""
    n = n if n.ndim == total.ndim else n[:, None]
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = total / n
        var = total_sq / n - mean**2
        se = np.sqrt(np.maximum(var, 0) / np.maximum(n - 1, 1))
    return mean, se


def merge_robust_interval(tallies: Tallies, on_merged: str) -> tuple[np.ndarray, np.ndarray]:
    """A 95 % interval for each outcome's probability that holds however the numerically
    merged trajectories' classes were fixed, (point, time, outcome).

    Under ``"auto"`` each counted merge is bounded (``merge_bound`` sums the chances that
    one is in the wrong class): by Markov's inequality more than m of them are wrong with
    probability at most ``merge_bound``/(m + 1), so with m the least count for which that is
    ≤ 10⁻³, Wilson's bounds of the count ∓ m hold with 95 % less at most 0.1 %; where the
    bound is below 10⁻³ (the common case) m = 0 and this is Wilson's interval. Under the
    other choices the merged trajectories' classes are unknown: of the n_valid
    trajectories, c are unmerged and in the outcome and the m merged ones add an unknown
    0 … m, and Wilson's bounds grow with the count, so [lower(c), upper(c + m)] over
    n_valid contains the Wilson interval of every possible true count (Wilson's interval
    where nothing merged); neither ``count`` nor ``exclude`` gives this by itself.
    """
    n = np.broadcast_to(tallies.n_valid[:, None, None], tallies.counts.shape)
    if on_merged == "auto":
        expected = tallies.merge_bound / MERGE_UNIT
        wrong = np.maximum(np.ceil(expected * 1e3) - 1, 0).astype(np.int64)[..., None]
        lower, _ = wilson_bounds(np.maximum(tallies.counts - wrong, 0), n)
        _, upper = wilson_bounds(np.minimum(tallies.counts + wrong, n), n)
        return lower, upper
    unmerged = tallies.counts - tallies.merged_counts
    merged = np.broadcast_to(tallies.n_merged[..., None], unmerged.shape)
    lower, _ = wilson_bounds(unmerged, n)
    _, upper = wilson_bounds(unmerged + merged, n)
    return lower, upper


def probabilities_dataset(
    tallies: Tallies,
    points: Sequence[Mapping[str, Any]],
    save_times: np.ndarray,
    *,
    on_merged: str = "auto",
) -> xr.Dataset:
    """Counts, probabilities, Wilson 95 % bounds over (point, time, outcome), and the mean
    cosine, pair density and span dimension (with standard errors) over (point, time),
    over the valid trajectories, less those whose tokens merged with ``on_merged`` set to
    ``"exclude"``."""
    exclude_merged = on_merged == "exclude"
    counts = tallies.counts
    n_counted = np.broadcast_to(tallies.n_valid[:, None], tallies.n_merged.shape)
    if exclude_merged:
        counts, n_counted = counts - tallies.merged_counts, n_counted - tallies.n_merged
    n = np.broadcast_to(n_counted[..., None], counts.shape)
    with np.errstate(invalid="ignore", divide="ignore"):
        probability = counts / n
    means = {}
    for name in MEANS:
        mean, se = mean_and_se(*tallies.sums(name, exclude_merged), n_counted)
        means[name] = (("point", "time"), mean)
        means[f"{name}_se"] = (("point", "time"), se)
    lower, upper = wilson_bounds(counts, n)
    merge_lower, merge_upper = merge_robust_interval(tallies, on_merged)
    # The summed bound of the counted merges ("auto"); unknown (NaN) where merged
    # trajectories were counted or excluded unbounded.
    bound = tallies.merge_bound / MERGE_UNIT
    if on_merged != "auto":
        bound = np.where(tallies.n_merged > 0, np.nan, 0.0)
    dims3 = ("point", "time", "outcome")
    ds = xr.Dataset(
        {
            "count": (dims3, counts),
            "probability": (dims3, probability),
            "ci_lower": (dims3, lower),
            "ci_upper": (dims3, upper),
            "merge_ci_lower": (dims3, merge_lower),
            "merge_ci_upper": (dims3, merge_upper),
            "n_valid": ("point", tallies.n_valid),
            "n_nonfinite": ("point", tallies.n_nonfinite),
            **means,
            "n_merged": (("point", "time"), tallies.n_merged),
            "n_counted": (("point", "time"), np.array(n_counted)),
            "merge_bound": (("point", "time"), bound),
            "n_rerun": ("point", tallies.n_rerun),
        },
        coords={
            "point": np.arange(len(points)),
            "time": save_times,
            "outcome": list(OUTCOMES),
            **coordinates(points),
        },
    )
    # Units, long names and descriptions from the one table of them (metadata.VARIABLES).
    return describe(ds, title=PROBABILITIES_TITLE)
