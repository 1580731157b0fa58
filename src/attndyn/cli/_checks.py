"""From a study command's options to its typed objects (:class:`ModelSpec`,
:class:`MonteCarlo`), refusing, naming the flags, what the run would ignore: another
engine's or scheme's flags, a --depth beside --step or the SDE engine."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .._core import defaults
from ._options import given

if TYPE_CHECKING:
    from ..studies.phase import ModelSpec, MonteCarlo


#: Why the SDE engine has no use for a discrete-engine option given with it.
SDE_IGNORES = {
    "step": "the sde engine steps by --dt",
    "values": "the sde engine's noise is Brownian, whatever the law of the values",
}


def check_engine_flags(options: Mapping[str, Any]) -> None:
    """Refuse flags of the other engine (they would be ignored): --solver and --dt with
    the discrete engine, --step and --values with the sde engine."""
    from .._core.errors import ParameterError

    if options["engine"] == "sde":
        for name, why in SDE_IGNORES.items():
            if given(name):
                raise ParameterError(
                    f"--{name} applies to --engine discrete only; {why} (drop --{name}, or "
                    "drop --engine sde)."
                )
        return
    for name in ("solver", "dt"):
        if given(name):
            raise ParameterError(
                f"--{name} applies to --engine sde only; the discrete engine steps by "
                f"1/--depth (drop --{name}, or add --engine sde)."
            )


#: The scheme each scheme-specific option belongs to.
SCHEME_OPTIONS = {"tau": ("mix-ln", "Mix-LN's switch time"), "alpha": ("ngpt", "nGPT's step")}


def check_scheme_flags(options: Mapping[str, Any]) -> None:
    """Refuse, naming the flags, a scheme the engine lacks (the SDEs are Post-LN's limit)
    and a scheme's own number given for another scheme (it would be ignored)."""
    from .._core.errors import ParameterError

    scheme = options["scheme"]
    if scheme != "post-ln" and options["engine"] == "sde":
        raise ParameterError(
            f"--scheme {scheme} has no sde engine: the SDEs (seed 003 eq. 6 / eq. 8) are the "
            "depth limit of Post-LN (drop --engine sde, or drop --scheme)."
        )
    for name, (owner, what) in SCHEME_OPTIONS.items():
        if given(name) and scheme != owner:
            raise ParameterError(
                f"--{name} is {what} and applies to --scheme {owner} only; this run's scheme "
                f"is {scheme} (drop --{name}, or add --scheme {owner})."
            )


def depth_conflicts(options: Mapping[str, Any]) -> list[str]:
    """Messages for a --depth that the run would ignore: with the sde engine, or with
    --step (which sets the layer step itself)."""
    if not given("depth"):
        return []
    if options["engine"] == "sde":
        return [
            "--depth applies to --engine discrete only; the sde engine steps by --dt (drop "
            "--depth, or drop --engine sde)."
        ]
    if given("step"):
        return [
            "--depth and --step both set the discrete engine's layer step (--step η, or "
            "1/--depth); give one of them (drop --depth or --step)."
        ]
    return []


def refuse_unused(
    problems: Sequence[str], spec: ModelSpec, points: Sequence[Mapping[str, Any]]
) -> None:
    """Refuse the first of ``problems`` (options given that the run would ignore), after
    building every point's model, so that a value the model refuses is named first."""
    if not problems:
        return
    from .._core.errors import ParameterError
    from ..studies.evolution import point_model, study_models

    models = study_models(spec, [p["model"] for p in points if "model" in p])
    for point in points:
        if "model" in point:
            point_model(models, point)
        else:
            spec.model.model(**point)
    raise ParameterError(problems[0])


def monte_carlo(options: Mapping[str, Any]) -> MonteCarlo:
    """The estimator options shared by the study commands."""
    from ..studies.phase import MonteCarlo

    return MonteCarlo(
        n_trajectories=options["n_trajectories"],
        seed=options["seed"],
        tol=options["tol"],
        chunk_size=options["chunk_size"],
        route=options.get("route", "auto"),
        early_absorption=options.get("early_absorption"),
        on_nonfinite=options.get("on_nonfinite", defaults.ON_NONFINITE),
        x64=options.get("x64", False),
        on_merged=options.get("on_merged", defaults.ON_MERGED),
    )


def model_spec(options: Mapping[str, Any], *, noise: str, attention: str) -> ModelSpec:
    """The model options shared by the study commands."""
    from ..studies.phase import ModelSpec

    return ModelSpec(
        noise=noise,
        engine=options["engine"],
        attention=attention,
        values=options["values"],
        sigma=options["sigma"],
        depth=options["depth"],
        horizon=options["horizon"],
        solver=options["solver"],
        dt=options["dt"],
        norm=options.get("norm", defaults.NORM),
        step=options.get("step"),
        scheme=options.get("scheme", defaults.SCHEME),
        tau=options.get("tau", defaults.TAU),
        alpha=options.get("alpha", defaults.ALPHA),
    )
