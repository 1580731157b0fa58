"""Discrete → continuous (003 Theorem 1): eq. 4 at depth L converges in law to eq. 6."""

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attndyn as ad

BETA, DIM, T = 1.0, 4, 1.0


def _stats(z):
    z = np.asarray(z, np.float64)
    return z.mean(), z.std(ddof=1) / np.sqrt(len(z))


def _discrete_mean(depth, distribution, n, seed):
    model = ad.DiscreteTransformer(
        ad.Attention(BETA),
        ad.MatrixValues(1.0, distribution=distribution),
        depth=depth,
        saveat=ad.SaveAt(T),
    )
    x0 = jnp.eye(DIM, dtype=jnp.float32)[:2]  # orthogonal start, Z_0 = 0

    def one(k):
        x = ad.normalize(model.trajectory(x0, key=k)[-1])
        return x[0] @ x[1]

    return _stats(jax.jit(jax.vmap(one))(jax.random.split(jax.random.key(seed), n)))


@pytest.fixture(scope="module")
def reference():
    # E Z_1 of the SDE from the exact 1-D overlap diffusion (SA, full noise), Heun at
    # dt = 2e-3 (weak error ~1e-3, below the tolerances used) over 50,000 paths (its SE is
    # 0.63 times that of the 20,000-trajectory discrete means it is compared with).
    o = ad.OverlapSDE(
        BETA,
        attention="softmax",
        noise="full",
        dim=DIM,
        saveat=ad.SaveAt(T),
        integrator=ad.SDEIntegrator(diffrax.Heun(), dt=2e-3),
    )
    keys = jax.random.split(jax.random.key(0), 50_000)
    z = jax.jit(jax.vmap(lambda k: o.solve(jnp.zeros((), jnp.float32), key=k).z[-1]))(keys)
    return _stats(z)


@pytest.mark.slow
def test_weak_error_decreases_with_depth(reference):
    # The weak error of E Z_1 is ≈ 0.3/L (experiments/limit_convergence.py: 0.034 at
    # L = 10), so ≈ 0.06 at L = 5 and 0.008 at L = 40. We require the L = 5 error to be
    # resolved (> 4 SE) and to exceed the L = 40 error by more than 4 combined SE.
    ref, ref_se = reference
    e5, se5 = _discrete_mean(5, "gaussian", 20_000, seed=1)
    e40, se40 = _discrete_mean(40, "gaussian", 20_000, seed=2)
    err5, err40 = e5 - ref, e40 - ref
    assert abs(err5) > 4 * np.hypot(se5, ref_se)
    assert abs(err5) - abs(err40) > 4 * np.hypot(se5, se40)


@pytest.mark.slow
def test_value_distributions_reach_the_same_limit(reference):
    # Theorem 1 needs only centred, unit-variance, bounded entries: Gaussian, uniform and
    # Rademacher values agree with each other within 4 SE at L = 40, and each lies within
    # 4 SE plus the leading bias 0.3/L (= 0.0075, measured for Gaussian values) of the SDE.
    ref, ref_se = reference
    depth = 40
    means = {
        d: _discrete_mean(depth, d, 20_000, seed=10 + i)
        for i, d in enumerate(("gaussian", "uniform", "rademacher"))
    }
    g, g_se = means["gaussian"]
    for d in ("uniform", "rademacher"):
        m, se = means[d]
        assert abs(m - g) < 4 * np.hypot(se, g_se), (d, m, g)
    for d, (m, se) in means.items():
        assert abs(m - ref) < 4 * np.hypot(se, ref_se) + 0.3 / depth, (d, m, ref)
