"""Warnings held back while a study checks its arguments, shown once it runs.

Building the points' models, planning and reading the checkpoint may warn (a horizon off
the layer grid) and then refuse the arguments: a warning followed by the error that stops
the run was two lines for one mistake. :func:`deferred_warnings` records them
(``warnings.catch_warnings(record=True)``) until the study starts running
(:func:`release_warnings`) or the block ends, then issues them again, in order, through
the filters and ``showwarning`` in effect outside the recording; it drops them if the
block refuses the arguments (:class:`ParameterError`). Nested uses share the outermost
(the CLI holds a whole command's). Nothing is replaced by hand: the warnings machinery is
restored by ``catch_warnings`` when the block ends.
"""

import contextlib
import warnings
from collections.abc import Iterator
from typing import Any

from .._core.errors import ParameterError


class _Held:
    """The recording of one :func:`deferred_warnings` block."""

    def __init__(self) -> None:
        self.outside = list(warnings.filters)
        self.recording = warnings.catch_warnings(record=True)
        self.caught = self.recording.__enter__()
        self.holding = True

    def release(self) -> None:
        """Stop recording (later warnings are shown at once) and issue the recorded ones.
        Filters set inside the block while it recorded stay in force until it ends."""
        if not self.holding:
            return
        self.holding = False
        added: list[Any] = [f for f in warnings.filters if f not in self.outside]
        self.recording.__exit__(None, None, None)
        for action, message, category, module, lineno in reversed(added):
            warnings.filterwarnings(
                action,
                message.pattern if message is not None else "",
                category,
                module.pattern if module is not None else "",
                lineno,
            )
        held, self.caught[:] = list(self.caught), []
        for w in held:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)


_held: list[_Held] = []


@contextlib.contextmanager
def deferred_warnings() -> Iterator[None]:
    """Hold the warnings raised inside until :func:`release_warnings` or the end of the
    block (see the module docstring)."""
    if _held:
        yield
        return
    with warnings.catch_warnings():  # filters as they were outside, once the block ends
        held = _Held()
        _held.append(held)
        try:
            yield
        except ParameterError:
            held.caught.clear()
            raise
        finally:
            _held.remove(held)
            held.release()


def release_warnings() -> None:
    """Show the warnings :func:`deferred_warnings` holds, and every later one at once: the
    arguments passed every check and the study runs."""
    for held in _held:
        held.release()
