"""CF-style metadata of attndyn's datasets: the one table of every variable's units, long
name and description, and the global attributes every dataset carries.

Every study describes its dataset with :func:`describe`, which writes, from :data:`VARIABLES`
(or the study's own table, for variables that only it makes):

- on every variable and coordinate: ``long_name``, ``description`` and, for numbers,
  ``units`` (``"1"``: every quantity of attndyn is dimensionless: probabilities, counts,
  cosines, β, d, N, and the model time t, which counts layers in units of 1/L);
- on the dataset: ``title``, ``Conventions`` (``CF-1.10``), ``history`` (when, with what
  and by which command it was made), ``source`` and ``references`` (the papers).

A new study adds its variables with :func:`register` (or passes ``variables=`` to
:func:`describe`); a variable without an entry is left undescribed, and the tests over
every command's output fail on it.

The points of a study (β, d, N, ε, …) form a pandas MultiIndex along ``point`` in memory, so
``ds.sel(beta=2.0, dim=4)`` selects directly. netCDF cannot store a MultiIndex:
:func:`to_netcdf` writes its levels as plain coordinates along ``point`` (naming them in
the ``point_index`` attribute) and :func:`open_dataset` restores it.
"""

import dataclasses
import os
from collections.abc import Mapping, Sequence
from typing import Any

import xarray as xr

#: The CF version the datasets follow.
CONVENTIONS = "CF-1.10"
#: Coordinates that attndyn 0.4 named otherwise (old name → new), renamed on reading.
RENAMED_COORDINATES = {"tokens": "n_tokens"}
#: The attribute naming the levels of the ``point`` MultiIndex in a written file.
POINT_INDEX = "point_index"
#: The papers the models come from (``references`` of every dataset; docs/references.md).
REFERENCES = (
    "seed 003: L. Fedorov, M. E. Sander, R. Elie, P. Marion, M. Lauriere, Clustering in "
    "Deep Stochastic Transformers, arXiv:2601.21942; seed 004: N. Karagodin, S. Ge, "
    "Y. Polyanskiy, P. Rigollet, Normalization in Attention Dynamics, arXiv:2510.22026"
)


@dataclasses.dataclass(frozen=True)
class Variable:
    """What one variable (or coordinate) of a dataset is."""

    long_name: str
    description: str
    #: UDUNITS string; "1" for a dimensionless number, None for strings (no quantity).
    units: str | None = "1"


_PROB = "estimated probability of the class at the save time, over n_counted trajectories"
_WILSON = "Wilson score 95 % confidence bound of probability"
_MERGE = (
    "95 % bound however the n_merged trajectories' classes were fixed: with "
    "on_merged='auto', Wilson's bounds of the count -/+ m, m the merged trajectories "
    "possibly in the wrong class except with probability <= 1e-3 (from merge_bound; "
    "usually 0); otherwise the Wilson bound of the unmerged count (lower), of it plus "
    "n_merged (upper), over n_valid (Wilson's interval where nothing merged)"
)

#: Every variable and coordinate attndyn's studies write, by name.
VARIABLES: dict[str, Variable] = {
    # Coordinates of the points and of time.
    "point": Variable("point", "index of the point in the study's list of points"),
    "beta": Variable("inverse temperature beta", "β of the attention exp(β⟨Qx, Ky⟩)"),
    "dim": Variable("token dimension d", "dimension d of each token (the sphere S^{d-1})"),
    "n_tokens": Variable("number of tokens N", "tokens per trajectory"),
    # 0.4's name of n_tokens (points that still give it; open_dataset renames old files').
    "tokens": Variable("number of tokens N", "tokens per trajectory"),
    "eps": Variable(
        "hybrid noise size epsilon",
        "ε of the scalar value noise (seed 003 eq. 7/8); NaN for models without it",
    ),
    "model": Variable(
        "model", "full, hybrid or deterministic value noise (seed 003 eqs. 4, 7)", None
    ),
    "time": Variable(
        "model time t",
        "continuous time of the dynamics; layer n of a depth-L stack is at t = n/L",
    ),
    "outcome": Variable(
        "clustering class",
        "single: one cluster; antipodal: two opposite clusters; has_antipodal_pair: at "
        "least one pair at −1 (overlaps the others); unclustered: neither single nor "
        "antipodal (pairs within tol of ±1 count as clustered)",
        None,
    ),
    # The estimator's results.
    "count": Variable(
        "trajectories in the class", "number of counted trajectories in the class at t"
    ),
    "probability": Variable("probability of the class", _PROB),
    "ci_lower": Variable("lower 95 % bound of probability", _WILSON),
    "ci_upper": Variable("upper 95 % bound of probability", _WILSON),
    "merge_ci_lower": Variable("merge-robust lower 95 % bound of probability", _MERGE),
    "merge_ci_upper": Variable("merge-robust upper 95 % bound of probability", _MERGE),
    "n_valid": Variable(
        "valid trajectories", "trajectories simulated at the point whose states stayed finite"
    ),
    "n_nonfinite": Variable(
        "non-finite trajectories",
        "trajectories that became NaN or inf or broke an invariant of the model (in "
        "float32 and again when rerun in float64 from the same random numbers, where the "
        "model allows it; provenance nonfinite_rerun counts the reruns), excluded from "
        "every estimate",
    ),
    "n_merged": Variable(
        "numerically merged trajectories",
        "valid trajectories whose tokens became numerically identical (or exactly "
        "antipodal): the arithmetic, not the dynamics, fixed their class",
    ),
    "n_counted": Variable(
        "counted trajectories",
        "trajectories in the probabilities and means at t: n_valid, less n_merged where "
        "merged trajectories are excluded (provenance on_merged)",
    ),
    "merge_bound": Variable(
        "bound on merged trajectories in a wrong class",
        "upper bound on the expected number of merged trajectories counted in a class "
        "they would have left without the rounding (on_merged='auto': the sum of their "
        "scale-function bounds; NaN where merged trajectories were counted or excluded "
        "without a bound)",
    ),
    "n_rerun": Variable(
        "trajectories rerun in float64",
        "trajectories rerun in float64 from the same random numbers because float32 "
        "merged their tokens with a bound above 1e-7 or none (on_merged='auto')",
    ),
    "mean_cosine": Variable(
        "mean pairwise cosine",
        "mean over trajectories of the mean pairwise cosine (seed 000's CosSim)",
    ),
    "pair_density": Variable(
        "fraction of clustered pairs",
        "mean over trajectories of the fraction of pairs with cosine > 0.999",
    ),
    "span_dim": Variable(
        "span dimension",
        "mean over trajectories of the number of Gram eigenvalues > 1e-3",
    ),
    "mean_cosine_se": Variable("standard error of mean_cosine", "standard error of the mean"),
    "pair_density_se": Variable("standard error of pair_density", "standard error of the mean"),
    "span_dim_se": Variable("standard error of span_dim", "standard error of the mean"),
    # Theory and checks the studies add.
    "p_antipodal_exact": Variable(
        "exact t = infinity probability of antipodal",
        "exact t = ∞ probability that two uniform tokens end antipodal (scale function); "
        "NaN for N ≠ 2 and beyond the quadrature's range",
    ),
    "p_antipodal_pair_three_tokens": Variable(
        "three-token reading of P(has antipodal pair)",
        "(3/2)·P2·F·exp(−T/τ) at T = the horizon (a reading, not a proof); NaN where it "
        "was not derived",
    ),
    "sphere_drift": Variable(
        "drift off the sphere",
        "max | |Y_i| − 1 | over saved states (solver error left)",
    ),
    "layer_step": Variable(
        "hybrid layer step",
        "the discrete hybrid model's layer step ε·e^β/(2√L) (USA) or ε/(2√L) (SA): above "
        "0.1 the model at this depth is far from its SDE limit (far_from_limit)",
    ),
    "far_from_limit": Variable(
        "far from the SDE limit",
        "1 where layer_step > 0.1: the discrete model is far from the SDE limit and its "
        "answer depends on the law of v_n (raise the depth); 0 elsewhere",
    ),
    # The normalization-scheme study (seed 004).
    "scheme": Variable("normalization scheme", "seed 004's scheme name", None),
    "alpha": Variable("nGPT step alpha", "α of nGPT's update"),
    "layer": Variable("layer", "layer of the random-weight stack (0: the start)"),
    "run": Variable("random-weight run", "index of an independent random-weight stack"),
    "rate_point": Variable("rate-fit sample", "index of a sample of the terminal-rate fit"),
    "gamma_reduced": Variable(
        "cosine gamma(t), reduced ODE",
        "cosine between any two tokens from the symmetric start, reduced ODE (Thm 4.1)",
    ),
    "gamma_full": Variable(
        "cosine gamma(t), n-particle ODE", "mean pairwise cosine of the n-particle ODE"
    ),
    "r_reduced": Variable("token radius r(t), reduced ODE", "radius of the tokens"),
    "initial_slope": Variable("measured gamma'(0)", "initial slope of γ, measured"),
    "initial_slope_theory": Variable("theory gamma'(0)", "initial slope of γ, theory"),
    "terminal_rate": Variable(
        "fitted terminal rate", "fitted rate of 1 − γ deep in the terminal regime"
    ),
    "terminal_rate_lower": Variable("lower bound of terminal_rate", "fit interval"),
    "terminal_rate_upper": Variable("upper bound of terminal_rate", "fit interval"),
    "terminal_rate_theory": Variable("theory terminal rate", "Thm 4.1's rate"),
    "terminal_rate_law": Variable(
        "terminal law", "exponential, power or sqrt-exponential law of 1 − γ", None
    ),
    "terminal_rate_variable": Variable(
        "variable of the rate", "t (exponential) or log t (power law)", None
    ),
    "terminal_law": Variable("theory law", "the terminal law of 1 − γ", None),
    "rate_time": Variable("time of the rate fit", "t of each sample of the rate fit"),
    "rate_log_gap": Variable("log(1 − gamma)", "natural log of the gap 1 − γ at rate_time"),
    "ngpt_gamma": Variable("nGPT cosine gamma(t)", "γ(t) of nGPT's reduced ODE per α"),
    "random_weights_cosine": Variable(
        "mean pairwise cosine, random weights",
        "mean pairwise cosine after each layer of a random-weight stack",
    ),
}


def register(variables: Mapping[str, Variable]) -> None:
    """Add a new study's variables to :data:`VARIABLES` (a name already there must keep
    its meaning: refused if it would change)."""
    for name, variable in variables.items():
        if VARIABLES.get(name, variable) != variable:
            raise ValueError(f"variable {name!r} is already described differently")
        VARIABLES[name] = variable


def describe_variables(
    ds: xr.Dataset, variables: Mapping[str, Variable] | None = None
) -> xr.Dataset:
    """Write ``long_name``, ``description`` and (for numbers) ``units`` on every variable
    and coordinate of ``ds`` found in ``variables`` or :data:`VARIABLES` (in place; returned
    too)."""
    table = {**VARIABLES, **(variables or {})}
    for name in [*ds.data_vars, *ds.coords]:
        entry = table.get(str(name))
        if entry is None:
            continue
        attrs = ds[name].attrs
        attrs["long_name"] = entry.long_name
        # A study's description of this run (its horizon, its norm) is kept.
        attrs.setdefault("description", entry.description)
        if entry.units is not None and ds[name].dtype.kind in "biuf":
            attrs["units"] = entry.units
    return ds


def describe(
    ds: xr.Dataset, *, title: str, variables: Mapping[str, Variable] | None = None
) -> xr.Dataset:
    """:func:`describe_variables`, and the global ``title``, ``Conventions``, ``source``
    and ``references`` (in place; returned too). ``history`` comes with the provenance
    (:func:`attndyn._estimate.dataset.attach_provenance`)."""
    from .._version import __version__

    describe_variables(ds, variables)
    ds.attrs["title"] = title
    ds.attrs["Conventions"] = CONVENTIONS
    ds.attrs["source"] = f"attndyn {__version__}"
    ds.attrs["references"] = REFERENCES
    return ds


def history_line(record: Mapping[str, Any]) -> str:
    """CF ``history``: when the dataset was made, by which attndyn version and command
    (or, from Python, which study)."""
    made = record.get("created", "")
    study = record.get("study", record.get("kind", "study"))  # kind: 0.4's records
    how = record.get("command") or f"attndyn.{study} (Python API)"
    return f"{made} attndyn {record.get('attndyn_version', '')}: {how}".strip()


def index_points(ds: xr.Dataset, names: Sequence[str] | None = None) -> xr.Dataset:
    """``ds`` with its point coordinates (``names``; default: every coordinate along
    ``point``) as one index along ``point`` (a MultiIndex for several), so that
    ``ds.sel(beta=2.0, dim=4)`` selects directly. Unchanged without point coordinates."""
    if "point" not in ds.dims or _indexed(ds):
        return ds
    levels = list(names) if names is not None else _point_coordinates(ds)
    if not levels:
        return ds
    if "point" in ds.coords:
        ds = ds.drop_vars("point")
    return ds.set_xindex(levels)


def _point_coordinates(ds: xr.Dataset) -> list[str]:
    return [str(k) for k, v in ds.coords.items() if v.dims == ("point",) and k != "point"]


def _indexed(ds: xr.Dataset) -> list[str]:
    """The coordinates that index ``point`` (besides a plain ``point`` coordinate)."""
    return [
        str(k)
        for k, v in ds.xindexes.items()
        if v is not None and k != "point" and ds[k].dims == ("point",)
    ]


def for_netcdf(ds: xr.Dataset) -> xr.Dataset:
    """``ds`` as netCDF can store it: an index along ``point`` (a MultiIndex) reset to
    plain coordinates, their names recorded in the ``point_index`` attribute; and no
    ``_FillValue`` on coordinates (CF §2.5.1: coordinates have no missing values; xarray
    would add NaN as one to every float coordinate)."""
    levels = _indexed(ds)
    out = ds.reset_index(levels) if levels else ds.copy()
    for name in out.coords:
        out[name].encoding["_FillValue"] = None
    if not levels:
        return out
    if "point" in out.coords and "point" not in ds.data_vars:
        out = out.drop_vars("point")
    out.attrs[POINT_INDEX] = " ".join(levels)
    return out


def to_netcdf(ds: xr.Dataset, path: str | os.PathLike, **kwargs: Any) -> None:
    """Write ``ds`` as netCDF (:func:`for_netcdf`); :func:`open_dataset` reads it back."""
    for_netcdf(ds).to_netcdf(path, **kwargs)


def open_dataset(path: str | os.PathLike, **kwargs: Any) -> xr.Dataset:
    """Open an attndyn results file with ``xarray.open_dataset`` and restore its point
    index (the ``point_index`` attribute; for a file written without one, such as
    ``modes.nc``, every coordinate along ``point``), so ``ds.sel(beta=2.0, dim=4)`` works.
    The data are loaded into memory and the file closed. A file of attndyn 0.4 reads in
    today's names (its ``tokens`` coordinate as ``n_tokens``).

    ``xarray.open_dataset`` alone gives the points as plain coordinates: netCDF cannot
    store a MultiIndex, and xarray indexes only a coordinate named as its dimension, so no
    layout along ``point`` is selectable by value there. Plain xarray restores it with
    ``ds.set_xindex(ds.attrs["point_index"].split())``."""
    with xr.open_dataset(path, **kwargs) as ds:
        ds = ds.load()
    names = str(ds.attrs.pop(POINT_INDEX, "")).split()
    old = {o: n for o, n in RENAMED_COORDINATES.items() if o in ds.coords and n not in ds.variables}
    if old and "provenance" in ds.attrs:  # a study's file from attndyn 0.4: today's names
        ds = ds.rename(old)
        names = [old.get(n, n) for n in names]
    if names and all(n in ds.coords for n in names):
        return ds.set_xindex(names)
    return index_points(ds) if not names else ds
