"""How the commands fail: a parameter error as one line with exit status 2, a failed run
(overflow, the file system, the JAX runtime, memory) as one line with status 1, a Ctrl-C as
one line saying how to resume (status 130), and warnings as one line each. Never a
traceback."""

import contextlib
import functools
import sys
import warnings
from collections.abc import Callable, Iterator

import click


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
        from .._estimate.held_warnings import deferred_warnings
        from .._io import interrupts

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
    from .._io.files import StorageError

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
