"""Warnings held back while a study checks its arguments, shown once it runs.

Building the points' models, planning and reading the checkpoint may warn (a horizon off
the layer grid) and then refuse the arguments: a warning followed by the error that stops
the run was two lines for one mistake. :func:`deferred_warnings` holds them until the
study starts running (:func:`release_warnings`) or the block ends, and drops them if the
block refuses the arguments (:class:`ParameterError`). Nested uses share the outermost
(the CLI holds a whole command's).
"""

import contextlib
import warnings
from collections.abc import Iterator

from .._core.errors import ParameterError


class _Held:
    """Warnings held by :func:`deferred_warnings`, and where to show them."""

    def __init__(self, show):
        self.show = show
        self.warnings: list[tuple] = []
        self.holding = True

    def release(self) -> None:
        self.holding = False
        held, self.warnings = self.warnings, []
        for args in held:
            self.show(*args)


_held: list[_Held] = []


@contextlib.contextmanager
def deferred_warnings() -> Iterator[None]:
    """Hold the warnings raised inside until :func:`release_warnings` or the end of the
    block (see the module docstring). Inside ``warnings.catch_warnings``, so that the
    warnings machinery is restored as it was however the block ends."""
    if _held:
        yield
        return
    with warnings.catch_warnings():
        held = _Held(warnings.showwarning)

        def show(message, category, filename, lineno, file=None, line=None):
            if held.holding:
                held.warnings.append((message, category, filename, lineno, file, line))
            else:
                held.show(message, category, filename, lineno, file, line)

        warnings.showwarning = show
        _held.append(held)
        try:
            yield
        except ParameterError:
            held.warnings.clear()
            raise
        finally:
            _held.remove(held)
            warnings.showwarning = held.show
            held.release()


def release_warnings() -> None:
    """Show the warnings :func:`deferred_warnings` holds, and every later one at once: the
    arguments passed every check and the study runs."""
    for held in _held:
        held.release()
