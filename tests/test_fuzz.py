"""Property-based tests (Hypothesis): every input either runs or is refused cleanly.

For the CLI commands the property is: the command reaches its simulation (or finishes),
or it exits with status 2 and exactly one ``Error:`` line naming a parameter, or (a run
that reached a point where the model's map is undefined) with status 1 and one ``Error:``
line naming that cause; never a traceback, never another exit status. For the
constructors: the object is built, or an :class:`attndyn.ParameterError` is raised; never
another exception.

The default run stops each command where its simulation would start (everything before
it, validation, model building, the output folder and the exact curve, runs for real)
and tries few examples. ``-m slow`` tries many more, and runs the simulations of the
inputs drawn entirely from tiny valid values.
"""

import contextlib
import tempfile
from pathlib import Path

import jax.numpy as jnp
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, event, given, settings, strategies as st

import attndyn as ad
from attndyn._core.attention import ATTENTION_KINDS
from attndyn._core.values import DISTRIBUTIONS
from attndyn._estimate import estimator as _estimator
from attndyn.cli import main
from attndyn.studies import ModelSpec, MonteCarlo, schemes as schemes_module

FAST = settings(
    max_examples=10,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
THOROUGH = settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


class Reached(Exception):
    """Raised where the simulation would start: every check before it has passed."""


def _reach(*args, **kwargs):
    raise Reached


#: Text a user might type for a number: special values, huge and tiny ones, garbage.
WILD = st.one_of(
    st.sampled_from(
        [
            *["nan", "inf", "-inf", "-1", "0", "1e400", "1e20", "abc", "", "2**64", "1,", ","],
            *[":", "1:2", "0:1:0", "1:0:1", "0:inf:1", "0:1:nan", "0:1e9:1e-9", "-0", "1e-300"],
            # Decimal ranges finer than 12 decimals (issue 29: rounded, they repeated 0).
            *["0:3e-13:1e-13", "0:3.6e-12:1.2e-12", "1:1.0000000000000000001:1e-19"],
            *["1e308:1.7e308:1e307", "0:1e308:1e-308", "4.4e1", "44.4", "1e3"],
        ]
    ),
    st.integers(-(2**70), 2**70).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.text(max_size=4),
)


def _choose(data, name: str, tiny: list[str], wild: bool, flags: list[str]) -> None:
    """Add ``--name value`` with a wild value, or maybe (absent otherwise) a tiny valid one."""
    if wild:
        flags += [f"--{name}", data.draw(WILD, label=name)]
    elif name in ("solver", "dt") and "sde" not in flags:
        return  # SDE-only flags: with the discrete engine they are refused (a wild draw)
    elif data.draw(st.booleans(), label=f"{name} given"):
        flags += [f"--{name}", data.draw(st.sampled_from(tiny), label=name)]


#: Tiny valid values (every combination of them runs in well under a second).
COMMON = {
    "n-trajectories": ["1", "2", "4"],
    "depth": ["1", "2", "3"],
    "horizon": ["0.5", "1", "2"],
    "beta": ["0", "0.5", "1", "0,2", "0:1:0.5"],
    "dim": ["2", "3", "4", "2,4"],
    "n-tokens": ["1", "2", "3"],
    "sigma": ["0.5", "1"],
    "tol": ["1e-3", "0.5"],
    "seed": ["0", "7", str(2**32 - 1)],
    "chunk-size": ["1", "3", "1000"],
    "engine": ["discrete", "sde"],
    "values": list(DISTRIBUTIONS),
    "solver": ["euler", "heun"],
    "dt": ["0.5", "0.25"],
    "route": ["auto", "full"],
    "early-absorption": ["1e-7", "0.5", "auto", "off"],  # a bound: reduced route only
    "eps": ["0", "0.5", "0,1"],
    "attention": list(ATTENTION_KINDS),
}
PHASE = {**COMMON, "diagram": ["beta-d", "beta-eps", "beta-n"]}
EVOLUTION = {**COMMON, "noise": ["matrix", "scalar", "none", "matrix,scalar"]}
EVOLUTION["saves"] = ["1", "2", "3"]
SCHEMES = {
    "schemes": ["post-ln", "pre-ln,ngpt", "mix-ln"],
    "n-tokens": ["2", "3"],
    "dim": ["3", "4"],
    "beta": ["0", "1"],
    "horizon": ["1", "2"],
    "alpha": ["1", "0.5,2"],
    "tau": ["0", "0.5"],
    "r0": ["0.5", "1"],
    "seed": ["0", "3"],
    "rw-n-layers": ["1", "2"],
    "rw-n-trajectories": ["1", "2"],
}


def _names(command) -> set[str]:
    """Words by which an error may name a parameter of ``command``."""
    names = {"n_trajectories", "chunk_size", "depth·horizon", "horizon/dt", "process_id"}
    names |= {"rw_n_layers", "rw_n_trajectories", "n_tokens", "attention kind", "scheme", "key"}
    names |= {"--out"}
    for param in command.params:
        if param.name:
            names |= {param.name, param.name.replace("_", "-")}
        names |= {opt.lstrip("-") for opt in param.opts}
    return names


def _check(result, command) -> str:
    """The property: ran (or reached its simulation), or status 2 with one named error."""
    if isinstance(result.exception, Reached):
        return "reached"
    assert "Traceback" not in result.output
    if result.exit_code == 0:
        return "ran"
    lines = [line for line in result.output.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("Error:")]
    assert len(errors) == 1 and lines[-1] == errors[0], result.output
    if result.exit_code == 2:  # bad input: that one line alone, no warning before it
        assert lines == errors, result.output
    if result.exit_code == 1:
        # A run that reached a point where the model's own map is undefined (e.g. V_n = −I
        # under Post-LN with one token): reported with its cause named, never a traceback.
        assert "became NaN or infinite (or too large to normalise). Cause: " in errors[0], errors[0]
        return "undefined map"
    assert result.exit_code == 2, (result.exit_code, result.output, repr(result.exception))
    assert any(name in errors[0] for name in _names(command)), errors[0]
    return "refused"


def _invoke(name: str, flags: list[str], *, simulate: bool, monkeypatch) -> str:
    command = main.commands[name]
    with contextlib.ExitStack() as stack:
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        if not simulate:
            stack.enter_context(monkeypatch.context()).setattr(_estimator._Study, "run", _reach)
        result = CliRunner().invoke(main, [name, *flags, "--out", str(folder / "out")])
        outcome = _check(result, command)
    event(outcome)
    return outcome


#: Sizes the estimator commands get when the draw leaves them out (their defaults are
#: sized for real studies).
SMALL_DEFAULTS = {"n-trajectories": "2", "depth": "2", "horizon": "1"}


def _draw_flags(data, options: dict[str, list[str]], defaults: dict[str, str]):
    """Flags drawn for ``options``, and whether every drawn value was a tiny valid one.

    A third of the draws are tame (tiny valid values only: they run), a third have one
    wild value (whose error must then be named), a third several."""
    mode = data.draw(st.sampled_from(["tame", "one", "many"]), label="mode")
    names = list(options)
    chosen = data.draw(st.sampled_from(names), label="wild option") if mode == "one" else None
    flags: list[str] = []
    for name in names:
        wild = name == chosen or (mode == "many" and data.draw(st.booleans(), label="wild"))
        _choose(data, name, options[name], wild, flags)
    for name, value in defaults.items():
        if f"--{name}" not in flags:
            flags += [f"--{name}", value]
    return flags, mode == "tame"


def _estimator_command(name: str, options, data, monkeypatch, *, simulate_tiny: bool) -> None:
    flags, tiny = _draw_flags(data, options, SMALL_DEFAULTS)
    _invoke(
        name, [*flags, "--no-progress"], simulate=simulate_tiny and tiny, monkeypatch=monkeypatch
    )


@FAST
@given(data=st.data())
def test_phase_diagram_inputs_run_or_are_refused(data, monkeypatch):
    _estimator_command("phase-diagram", PHASE, data, monkeypatch, simulate_tiny=False)


@FAST
@given(data=st.data())
def test_evolution_inputs_run_or_are_refused(data, monkeypatch):
    _estimator_command("evolution", EVOLUTION, data, monkeypatch, simulate_tiny=False)


@FAST
@given(data=st.data())
def test_schemes_inputs_run_or_are_refused(data, monkeypatch):
    # The schemes study stops at its first solve (its full run takes tens of seconds).
    monkeypatch.setattr(schemes_module, "_scheme_part", _reach)
    flags, _ = _draw_flags(data, SCHEMES, {})
    _invoke("schemes", flags, simulate=True, monkeypatch=monkeypatch)


@pytest.mark.slow
@THOROUGH
@given(data=st.data())
def test_phase_diagram_inputs_thoroughly(data, monkeypatch):
    _estimator_command("phase-diagram", PHASE, data, monkeypatch, simulate_tiny=True)


@pytest.mark.slow
@THOROUGH
@given(data=st.data())
def test_evolution_inputs_thoroughly(data, monkeypatch):
    _estimator_command("evolution", EVOLUTION, data, monkeypatch, simulate_tiny=True)


# --- constructors ----------------------------------------------------------------------------

NUMBERS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-(2**70), 2**70).map(float),
    st.sampled_from([0.0, -0.0, 1e-300, 1e300, 5e-324]),
)
ARRAYS = st.lists(st.floats(-10, 10), min_size=0, max_size=3).map(
    lambda v: jnp.asarray(v, jnp.float32)
)


def _builds_or_refuses(build) -> None:
    try:
        build()
    except ad.ParameterError as error:
        assert "\n" not in str(error)


@FAST
@given(
    beta=st.one_of(NUMBERS, ARRAYS),
    kind=st.sampled_from([*ATTENTION_KINDS, "linear"]),
    heads=st.integers(-2, 5),
    sigma=st.one_of(NUMBERS, ARRAYS),
    drift=NUMBERS,
    distribution=st.sampled_from([*DISTRIBUTIONS, "cauchy"]),
)
def test_attention_and_values_build_or_refuse(beta, kind, heads, sigma, drift, distribution):
    _builds_or_refuses(lambda: ad.Attention(beta, kind=kind, n_heads=heads))
    _builds_or_refuses(lambda: ad.MatrixValues(sigma, distribution=distribution, drift=drift))
    _builds_or_refuses(lambda: ad.ScalarValues(sigma, distribution=distribution))


@FAST
@given(
    horizon=NUMBERS,
    ts=st.one_of(st.none(), st.lists(NUMBERS, max_size=3)),
    depth=st.one_of(st.integers(-3, 2**40), st.sampled_from([2**31 - 1, 2**31])),
    dt=NUMBERS,
)
def test_models_build_or_refuse(horizon, ts, depth, dt):
    def discrete():
        ad.DiscreteTransformer(ad.Attention(1.0), depth=depth, saveat=ad.SaveAt(horizon, ts))

    def sde():
        integrator = ad.SDEIntegrator(dt=dt)
        ad.TransformerSDE(ad.Attention(1.0), saveat=ad.SaveAt(horizon, ts), integrator=integrator)

    _builds_or_refuses(discrete)
    _builds_or_refuses(sde)


@FAST
@given(
    n_trajectories=st.integers(-5, 2**64),
    seed=st.integers(-5, 2**65),
    tol=NUMBERS,
    chunk=st.one_of(st.none(), st.integers(-5, 2**40)),
    absorption=st.one_of(st.none(), NUMBERS),
    sigma=NUMBERS,
    depth=st.integers(-5, 2**40),
    horizon=NUMBERS,
    engine=st.sampled_from(["discrete", "sde", "gpu"]),
)
def test_study_options_build_or_refuse(
    n_trajectories, seed, tol, chunk, absorption, sigma, depth, horizon, engine
):
    _builds_or_refuses(
        lambda: MonteCarlo(
            n_trajectories=n_trajectories,
            seed=seed,
            tol=tol,
            chunk_size=chunk,
            early_absorption=absorption,
        )
    )
    _builds_or_refuses(lambda: ModelSpec(engine=engine, sigma=sigma, depth=depth, horizon=horizon))


# --- constructors given values of any type, as a user's process meets them ------------------

#: A child process (no runtime type checker: a user's process has only attndyn's checks)
#: that runs Hypothesis over the constructors with values of every kind: each call builds
#: or raises one ParameterError line; anything else is printed as a failure.
_ANY_TYPE_CHILD = """
import math, sys
import jax, jax.numpy as jnp, numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st
import attndyn as ad

VALUES = st.one_of(
    st.none(), st.booleans(), st.text(max_size=5), st.binary(max_size=3),
    st.floats(allow_nan=True, allow_infinity=True), st.integers(-2**70, 2**70),
    st.complex_numbers(max_magnitude=10),
    st.lists(st.floats(-5, 5), max_size=3),
    st.lists(st.lists(st.floats(0, 1), max_size=2), max_size=2),
    st.sampled_from([np.float64(1.0), np.array([[0.0, 1.0]]), np.array(["1"]), jnp.ones(2)]),
)
MODEL = ad.DiscreteTransformer(ad.Attention(1.0), depth=2)
X0 = np.ones((3, 4), np.float32) / 2
failures = []

def check(label, build):
    try:
        build()
    except ad.ParameterError as error:
        if "\\n" in str(error):
            failures.append(f"{label}: two lines: {error!r}")
    except Exception as error:
        failures.append(f"{label}: {type(error).__name__}: {error}"[:300])

@settings(max_examples=int(sys.argv[1]), deadline=None, suppress_health_check=list(HealthCheck))
@given(a=VALUES, b=VALUES)
def run(a, b):
    check(f"Attention({a!r})", lambda: ad.Attention(a))
    check(f"Attention(1, diagonal_shift={a!r})", lambda: ad.Attention(1.0, diagonal_shift=a))
    check(f"MatrixValues({a!r}, drift={b!r})", lambda: ad.MatrixValues(a, drift=b))
    check(f"ScalarValues({a!r})", lambda: ad.ScalarValues(a))
    check(f"MixLN(tau={a!r})", lambda: ad.MixLN(tau=a))
    check(f"NGPT(alpha={a!r})", lambda: ad.NGPT(alpha=a))
    check(f"SaveAt({a!r}, {b!r})", lambda: ad.SaveAt(a, b))
    check(f"SaveAt(2.0, {b!r})", lambda: ad.SaveAt(2.0, b))
    check(f"trajectory(x0={a!r})", lambda: MODEL.trajectory(a, key=jax.random.key(0)))
    check(f"trajectory(key={a!r})", lambda: MODEL.trajectory(X0, key=a))

run()
print("ANY TYPE\\t" + " || ".join(failures[:20]))
"""


def any_type_child(examples: int) -> str:
    """The child's code, trying ``examples`` draws; it prints the failures, one a line.
    Attention("1.0") raised a TypeError, SaveAt(1.0, [[0, 1]]) and SaveAt(1.0, "0,1") other
    exceptions, SaveAt(2.0, "01") saved at t = 1, trajectory(jnp.ones(4)), key=0 and an
    int32 start tracebacks (issue 29). The default run tries a few draws in the child
    process of ``tests/test_api_validation.py`` (one JAX start for both)."""
    return _ANY_TYPE_CHILD.replace("sys.argv[1]", str(examples))


@pytest.mark.slow
def test_constructors_take_values_of_any_type_thoroughly():
    from tests.helpers import run_untyped

    failures = run_untyped(any_type_child(400)).split("ANY TYPE\t", 1)[1].strip()
    assert not failures, failures
