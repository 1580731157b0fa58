"""Validation once (issue 44 item 4), the pieces that let the estimator trust what was
checked where it entered: checked points, the unchecked sampler and Wilson kernel, and a
save grid refused once per step. Each trusted route gives the checked route's numbers."""

import copy
import pickle

import jax
import numpy as np
import pytest

import attndyn as ad
from attndyn._core.errors import ParameterError
from attndyn._core.sphere import sphere_points
from attndyn._estimate.plan import CheckedPoints, check_points
from attndyn._estimate.stats import wilson_bounds


def test_checked_points_are_trusted_and_read_only():
    points = ad.studies.phase_points("beta-d", betas=[0.5, 1.0], dims=[3], n_tokens=[2])
    assert isinstance(points, CheckedPoints)
    assert points == [{"dim": 3, "n_tokens": 2, "beta": b} for b in (0.5, 1.0)]
    for change in (
        lambda: points.append({"dim": 1, "n_tokens": 2, "beta": 0.5}),
        lambda: points.__setitem__(0, {"dim": 1}),
        lambda: points.extend([]),
    ):
        with pytest.raises(TypeError, match="read-only"):
            change()
    # A list built from them is checked again: a bad point added there is refused.
    with pytest.raises(ParameterError, match="dim"):
        check_points([*points, {"dim": 1, "n_tokens": 2, "beta": 0.5}])
    # Copied and pickled as checked points (a study may copy its arguments).
    for copied in (copy.copy(points), copy.deepcopy(points), pickle.loads(pickle.dumps(points))):
        assert isinstance(copied, CheckedPoints) and copied == points
    # Checked points pass through as copies (the estimator's dicts are its own).
    again = check_points(points)
    assert isinstance(again, CheckedPoints) and again == points and again[0] is not points[0]


def test_estimate_probabilities_checks_a_users_points_once():
    # A direct call still refuses a bad point (a plain list is not trusted).
    model_fn = lambda beta, dim, n_tokens: ad.DiscreteTransformer(  # noqa: E731
        ad.Attention(beta=beta), depth=2
    )
    with pytest.raises(ParameterError, match="n_tokens"):
        ad.estimate_probabilities(
            model_fn,
            [{"dim": 3, "n_tokens": 0, "beta": 0.5}],
            key=jax.random.key(0),
            n_trajectories=4,
            progress=False,
        )


def test_sphere_points_is_uniform_sphere_unchecked():
    key = jax.random.key(3)
    checked = ad.uniform_sphere(key=key, n_tokens=5, dim=4)
    np.testing.assert_array_equal(np.asarray(sphere_points(key, 5, 4)), np.asarray(checked))


def test_wilson_bounds_is_wilson_interval_unchecked():
    k, n = np.array([0, 3, 7, 10]), np.array([10, 10, 10, 10])
    for got, want in zip(wilson_bounds(k, n), ad.wilson_interval(k, n), strict=True):
        np.testing.assert_array_equal(got, want)
    with pytest.raises(ParameterError, match="successes"):
        ad.wilson_interval(11, 10)  # the public function still checks


def test_save_steps_refused_at_every_call_and_never_shared():
    colliding = ad.SaveAt(1.0, (0.5, 0.6))
    for _ in range(2):  # a refusal is not cached: every call refuses
        with pytest.raises(ParameterError, match="round to the same step"):
            colliding.steps(0.5)
    saveat = ad.SaveAt(1.0, (0.5, 1.0))
    steps = saveat.steps(0.25)
    steps[0] = 99  # a caller's array is its own, not the cache's
    np.testing.assert_array_equal(saveat.steps(0.25), [2, 4])
    np.testing.assert_array_equal(saveat.steps(np.float64(0.25)), [2, 4])  # uncached route
