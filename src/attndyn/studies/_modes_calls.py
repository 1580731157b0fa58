"""Compiled calls that a Ctrl-C can interrupt while they compile or run.

Python runs a signal handler only between bytecodes of its main thread, never inside a
call into XLA: a Ctrl-C during a compilation (seconds to tens of seconds for the
observables of 65,536 tokens) or a running call (a layer of 65,536 tokens on the direct
route: seconds) was seen only when it ended. Here every call is dispatched from a worker
thread and its results are awaited by polling (:func:`run_call`), so the main thread is
always in Python and a Ctrl-C is raised within a poll. The interrupted call goes on in
the background until it ends: :func:`work_in_flight` says so, and the command line then
exits at once (``os._exit``) rather than wait for it (its interpreter's exit would wait,
or crash).

Calls are compiled with ``jax.jit`` (:func:`async_jit`), not ``eqx.filter_jit``, which in
equinox 0.13 blocks until a call ends (it waits on a marker output, to report its runtime
errors).
"""

import concurrent.futures
import time
from collections.abc import Callable

import equinox as eqx
import jax

from .._io import interrupts

#: The one thread that dispatches (traces, compiles and enqueues) the calls.
_POOL = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="attndyn-modes")
#: What the main thread waits for: the dispatch of a call, then the arrays it returned.
_DISPATCHING: list[concurrent.futures.Future] = []
_AWAITED: list[jax.Array] = []
#: The longest pause between two polls (seconds): the most a Ctrl-C waits.
LONGEST_PAUSE = 0.05


def async_jit(fun: Callable, *, donate: tuple[int, ...] = (), **static: type) -> Callable:
    """``fun(model, *args)`` compiled with ``jax.jit``, the model split into its arrays
    (traced) and the rest (static, hashed); ``static`` names further static keyword
    arguments; ``donate``: the positions in ``args`` whose buffers the call may reuse
    for its results (the caller drops them). A call returns as soon as it is enqueued."""

    def split(static_part, dynamic_part, *args, **kwargs):
        return fun(eqx.combine(dynamic_part, static_part), *args, **kwargs)

    compiled = jax.jit(
        split,
        static_argnums=0,
        static_argnames=tuple(static),
        donate_argnums=tuple(2 + i for i in donate),
    )

    def call(model, *args, **kwargs):
        dynamic_part, static_part = eqx.partition(model, eqx.is_array)
        return compiled(static_part, dynamic_part, *args, **kwargs)

    return call


def run_call(fun: Callable, *args, **kwargs):
    """``fun(*args, **kwargs)``, a compiled call: dispatched from the worker thread (with
    the caller's ``jax_enable_x64``, a thread-local setting), then its results waited for
    (:func:`wait`); the main thread polls throughout, so a Ctrl-C is raised within
    :data:`LONGEST_PAUSE` even while the call compiles."""
    x64 = bool(jax.config.read("jax_enable_x64"))

    def dispatch():
        with jax.enable_x64(x64):
            return fun(*args, **kwargs)

    future = _POOL.submit(dispatch)
    _DISPATCHING[:] = [future]
    _poll(future.done)
    _DISPATCHING.clear()
    out = future.result()  # an error of the call (tracing, compiling) is raised here
    wait(out)
    return out


def wait(tree) -> None:
    """Wait for the arrays of ``tree`` (a call's results, enqueued or running), polling
    (:func:`_poll`): a Ctrl-C leaves the call running and :func:`work_in_flight` true."""
    leaves = _arrays(tree)
    _AWAITED[:] = leaves
    _poll(lambda: all(_ready(leaf) for leaf in leaves))
    _AWAITED.clear()


def _poll(done: Callable[[], bool]) -> None:
    """Return when ``done()``; meanwhile sleep, in pauses from 0.1 ms (a short call costs
    little more than itself) to :data:`LONGEST_PAUSE`, checking for Ctrl-C."""
    pause = 1e-4
    while not done():
        time.sleep(pause)
        pause = min(LONGEST_PAUSE, 2 * pause)
        interrupts.check()


def work_in_flight() -> bool:
    """Whether a call that was being dispatched or awaited when a Ctrl-C came still runs
    (its results are never read: the interrupted tile is redone on resume)."""
    dispatching = any(not future.done() for future in _DISPATCHING)
    return dispatching or any(not _ready(leaf) for leaf in _AWAITED)


def _arrays(tree) -> list[jax.Array]:
    """The arrays of ``tree`` whose readiness can be asked (typed PRNG key arrays cannot:
    they come from the same call as the arrays beside them)."""
    return [leaf for leaf in jax.tree.leaves(tree) if hasattr(leaf, "is_ready")]


def _ready(leaf: jax.Array) -> bool:
    """Whether the computation of ``leaf`` is done (``jax.Array.is_ready``, which the type
    stubs leave out)."""
    return bool(leaf.is_ready())  # type: ignore[attr-defined]
