"""Issue 42 item 6: the merge bound of unnormalised attention at any β.

``attndyn phase-diagram --n-trajectories 500 --depth 5 --horizon 2 --dim 4 --attention
unnormalized --route full --beta 350`` printed overflow warnings and stopped ("their gap
can grow back"): the merge law squared weights e^{βz} that overflow float64 from β ≈ 354.
It now divides each row's weights by their largest (every term of the exponent is of
degree 2 in the weights but the drift's, which keeps the factor): κ at any β.
"""

import warnings

import numpy as np
import pytest

from attndyn._models.merging import MergeLaw


class RawWeights(MergeLaw):
    """The law as it was: undivided weights e^{βz}/N, here in 80-bit extended precision
    (largest e^{11356}), which holds their squares for the β of these tests: the
    reference."""

    def _weights(self, gram):
        scores = self.beta * np.asarray(gram, np.longdouble)
        return np.exp(scores) / gram.shape[-1], np.zeros(gram.shape[:-1])


def _merged_pairs(n: int, dim: int, seed: int) -> np.ndarray:
    """``n`` configurations of three unit tokens of R^dim, tokens 0 and 1 merged (equal)."""
    rng = np.random.default_rng(seed)
    theta = rng.standard_normal((n, 3, dim))
    theta /= np.linalg.norm(theta, axis=-1, keepdims=True)
    theta[:, 1] = theta[:, 0]
    return theta


#: The noises of the law: full (without and with a drift a), and scalar.
NOISES = [(0.0, 1.0, 0.0), (1.0, 1.0, 0.0), (0.0, 0.0, 0.5)]


@pytest.mark.skipif(np.finfo(np.longdouble).maxexp < 16384, reason="needs 80-bit long double")
@pytest.mark.parametrize("beta", [1.0, 30.0, 350.0, 1000.0])
@pytest.mark.parametrize(("drift", "sigma", "eps"), NOISES)
def test_unnormalised_exponents_equal_those_of_undivided_weights(beta, drift, sigma, eps):
    # Two routes to κ of a merged pair among three tokens: the law's (divided weights, in
    # float64, no warning) and the undivided formula in extended precision. On 9f5b4a1
    # β = 350 and 1000 gave NaN (no bound) with overflow warnings.
    plus = _merged_pairs(64, 4, seed=int(beta))
    merged = np.zeros((64, 3, 3), bool)
    law = MergeLaw("unnormalized", beta, 4, drift=drift, sigma=sigma, eps=eps)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an overflow warning fails the test
        kappa = law.exponents(plus, merged)[:, 0, 1]
    reference = RawWeights("unnormalized", beta, 4, drift=drift, sigma=sigma, eps=eps)
    with np.errstate(all="ignore"):
        expected = np.asarray(reference.exponents(plus, merged)[:, 0, 1], np.float64)
    if eps == 0.0 and drift == 0.0:
        assert np.all(np.isfinite(kappa)), kappa  # full noise, no drift: always bounded
    # The scalar exponent comes from a bisection (relative precision 2^-60 of its bracket).
    np.testing.assert_allclose(kappa, expected, rtol=1e-9, equal_nan=True)


@pytest.mark.parametrize("beta", [350.0, 1000.0, 1e5])
def test_two_tokens_exponents_are_spec_4_at_any_beta(beta):
    # Two tokens alone, full noise: κ₊ = (d − 1)/2 at +1 whatever β (spec §4), and at −1
    # κ₋ = ½ − (d − 2)/(2 cosh 2β) → ½ (its value at β = 30 already, to 1e-25).
    dim = 5
    theta = np.zeros((1, 2, dim))
    theta[0, :, 0] = 1.0
    law = MergeLaw("unnormalized", beta, dim, sigma=1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        same = law.exponents(theta, np.zeros((1, 2, 2), bool))[0, 0, 1]
        theta[0, 1, 0] = -1.0
        opposite = law.exponents(theta, np.ones((1, 2, 2), bool))[0, 0, 1]
    assert same == pytest.approx((dim - 1) / 2, rel=1e-12)
    at_30 = MergeLaw("unnormalized", 30.0, dim, sigma=1.0).exponents(
        theta, np.ones((1, 2, 2), bool)
    )
    assert opposite == pytest.approx(float(at_30[0, 0, 1]), rel=1e-12)


@pytest.mark.slow
def test_the_sde_drift_check_runs_in_the_precision_of_an_x64_study():
    # `phase-diagram --engine sde --x64 --attention unnormalized --beta 50` wrote
    # sphere_drift = NaN: the check ran float32 models, whose weights e^{βz} overflow
    # (their squares from β ≈ 44.4). The x64 study's own models are float64 and measured
    # so: the projection after each step leaves |Y| − 1 at float64 rounding. 12 s CPU (two
    # SDE programs); the default suite checks which models are measured (below).
    import jax

    import attndyn as ad
    from attndyn.studies.phase import sphere_drift_of

    def make(beta, dim, n_tokens):
        del dim, n_tokens
        return ad.TransformerSDE(
            ad.Attention(beta, kind="unnormalized"),
            saveat=ad.SaveAt(0.2),
            integrator=ad.SDEIntegrator(dt=0.1),
        )

    points = [{"beta": 50.0, "dim": 3, "n_tokens": 2}]
    with jax.enable_x64(True):
        wide = make(**points[0])
    (drift,) = sphere_drift_of(lambda **p: wide, points, seed=0, n=2)
    assert 0 <= drift < 1e-14
    (narrow,) = sphere_drift_of(make, points, seed=0, n=2)  # float32: overflows
    assert np.isnan(narrow)


def test_an_x64_study_measures_the_drift_of_its_own_float64_models():
    # The smoke version of the test above: what is measured, without solving.
    import jax

    import attndyn as ad
    from attndyn._estimate.plan import BuiltModels
    from attndyn.studies.phase import MonteCarlo, _in_float64, drift_models

    def make(beta, dim, n_tokens):
        del dim, n_tokens
        return ad.TransformerSDE(ad.Attention(beta, kind="unnormalized"), saveat=ad.SaveAt(0.2))

    points = [{"beta": 50.0, "dim": 3, "n_tokens": 2}]
    built = BuiltModels(make, points, x64=True)
    measured = drift_models(built, MonteCarlo(x64=True))(**points[0])
    assert _in_float64(measured) and not _in_float64(make(**points[0]))
    assert jax.numpy.asarray(1.0).dtype == np.float32  # x64 is off again outside


@pytest.mark.slow
@pytest.mark.parametrize("beta", ["350", "1000"])
def test_the_issue_42_runs_are_bounded_and_equal_counting(tmp_path, beta):
    # The issue's command: overflow warnings and "their gap can grow back" at β = 350 … 1000
    # on 9f5b4a1. Now it runs, warns of nothing, and its merges are bounded tightly enough
    # to be counted (no rerun changes a class): the counts equal --on-merged count's. At
    # β = 1000 both give 0.180/0.136/0.684 (NumPy float64, an independent simulation:
    # 0.172/0.131/0.697, within 1 SE of 500 trajectories). About 20 s CPU each.
    import json

    from click.testing import CliRunner

    from attndyn.cli import main

    args = [
        "phase-diagram", "--n-trajectories", "500", "--depth", "5", "--horizon", "2",
        "--dim", "4", "--attention", "unnormalized", "--route", "full", "--beta", beta,
        "--no-progress", "--json",
    ]  # fmt: skip
    points = {}
    for merged in ("auto", "count"):
        out = tmp_path / merged
        result = CliRunner().invoke(main, [*args, "--on-merged", merged, "--out", str(out)])
        assert result.exit_code == 0, result.output
        assert "overflow" not in result.stderr and "invalid value" not in result.stderr
        points[merged] = json.loads(result.stdout)["points"][0]
    for key in ("p_single", "p_antipodal", "p_unclustered", "n_merged"):
        assert points["auto"][key] == points["count"][key], key
