"""Bad arguments to the Python API are refused with a ParameterError, before any work.

Each test makes the work itself fail loudly (a ``model_fn`` or study stage that raises an
AssertionError), so a check that came too late, or not at all, fails the test instead of
running a simulation. Arguments of the wrong type are tried in a child process (see
:func:`refusals`): in this one, the tests' runtime type checker would refuse them first,
and a user's process has only attndyn's own checks.
"""

import re
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attndyn as ad
from attndyn._estimate import estimator
from attndyn.studies import evolution_points, phase, phase_points, schemes, schemes_study
from attndyn.studies.phase import ModelSpec, MonteCarlo, phase_diagram_study
from tests.helpers import run_untyped

POINTS = [{"dim": 3, "n_tokens": 2, "beta": 1.0}]
SPEC = ModelSpec(depth=2, horizon=1.0)


def never(**point: Any):
    raise AssertionError(f"a model was built for {point}: the argument was not checked first")


def estimate(**kwargs: Any):
    """``estimate_probabilities`` with a ``model_fn`` that must never be called."""
    options: dict[str, Any] = {"key": jax.random.key(0), "n_trajectories": 4, "progress": False}
    return ad.estimate_probabilities(never, kwargs.pop("points", POINTS), **options, **kwargs)


@pytest.fixture
def no_simulation(monkeypatch):
    """Fail any Monte Carlo estimate a phase study starts."""

    def refuse(self, *args, **kwargs):
        raise AssertionError("the study was simulated before its arguments were checked")

    monkeypatch.setattr(phase.MonteCarlo, "estimate", refuse)


@pytest.fixture
def no_schemes_work(monkeypatch):
    """Fail the first step of a schemes study after its checks."""

    def refuse(*args, **kwargs):
        raise AssertionError("the schemes study started before its arguments were checked")

    monkeypatch.setattr(schemes, "symmetric_start", refuse)


# --- Arguments of the wrong type, as a user meets them (no runtime type checker) -------------

_WRONG_TYPES_CHILD = """
import jax, numpy as np
import attndyn as ad
from attndyn.studies import evolution_points, phase, phase_points, schemes, schemes_study

def never(**point):
    raise AssertionError("a model was built before the arguments were checked")

def refuse(*args, **kwargs):
    raise AssertionError("the study started before its arguments were checked")

def expect(ok):
    if not ok:
        raise AssertionError("an accepted argument gave the wrong result")

phase.MonteCarlo.estimate = refuse
schemes.symmetric_start = refuse
MODEL = ad.DiscreteTransformer(ad.Attention(1.0), depth=2)
X0 = np.ones((3, 4), np.float32) / 2
POINTS = [{"dim": 3, "n_tokens": 2, "beta": 1.0}]
AXES = {"betas": [1.0], "dims": [3], "n_tokens": [2], "eps": [0.5]}

def estimate(points=POINTS, **kwargs):
    return ad.estimate_probabilities(
        never, points, key=jax.random.key(0), n_trajectories=4, progress=False, **kwargs
    )

CASES = {
    "grid beta=1": lambda: ad.grid(dim=[3], beta=1),
    "grid beta=None": lambda: ad.grid(dim=[3], beta=None),
    "grid beta={1.0, 2.0}": lambda: ad.grid(dim=[3], beta={1.0, 2.0}),
    "grid beta=np.float64(1.0)": lambda: ad.grid(dim=[3], beta=np.float64(1.0)),
    "grid of 1-d arrays": lambda: expect(
        len(ad.grid(dim=[3], beta=np.asarray([1.0, 2.0]), eps=jax.numpy.asarray([0.5, 1.0]))) == 4
    ),
    "phase_points betas='12'": lambda: phase_points("beta-eps", **{**AXES, "betas": "12"}),
    "phase_points dims=4": lambda: phase_points("beta-eps", **{**AXES, "dims": 4}),
    "phase_points n_tokens=None": lambda: phase_points("beta-eps", **{**AXES, "n_tokens": None}),
    "phase_points eps='5'": lambda: phase_points("beta-eps", **{**AXES, "eps": "5"}),
    "evolution_points betas='1'": lambda: evolution_points(["full"], **{**AXES, "betas": "1"}),
    "evolution_points dims=3": lambda: evolution_points(["full"], **{**AXES, "dims": 3}),
    "estimate points=5": lambda: estimate(points=5),
    "estimate x64='no'": lambda: estimate(x64="no"),
    "estimate metadata=list": lambda: estimate(metadata=[("note", 1)]),
    "MonteCarlo x64='no'": lambda: phase.MonteCarlo(x64="no"),
    "MonteCarlo x64=1": lambda: phase.MonteCarlo(x64=1),
    "MonteCarlo exclude_nonfinite='no'": lambda: phase.MonteCarlo(exclude_nonfinite="no"),
    "MonteCarlo exclude_nonfinite=None": lambda: phase.MonteCarlo(exclude_nonfinite=None),
    "MonteCarlo numpy bools": lambda: phase.MonteCarlo(x64=np.True_, exclude_nonfinite=np.False_),
    "phase_diagram_study points=dict": lambda: phase.phase_diagram_study(
        "beta-d", phase.ModelSpec(depth=2, horizon=1.0), phase.MonteCarlo(), POINTS[0]
    ),
    "schemes_study alphas=2": lambda: schemes_study(alphas=2, progress=False),
    "schemes_study beta='3'": lambda: schemes_study(beta="3", progress=False),
    "schemes_study horizon=None": lambda: schemes_study(horizon=None, progress=False),
    "schemes_study alphas=[1.0, '2']": lambda: schemes_study(alphas=[1.0, "2"], progress=False),
    "schemes_study rw_beta='1'": lambda: schemes_study(rw_beta="1", progress=False),
    "use_all_cores 2.5": lambda: ad.use_all_cores(2.5),
    "wilson_interval 1.5 of 3": lambda: ad.wilson_interval(1.5, 3),
    "wilson_interval 2 of 2.5": lambda: ad.wilson_interval(2, 2.5),
    "wilson_interval nan of 3": lambda: ad.wilson_interval(float("nan"), 3),
    "wilson_interval 3.0 of 4.0": lambda: ad.wilson_interval(3.0, 4.0),
    # Issue 29: constructors and trajectories give one ParameterError line naming the argument.
    "Attention '1.0'": lambda: ad.Attention("1.0"),
    "Attention True": lambda: ad.Attention(True),
    "Attention diagonal_shift='1'": lambda: ad.Attention(1.0, diagonal_shift="1"),
    "MatrixValues sigma=None": lambda: ad.MatrixValues(None),
    "NGPT alpha='2'": lambda: ad.NGPT(alpha="2"),
    "SaveAt ts=[[0, 1]]": lambda: ad.SaveAt(1.0, [[0.0, 1.0]]),
    "SaveAt ts='0,1'": lambda: ad.SaveAt(1.0, "0,1"),
    "SaveAt ts='01'": lambda: ad.SaveAt(2.0, "01"),
    "SaveAt horizon='1'": lambda: ad.SaveAt("1"),
    "SaveAt numpy": lambda: expect(ad.SaveAt(np.float64(2.0), np.asarray([1.0, 2.0])).ts == (1, 2)),
    "trajectory x0 1-d": lambda: MODEL.trajectory(jax.numpy.ones(4), key=jax.random.key(0)),
    "trajectory key=0": lambda: MODEL.trajectory(X0, key=0),
    "trajectory int32 x0": lambda: MODEL.trajectory(X0.astype(np.int32), key=jax.random.key(0)),
    "simulate x0 2-d": lambda: MODEL.simulate(X0, jax.random.split(jax.random.key(0), 3)),
    # Issue 42 item 7: tracebacks from the theory, the integrators and the sampler.
    "mode_growth_rate beta='4'": lambda: ad.theory.mode_growth_rate("4", 2, 1),
    "mode_growth_rate beta=None": lambda: ad.theory.mode_growth_rate(None, 2, 1),
    "mode_growth_rate beta=array": lambda: ad.theory.mode_growth_rate(np.array([1.0, 2.0]), 2, 1),
    "most_unstable_degree beta=[1, 2]": lambda: ad.theory.most_unstable_degree([1, 2], 2),
    "mode_growth_rate ell='3'": lambda: ad.theory.mode_growth_rate(1.0, 2, "3"),
    "mode_growth_rate ell=2.0": lambda: ad.theory.mode_growth_rate(1.0, 2, 2.0),
    "mode_growth_rate ell=10**30": lambda: expect(ad.theory.mode_growth_rate(1.0, 2, 10**30) == 0),
    "mode_growth_rate ell=[1, True]": lambda: ad.theory.mode_growth_rate(1.0, 2, [1, True]),
    "mode_growth_rate depth='5'": lambda: ad.theory.mode_growth_rate(1.0, 2, 1, depth="5"),
    "mode_growth_rate numpy": lambda: expect(
        ad.theory.mode_growth_rate(np.float32(4), np.int64(2), np.int64(3), depth=np.int64(9)) > 0
    ),
    "funk_hecke_exponential beta=True": lambda: ad.theory.funk_hecke_exponential(True, 2, 1),
    "self_attention_weight n_tokens=3.0": lambda: ad.theory.self_attention_weight(1.0, 2, 3.0),
    "SDEIntegrator dt='0.1'": lambda: ad.SDEIntegrator(dt="0.1"),
    "SDEIntegrator dt=None": lambda: ad.SDEIntegrator(dt=None),
    "SDEIntegrator project='no'": lambda: ad.SDEIntegrator(project="no"),
    "ODEIntegrator dt0='1'": lambda: ad.ODEIntegrator(dt0="1"),
    "ODEIntegrator adaptive='no'": lambda: ad.ODEIntegrator(adaptive="no", dt0=0.1),
    "uniform_sphere key=0": lambda: ad.uniform_sphere(key=0, n_tokens=2, dim=3),
    "uniform_sphere numpy": lambda: expect(
        ad.uniform_sphere(key=jax.random.key(0), n_tokens=np.int64(2), dim=np.int32(3)).shape
        == (2, 3)
    ),
    "estimate early_absorption='off'": lambda: estimate(early_absorption="off"),
}

# Every scalar argument of the theory functions given a string, None, a bool, an array,
# NaN and a value below its range: the calls that did not raise one ParameterError naming
# the argument (empty when all did).
def theory_refusals():
    t, scheme = ad.theory, ad.scheme_from_name("post-ln")
    from attndyn.theory._symmetric import time_to_gap
    beta_calls = {
        "eps_critical": lambda v: t.eps_critical(v),
        "p_antipodal_uniform": lambda v: t.p_antipodal_uniform(v, 4),
        "p_antipodal_given_overlap": lambda v: t.p_antipodal_given_overlap(0.1, v, 4),
        "scale_density": lambda v: t.scale_density(0.1, v, 4),
        "antipodal_reachable": lambda v: t.antipodal_reachable(v, 4),
        "sa_hybrid_boundaries": lambda v: t.sa_hybrid_boundaries(v),
        "hybrid_attracts": lambda v: t.hybrid_attracts(v, 0.5),
        "hybrid_end_rates": lambda v: t.hybrid_end_rates(v, 0.5),
        "p_antipodal_hybrid_uniform": lambda v: t.p_antipodal_hybrid_uniform(v, 0.5),
        "hybrid_layer_step": lambda v: t.hybrid_layer_step(v, 0.5, 10),
        "depth_for_step": lambda v: t.depth_for_step(v, 0.5),
        "two_cluster_overlap_coefficients": lambda v: t.two_cluster_overlap_coefficients(0.1, v, 4),
        "antipodal_split_drift": lambda v: t.antipodal_split_drift(v, 4, (2, 1)),
        "antipodal_contraction_rate": lambda v: t.antipodal_contraction_rate(v, 4),
        "antipodal_split_level": lambda v: t.antipodal_split_level(v, 4, (2, 1)),
        "antipodal_split_lifetime": lambda v: t.antipodal_split_lifetime(v, 4, (2, 1)),
        "p_antipodal_pair_three_tokens": lambda v: t.p_antipodal_pair_three_tokens(v, 4, 5.0),
        "initial_slope": lambda v: t.initial_slope(scheme, beta=v, n_tokens=4),
        "time_to_gap": lambda v: time_to_gap(scheme, beta=v, n_tokens=4),
        "mode_growth_rate": lambda v: t.mode_growth_rate(v, 2, 3),
        "most_unstable_degree": lambda v: t.most_unstable_degree(v, 2),
        "funk_hecke_exponential": lambda v: t.funk_hecke_exponential(v, 2, 3),
        "log_funk_hecke_exponential": lambda v: t.log_funk_hecke_exponential(v, 2, 3),
        "self_attention_weight": lambda v: t.self_attention_weight(v, 2, 3),
    }
    others = {
        ("eps", "hybrid_attracts"): lambda v: t.hybrid_attracts(1.0, v),
        ("eps", "p_antipodal_hybrid_uniform"): lambda v: t.p_antipodal_hybrid_uniform(1.0, v),
        ("z", "p_antipodal_given_overlap"): lambda v: t.p_antipodal_given_overlap(v, 1.0, 4),
        ("z", "p_antipodal_hybrid_given_overlap"): lambda v: t.p_antipodal_hybrid_given_overlap(
            v, 1.0, 1.5, "softmax"
        ),
        ("depth", "mode_growth_rate"): lambda v: t.mode_growth_rate(1.0, 2, 3, depth=v),
        ("depth", "hybrid_layer_step"): lambda v: t.hybrid_layer_step(1.0, 0.5, v),
        ("sigma", "antipodal_split_lifetime"): lambda v: t.antipodal_split_lifetime(
            1.0, 4, (2, 1), sigma=v
        ),
        ("r0", "initial_slope"): lambda v: t.initial_slope(scheme, beta=1.0, n_tokens=4, r0=v),
        ("horizon", "p_antipodal_pair_three_tokens"): lambda v: t.p_antipodal_pair_three_tokens(
            1.0, 4, v
        ),
    }
    calls = {("beta", name): call for name, call in beta_calls.items()} | others
    failed = []
    for (argument, name), call in calls.items():
        for value in ("4", None, True, np.array([1.0, 2.0]), float("nan"), -2.0):
            if value is None and argument == "depth" and name == "mode_growth_rate":
                continue  # depth=None is the flow
            try:
                call(value)
                failed.append(f"{name}({argument}={value!r}) accepted")
            except ad.ParameterError as error:
                if not str(error).startswith(argument):
                    failed.append(f"{name}({argument}={value!r}): {error}")
            except Exception as error:
                failed.append(f"{name}({argument}={value!r}): {type(error).__name__} {error}")
    return "; ".join(failed)

print("THEORY\\t" + theory_refusals())
for name, case in CASES.items():
    try:
        case()
        outcome = "accepted"
    except ad.ParameterError as error:
        outcome = "ParameterError: " + str(error)
    except Exception as error:
        outcome = type(error).__name__ + ": " + str(error)
    print(name + "\\t" + outcome.replace("\\n", " | "))
"""

WRONG_TYPES = {
    "grid beta=1": "ParameterError: beta must be a list of values",
    "grid beta=None": "ParameterError: beta must be a list of values",
    "grid beta={1.0, 2.0}": "ParameterError: beta must be a list of values",
    "grid beta=np.float64(1.0)": "ParameterError: beta must be a list of values",
    "grid of 1-d arrays": "accepted",
    "phase_points betas='12'": "ParameterError: betas must be a list of values",  # β = 1, 2
    "phase_points dims=4": "ParameterError: dims must be a list of values",
    "phase_points n_tokens=None": "ParameterError: n_tokens must be a list of values",
    "phase_points eps='5'": "ParameterError: eps must be a list of values",
    "evolution_points betas='1'": "ParameterError: betas must be a list of values",
    "evolution_points dims=3": "ParameterError: dims must be a list of values",
    "estimate points=5": "ParameterError: points must be a list of dicts",
    "estimate x64='no'": "ParameterError: x64='no' must be True or False",  # ran in float64
    "estimate metadata=list": "ParameterError: metadata must be a dict",
    "MonteCarlo x64='no'": "ParameterError: x64='no' must be True or False",
    "MonteCarlo x64=1": "ParameterError: x64=1 must be True or False",
    "MonteCarlo exclude_nonfinite='no'": "ParameterError: exclude_nonfinite='no' must be True",
    "MonteCarlo exclude_nonfinite=None": "ParameterError: exclude_nonfinite=None must be True",
    "MonteCarlo numpy bools": "accepted",
    "phase_diagram_study points=dict": "ParameterError: points must be a list of dicts",
    "schemes_study alphas=2": "ParameterError: alphas must be a list of values",
    "schemes_study beta='3'": "ParameterError: beta='3' must be a real number",
    "schemes_study horizon=None": "ParameterError: horizon=None must be a real number",
    "schemes_study alphas=[1.0, '2']": "ParameterError: alpha='2' must be a real number",
    "schemes_study rw_beta='1'": "ParameterError: rw_beta='1' must be a real number",
    "use_all_cores 2.5": "ParameterError: n_devices=2.5 must be an integer >= 1",
    "wilson_interval 1.5 of 3": "ParameterError: successes=1.5 must be whole numbers >= 0",
    "wilson_interval 2 of 2.5": "ParameterError: trials=2.5 must be whole numbers >= 0",
    "wilson_interval nan of 3": "ParameterError: successes=nan must be whole numbers >= 0",
    "wilson_interval 3.0 of 4.0": "accepted",
    "Attention '1.0'": "ParameterError: beta='1.0' must be a real number",
    "Attention True": "ParameterError: beta=True must be a real number",
    "Attention diagonal_shift='1'": "ParameterError: diagonal_shift='1' must be a real number",
    "MatrixValues sigma=None": "ParameterError: sigma=None must be a real number",
    "NGPT alpha='2'": "ParameterError: alpha='2' must be a real number",
    "SaveAt ts=[[0, 1]]": "ParameterError: ts=[[0.0, 1.0]] must be the save times: a list",
    "SaveAt ts='0,1'": "ParameterError: ts='0,1' must be the save times: a list",
    "SaveAt ts='01'": "ParameterError: ts='01' must be the save times: a list",  # was (1.0,)
    "SaveAt horizon='1'": "ParameterError: horizon='1' must be a real number T > 0",
    "SaveAt numpy": "accepted",
    "trajectory x0 1-d": "ParameterError: x0 must be a float array of shape (N, d)",
    "trajectory key=0": "ParameterError: key=0 must be one JAX PRNG key",
    "trajectory int32 x0": "ParameterError: x0 must be a float array of shape (N, d) (N tokens",
    "simulate x0 2-d": "ParameterError: x0 must be a float array of shape (batch, N, d)",
    # A TypeError from SciPy or NumPy before, and "beta=nan" for None.
    "mode_growth_rate beta='4'": "ParameterError: beta='4' must be a real number in [0.0, inf]",
    "mode_growth_rate beta=None": "ParameterError: beta=None must be a real number",
    "mode_growth_rate beta=array": "ParameterError: beta must be one real number; got an array "
    "of shape (2,). The theory functions take an array of degrees ell, not of beta",
    "most_unstable_degree beta=[1, 2]": "ParameterError: beta must be one real number; got a list",
    "mode_growth_rate ell='3'": "ParameterError: ell='3' must be whole degrees >= 0",
    "mode_growth_rate ell=2.0": "ParameterError: ell=2.0 must be whole degrees >= 0",
    "mode_growth_rate ell=10**30": "accepted",  # a Python int of any size (ℓ* at huge β)
    "mode_growth_rate ell=[1, True]": "ParameterError: ell=[1, True] must be whole degrees",
    "mode_growth_rate depth='5'": "ParameterError: depth='5' must be a real number in (0.0, inf]",
    "mode_growth_rate numpy": "accepted",
    "funk_hecke_exponential beta=True": "ParameterError: beta=True must be a real number",
    "self_attention_weight n_tokens=3.0": "ParameterError: n_tokens=3.0 must be an integer >= 2",
    "SDEIntegrator dt='0.1'": "ParameterError: dt='0.1' must be a real number in (0.0, inf]",
    "SDEIntegrator dt=None": "ParameterError: dt=None must be a real number in (0.0, inf]",
    "SDEIntegrator project='no'": "ParameterError: project='no' must be True or False",
    "ODEIntegrator dt0='1'": "ParameterError: dt0='1' must be a real number in (0.0, inf]",
    "ODEIntegrator adaptive='no'": "ParameterError: adaptive='no' must be True or False",
    "uniform_sphere key=0": "ParameterError: key=0 must be one JAX PRNG key",
    "uniform_sphere numpy": "accepted",
    # "choose one of 'auto'" before: the message lists every allowed value.
    "estimate early_absorption='off'": "ParameterError: early_absorption='off' is not allowed; "
    "choose True, False, 'auto' or a bound in (0, 1]",
}


@pytest.fixture(scope="module")
def refusals() -> dict[str, str]:
    """Each case of the child (one process for all: it imports JAX once) and what came of
    it: ``accepted``, or the exception's type and message on one line. The child also runs
    a few Hypothesis draws of the constructors with values of any type (``ANY TYPE``: the
    failures; see ``tests/test_fuzz.py``)."""
    from tests.test_fuzz import any_type_child

    stdout = run_untyped(_WRONG_TYPES_CHILD + any_type_child(20))
    lines = [line.split("\t", 1) for line in stdout.splitlines() if "\t" in line]
    return dict((name, outcome) for name, outcome in lines)


def test_theory_functions_refuse_values_of_any_type_by_name(refusals):
    # Issue 42: mode_growth_rate('4', 2, 1) was a SciPy TypeError, None "beta=nan", an array
    # of β "truth value ambiguous"; the other theory functions did the same, and
    # hybrid_attracts(1, 1e300) raised OverflowError. Each scalar argument of every theory
    # function: one ParameterError that starts with the argument's name.
    assert refusals["THEORY"] == "", refusals["THEORY"].replace("; ", "\n")


def test_constructors_take_values_of_any_type_or_refuse_them_by_name(refusals):
    # Hypothesis in the child: every draw builds or raises one ParameterError line.
    assert refusals["ANY TYPE"] == "", refusals["ANY TYPE"]


@pytest.mark.parametrize("case", list(WRONG_TYPES))
def test_wrong_types_are_refused_by_name(refusals, case):
    assert refusals[case].startswith(WRONG_TYPES[case]), refusals[case]
    assert " | " not in refusals[case]  # one line


# --- 1. phase_diagram_study: the diagram, its noise and its points ------------------------------


def test_phase_study_refuses_an_unknown_diagram(no_simulation):
    # Ran and was recorded as kind 'zzz'.
    with pytest.raises(ad.ParameterError, match="diagram='zzz' is not allowed; choose one of"):
        phase_diagram_study("zzz", SPEC, MonteCarlo(), POINTS)


@pytest.mark.parametrize(
    ("diagram", "noise", "needed"),
    [
        ("beta-d", "scalar", "matrix"),  # ran eq. 7 and attached eq. 4's exact curve
        ("beta-d", "none", "matrix"),
        ("beta-n", "scalar", "matrix"),
        ("beta-eps", "matrix", "scalar"),
    ],
)
def test_phase_study_refuses_a_noise_that_does_not_fit_the_diagram(
    no_simulation, diagram, noise, needed
):
    points = phase_points(diagram, betas=[1.0], dims=[3], n_tokens=[2], eps=[0.5])
    spec = ModelSpec(noise=noise, depth=2, horizon=1.0)
    needs = re.escape(f"diagram='{diagram}' needs ModelSpec(noise='{needed}')")
    with pytest.raises(ad.ParameterError, match=needs):
        phase_diagram_study(diagram, spec, MonteCarlo(), points)


def test_phase_study_refuses_points_without_the_keys_of_the_diagram(no_simulation):
    # beta-eps points without eps failed with a raw JAX ValueError while building the model.
    spec = ModelSpec(noise="scalar", depth=2, horizon=1.0)
    with pytest.raises(ad.ParameterError, match="gives exactly the keys dim, n_tokens, eps, beta"):
        phase_diagram_study("beta-eps", spec, MonteCarlo(), POINTS)
    extra = [{**POINTS[0], "eps": 0.5}]  # eps would be ignored by the full-noise model
    with pytest.raises(ad.ParameterError, match="gives exactly the keys dim, n_tokens, beta"):
        phase_diagram_study("beta-d", SPEC, MonteCarlo(), extra)


# --- 2. lists of values: a string is not one ---------------------------------------------------


def test_grid_refuses_a_string():
    # 'abc' gave the points 'a', 'b', 'c'.
    with pytest.raises(ad.ParameterError, match=r"beta must be a list of values.*write \['abc'\]"):
        ad.grid(dim=[3], beta="abc")


def test_grid_takes_lists_tuples_and_ranges():
    # (and 1-d arrays: see the child above, where the type checker does not refuse them)
    points = ad.grid(dim=range(2, 4), n_tokens=(2,), beta=[1.0, 2.0])
    assert [(p["dim"], p["beta"]) for p in points] == [(2, 1.0), (2, 2.0), (3, 1.0), (3, 2.0)]


def test_evolution_points_refuse_a_string_of_models():
    # models='full' was read as the models 'f', 'u', 'l', 'l'.
    with pytest.raises(ad.ParameterError, match="models must be a list of values"):
        evolution_points("full", betas=[1.0], dims=[3], n_tokens=[2], eps=[0.5])


def test_schemes_study_refuses_a_string_of_schemes(no_schemes_work):
    # schemes='post-ln' was read as the schemes 'p', 'o', ...
    with pytest.raises(ad.ParameterError, match="schemes must be a list of values"):
        schemes_study(schemes="post-ln", progress=False)


# --- 3. routes are checked at construction (flags: see the child above) ------------------------


def test_monte_carlo_checks_the_route_at_construction():
    with pytest.raises(ad.ParameterError, match="route='x' is not allowed; choose one of"):
        MonteCarlo(route="x")
    assert MonteCarlo(route="full").route == "full"


# --- 4. metadata may not overwrite the provenance ----------------------------------------------


@pytest.mark.parametrize("name", ["n_trajectories", "seconds", "attndyn_version", "signature"])
def test_metadata_that_names_a_provenance_field_is_refused_first(name):
    # n_trajectories raised "provenance_record() got multiple values" after the simulation;
    # attndyn_version silently replaced the real version.
    with pytest.raises(ad.ParameterError, match=f"metadata names '{name}'"):
        estimate(metadata={name: 999})


def test_the_reserved_metadata_keys_are_the_provenance_fields():
    # Every field the estimator records is reserved, except the study's names (study,
    # diagram, kind: a study names itself).
    model = ad.DiscreteTransformer(ad.Attention(1.0), depth=1, saveat=ad.SaveAt(1.0))
    ds = ad.estimate_probabilities(
        lambda **p: model,
        [{"dim": 3, "n_tokens": 2}],
        key=jax.random.key(0),
        n_trajectories=2,
        progress=False,
        metadata={"study": "mine", "kind": "mine", "note": 1},
    )
    # The model's own fields (its depth) are recorded too, not reserved: a study's
    # metadata names them again.
    recorded = set(ad.provenance(ds)) - {"study", "kind", "note", *model.provenance()}
    reserved = set(estimator.provenance_record(0.0)) | set(estimator.ESTIMATOR_FIELDS)
    assert recorded == reserved
    assert ad.provenance(ds)["study"] == ad.provenance(ds)["kind"] == "mine"


# --- 5. schemes_study: no repeats ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"schemes": ["post-ln", "post-ln"]}, "schemes gives 'post-ln' twice"),
        ({"alphas": [1.0, 1.0]}, "alphas gives 1.0 twice"),
        ({"alphas": (2.0, 0.5, 2.0)}, "alphas gives 2.0 twice"),
    ],
)
def test_schemes_study_refuses_repeats(no_schemes_work, arguments, message):
    # Each ran, and gave two rows with one coordinate.
    with pytest.raises(ad.ParameterError, match=message):
        schemes_study(progress=False, **arguments)


# --- 6. use_all_cores: 0 is not "every core" ---------------------------------------------------


@pytest.mark.parametrize("n_devices", [0, -2, True])
def test_use_all_cores_refuses_counts_below_one(n_devices):
    jnp.zeros(1)  # JAX has started: nothing here may reconfigure it
    with pytest.raises(ad.ParameterError, match=f"n_devices={n_devices!r} must be an integer"):
        ad.use_all_cores(n_devices)


# --- 7. wilson_interval: accurate messages (whole counts: see the child above) -----------------


@pytest.mark.parametrize(
    ("successes", "trials", "message"),
    [
        (1, 0, r"successes=1 exceed trials=0"),  # said "above trials or below 0"
        (-1, 3, r"successes=-1 must be whole numbers >= 0"),
        (2, -1, r"trials=-1 must be whole numbers >= 0"),
        (np.asarray([1, 4]), 3, r"successes=\[1 4\] exceed trials=3"),
    ],
)
def test_wilson_interval_names_the_count_at_fault(successes, trials, message):
    with pytest.raises(ad.ParameterError, match=message):
        ad.wilson_interval(successes, trials)


def test_wilson_interval_checks_the_confidence():
    with pytest.raises(ad.ParameterError, match=r"confidence=1\.5 is outside"):
        ad.wilson_interval(3, 4, confidence=1.5)


# --- 8. a checkpoint's folder must exist -------------------------------------------------------


def test_checkpoint_in_a_missing_folder_is_refused_and_nothing_is_created(tmp_path):
    # The folder (even a tree of them) used to be created.
    path = tmp_path / "missing" / "deeper" / "study.nc"
    with pytest.raises(ad.ParameterError, match=r"checkpoint=.* folder that does not exist"):
        estimate(checkpoint=path)
    assert not (tmp_path / "missing").exists()


def test_the_sde_records_no_value_law():
    # The SDEs' noise is a Brownian motion: provenance said values="uniform" (or the
    # default "gaussian") for runs in which no value law was drawn (audit).
    assert ad.studies.ModelSpec(engine="sde").metadata()["values"] is None
    assert ad.studies.ModelSpec(engine="sde", values="uniform").metadata()["values"] is None
    assert ad.studies.ModelSpec(values="uniform").metadata()["values"] == "uniform"


# --- issue 29: the layer count a warning names is the one the saves record -------------------


@pytest.mark.parametrize(
    ("depth", "horizon"),
    [(35, 1.1), (5, 0.3), (100, 0.305), (3, 0.5), (7, 2.5)],
)
def test_a_rounded_horizon_is_warned_as_recorded(depth, horizon):
    # DiscreteTransformer(depth=35, SaveAt(1.1)) warned "38 layers, t = 1.08571" and saved
    # the 39-layer state at t = 1.1143; --horizon 0.3 --depth 5 warned "2 layers, t = 0.4"
    # and recorded t = 0.2 (audit): two roundings of one number.
    with pytest.warns(UserWarning, match="not a multiple of the layer step") as caught:
        model = ad.DiscreteTransformer(ad.Attention(1.0), depth=depth, saveat=ad.SaveAt(horizon))
    text = str(caught[0].message)
    found = re.search(r"running (\d+) layers?, to t = ([0-9.e+-]+)\.", text)
    assert found is not None, text
    layers, time = found.groups()
    assert int(layers) == model.n_layers == int(model.save_layers[-1])
    assert float(time) == pytest.approx(float(model.save_times[-1]), rel=1e-5)


def test_select_route_refuses_an_unknown_route():
    # A misspelt route ran as "auto" (the estimator checked it, select_route did not).
    model = ad.DiscreteTransformer(ad.Attention(1.0), ad.MatrixValues(1.0))
    with pytest.raises(ad.ParameterError, match="route='ful' is not allowed"):
        ad.select_route(model, n_tokens=2, dim=4, route="ful")
