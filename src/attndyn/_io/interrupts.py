"""Ctrl-C that is never lost: a SIGINT is remembered while a study runs, and raised again
at the next check between blocks of device work.

Python turns SIGINT into a ``KeyboardInterrupt`` raised wherever the main thread happens to
be. Where that is a garbage-collection callback (JAX registers one) or a ``__del__``,
Python prints "Exception ignored in ..." and goes on: the interrupt was swallowed and the
run finished as if nothing had happened. :func:`watching` installs a handler that records
the signal before raising, and :func:`check` raises it again; the estimator checks between
blocks of steps and between tiles, the CLI before it writes its outputs.
"""

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator

_pending = threading.Event()
_depth = [0]
_shield = [0]


def _handler(previous):
    def handle(signum, frame):
        _pending.set()
        if _shield[0] > 0:  # inside deferred(): raised when it ends
            return
        if callable(previous):
            previous(signum, frame)  # the default raises KeyboardInterrupt; a notebook's
        raise KeyboardInterrupt

    return handle


@contextlib.contextmanager
def watching() -> Iterator[None]:
    """While inside: every SIGINT is recorded (see the module docstring). Nested uses share
    the outermost one; a new outermost use forgets an interrupt an earlier run left
    recorded. Outside the main thread (where no handler can be set) this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    outermost = _depth[0] == 0
    previous = None
    previous_hook = sys.unraisablehook
    if outermost:
        _pending.clear()
        previous = signal.getsignal(signal.SIGINT)
        if callable(previous):  # SIG_IGN or SIG_DFL: the user's choice, left alone
            signal.signal(signal.SIGINT, _handler(previous))
            sys.unraisablehook = _quiet(previous_hook)
    _depth[0] += 1
    try:
        yield
    finally:
        _depth[0] -= 1
        if outermost and callable(previous):
            signal.signal(signal.SIGINT, previous)
            sys.unraisablehook = previous_hook


def _quiet(hook):
    """``sys.unraisablehook`` that leaves out the recorded SIGINT's swallowed
    ``KeyboardInterrupt`` ("Exception ignored in: <function _xla_gc_callback ...>"): it is
    raised again at the next :func:`check`."""

    def quiet(unraisable):
        if isinstance(unraisable.exc_value, KeyboardInterrupt) and _pending.is_set():
            return
        hook(unraisable)

    return quiet


def check() -> None:
    """Raise ``KeyboardInterrupt`` if a SIGINT arrived since the outermost :func:`watching`
    began (even one whose first ``KeyboardInterrupt`` Python swallowed). Only inside
    :func:`watching`, in the main thread: a study run from another thread never sees
    SIGINT, nor one an earlier study left recorded."""
    main = threading.current_thread() is threading.main_thread()
    if main and _depth[0] > 0 and _pending.is_set():
        raise KeyboardInterrupt


def pending() -> bool:
    """Whether a SIGINT arrived since the outermost :func:`watching` began."""
    return _pending.is_set()


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """While inside, a SIGINT recorded by :func:`watching` waits: it is raised when the
    block ends (:func:`check`). For updates that must happen whole (the tallies of a
    chunk, a checkpoint's state): an interrupt between two of their assignments left a
    checkpoint whose counts disagreed."""
    _shield[0] += 1
    try:
        yield
    finally:
        _shield[0] -= 1
    if _shield[0] == 0:
        check()
