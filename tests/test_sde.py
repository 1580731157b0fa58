"""Transformer SDE (003 eq. 6) and hybrid SDE (eq. 8): sphere, solvers, inputs, Prop. 1."""

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attndyn as ad
from tests.helpers import binomial_se, sphere_points, two_sample_ks_pvalue


def _terminal_overlaps(model, *, n_traj, dim, seed):
    """(Z_0, Z_T) of two uniform tokens over ``n_traj`` independent trajectories."""

    def one(key):
        k1, k2 = jax.random.split(key)
        x0 = ad.uniform_sphere(key=k1, n_tokens=2, dim=dim)
        y = model.trajectory(x0, key=k2)[-1]
        y = ad.normalize(y)
        return jnp.dot(x0[0], x0[1]), jnp.dot(y[0], y[1])

    return jax.jit(jax.vmap(one))(jax.random.split(jax.random.key(seed), n_traj))


def _max_drift(model, *, n_traj, n_tokens, dim, seed=0):
    def one(key):
        k1, k2 = jax.random.split(key)
        x0 = ad.uniform_sphere(key=k1, n_tokens=n_tokens, dim=dim)
        return model.solve(x0, key=k2).sphere_drift

    drift = jax.jit(jax.vmap(one))(jax.random.split(jax.random.key(seed), n_traj))
    return float(jnp.max(drift))


# Both drifts of a model as one program (the Itô drift op by op compiles every op).
_drifts = eqx.filter_jit(lambda m, y: (m.ito_drift(y), m.stratonovich_drift(y)))


@pytest.mark.slow
def test_projected_solvers_stay_on_sphere():
    for solver in (diffrax.Euler(), diffrax.Heun(), diffrax.SPaRK()):
        m = ad.TransformerSDE(
            ad.Attention(3.0),
            saveat=ad.SaveAt(1.0),
            integrator=ad.SDEIntegrator(solver=solver, dt=0.05),
        )
        assert _max_drift(m, n_traj=4, n_tokens=3, dim=3) < 1e-5, solver
    h = ad.HybridSDE(
        ad.Attention(2.0, kind="unnormalized"),
        eps=1.5,
        saveat=ad.SaveAt(2.0),
        integrator=ad.SDEIntegrator(dt=0.02),
    )
    assert _max_drift(h, n_traj=8, n_tokens=3, dim=4) < 1e-5


@pytest.mark.slow
@pytest.mark.default_case("hybrid")
@pytest.mark.parametrize("cls", ["transformer", "hybrid"])
def test_unprojected_drift_shrinks_with_step(cls):
    # Without projection the solver's own error moves Y off the sphere; it must shrink
    # as dt does (Euler–Maruyama: |Y|² wanders by O(√(T·dt)), so dt/4 should halve it;
    # we ask for a factor 1.4 at least, and for a small absolute value at dt = 0.005).
    drifts = []
    for dt in (0.02, 0.005):
        integrator = ad.SDEIntegrator(dt=dt, project=False)
        if cls == "transformer":
            m = ad.TransformerSDE(ad.Attention(3.0), saveat=ad.SaveAt(5.0), integrator=integrator)
        else:
            m = ad.HybridSDE(
                ad.Attention(3.0), eps=1.0, saveat=ad.SaveAt(5.0), integrator=integrator
            )
        drifts.append(_max_drift(m, n_traj=64, n_tokens=2, dim=4))
    assert drifts[1] < drifts[0] / 1.4, drifts
    assert drifts[1] < 0.1, drifts


@pytest.mark.slow
@pytest.mark.parametrize(
    "n", [300, pytest.param(1000, marks=pytest.mark.slow)], ids=["smoke", "full"]
)
def test_stratonovich_heun_matches_ito_euler_in_law(n):
    # Heun solves the Stratonovich form (drift corrected by −½ΣDg·g, by autodiff); if the
    # correction were wrong the terminal overlap law would differ. Two independent samples
    # of n: KS must not reject at the 0.1 % level (fixed seeds; the level holds at any n,
    # the default run's 300 only has less power than the slow run's 1000).
    euler = ad.TransformerSDE(
        ad.Attention(1.5),
        saveat=ad.SaveAt(1.0),
        integrator=ad.SDEIntegrator(diffrax.Euler(), dt=0.02),
    )
    heun = ad.TransformerSDE(
        ad.Attention(1.5),
        saveat=ad.SaveAt(1.0),
        integrator=ad.SDEIntegrator(diffrax.Heun(), dt=0.02),
    )
    _, z_e = _terminal_overlaps(euler, n_traj=n, dim=3, seed=1)
    _, z_h = _terminal_overlaps(heun, n_traj=n, dim=3, seed=2)
    assert two_sample_ks_pvalue(z_e, z_h) > 1e-3


@pytest.mark.default_case("unnormalized")
@pytest.mark.parametrize("kind", ["softmax", "unnormalized"])
def test_stratonovich_drift_is_tangent(kind):
    # On the sphere the Stratonovich form of eq. 6/8 has tangent drift (the Itô drift's
    # radial part is exactly the Itô-Stratonovich correction of the tangent noise: Lemma 1).
    # The radial part of the autodiff correction must therefore cancel it.
    y = sphere_points(3, 4, 3)
    for m in (
        ad.TransformerSDE(
            ad.Attention(1.3, kind=kind),
            sigma=0.7,
            integrator=ad.SDEIntegrator(diffrax.Heun()),
        ),
        ad.HybridSDE(
            ad.Attention(1.3, kind=kind), eps=0.8, integrator=ad.SDEIntegrator(diffrax.Heun())
        ),
    ):
        ito, strat = (np.asarray(d, np.float64) for d in _drifts(m, y))
        # The radial parts in NumPy (float64: no rounding of its own in the cancellation).
        y64 = np.asarray(y, np.float64)
        radial_ito = np.sum(y64 * ito, axis=-1)
        radial_strat = np.sum(y64 * strat, axis=-1)
        scale = float(np.max(np.abs(radial_ito))) + 1e-3
        assert float(np.max(np.abs(radial_strat))) < 1e-5 * max(scale, 1.0) + 1e-5
        if isinstance(m, ad.TransformerSDE):
            assert float(np.max(np.abs(radial_ito))) > 0.1  # the check is not vacuous


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(eps=-0.1), "eps"),
        (dict(sigma=0.0), "sigma"),
        (dict(dt=2.0), "dt"),
        (dict(solver=diffrax.ShARK()), "additive"),
        (dict(solver=diffrax.SRA1()), "additive"),
        (dict(solver=diffrax.ItoMilstein()), "commutative"),
        (dict(solver="rk4"), "solver"),
        (dict(solver=diffrax.Tsit5()), "SDE solver"),
        (dict(brownian="pink"), "brownian"),
        (dict(saveat=(0.5, 2.0)), "saveat"),
    ],
)
def test_bad_input(kwargs, match):
    cls = ad.HybridSDE if "eps" in kwargs else ad.TransformerSDE
    with pytest.raises(ad.ParameterError, match=match):
        # The integrator and the save times are built inside the ``raises`` block: a bad
        # dt or Brownian kind is refused by SDEIntegrator, a bad save time by SaveAt.
        integrator_kw = {k: v for k, v in kwargs.items() if k in ("dt", "solver", "brownian")}
        model_kw = {k: v for k, v in kwargs.items() if k in ("eps", "sigma")}
        cls(
            ad.Attention(1.0),
            saveat=ad.SaveAt(1.0, kwargs.get("saveat")),
            integrator=ad.SDEIntegrator(**integrator_kw),
            **model_kw,
        )


def test_hybrid_milstein_refused_with_reason():
    integrator = ad.SDEIntegrator(diffrax.StratonovichMilstein())
    with pytest.raises(ad.ParameterError, match="Heun"):
        ad.HybridSDE(ad.Attention(1.0), integrator=integrator)


def test_solver_names_are_deprecated_and_stand_for_the_same_solvers():
    # The studies' and the CLI's names go through one map, without a warning.
    from attndyn._models.integrators import sde_solver

    for name, cls in (("euler", diffrax.Euler), ("heun", diffrax.Heun), ("spark", diffrax.SPaRK)):
        with pytest.warns(DeprecationWarning, match=f"solver='{name}'.*diffrax.{cls.__name__}"):
            integrator = ad.SDEIntegrator(name, 0.1)
        assert type(integrator.solver) is cls
        assert integrator.stratonovich == (name != "euler")
        assert integrator == ad.SDEIntegrator(sde_solver(name), 0.1)
    with pytest.raises(ad.ParameterError, match="solver"):
        sde_solver("milstein")


class _GBM(ad.AbstractItoSDE):
    """Geometric Brownian motion dX = μX dt + σX dW, Itô: E X_T = e^{μT}, where the
    Stratonovich reading of the same coefficients gives e^{(μ + σ²/2)T}."""

    mu: float = 0.5
    sigma: float = 0.8

    def ito_drift(self, y):
        return self.mu * y

    def diffusion_apply(self, y, dw):
        return self.sigma * y * dw

    def brownian_shape(self, y):
        return ()


def test_the_solver_type_decides_the_calculus():
    # An SDE states its drift once, in Itô form; the integrator hands a Stratonovich solver
    # the corrected drift b − ½ g g' because of its type (diffrax.AbstractStratonovichSolver),
    # whichever solver it is: EulerHeun is in no list of attndyn's. On GBM the correction
    # is μy − ½σ²y in closed form, and E X_1 = e^{0.5} = 1.649 for every solver (the
    # Stratonovich reading, e^{0.82} = 2.270, is ~20 standard errors away). Tolerance:
    # 4 standard errors of the 2,048-path mean (0.03 each) plus the weak bias at dt = 1/32
    # (Euler: e^{0.5} − (1 + μ/32)^32 = 0.007).
    from attndyn._models.integrators import stratonovich_drift

    gbm = _GBM()
    y = np.float32(1.7)
    expected = (gbm.mu - gbm.sigma**2 / 2) * np.float64(y)
    np.testing.assert_allclose(stratonovich_drift(gbm, y), expected, rtol=1e-6)
    keys = jax.random.split(jax.random.key(0), 2048)
    for solver in (diffrax.Euler(), diffrax.EulerHeun()):
        integrator = ad.SDEIntegrator(solver, dt=1 / 32, project=False)

        def terminal(key, integrator=integrator):
            ys, _ = integrator.solve(gbm, jnp.ones(()), jnp.ones(1), 1.0, key=key, project=False)
            return ys[-1]

        x = np.asarray(jax.jit(jax.vmap(terminal))(keys), np.float64)
        se = float(np.std(x)) / np.sqrt(x.size)
        assert abs(float(np.mean(x)) - np.exp(0.5)) < 4 * se + 0.007, (solver, x.mean(), se)


def test_vmap_over_parameters_and_save_times():
    x0 = sphere_points(0, 3, 4)

    def run(beta, eps):
        m = ad.HybridSDE(
            ad.Attention(beta),
            eps=eps,
            saveat=ad.SaveAt(1.0, (0.5, 1.0)),
            integrator=ad.SDEIntegrator(dt=0.05),
        )
        return m.trajectory(x0, key=jax.random.key(1))

    betas, epss = np.array([0.5, 2.0], np.float32), np.array([0.0, 1.0], np.float32)
    out = jax.jit(jax.vmap(run))(betas, epss)
    assert out.shape == (2, 2, 3, 4)
    m = ad.HybridSDE(
        ad.Attention(1.0),
        saveat=ad.SaveAt(1.0, (0.5, 1.0)),
        integrator=ad.SDEIntegrator(dt=0.3),
    )
    # Steps of 1/4; saves are rounded to the step grid.
    np.testing.assert_allclose(m.save_times, [0.5, 1.0])
    assert m.step_size == pytest.approx(0.25)


@pytest.mark.slow
def test_estimator_runs_sde_and_refuses_an_overflowing_beta():
    def model_fn(beta, dim, n_tokens):
        del dim, n_tokens
        return ad.TransformerSDE(
            ad.Attention(beta, kind="unnormalized"),
            saveat=ad.SaveAt(1.0),
            integrator=ad.SDEIntegrator(dt=0.1),
        )

    ds = _estimate_two(model_fn, betas=(1.0,))
    assert int(ds["n_nonfinite"][0]) == 0
    # e^{200} overflows float32: it used to run, every trajectory reported as non-finite;
    # the largest exponent is known before running, so the point is refused then, naming
    # float64 (issue 29).
    with pytest.raises(ad.ParameterError, match=r"β = 200 .*--x64"):
        _estimate_two(model_fn)


def _estimate_two(model_fn, betas=(1.0, 200.0)):
    return ad.estimate_probabilities(
        model_fn,
        [{"beta": beta, "dim": 3, "n_tokens": 2} for beta in betas],
        key=jax.random.key(0),
        n_trajectories=16,
        on_nonfinite="exclude",
        progress=False,
    )


def test_prop1_hybrid_clusters_below_and_splits_above_threshold():
    # Prop. 1 (USA, N = 2): single cluster a.s. for ε² < 2e^{−β}, antipodal a.s. above.
    # β = 1: ε_c = 0.858; ε = 0.3 and 2.0 are far from it, where the log-distance to the
    # attracting end drifts at rate ≥ 3 (see docs/sde.md), so T = 20 is long. The limit
    # probabilities are 1; we allow 4 binomial standard errors at p = 0.97 below 1.
    n = 200
    eps_c = ad.theory.eps_critical(1.0)
    for eps, outcome in ((0.3, "single"), (2.0, "antipodal")):
        assert (eps < eps_c) == (outcome == "single")

        def model_fn(beta, eps, dim, n_tokens):
            del dim, n_tokens
            return ad.HybridSDE(
                ad.Attention(beta, kind="unnormalized"),
                eps=eps,
                saveat=ad.SaveAt(20.0),
                integrator=ad.SDEIntegrator(dt=0.01),
            )

        ds = ad.estimate_probabilities(
            model_fn,
            [{"beta": 1.0, "eps": eps, "dim": 3, "n_tokens": 2}],
            key=jax.random.key(4),
            n_trajectories=n,
            progress=False,
        )
        p = float(ds["probability"].isel(point=0, time=-1).sel(outcome=outcome))
        assert p >= 0.97 - 4 * binomial_se(0.97, n), (eps, outcome, p)
