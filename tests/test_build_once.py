"""A study builds each point's model once (issue 30 item 2): the check before anything
runs, the estimator's plan and the SDE engine's drift measurement share the one build."""

import collections

import jax
import pytest

from attndyn.studies import phase
from attndyn.studies.spec import StudyModel

POINTS = phase.phase_points("beta-d", betas=[0.5, 1.5], dims=[3], n_tokens=[2])
CASES = {
    # Two tokens in d = 3 with Gaussian values: the reduced two-token route.
    "reduced": (phase.ModelSpec(depth=2, horizon=1.0), phase.MonteCarlo(n_trajectories=4)),
    "full": (
        phase.ModelSpec(depth=2, horizon=1.0),
        phase.MonteCarlo(n_trajectories=4, route="full"),
    ),
    # The SDE engine on its full route (its two-token overlap route compiles for longer).
    "sde": (
        phase.ModelSpec(engine="sde", horizon=0.2, dt=0.1),
        phase.MonteCarlo(n_trajectories=4, route="full"),
    ),
}


@pytest.mark.parametrize(
    "case",
    # The SDE engine's compile costs ~20 s of CPU: slow; the reduced and full cases are
    # the default run's smoke version of the same study path.
    [pytest.param(c, marks=pytest.mark.slow) if c == "sde" else c for c in CASES],
)
def test_a_study_builds_each_points_model_once(case, monkeypatch):
    spec, mc = CASES[case]
    builds = collections.Counter()
    build = StudyModel.model

    def counted(self, **p):
        builds[(p["dim"], p["n_tokens"], p["beta"])] += 1
        return build(self, **p)

    # Every point's model is built by its StudyModel (ModelSpec.model_fn is its method).
    monkeypatch.setattr(StudyModel, "model", counted)
    ds = phase.phase_diagram_study("beta-d", spec, mc, POINTS, progress=False)
    assert builds == {(p["dim"], p["n_tokens"], p["beta"]): 1 for p in POINTS}
    # The route each case is meant to exercise did run (provenance records it).
    want = {"reduced": "reduced", "full": "full", "sde": "full"}[case]
    assert ds.attrs["route"] == want
    if case == "sde":
        assert ds["sphere_drift"].shape == (len(POINTS),)


def test_an_evolution_study_builds_each_points_model_once(monkeypatch):
    from attndyn.studies import evolution

    builds = collections.Counter()
    build = StudyModel.model

    def counted(self, **p):
        builds[(self.noise.name, p["beta"])] += 1
        return build(self, **p)

    monkeypatch.setattr(StudyModel, "model", counted)
    points = evolution.evolution_points(["full"], betas=[0.5, 1.5], dims=[3], n_tokens=[2], eps=[])
    spec = phase.ModelSpec(depth=2, horizon=1.0)
    evolution.evolution_study(spec, phase.MonteCarlo(n_trajectories=4), points, saves=2)
    assert builds == {("matrix", 0.5): 1, ("matrix", 1.5): 1}


def test_a_studys_options_are_checked_once_where_they_enter(monkeypatch):
    # MonteCarlo checks them (by the estimator's rules, in its own names); the estimator
    # it calls trusts them. A direct call of the estimator checks its own.
    import attndyn as ad
    from attndyn._estimate import estimator

    calls = []
    check = phase.check_options

    def counted(**options):
        calls.append(options)
        return check(**options)

    monkeypatch.setattr(phase, "check_options", counted)
    monkeypatch.setattr(estimator, "check_options", counted)
    spec = CASES["full"][0]
    mc = phase.MonteCarlo(n_trajectories=4, route="full")
    phase.phase_diagram_study("beta-d", spec, mc, POINTS, progress=False)
    assert len(calls) == 1
    with pytest.raises(ad.ParameterError, match=r"^chunk-size=0 must be"):
        phase.MonteCarlo(chunk_size=0)
    with pytest.raises(ad.ParameterError, match=r"^n_trajectories=0 must be"):
        phase.MonteCarlo(n_trajectories=0)
    with pytest.raises(ad.ParameterError, match=r"^early-absorption=2\.0 is outside"):
        phase.MonteCarlo(early_absorption=2.0)
    with pytest.raises(ad.ParameterError, match=r"^route='x' is not allowed"):
        mc.estimate(spec.model_fn(), POINTS, route="x")
    with pytest.raises(ad.ParameterError, match=r"^n_trajectories=0 must be"):
        ad.estimate_probabilities(spec.model_fn(), POINTS, key=jax.random.key(0), n_trajectories=0)
    assert len(calls) == 5  # three MonteCarlos and the estimator; the override by itself
