"""The normalized-attention ODE (spec §3.1) for the six schemes, solved with diffrax."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attndyn
import attndyn as ad
from attndyn import (
    NGPT,
    Attention,
    DeterministicValues,
    DiscreteTransformer,
    MixLN,
    NormalizedAttentionODE,
    ODEIntegrator,
    ParameterError,
    PeriLN,
    PostLN,
    PreLN,
    SaveAt,
    SqrtScaling,
)

SCHEMES = [PostLN(), PreLN(), MixLN(tau=0.5), PeriLN(), NGPT(alpha=0.7), SqrtScaling()]
IDS = [s.name for s in SCHEMES]


def random_start(n=5, d=4, seed=0, radius=1.0):
    return radius * attndyn.uniform_sphere(key=jax.random.key(seed), n_tokens=n, dim=d)


def test_drift_is_reported_not_hidden():
    # Explicit Euler with a coarse constant step leaves the sphere by O(dt²) per step.
    import diffrax

    model = NormalizedAttentionODE(
        Attention(1.0),
        PostLN(),
        saveat=SaveAt(4.0, (4.0,)),
        integrator=ODEIntegrator(solver=diffrax.Euler(), adaptive=False, dt0=0.5),
    )
    sol = model.solve(random_start())
    assert float(sol.sphere_drift[-1]) > 1e-3
    np.testing.assert_allclose(np.linalg.norm(sol.theta, axis=-1), 1.0, atol=1e-6)


@pytest.mark.default_case("pre-ln")
@pytest.mark.parametrize("scheme", SCHEMES, ids=IDS)
def test_euler_layers_converge_at_order_one(scheme):
    """Deterministic layer maps are Euler steps: the error at T halves when L doubles.

    The same solve checks that θ stays on the sphere (start off it, radius 1.3).
    """
    horizon, x0 = 2.0, random_start(n=4, d=3, seed=1, radius=1.3)
    attention = Attention(1.5)
    ode = NormalizedAttentionODE(
        attention,
        scheme,
        saveat=SaveAt(horizon, (0.5, 1.0, 2.0)),
        integrator=ODEIntegrator(rtol=1e-7, atol=1e-9),
    )
    sol = ode.solve(x0)
    exact = sol.x[-1]
    # The exact flow keeps |θ| = 1; float32 at rtol 1e-7 drifts by round-off only.
    assert float(jnp.max(sol.sphere_drift)) < 1e-5
    np.testing.assert_allclose(np.linalg.norm(sol.theta, axis=-1), 1.0, atol=1e-6)
    errors = []
    for depth in (16, 32, 64):
        model = DiscreteTransformer(
            attention, DeterministicValues(), scheme, depth, SaveAt(horizon)
        )
        x = eqx.filter_jit(model.trajectory)(x0, key=jax.random.key(0))[-1]
        errors.append(float(jnp.max(jnp.abs(x - exact))))
    ratios = np.array(errors[:-1]) / np.array(errors[1:])
    # Order 1: ratios → 2. (Mix-LN: τL is an integer at every depth, so no switch offset.)
    assert np.all((ratios > 1.7) & (ratios < 2.4)), (errors, ratios)
    assert errors[-1] < 0.05


@pytest.mark.slow
def test_mix_ln_switch_happens_at_tau():
    tau, horizon = 0.75, 3.0
    ts = np.array([0.0, 0.25, 0.5, 0.75, 1.0, 2.0, 3.0])
    x0 = random_start(n=4, d=4, seed=2, radius=2.0)
    attention = Attention(1.0)
    mix = NormalizedAttentionODE(attention, MixLN(tau=tau), saveat=SaveAt(horizon, ts)).solve(x0)
    # Before τ: the Post-LN flow (radius held at 1, what Post-LN's normalisation leaves).
    post = NormalizedAttentionODE(attention, PostLN(), saveat=SaveAt(tau, ts[:4])).solve(x0)
    np.testing.assert_allclose(mix.theta[:4], post.theta, atol=1e-5)
    np.testing.assert_allclose(mix.r[:4], 1.0)
    # After τ: the Pre-LN flow started from the Post-LN state at τ with r = 1.
    start = post.theta[-1]
    pre = NormalizedAttentionODE(
        attention, PreLN(), saveat=SaveAt(horizon - tau, ts[4:] - tau)
    ).solve(start)
    np.testing.assert_allclose(mix.theta[4:], pre.theta, atol=1e-5)
    np.testing.assert_allclose(mix.r[4:], pre.r, rtol=1e-5)
    assert np.all(np.asarray(mix.r[4:]) > 1.1)


@pytest.mark.slow  # ~8 s; test_mix_ln_switch_happens_at_tau is the smoke
def test_mix_ln_extremes_and_vmap_over_tau():
    """τ = 0 is Pre-LN from the start radius; τ ≥ T is Post-LN. τ is vmappable."""
    x0 = random_start(n=3, d=3, seed=3, radius=1.5)
    attention = Attention(1.0)
    ts = (0.5, 2.0)

    def solve(scheme):
        return NormalizedAttentionODE(attention, scheme, saveat=SaveAt(2.0, ts)).solve(x0)

    mix = jax.vmap(lambda tau: solve(MixLN(tau=tau)).x)(jnp.array([0.0, 5.0]))
    np.testing.assert_allclose(mix[0], solve(PreLN()).x, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(mix[1], solve(PostLN()).x, atol=1e-5)


@pytest.mark.slow
def test_pre_ln_radius_grows_linearly_from_narrow_cone():
    """Thm 4.3(i): in a narrow cone ⟨θ, A⟩ → 1, so r(t) ≈ t + r_0."""
    noise = 0.05 * jax.random.normal(jax.random.key(4), (6, 5))
    x0 = attndyn.normalize(jnp.zeros((6, 5)).at[:, 0].set(1.0) + noise)
    model = NormalizedAttentionODE(Attention(1.0), PreLN(), saveat=SaveAt(40.0, (20.0, 40.0)))
    r = np.asarray(model.solve(x0).r)
    slope = (r[1] - r[0]) / 20.0
    # ⟨θ, A⟩ ≤ 1 bounds the slope above; the cone keeps it within 1 % of 1.
    assert np.all((slope > 0.99) & (slope <= 1.0 + 1e-5)), slope
    np.testing.assert_allclose(r[1], 41.0, rtol=0.01)


@pytest.mark.slow
def test_vmap_over_starts_and_parameters():
    x0 = jnp.stack([random_start(seed=s) for s in range(3)])
    betas = jnp.array([0.5, 1.0, 2.0])
    alphas = jnp.array([0.5, 1.0, 1.5])

    def solve(beta, alpha, x):
        model = NormalizedAttentionODE(Attention(beta), NGPT(alpha=alpha), saveat=SaveAt(2.0))
        return model.solve(x).x

    batched = jax.jit(jax.vmap(solve))(betas, alphas, x0)
    for i in range(3):
        single = jax.jit(solve)(betas[i], alphas[i], x0[i])
        np.testing.assert_allclose(batched[i], single, atol=1e-5)
    # vmap over Mix-LN's τ: test_mix_ln_extremes_and_vmap_over_tau.


def _counting(field, traced: list):
    """``field``, noting each call (calls happen when a solve is traced, never when its
    compiled program runs)."""

    def counted(t, y, args):
        traced.append(1)
        return field(t, y, args)

    return counted


def test_one_compiled_solve_serves_every_save_grid_horizon_and_tolerance(monkeypatch):
    # The save times, the horizon and the tolerances enter the compiled solve as arrays (a
    # model's SaveAt is static, so the solve takes it apart: saveat.without_saves): the
    # schemes study's fits, at two tolerances on their own grids, and a sweep over T, trace
    # once. Counted by the vector field's calls: traces, whatever JAX's disk cache holds.
    from attndyn._models import ode as ode_module, symmetric as symmetric_module

    traced = []
    for module in (ode_module, symmetric_module):
        monkeypatch.setattr(module, "_field", _counting(module._field, traced))
    runs = [  # (save times, horizon, integrator): same number of saves, all else differs
        ((0.5, 1.0), 1.0, ODEIntegrator()),
        ((0.25, 1.5), 2.0, ODEIntegrator(rtol=1e-7, atol=1e-9)),
    ]
    x0 = random_start(n=3, d=7)  # a shape no other test here solves: the first run traces
    for model in (
        lambda s, i: NormalizedAttentionODE(Attention(1.0), PreLN(), saveat=s, integrator=i),
        lambda s, i: ad.SymmetricODE(PreLN(), 2.0, n_tokens=7, saveat=s, integrator=i),
    ):
        counts, sols = [], []
        for ts, horizon, integrator in runs:
            sols.append(model(SaveAt(horizon, ts), integrator).solve(x0))
            counts.append(len(traced))
        traced.clear()
        assert counts[0] > 0 and counts[1] == counts[0]
        # The arrays are the run's own: its times, and its horizon (the placeholder's is 1).
        np.testing.assert_array_equal(sols[1].ts, np.array([0.25, 1.5], np.float32))
        assert bool(jnp.all(jnp.isfinite(sols[1].r))) and not np.array_equal(
            sols[0].r[-1], sols[1].r[-1]
        )


def test_tolerances_are_exact_array_leaves():
    integrator = ODEIntegrator(rtol=1e-10, atol=np.float32(1e-12))
    # float64 whatever JAX's x64 setting: cast to the state's dtype in the solve, as a
    # Python float would be (bit-identical numbers: benchmarks/same_numbers.py).
    assert integrator.rtol.dtype == np.float64 and float(integrator.rtol) == 1e-10
    assert float(integrator.atol) == float(np.float32(1e-12))
    dynamic, _ = eqx.partition(integrator, eqx.is_array)
    assert float(dynamic.rtol) == 1e-10  # a leaf: a sweep over it never recompiles


@pytest.mark.parametrize(
    ("build", "needle"),
    [
        (
            lambda: NormalizedAttentionODE(Attention(1.0), saveat=SaveAt(1.0, (0.5, 1.5))),
            "saveat",
        ),
        (lambda: NormalizedAttentionODE(Attention(1.0), saveat=SaveAt(1.0, (-0.1,))), "saveat"),
        (lambda: NormalizedAttentionODE(Attention(1.0), MixLN(tau=-1.0)), "tau"),
        (lambda: NormalizedAttentionODE(Attention(1.0), NGPT(alpha=0.0)), "alpha"),
        (lambda: NormalizedAttentionODE(Attention(1.0), saveat=SaveAt(0.0)), "horizon"),
        (
            lambda: NormalizedAttentionODE(
                Attention(1.0), integrator=ODEIntegrator(adaptive=False)
            ),
            "dt0",
        ),
        (lambda: attndyn.scheme_from_name("layer-norm"), "scheme"),
        (lambda: ODEIntegrator(rtol="1e-6"), "rtol"),
        (lambda: ODEIntegrator(atol=[1e-8, 1e-9]), "atol"),
        (lambda: ODEIntegrator(rtol=0.0), "rtol"),
        (lambda: ODEIntegrator(atol=float("nan")), "atol"),
    ],
)
def test_bad_input_is_a_clear_error(build, needle):
    with pytest.raises(ParameterError, match=needle):
        build()


@pytest.mark.slow
def test_a_failed_solve_is_reported_as_non_finite_and_can_be_excluded():
    # Five steps cannot reach t = 1 at rtol 1e-8: diffrax's max_steps failure used to abort
    # the study with an EquinoxRuntimeError; it now gives NaN states, reported (or excluded)
    # like any non-finite trajectory.
    def model(beta, dim, n_tokens):
        del dim, n_tokens
        integrator = ad.ODEIntegrator(rtol=1e-8, atol=1e-10, max_steps=5)
        return ad.NormalizedAttentionODE(ad.Attention(beta), integrator=integrator)

    point = [dict(dim=3, n_tokens=3, beta=1.0)]
    with pytest.raises(ad.NonFiniteError, match=r"8 of 8 .*max_steps reached"):
        ad.estimate_probabilities(model, point, key=jax.random.key(0), n_trajectories=8)
    with pytest.warns(UserWarning, match="excluded from the probabilities"):
        ds = ad.estimate_probabilities(
            model, point, key=jax.random.key(0), n_trajectories=8, on_nonfinite="exclude"
        )
    assert int(ds["n_nonfinite"].values.max()) == 8
    # With the default budget the same point solves.
    solved = ad.NormalizedAttentionODE(ad.Attention(1.0)).solve(
        ad.uniform_sphere(key=jax.random.key(1), n_tokens=3, dim=3)
    )
    assert bool(jnp.all(jnp.isfinite(solved.theta)))
