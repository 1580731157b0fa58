"""Validation once (issue 44 item 4): a parameter is checked where it enters, not again in
every layer it passes through, nor inside the theory's quadratures.

A small ``attndyn phase-diagram`` run goes through the command line: parsing, the study,
the estimator, the model, the exact curve and the figure. Two kinds of checks are counted
while it runs:

- the ``check_*`` functions of :mod:`attndyn._core.errors`, wrapped with a counter in
  every attndyn module that imported them; a check counts once however it nests
  (``check_real_in`` calls ``check_real`` and ``check_bound``), and a parameter is the
  pair (name, value);
- the hand-written guards, ``if <condition>: raise ParameterError(...)`` anywhere else in
  the package (found by reading the source), traced line by line: a guard is the pair
  (its line, the arguments and local numbers of the call it is evaluated in).

One point: a value is then checked where it enters (the command line, the spec or a
public function) and by the model built from it (its ``__check_init__``), so at most
twice. (With P points each model checks its own: a spec-level value would be checked
1 + P times, rightly; one point makes the rule exact.) The theory's closed forms that the
study and the figure evaluate are entries of their own (they read d and β back from the
dataset), so their checks are counted per call of a public theory function: each checks
its arguments once, and its kernels and quadratures check nothing again (the run made
518 such checks before, 127 of d alone).
"""

import ast
import collections
import importlib
import pkgutil
import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

import attndyn
from attndyn._core import errors

SRC = Path(attndyn.__file__).parent

#: Every ``check_*`` function of the errors module.
CHECKS: dict[str, Callable[..., Any]] = {
    name: value
    for name, value in vars(errors).items()
    if name.startswith("check_") and callable(value)
}

#: Known re-checks, each in a module this work does not own, with the work that removes
#: it. Their checks are left out of the limit only while the parameter would be over it
#: with them: the test fails once an entry is no longer needed, so that the list only
#: shrinks (as tests/test_architecture.py's _PENDING). Empty: the estimator trusts the
#: points a study checked (CheckedPoints) and draws its starts unchecked (sphere_points),
#: its intervals take its own counts unchecked (wilson_bounds), and SaveAt.steps refuses
#: a save grid once per step (the model's __check_init__ is the first call).
_PENDING: dict[str, str] = {}


def _value_key(value: Any) -> str:
    """A hashable description of a checked value (arrays and lists by their numbers)."""
    if isinstance(value, str | bool | type(None)):
        return repr(value)
    try:
        return repr(np.asarray(value).tolist())[:60]
    except Exception:
        return type(value).__name__


def _short(path: str) -> str:
    return path.rpartition("/attndyn/")[2] or path


def _theory_entry(frame: FrameType | None) -> FrameType | None:
    """The outermost frame of attndyn.theory on the stack: the public function called."""
    found = None
    while frame is not None:
        if "/attndyn/theory/" in frame.f_code.co_filename:
            found = frame
        frame = frame.f_back
    return found


def _call_key(frame: FrameType) -> str:
    """What a guard in ``frame`` is evaluated on: the call's arguments and its local
    numbers and strings (a loop's variable: ``for name in ...``), numbers, strings and
    small arrays by value, other arguments (models, options) by identity (cheap, and
    distinct while alive)."""
    code = frame.f_code
    arguments = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
    parts = []
    for name, value in frame.f_locals.items():
        small = isinstance(value, np.ndarray) and value.size <= 16
        if isinstance(value, str | int | float | bool | type(None)) or small:
            parts.append(f"{name}={_value_key(value)}")
        elif name in arguments:
            parts.append(f"{name}={type(value).__name__}@{id(value):x}")
    return ", ".join(parts)


def _guards() -> set[tuple[str, int]]:
    """``(file, line)`` of every ``if`` whose body raises ParameterError, outside the check
    functions (counted apart)."""
    found = set()
    for path in SRC.rglob("*.py"):
        if path.name == "errors.py" and path.parent.name == "_core":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.If) and any(
                isinstance(s, ast.Raise) and "ParameterError" in ast.unparse(s) for s in node.body
            ):
                found.add((str(path), node.test.lineno))
    return found


class CheckCounter:
    """The checks made while installed: ``(name, value) → [sites]`` on the simulation path,
    and per call of a public theory function apart."""

    def __init__(self) -> None:
        self.path: dict[tuple[str, str], list[str]] = collections.defaultdict(list)
        self.theory: dict[tuple[int, str, str], list[str]] = collections.defaultdict(list)
        self._entries: list[FrameType] = []  # kept alive, so that their ids stay theirs
        self._depth = 0
        self._guards = _guards()
        self._guard_lines = collections.defaultdict(set)
        for path, line in self._guards:
            self._guard_lines[path].add(line)

    def _count(self, name: str, value: str, caller: FrameType, site: str) -> None:
        entry = _theory_entry(caller)
        if entry is None:
            self.path[(name, value)].append(site)
            return
        self._entries.append(entry)
        self.theory[(id(entry), name, value)].append(f"{site} in {entry.f_code.co_name}")

    def wrap(self, check: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*args: Any, **kwargs: Any) -> Any:
            if self._depth == 0:
                caller = sys._getframe(1)
                name = args[0] if args else kwargs["name"]
                value = args[1] if len(args) > 1 else next(iter(kwargs.values()), None)
                where = f"{_short(caller.f_code.co_filename)}:{caller.f_lineno}"
                self._count(name, _value_key(value), caller, where)
            self._depth += 1
            try:
                return check(*args, **kwargs)
            finally:
                self._depth -= 1

        return counted

    def _trace(self, frame: FrameType, event: str, arg: Any):
        """sys.settrace's function: line events only in files that hold a guard."""
        lines = self._guard_lines.get(frame.f_code.co_filename)
        if not lines:
            return None

        def local(frame: FrameType, event: str, arg: Any):
            if event == "line" and frame.f_lineno in lines:
                site = f"{_short(frame.f_code.co_filename)}:{frame.f_lineno}"
                self._count(f"guard {site}", _call_key(frame), frame, site)
            return local

        # Not the comprehensions and lambdas on a guard's line: the function's frame is
        # the one that evaluates it.
        return None if frame.f_code.co_name.startswith("<") else local

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Replace each check in every attndyn module that holds it (``from .errors import
        check_int`` binds the function in the importing module)."""
        wrapped = {name: self.wrap(check) for name, check in CHECKS.items()}
        for module_name, module in list(sys.modules.items()):
            if module is None or not module_name.startswith("attndyn"):
                continue
            for name, check in CHECKS.items():
                if getattr(module, name, None) is check:
                    monkeypatch.setattr(module, name, wrapped[name])

    def run(self, action: Callable[[], Any]) -> Any:
        """``action()`` with the guards traced."""
        previous = sys.gettrace()
        sys.settrace(self._trace)
        try:
            return action()
        finally:
            sys.settrace(previous)

    def over(self, *, limit: int) -> list[str]:
        """The parameters checked more than ``limit`` times on the path, with their sites.
        A pending module's checks are left out of the count, and a pending module that
        checks something but puts no parameter over the limit is a problem too (the list
        only shrinks). One that checks nothing is not: uniform_sphere checks while the
        estimator's program is traced, which a run whose program this process compiled
        before skips."""
        problems, needed, hit = [], set(), set()
        for (name, value), sites in sorted(self.path.items()):
            modules = [site.rpartition(":")[0] for site in sites]
            hit |= set(modules) & _PENDING.keys()
            if len(sites) <= limit:
                continue
            needed |= set(modules) & _PENDING.keys()
            if sum(module not in _PENDING for module in modules) > limit:
                problems.append(f"{name}={value} checked {len(sites)} times: {', '.join(sites)}")
        stale = sorted(hit - needed)
        return problems + [f"{module} is pending but puts nothing over" for module in stale]

    def rechecked_in_theory(self) -> list[str]:
        """The parameters one call of a theory function checked more than once."""
        return [
            f"{name}={value} checked {len(sites)} times in one call: {', '.join(sites)}"
            for (_, name, value), sites in sorted(self.theory.items())
            if len(sites) > 1
        ]


def _import_everything() -> None:
    """Every attndyn module, so that each is patched before the run (a module imported
    during it would hold the unwrapped checks)."""
    for info in pkgutil.walk_packages(attndyn.__path__, "attndyn."):
        if not info.name.endswith("__main__"):
            importlib.import_module(info.name)


def test_the_counter_sees_a_recheck(monkeypatch):
    # The counter can fail: a theory function that called another public one, each
    # checking d, is one call checking d twice; a value checked at three places is over.
    from attndyn.theory import _phase

    counter = CheckCounter()
    counter.install(monkeypatch)
    # The shape of the old p_antipodal_uniform, compiled as code of theory/_phase.py.
    source = (
        "def old_uniform(beta, dim):\n"
        "    dim = effective_dim(dim)\n"
        "    return antipodal_reachable(beta, dim)\n"
    )
    namespace = vars(_phase).copy()
    exec(compile(source, _phase.__file__, "exec"), namespace)
    counter.run(lambda: namespace["old_uniform"](0.5, 3))
    rechecked = counter.rechecked_in_theory()
    assert any(line.startswith("dim=3 checked ") for line in rechecked), rechecked
    for _ in range(3):
        errors.check_int("n_tokens", 2, lower=1)
    assert errors.check_int is not CHECKS["check_int"]
    assert any(line.startswith("n_tokens=2 checked 3 times: ") for line in counter.over(limit=2))
    # A guard is counted by its line and the values its condition reads (the public
    # wilson_interval checks its counts at every call).
    counter.run(lambda: [attndyn.wilson_interval(1, 4) for _ in range(3)])
    guards = [k for k in counter.path if k[0].startswith("guard _estimate/stats.py")]
    assert guards and all("successes=1, trials=4" in key for _, key in guards), guards
    assert all(len(counter.path[guard]) == 3 for guard in guards)


def test_a_small_run_checks_each_parameter_at_most_twice(monkeypatch, tmp_path):
    from attndyn.cli import main

    _import_everything()
    counter = CheckCounter()
    counter.install(monkeypatch)
    # test_build_once's shapes (d = 3, N = 2, L = 2, T = 1, 4 trajectories): the same
    # compiled programs.
    args = ["phase-diagram", "--beta", "0.5", "--dim", "3", "--n-tokens", "2", "--depth", "2"]
    args += ["--horizon", "1", "--n-trajectories", "4", "--no-progress", "--out", str(tmp_path)]
    result = counter.run(lambda: CliRunner().invoke(main, args))
    assert result.exit_code == 0, result.output
    assert counter.path, "no check was counted: the wrapping missed the run"
    assert counter.theory, "the run evaluated no theory: the figure's exact curve is gone?"
    problems = counter.over(limit=2) + counter.rechecked_in_theory()
    assert not problems, "\n".join(problems)
