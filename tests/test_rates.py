"""Clustering-speed observables and terminal-rate fits (seed 004 Thm 4.1)."""

import jax
import numpy as np
import pytest

from attndyn import (
    NGPT,
    MixLN,
    ParameterError,
    PeriLN,
    PostLN,
    PreLN,
    SaveAt,
    SqrtScaling,
    SymmetricODE,
)
from attndyn.studies import clustering_time, cosine_gap, fit_terminal_rate
from attndyn.theory import terminal_rate_theory


def fitted_rate(scheme, horizon, *, beta=2.0, n=16):
    theory = terminal_rate_theory(scheme)
    if theory.law == "power":
        ts = np.geomspace(1.0, horizon, 120)
    else:
        ts = np.linspace(0.0, horizon, 120)
    sol = SymmetricODE(scheme, beta, n_tokens=n, saveat=SaveAt(horizon, ts)).solve()
    return theory, fit_terminal_rate(sol.ts, law=theory.law, log_gap=sol.log_gap)


@pytest.mark.default_case("pre-ln")
@pytest.mark.parametrize(
    ("scheme", "horizon"),
    [
        (PostLN(), 60.0),
        (PreLN(), 1e4),
        (SqrtScaling(), 2000.0),
        (PeriLN(), 1e4),
        (MixLN(tau=2.0), 1e4),
        (NGPT(alpha=0.5), 120.0),
    ],
    ids=["post-ln", "pre-ln", "sqrt-scaling", "peri-ln", "mix-ln", "ngpt"],
)
def test_terminal_rates_match_theory(scheme, horizon):
    theory, fit = fitted_rate(scheme, horizon)
    assert fit.contains(theory.value), (fit.value, fit.interval)
    # The interval is informative: narrower than 5 % of the rate.
    assert fit.interval[1] - fit.interval[0] < 0.05 * theory.value


def test_wrong_law_is_rejected():
    """A power law fitted as an exponential has a drifting local rate: 0 is not in reach."""
    ts = np.geomspace(1, 1e4, 100)
    fit = fit_terminal_rate(ts, ts**-2.0, law="exponential")
    assert not fit.contains(2.0)
    exact = fit_terminal_rate(ts, 3 * ts**-2.0, law="power")
    assert exact.value == pytest.approx(2.0, abs=1e-9)


def test_noisy_fit_covers_truth():
    """Multiplicative noise of 1 %: the interval (≥ 4 standard errors) covers the truth."""
    rng = np.random.default_rng(0)
    ts = np.linspace(0, 20, 200)
    gap = np.exp(-1.5 * ts) * np.exp(0.01 * rng.standard_normal(ts.size))
    fit = fit_terminal_rate(ts, gap, law="exponential")
    assert fit.contains(1.5)
    assert fit.stderr > 0
    # sqrt-scaling's exact law e^{−4√(t+1)} is a straight line in its variable √(t + 1).
    sq = fit_terminal_rate(ts, np.exp(-4 * np.sqrt(ts + 1)), law="sqrt-exponential")
    assert sq.value == pytest.approx(4.0, rel=1e-9)
    assert sq.variable == "√(t+1)" and fit.variable == "t"


def test_fit_needs_points_and_a_law():
    with pytest.raises(ParameterError, match="law"):
        fit_terminal_rate([1, 2, 3], [1, 1, 1], law="linear")
    with pytest.raises(ParameterError, match="6 usable"):
        fit_terminal_rate([1.0, 2.0, 3.0], [0.5, 0.25, 0.125], law="exponential")
    with pytest.raises(ParameterError, match="gap or log_gap"):
        fit_terminal_rate([1.0, 2.0], law="power")


def test_clustering_time_interpolates_in_log():
    ts = np.linspace(0, 10, 11)
    gap = np.exp(-ts)
    assert clustering_time(ts, gap, np.exp(-3.5)) == pytest.approx(3.5)
    assert np.isnan(clustering_time(ts, gap, 1e-9))
    assert clustering_time(ts, gap, 2.0) == 0.0
    with pytest.raises(ParameterError, match="tol"):
        clustering_time(ts, gap, 0.0)


def test_cosine_gap():
    # Inputs made in NumPy and put on the device as they are (JAX's sampler, jnp.ones and
    # jnp.eye compile each); the batch of equal tokens has x's shape: one program for both.
    x = jax.device_put(np.random.default_rng(0).standard_normal((3, 4, 5)).astype(np.float32))
    same = jax.device_put(np.ones((3, 4, 5), np.float32))
    assert cosine_gap(x).shape == (3,)
    np.testing.assert_allclose(cosine_gap(same), 0.0, atol=1e-6)
    orth = jax.device_put(np.eye(4, 5, dtype=np.float32))
    assert float(cosine_gap(orth)) == pytest.approx(1.0)


def test_every_law_states_its_variable():
    assert terminal_rate_theory(PostLN()).variable == "t"
    assert terminal_rate_theory(PreLN()).variable == "log t"
    sqrt = terminal_rate_theory(SqrtScaling())
    assert sqrt.variable == "√(t+1)" and sqrt.formula == "exp(-4 sqrt(t+1))"
    assert fit_terminal_rate(np.geomspace(1, 100, 20), np.geomspace(1, 100, 20) ** -2.0,
                             law="power").as_dict()["variable"] == "log t"  # fmt: skip


def test_a_rate_kind_still_reads_as_its_law_with_a_warning():
    """0.4 named a terminal law a rate's ``kind`` (``kind=``, ``.kind``, ``RATE_KINDS``,
    ``RateKind``): each still works for one release, with a DeprecationWarning."""
    import warnings

    from attndyn import studies, theory
    from attndyn.studies.rates import clock

    ts = np.geomspace(1.0, 100.0, 20)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new spellings warn of nothing
        fit = fit_terminal_rate(ts, ts**-2.0, law="power")
        assert fit.law == "power" and fit.as_dict()["law"] == "power"
        assert studies.RATE_LAWS == ("exponential", "power", "sqrt-exponential")
        assert terminal_rate_theory(PostLN()).law == "exponential"
    with pytest.warns(DeprecationWarning, match="'kind' is deprecated, use 'law'"):
        old = fit_terminal_rate(ts, ts**-2.0, kind="power")  # pyright: ignore[reportCallIssue]
    assert old == fit
    with pytest.warns(DeprecationWarning, match="'kind' is deprecated, use 'law'"):
        assert fit.kind == "power"  # pyright: ignore[reportAttributeAccessIssue]
    with pytest.warns(DeprecationWarning, match="'kind' is deprecated, use 'law'"):
        assert terminal_rate_theory(PostLN()).kind == "exponential"  # pyright: ignore[reportAttributeAccessIssue]
    with pytest.warns(DeprecationWarning, match="'kind' is deprecated, use 'law'"):
        np.testing.assert_array_equal(clock(ts, kind="power"), np.log(ts))  # pyright: ignore[reportCallIssue]
    with pytest.warns(DeprecationWarning, match="'RATE_KINDS' is deprecated, use 'RATE_LAWS'"):
        assert studies.RATE_KINDS == studies.RATE_LAWS  # pyright: ignore[reportAttributeAccessIssue]
    with pytest.warns(DeprecationWarning, match="'RateKind' is deprecated, use 'RateLaw'"):
        assert theory.RateKind is theory.RateLaw  # pyright: ignore[reportAttributeAccessIssue]
    with pytest.raises(ParameterError, match="give law only"):
        fit_terminal_rate(ts, ts**-2.0, law="power", kind="power")  # pyright: ignore[reportCallIssue]


@pytest.mark.slow
def test_sqrt_scaling_rate_in_the_right_variable_is_exact():
    """The symmetric-start ODE of sqrt-scaling fitted in √(t + 1): 4 to 4 digits (in √t the
    same window gives a biased local slope)."""
    from attndyn.studies.schemes import terminal_fit

    theory, fit, _ = terminal_fit(SqrtScaling(), beta=3.0, n_tokens=32, r0=1.0)
    assert fit.variable == "√(t+1)"
    assert fit.value == pytest.approx(theory.value, abs=2e-3), fit.value
    assert fit.contains(4.0)
