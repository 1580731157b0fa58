import numpy as np

import attndyn as ad


def test_wilson_interval_known_values():
    # Wilson 95 % for 10/100: (0.0552, 0.1744), a textbook value.
    lo, hi = ad.wilson_interval(10, 100)
    np.testing.assert_allclose([lo, hi], [0.0552, 0.1744], atol=1e-4)


def test_wilson_interval_at_the_ends():
    lo, hi = ad.wilson_interval(0, 50)
    assert lo == 0.0 and 0 < hi < 0.1
    lo, hi = ad.wilson_interval(50, 50)
    assert hi == 1.0 and 0.9 < lo < 1
    lo, hi = ad.wilson_interval(0, 0)
    assert np.isnan(lo) and np.isnan(hi)


def test_wilson_coverage():
    # Coverage of the nominal 95 % interval at p = 0.3, n = 200, over 4000 fixed-seed
    # replicates: the coverage estimate has SE sqrt(.95·.05/4000) ≈ 0.0034, and Wilson's true
    # coverage here is within 0.01 of 0.95, so [0.925, 0.975] is > 4 SE either side.
    rng = np.random.default_rng(0)
    k = rng.binomial(200, 0.3, size=4000)
    lo, hi = ad.wilson_interval(k, 200)
    coverage = np.mean((lo <= 0.3) & (0.3 <= hi))
    assert 0.925 < coverage < 0.975
