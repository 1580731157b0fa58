"""The commands' options: their declarations (shared by the commands that take them), the
parsing of lists and special values, and 0.4's flags kept as hidden deprecated spellings.
Imports nothing heavy: ``attndyn --help`` and the options' own errors never import JAX."""

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

import click
from click.core import ParameterSource

from .._core import defaults
from .._core.names import (
    ATTENTION_KINDS,
    DISTRIBUTIONS,
    NORM_NAMES,
    SCHEME_NAMES,
    SDE_SOLVER_NAMES,
)
from .._core.renamed import DEPRECATED_FLAGS, REMOVED_IN
from ..studies._names import ENGINES


def nonempty_path(context: click.Context, param: click.Parameter, value: str | None):
    """Click callback of the folder options: an empty (or blank) path would be the current
    folder, filled with results or cache files; refused, naming the option."""
    if value is not None and not value.strip():
        raise click.BadParameter(
            "an empty path would write into the current folder; give a folder path, or "
            "leave the option out for its default.",
            context,
            param,
        )
    return value


def names(option: str, text: str) -> list[str]:
    """The comma-separated names of ``option``, each given once (a repeat would run, and
    store, the same study twice under one label)."""
    from .._core.errors import ParameterError

    listed = [part.strip() for part in text.split(",") if part.strip()]
    repeated = sorted({name for name in listed if listed.count(name) > 1})
    if repeated:
        raise ParameterError(
            f"{option} lists {', '.join(repeated)} more than once; give each once."
        )
    return listed


def floats(name: str, text: str) -> list[float]:
    from ._ranges import parse_range

    return parse_range(name, text)


def ints(name: str, text: str) -> list[int]:
    from ._ranges import parse_range

    return parse_range(name, text, integer=True)


def _apply(func: Callable, options: list[Callable]) -> Callable:
    for option in reversed(options):
        func = option(func)
    return func


def given(name: str) -> bool:
    """Whether the user gave option ``name`` (on the command line or in its environment
    variable), rather than leaving its default."""
    source = click.get_current_context().get_parameter_source(name)
    return source not in (ParameterSource.DEFAULT, None)


def deprecated_option(old: str, new: str, dest: str | None = None, **attrs: Any) -> Callable:
    """A hidden option ``old``, 0.4's spelling of ``new``: it still works for one release,
    with a one-line note on stderr (:func:`command_options` moves its value; ``dest``: its
    Python name where 0.4's was not the flag's, as 0.4's records name it)."""

    def note(context: click.Context, param: click.Parameter, value: Any) -> Any:
        if value is not None and context.get_parameter_source(str(param.name)) not in (
            ParameterSource.DEFAULT,
            None,
        ):
            click.echo(
                f"note: {old} is deprecated, use {new} (the old flag goes in {REMOVED_IN}).",
                err=True,
            )
        return value

    attrs.setdefault("default", None)
    decls = [old] if dest is None else [old, dest]
    return click.option(*decls, hidden=True, callback=note, **attrs)


def command_options(raw: dict[str, Any]) -> Mapping[str, Any]:
    """A command's options as click gave them, read-only from here on, with the values of
    deprecated flags moved to their new names (both spellings given: refused, naming
    them). The command builds its typed objects (``ModelSpec``, ``MonteCarlo``, …) from
    this mapping and nothing edits it: a value the command fills in (phase-diagram's
    default attention per kind) goes into a new mapping, which is what it records."""
    from .._core.errors import ParameterError

    options = {k: v for k, v in raw.items() if k not in DEPRECATED_FLAGS}
    for old, (new, convert) in DEPRECATED_FLAGS.items():
        value = raw.get(old)
        if value is None:
            continue
        value = convert(value)
        # Both spellings with one meaning: the note said which to keep; two meanings: refused.
        if given(new) and value != options.get(new):
            flag, new_flag = _flag(old), _flag(new)
            meaning = (
                ""
                if isinstance(value, bool) or value == raw[old]
                else f"{flag} {raw[old]} is {new_flag} {value}, not {options.get(new)}; "
            )
            raise ParameterError(f"{meaning}give {new_flag} only ({flag} is its deprecated name).")
        options[new] = value
    return MappingProxyType(options)


def _flag(name: str) -> str:
    """The command-line spelling of option ``name`` (its Python name) in this command."""
    context = click.get_current_context(silent=True)
    for param in context.command.params if context else ():
        if param.name == name and param.opts:
            return param.opts[0]
    return "--" + name.replace("_", "-")


def study_options(func: Callable) -> Callable:
    """The options every Monte Carlo study command takes: the value noise, the engine, the
    sample, the output folder, and the estimator's route, absorption, non-finite policy
    and multi-host flags. :func:`start_processes`, :func:`model_spec` and
    :func:`monte_carlo` read them."""
    options = [
        engine_option(
            "discrete: the depth-L layer maps; sde: the L → ∞ SDE of Post-LN (eq. 6 / eq. 8)."
        ),
        scheme_option(
            "Normalization scheme of the layer maps (seed 004; discrete engine). The exact "
            "t = ∞ curves and thresholds are Post-LN's: no other scheme's figure draws them."
        ),
        click.option(
            "--values",
            default=None,
            type=click.Choice(DISTRIBUTIONS),
            help="Law of the value noise, discrete engine only [default: gaussian matrix "
            "entries for full noise, rademacher scalars v_n for hybrid noise (003 eq. 7 "
            "assumes them bounded)].",
        ),
        click.option(
            "--sigma",
            default=defaults.SIGMA,
            show_default=True,
            type=float,
            help="σ > 0: the scale of the full value noise (not of the hybrid model's ε).",
        ),
        norm_option(
            "Token normalisation of the scheme: rms (the unit sphere) or layernorm (centred: "
            "the unit sphere of the mean-zero hyperplane, d ≥ 3; Post-LN's law is then the rms "
            "model's in d − 1 dimensions). Discrete engine only."
        ),
        tau_option("Mix-LN's switch τ ≥ 0: Post-LN before t = τ, Pre-LN after (--scheme mix-ln)."),
        alpha_option("nGPT's step α > 0 (--scheme ngpt)."),
        click.option(
            "--step",
            default=None,
            type=float,
            help="Discrete engine: a real layer step η > 0 instead of --depth (t = nη; a "
            "horizon off the layer grid is rounded with a warning).",
        ),
        click.option(
            "--solver",
            default=defaults.SOLVER,
            show_default=True,
            type=click.Choice(SDE_SOLVER_NAMES),
            help="SDE engine: euler (projected Euler–Maruyama, Itô), heun or spark "
            "(diffrax's Heun and SPaRK, on the Stratonovich form).",
        ),
        click.option(
            "--dt",
            default=defaults.DT,
            show_default=True,
            type=float,
            help="SDE engine: step in (0, T].",
        ),
        click.option(
            "--n-trajectories",
            default=defaults.N_TRAJECTORIES,
            show_default=True,
            type=int,
            help="Trajectories per point.",
        ),
        deprecated_option("--trajectories", "--n-trajectories", type=int),
        click.option(
            "--tol",
            default=defaults.TOL,
            show_default=True,
            type=float,
            help="Clustering tolerance.",
        ),
        click.option(
            "--seed", default=defaults.SEED, show_default=True, type=int, help="PRNG seed."
        ),
        click.option(
            "--chunk-size",
            default=None,
            type=int,
            help="Trajectories per batch (default: from device memory). Never changes results.",
        ),
        click.option(
            "--out",
            default="attndyn-results",
            show_default=True,
            callback=nonempty_path,
            help="Output folder for the dataset and figure (locked while a run uses it).",
        ),
        click.option(
            "--fresh",
            is_flag=True,
            help="Delete the checkpoint of an interrupted run and start afresh.",
        ),
        overwrite_option(),
        click.option("--json", "as_json", is_flag=True, help="Print one JSON object to stdout."),
        click.option("--no-progress", is_flag=True, help="Hide the progress bar."),
    ]
    return scale_options(_apply(func, options))


class EnvironmentInt(click.ParamType):
    """An integer option that its environment variable may set: a value that is not an
    integer is blamed on where it came from (``ATTNDYN_PROCESS_ID=abc`` was reported as a
    bad ``--process-id``)."""

    name = "integer"

    def convert(self, value, param, ctx):
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        try:
            return int(str(value).strip())
        except ValueError:
            pass
        source = ctx.get_parameter_source(param.name) if ctx and param and param.name else None
        if source == ParameterSource.ENVIRONMENT and param is not None:
            variable = param.envvar if isinstance(param.envvar, str) else param.opts[0]
            raise click.BadParameter(
                f"{value!r} is not an integer (unset it, or give a whole number).",
                ctx,
                param,
                param_hint=f"the environment variable {variable}",
            )
        self.fail(f"{value!r} is not a valid integer.", param, ctx)


class AbsorptionBound(click.ParamType):
    """``auto``, ``off`` or a bound in (0, 1] (checked by :class:`MonteCarlo`)."""

    name = "auto|off|BOUND"

    def convert(self, value, param, ctx):
        if isinstance(value, str) and value.strip().lower() in ("auto", "off"):
            return None if value.strip().lower() == "off" else "auto"
        try:
            return float(value)
        except (TypeError, ValueError):
            self.fail(
                f"early-absorption={value!r} must be auto, off or a bound in (0, 1].",
                param,
                ctx,
            )


def scale_options(func: Callable) -> Callable:
    """``--route``, ``--early-absorption``, ``--on-nonfinite`` and the multi-host flags."""
    options = [
        click.option(
            "--route",
            type=click.Choice(["auto", "full"]),
            default="auto",
            show_default=True,
            help="auto: simulate the N×N token frame where exact in law (Q=K=I, N<d, "
            "Gaussian or scalar values, RMS norm); full: always the N×d model.",
        ),
        click.option(
            "--early-absorption",
            type=AbsorptionBound(),
            default="auto",
            show_default=True,
            help="Stop each two-token trajectory once it is within δ of ±1, δ from the "
            "scale function for this per-trajectory bound on a changed class (e.g. 1e-7); "
            "auto: 1e-7 where the route supports it; off: simulate every layer.",
        ),
        click.option(
            "--x64",
            is_flag=True,
            help="Run in float64 (the full routes' float32 coordinates merge tokens closer "
            "than ~1e-7; merged trajectories are counted in n_merged either way).",
        ),
        click.option(
            "--on-merged",
            type=click.Choice(["auto", "raise", "exclude", "count"]),
            default=defaults.ON_MERGED,
            show_default=True,
            help="Trajectories whose tokens merged numerically (float precision, not the "
            "dynamics, fixed their class): auto bounds the chance that each merged pair "
            "would have come apart, reruns in float64 (same random numbers) those whose "
            "bound exceeds 1e-7, counts the rest with the summed bound in merge_bound and "
            "merge_ci, and stops only where no bound holds; raise stops at the first merge; "
            "exclude drops them at each save time (n_counted); count keeps them in the "
            "arithmetic's class. n_merged counts them always.",
        ),
        click.option(
            "--on-nonfinite",
            type=click.Choice(["raise", "exclude"]),
            default=defaults.ON_NONFINITE,
            show_default=True,
            help="Trajectories that overflow (NaN/inf): raise stops with an error naming "
            "them; exclude drops them from the probabilities, with a warning and their "
            "count in n_nonfinite.",
        ),
        deprecated_option(
            "--exclude-nonfinite", "--on-nonfinite exclude", is_flag=True, default=None
        ),
        *MULTI_HOST_OPTIONS,
        *CACHE_OPTIONS,
    ]
    return _apply(func, options)


#: The multi-host flags (jax.distributed), declared once for every command that runs on
#: several hosts: the Monte Carlo studies (:func:`study_options`) and ``attndyn modes``
#: (:func:`multi_host_options`); :func:`attndyn.cli._runtime.start_processes` reads them.
MULTI_HOST_OPTIONS = [
    click.option(
        "--coordinator",
        envvar="ATTNDYN_COORDINATOR",
        default=None,
        help="HOST:PORT of process 0 for a multi-host run (jax.distributed).",
    ),
    click.option(
        "--process-count",
        envvar="ATTNDYN_PROCESS_COUNT",
        type=EnvironmentInt(),
        default=None,
        help="Processes in a multi-host run (with --coordinator; each host runs one).",
    ),
    click.option(
        "--process-id",
        envvar="ATTNDYN_PROCESS_ID",
        type=EnvironmentInt(),
        default=None,
        help="This process's index, 0 to --process-count − 1 (0 writes the outputs).",
    ),
    click.option(
        "--coordinator-timeout",
        envvar="ATTNDYN_COORDINATOR_TIMEOUT",
        type=EnvironmentInt(),
        default=None,
        metavar="SECONDS",
        help="With --coordinator: how long each process waits for the coordinator and "
        "all the processes to join before stopping with an error "
        f"[default: {defaults.COORDINATOR_TIMEOUT}].",
    ),
]


def multi_host_options(func: Callable) -> Callable:
    """:data:`MULTI_HOST_OPTIONS`, for a command that takes no :func:`study_options`."""
    return _apply(func, MULTI_HOST_OPTIONS)


#: ``--cache/--no-cache`` and ``--cache-dir``: every command keeps its compiled programs.
CACHE_OPTIONS = [
    click.option(
        "--cache/--no-cache",
        default=True,
        show_default=True,
        help="Keep compiled programs on disk (JAX's persistent compilation cache), so "
        "a study shape compiles once per machine.",
    ),
    click.option(
        "--cache-dir",
        envvar="ATTNDYN_CACHE_DIR",
        default=None,
        callback=nonempty_path,
        help="Compilation cache folder [default: ~/.cache/attndyn/jax].",
    ),
]


def cache_options(func: Callable) -> Callable:
    """:data:`CACHE_OPTIONS`, for a command that takes no :func:`scale_options`."""
    return _apply(func, CACHE_OPTIONS)


def _choice_option(flag: str, default: str, choices, help: str) -> Callable:
    """A fixed list of names with its shared default (every command's help says what the
    choice does for it)."""
    return click.option(
        flag, default=default, show_default=True, type=click.Choice(choices), help=help
    )


def attention_option(help: str) -> Callable:
    """``--attention``: softmax (SA) or unnormalized (USA), the shared default."""
    return _choice_option("--attention", defaults.ATTENTION, ATTENTION_KINDS, help)


def engine_option(help: str) -> Callable:
    """``--engine``: the discrete layer maps or their L → ∞ SDE, the shared default."""
    return _choice_option("--engine", defaults.ENGINE, ENGINES, help)


def depth_option(
    help: str = "L: layers per unit time (discrete engine; not with --step).",
) -> Callable:
    """``--depth``: L, the discrete engine's layers per unit time, the shared default."""
    return click.option("--depth", default=defaults.DEPTH, show_default=True, type=int, help=help)


def norm_option(help: str) -> Callable:
    """``--norm``: rms or (centred) layernorm tokens, the shared default."""
    return _choice_option("--norm", defaults.NORM, NORM_NAMES, help)


def scheme_option(help: str) -> Callable:
    """``--scheme``: the normalization scheme of the layer maps, the shared default."""
    return _choice_option("--scheme", defaults.SCHEME, SCHEME_NAMES, help)


def tau_option(help: str) -> Callable:
    """``--tau``: Mix-LN's switch, the shared default (:func:`check_scheme_flags`)."""
    return click.option("--tau", default=defaults.TAU, show_default=True, type=float, help=help)


def alpha_option(help: str) -> Callable:
    """``--alpha``: nGPT's step, the shared default (:func:`check_scheme_flags`)."""
    return click.option("--alpha", default=defaults.ALPHA, show_default=True, type=float, help=help)


def overwrite_option() -> Callable:
    return click.option(
        "--overwrite",
        is_flag=True,
        help="Replace results in --out that a run with other arguments made (refused otherwise).",
    )
