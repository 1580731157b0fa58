"""Pieces shared by the CLI commands."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import click
from click.core import ParameterSource

# Only modules that import nothing heavy at the top: `attndyn --help` and the options'
# own errors never import JAX (each command imports what it runs when it runs).
from .._core import defaults
from .._core.names import (
    ATTENTION_KINDS,
    DISTRIBUTIONS,
    NORM_NAMES,
    SCHEME_NAMES,
    SDE_SOLVER_NAMES,
)
from .._core.renamed import DEPRECATED_FLAGS, REMOVED_IN
from .._estimate.defaults import DEFAULT_COORDINATOR_TIMEOUT
from ..studies._names import ENGINES

if TYPE_CHECKING:
    from ..studies.phase import ModelSpec, MonteCarlo
    from ._output import Output


def lazy_names(module: str, table: Mapping[str, str]) -> Callable[[str], Any]:
    """The ``__getattr__`` of a command module whose ``table`` names (name → the module
    that defines it, relative to attndyn) are imported on first use: ``attndyn --help``
    imports no JAX, and the names stay module attributes (a test can replace them)."""
    import importlib

    def __getattr__(name: str) -> Any:
        if name not in table:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(table[name], "attndyn"), name)
        setattr(sys.modules[module], name, value)
        return value

    return __getattr__


def cli_errors(func: Callable) -> Callable:
    """Turn parameter errors into usage errors (exit status 2, one line naming the
    parameter), and overflow or file-system errors into errors with exit status 1, and a
    Ctrl-C into one line saying how to resume (status 130); never a traceback."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        import jax

        from .._core.errors import (
            NonFiniteError,
            NumericalMergeError,
            NumericalMergeWarning,
            ParameterError,
        )
        from .._estimate import interrupts
        from .._estimate.estimator import deferred_warnings

        try:
            with warnings.catch_warnings(), interrupts.watching(), deferred_warnings():
                # The commands print their own line per point (warn_merged).
                warnings.simplefilter("ignore", NumericalMergeWarning)
                result = func(*args, **kwargs)
                # A Ctrl-C that Python swallowed (in a garbage-collection callback) still
                # ends the command with status 130.
                interrupts.check()
                return result
        except ParameterError as error:
            raise click.UsageError(str(error)) from None
        except (NonFiniteError, NumericalMergeError) as error:
            raise click.ClickException(str(error)) from None
        except KeyboardInterrupt:
            # Click would print "Aborted!" alone: say how to go on (status 130, as for SIGINT).
            click.echo(
                "Interrupted. Rerun the same command to resume: a study with a checkpoint "
                "continues where it stopped, its finished work kept.",
                err=True,
            )
            sys.exit(130)
        except OSError as error:  # e.g. a full disk while writing: the machine, status 1
            raise click.ClickException(storage_message(error)) from None
        except (jax.errors.JaxRuntimeError, MemoryError) as error:
            raise run_failure(error) from None

    return wrapper


def storage_message(error: OSError) -> str:
    """One line for a failed file operation: what failed, and that nothing is lost (the
    outputs are replaced together or not at all, and the checkpoint atomically)."""
    from .._estimate.files import StorageError

    if isinstance(error, StorageError) and "nothing was computed" in str(error.strerror):
        return f"{error.strerror}."
    where = f" ({error.filename})" if error.filename and not isinstance(error, StorageError) else ""
    return (
        f"{error.strerror or error}{where}. The previous outputs are unchanged and work "
        "already checkpointed is kept: rerun the same command to resume."
    )


def run_failure(error: BaseException) -> click.ClickException:
    """One line (status 1) for an error of the JAX runtime: out of memory (XLA's
    RESOURCE_EXHAUSTED, or Python's MemoryError) says what to lower; any other says what
    JAX reported, in its first line."""
    lines = str(error).strip().splitlines()
    first = lines[0] if lines else type(error).__name__
    if isinstance(error, MemoryError) or "RESOURCE_EXHAUSTED" in str(error):
        context = click.get_current_context(silent=True)
        known = {o for p in context.command.params for o in p.opts} if context else set()
        lower = "--n-tokens or --dim"
        if "--chunk-size" in known:  # a smaller batch needs less memory, same results
            lower = "--chunk-size (trajectories per batch; results unchanged), or " + lower
        return click.ClickException(
            f"the run ran out of memory ({first}); lower {lower}. Work already "
            "checkpointed is kept: a rerun resumes it."
        )
    return click.ClickException(f"the computation failed in JAX: {first}")


@contextlib.contextmanager
def one_line_warnings() -> Iterator[None]:
    """While the CLI runs (only there: importing attndyn leaves :func:`warnings.showwarning`
    alone), show each warning as one line on stderr, ``warning: <message>``, once per run
    (Python shows the caller's source path and line over two lines, and shows a warning
    again wherever a filter change reset its registry)."""
    shown: set[tuple[type, str]] = set()

    def show(message, category, filename, lineno, file=None, line=None) -> None:
        del filename, lineno, line
        text = " ".join(str(message).split())
        if (category, text) not in shown:
            shown.add((category, text))
            click.echo(f"warning: {text}", file=file, err=True)

    previous = warnings.showwarning
    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = previous


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


def emit_json(payload: dict[str, Any]) -> None:
    from .._core.serialize import plain

    click.echo(json.dumps(plain(payload)))


def say(message: str) -> None:
    click.echo(message, err=True)


def command_line() -> str:
    return " ".join(["attndyn", *sys.argv[1:]])


def _apply(func: Callable, options: list[Callable]) -> Callable:
    for option in reversed(options):
        func = option(func)
    return func


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
            f"[default: {DEFAULT_COORDINATOR_TIMEOUT}].",
        ),
        *CACHE_OPTIONS,
    ]
    return _apply(func, options)


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


def use_cache(options: Mapping[str, Any]) -> None:
    """The persistent compilation cache, unless --no-cache (before any JAX work): the
    folder of --cache-dir, else of ATTNDYN_CACHE_DIR, else the default; a folder asked
    for that cannot be written is refused naming where it came from."""
    from .._estimate.runtime import enable_compilation_cache

    if options.get("cache", True):
        source = click.get_current_context().get_parameter_source("cache_dir")
        name = "ATTNDYN_CACHE_DIR" if source == ParameterSource.ENVIRONMENT else "--cache-dir"
        enable_compilation_cache(options.get("cache_dir"), name=name)


def cacheable_solves() -> None:
    """Let JAX's persistent compilation cache keep the ODE and SDE programs.

    diffrax checks some inputs inside the compiled program (save times in order and in
    [t0, t1], Brownian times in range) with equinox's ``error_if``, which under equinox's
    default ``EQX_ON_ERROR=raise`` is a host callback; JAX never writes a program with a
    host callback to its cache, so every ODE and SDE study compiled again on every run
    (``attndyn schemes``: ~60 s of its ~100 s). The models validate those inputs where
    they enter, so the checks never fire; under ``EQX_ON_ERROR=nan`` one that did would
    give NaN states, which the studies report as a failed solve or a non-finite
    trajectory and never write as a result. The same numbers either way. Set for the
    command's own process, before equinox is imported; a value the user set is kept."""
    os.environ.setdefault("EQX_ON_ERROR", "nan")


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


def given(name: str) -> bool:
    """Whether the user gave option ``name`` (on the command line or in its environment
    variable), rather than leaving its default."""
    source = click.get_current_context().get_parameter_source(name)
    return source not in (ParameterSource.DEFAULT, None)


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


def start_processes(options: Mapping[str, Any]) -> bool:
    """Set the process up before any other JAX work: one CPU device per core, the
    persistent compilation cache (unless --no-cache), and a multi-process run if asked.
    True on the process that writes the outputs."""
    import jax

    from .._estimate.distributed import DistributedError, initialize_distributed
    from .._estimate.runtime import use_all_cores

    use_all_cores()
    use_cache(options)
    # How long to wait never changes the numbers: not one of the recorded arguments
    # (RUN_OPTIONS).
    timeout = options.get("coordinator_timeout")
    try:
        initialize_distributed(
            options["coordinator"],
            options["process_count"],
            options["process_id"],
            timeout,
            progress=True,
        )
    except DistributedError as error:  # a runtime failure (status 1), not bad input
        raise click.ClickException(str(error)) from None
    return jax.process_index() == 0


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
        on_merged=options.get("on_merged", "auto"),
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
        norm=options.get("norm", "rms"),
        step=options.get("step"),
        scheme=options.get("scheme", defaults.SCHEME),
        tau=options.get("tau", defaults.TAU),
        alpha=options.get("alpha", defaults.ALPHA),
    )


def study_output(
    options: Mapping[str, Any],
    name: str,
    *,
    writer: bool,
    n_cells: int,
    more_figures: Sequence[str] = (),
) -> Output:
    """The checked, locked ``--out`` folder of a Monte Carlo study (``name``.nc and .png,
    and ``more_figures``; ``n_cells``: points × save times, for the space it needs)."""
    from ._output import Output, result_arguments

    return Output(
        options["out"],
        dataset=f"{name}.nc",
        figures=[f"{name}.png", *more_figures],
        arguments=result_arguments(options),
        overwrite=options["overwrite"],
        writer=writer,
        needs=output_bytes(n_cells, n_figures=1 + len(more_figures)),
    )


def output_bytes(n_cells: int, *, n_figures: int) -> int:
    """About what a study's dataset, checkpoint and figures take on disk (``n_cells``:
    points × save times), with a margin: the netCDF files hold ~20 numbers of 8 bytes a
    cell and outcome beside ~40 KiB of headers, a figure up to a few hundred KiB."""
    return 2 * (64 * 2**10 + 20 * 8 * 4 * n_cells) + n_figures * 512 * 2**10


def study_checkpoint(out: Output, name: str, *, fresh: bool) -> Path | None:
    """Where a study keeps its resumable tallies (``None`` in a multi-process run, where
    each process holds only its own share and a shared file would mix them). Called with
    the folder locked, so ``--fresh`` never deletes another run's checkpoint."""
    import jax

    if jax.process_count() > 1:
        return None
    checkpoint = out.folder / f"{name}.checkpoint.nc"
    if fresh:
        checkpoint.unlink(missing_ok=True)
    return checkpoint


def study_metadata(out: Output) -> dict[str, Any]:
    """Provenance of the command: its line and the arguments that determine the results."""
    return {"command": command_line(), "arguments": out.arguments}


def save_png(figure, path: Path, *, dpi: int, metadata: Mapping[str, str]) -> None:
    """Write ``figure`` as a PNG carrying ``metadata`` (:func:`png_metadata`) in its text
    chunks; matplotlib adds no date, so the same figure and metadata give the same bytes."""
    figure.savefig(path, format="png", dpi=dpi, metadata=dict(metadata))


def png_metadata(ds, dataset: str) -> dict[str, str]:
    """The PNG text chunks of a figure of ``ds``, so that it can be traced without its
    dataset: ``attndyn:provenance``, the dataset's provenance record (its
    ``attrs["provenance"]`` JSON, verbatim); ``Description``, the command that made it;
    ``Source``, the dataset's file name (``dataset``) beside it; ``Software``, the version."""
    record = json.loads(ds.attrs["provenance"])
    return {
        "Software": f"attndyn {record['attndyn_version']}",
        "Source": dataset,
        "Description": record["command"],
        "attndyn:provenance": ds.attrs["provenance"],
    }


def finish(
    ds,
    name: str,
    out: Output,
    checkpoint: Path | None,
    figure,
    options: Mapping[str, Any],
    started: float,
    more_figures: Mapping[str, Callable] = MappingProxyType({}),
    **extra,
) -> None:
    """Write the dataset, its figure (``figure(ds)``) and ``more_figures`` (file name →
    draw function, each path also reported under ``<stem>_figure``), and replace the old
    ones with them together (:meth:`Output.commit`); drop the checkpoint they supersede;
    then report, with the seconds since ``started`` (the command's start): one JSON object
    on stdout with ``--json``, else one line on stderr. Every figure carries the dataset's
    provenance (:func:`png_metadata`)."""
    from .._estimate.metadata import to_netcdf
    from ..studies.summary import json_points

    warn_merged(ds)
    # The point MultiIndex is written as plain coordinates; attndyn.open_dataset restores it.
    dataset_path = out.stage(f"{name}.nc", functools.partial(to_netcdf, ds))
    save = functools.partial(save_png, dpi=130, metadata=png_metadata(ds, dataset_path.name))
    figure_path = out.stage(f"{name}.png", functools.partial(save, figure(ds)))
    written = [dataset_path, figure_path]
    for file, draw in more_figures.items():
        path = out.stage(file, functools.partial(save, draw(ds)))
        extra[f"{Path(file).stem.removeprefix(name + '_')}_figure"] = str(path)
        written.append(path)
    out.commit()
    if checkpoint is not None:
        checkpoint.unlink(missing_ok=True)
    seconds = time.perf_counter() - started
    if options["as_json"]:
        payload = {"kind": extra.pop("kind"), "engine": ds.attrs["engine"]}
        payload.update(points=json_points(ds), **extra)
        payload.update(seconds=seconds, dataset=str(dataset_path), figure=str(figure_path))
        emit_json(payload)
    else:  # every file written, the extra figures too
        files = ", ".join(str(path) for path in written[:-1])
        say(f"wrote {files} and {written[-1]} in {seconds:.1f} s")


def warn_merged(ds) -> None:
    """One line on stderr per point whose tokens merged numerically (the run went on, with
    --on-merged exclude or count); under auto, one line saying what it did, where it
    did something."""
    if "n_merged" not in ds:
        return
    record = json.loads(ds.attrs.get("provenance", "{}"))
    if record.get("on_merged", "auto") == "auto":
        say_resolved(ds)
        return
    done = "counted in their class" if record.get("on_merged") == "count" else "excluded"
    most = ds["n_merged"].max("time").values
    dtype = record.get("dtype", "float32")
    # Under --x64 already, only a reduced route resolves smaller gaps.
    way_out = "A reduced route" if dtype == "float64" else "--x64 or a reduced route"
    for i in [i for i, n in enumerate(most) if n > 0]:
        row = ds.isel(point=i)
        params = ", ".join(
            f"{k}={row[k].item()}" for k in ("beta", "eps", "dim", "n_tokens") if k in row.coords
        )
        say(
            f"warning: {int(most[i])} of {int(row['n_valid'])} trajectories at {params} have "
            f"tokens that merged numerically ({dtype} cannot resolve their gap, so the "
            f"arithmetic fixed their class); they are {done} (n_merged). {way_out} resolves "
            "far smaller gaps."
        )


def say_resolved(ds) -> None:
    """Under --on-merged auto: one line on stderr where trajectories were rerun in float64
    or merged tokens were counted with a bound (nothing where nothing merged)."""
    if "n_rerun" not in ds or "merge_bound" not in ds:
        return
    rerun = int(ds["n_rerun"].sum())
    merged = int(ds["n_merged"].max("time").sum())
    if not rerun and not merged:
        return
    bound = float(ds["merge_bound"].max())
    say(
        f"note: tokens merged numerically in float32 in some trajectories: {rerun} rerun in "
        f"float64 from the same random numbers; {merged} left merged, counted in their class "
        f"with a summed bound of {bound:.2g} on those in a wrong class (merge_bound, "
        "merge_ci)."
    )
