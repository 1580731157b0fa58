"""The six layer maps (seed 004 Table 1; spec §2) and their speed factors (Table 2)."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attndyn
from attndyn import (
    NGPT,
    SCHEME_NAMES,
    Attention,
    DeterministicValues,
    DiscreteTransformer,
    MatrixValues,
    MixLN,
    ParameterError,
    PeriLN,
    PostLN,
    PreLN,
    SaveAt,
    ScalarValues,
    SqrtScaling,
    scheme_from_name,
)

SCHEMES = [PostLN(), PreLN(), MixLN(tau=0.5), PeriLN(), NGPT(alpha=0.8), SqrtScaling()]
IDS = [s.name for s in SCHEMES]


def _start():
    """Some fixed start off the sphere (radius 1.4), drawn in NumPy: at import, in every
    xdist worker, a JAX draw would compile a random program."""
    y = np.random.default_rng(0).standard_normal((5, 4))
    return jnp.asarray((1.4 * y / np.linalg.norm(y, axis=-1, keepdims=True)).astype(np.float32))


X = _start()
ATTN = Attention(1.2)


def attention_update(depth):
    return lambda z: ATTN(z) / depth


def test_names_round_trip():
    for name in SCHEME_NAMES:
        assert scheme_from_name(name).name == name
    assert scheme_from_name("mix-ln", tau=0.3).tau == pytest.approx(0.3)  # type: ignore[attr-defined]
    with pytest.raises(ParameterError, match="scheme"):
        scheme_from_name("rms")
    with pytest.raises(ParameterError, match="tau"):
        scheme_from_name("mix-ln", tau=-0.1)
    with pytest.raises(ParameterError, match="alpha"):
        scheme_from_name("ngpt", alpha=0.0)


@pytest.mark.default_case("deterministic-sqrt-scaling", "matrix-pre-ln")
@pytest.mark.parametrize("scheme", SCHEMES, ids=IDS)
@pytest.mark.parametrize(
    "values",
    [DeterministicValues(), MatrixValues(1.0), ScalarValues(0.5)],
    ids=["deterministic", "matrix", "scalar"],
)
def test_every_scheme_runs_with_every_value_kind(scheme, values):
    model = DiscreteTransformer(ATTN, values, scheme, depth=10, saveat=SaveAt(1.0, (0.5, 1.0)))
    out = eqx.filter_jit(model.trajectory)(X, key=jax.random.key(1))
    assert out.shape == (2, 5, 4)
    assert np.all(np.isfinite(out))
    norms = np.linalg.norm(out, axis=-1)
    if not scheme.keeps_radius:
        np.testing.assert_allclose(norms, 1.0, atol=1e-5)


def test_layer_maps_do_what_the_table_says():
    depth = 8
    update = attention_update(depth)
    theta = attndyn.normalize(X)
    a = ATTN(theta)
    n = jnp.asarray(3.0)
    # Post-LN: normalize(θ + A/L).
    np.testing.assert_allclose(
        PostLN().layer(X, update, layer=n, depth=depth),
        attndyn.normalize(theta + a / depth),
        atol=1e-6,
    )
    # Pre-LN: x + A(Θ)/L, so r grows by ⟨θ, A⟩/L to first order.
    np.testing.assert_allclose(PreLN().layer(X, update, layer=n, depth=depth), X + a / depth)
    # Peri-LN: unit-length residual steps of size 1/L.
    step = PeriLN().layer(X, update, layer=n, depth=depth) - X
    np.testing.assert_allclose(np.linalg.norm(step, axis=-1), 1 / depth, rtol=1e-5)
    # nGPT with α = L jumps straight to the normalised attention output.
    np.testing.assert_allclose(
        NGPT(alpha=float(depth)).layer(X, update, layer=n, depth=depth),
        attndyn.normalize(a),
        atol=1e-6,
    )
    # sqrt-scaling at t = n/L divides the update by √(t + 1).
    np.testing.assert_allclose(
        SqrtScaling().layer(X, update, layer=n, depth=depth),
        attndyn.normalize(theta + a / depth / np.sqrt(3 / depth + 1)),
        atol=1e-6,
    )


def test_mix_ln_switches_at_ceil_tau_l():
    depth, mix = 10, MixLN(tau=0.25)  # ⌈τL⌉ = 3: layers 0, 1, 2 are Post-LN
    update = attention_update(depth)
    for n in range(6):
        out = mix.layer(X, update, layer=jnp.asarray(float(n)), depth=depth)
        ref = (PostLN() if n < 3 else PreLN()).layer(
            X, update, layer=jnp.asarray(float(n)), depth=depth
        )
        np.testing.assert_allclose(out, ref, atol=1e-6)


@pytest.mark.parametrize("scheme", SCHEMES, ids=IDS)
def test_speed_factors_are_the_layer_maps_velocity(scheme):
    """(layer(x) − x)·L → (r θ)' of the ODE as L → ∞ (Table 1 ↔ Table 2), at t = 0.7."""
    theta, r = attndyn.normalize(X), jnp.linalg.norm(X, axis=-1)
    if not scheme.keeps_radius or (isinstance(scheme, MixLN) and 0.7 < scheme.tau):
        r = jnp.ones_like(r)
    x = r[:, None] * theta
    t = jnp.asarray(0.7)
    ode = attndyn.NormalizedAttentionODE(ATTN, scheme)
    dtheta, dr = ode.vector_field(t, (theta, r), scheme)
    velocity = dr[:, None] * theta + r[:, None] * dtheta
    depth = 4096
    n = jnp.asarray(0.7 * depth)
    discrete = (scheme.layer(x, attention_update(depth), layer=n, depth=depth) - x) * depth
    np.testing.assert_allclose(discrete, velocity, atol=5e-3)


# Built in NumPy: jnp.linspace and jnp.full at import would compile in every xdist worker.
AFFINE = attndyn.LayerNorm(
    gain=jnp.asarray(np.linspace(0.5, 1.5, 4, dtype=np.float32)),
    bias=jnp.asarray(np.full(4, 0.1, np.float32)),
)


@pytest.mark.parametrize("scheme", [*SCHEMES, PostLN(norm=AFFINE), NGPT(norm=AFFINE)], ids=str)
def test_a_carried_state_takes_the_same_first_layer_bit_for_bit(scheme):
    # The layer loop carries enter(x0) and applies step: the first layer must be the
    # scheme's map itself, exactly, from a start off the sphere.
    update = attention_update(10)
    n = jnp.asarray(3.0)
    direct = scheme.layer(X, update, layer=n, depth=10)
    carried = scheme.step(scheme.enter(X), update, layer=n, depth=10)
    np.testing.assert_array_equal(np.asarray(carried), np.asarray(direct))
    # Only the schemes that start every layer by normalising, with an idempotent norm,
    # carry directions; a gain or bias makes the norm's output something it moves.
    carries = scheme.name in ("post-ln", "ngpt", "sqrt-scaling") and not scheme.norm.affine
    assert scheme.carries_directions == carries
    if not carries:
        np.testing.assert_array_equal(np.asarray(scheme.enter(X)), np.asarray(X))


@pytest.mark.default_case("PeriLN()")
@pytest.mark.parametrize("scheme", [*SCHEMES, PostLN(norm=AFFINE)], ids=str)
def test_the_layer_loop_is_the_scheme_map_applied_layer_by_layer(scheme):
    # trajectory() skips the first norm of rows that are already directions: the same map,
    # rounded once less per layer, so after 30 layers it stays within float32 rounding of
    # layer() applied layer by layer (which is not bit-identical to the compiled loop for
    # any scheme: XLA fuses the loop differently). A start off the sphere is saved as given
    # at t = 0, not as the loop's directions.
    model = DiscreteTransformer(
        ATTN, MatrixValues(0.7), scheme=scheme, depth=10, saveat=SaveAt(3.0, ts=(0.0, 3.0))
    )
    key = jax.random.key(4)
    saves = np.asarray(model.trajectory(X, key=key))
    np.testing.assert_array_equal(saves[0], np.asarray(X))
    # One compiled layer (op by op, each of its dozens of ops would compile), still a
    # separate program from the loop's.
    layer = eqx.filter_jit(model.layer)
    x = X
    for n in range(30):
        x = layer(x, jnp.asarray(n), key=key)
    np.testing.assert_allclose(saves[1], np.asarray(x), rtol=2e-5, atol=2e-5)


def _law_at(scheme, t):
    """The speed law of ``scheme`` in force at time ``t`` (the last stretch begun by t)."""
    laws = scheme.speed_laws()
    return [law for start, law in laws if start <= t][-1]


@pytest.mark.parametrize("scheme", [*SCHEMES, MixLN(tau=0.0)], ids=[*IDS, "mix-ln-tau0"])
def test_speed_laws_describe_the_speed_factors(scheme):
    """The closed-form description the theory reads (s = √(t+1)^a r^b |A|^c / α, and
    dr/dt = r⟨θ, A⟩/s when the radius grows) gives the factors the ODEs compute, on both
    sides of Mix-LN's switch."""
    rng = np.random.default_rng(3)
    r = rng.uniform(0.5, 3.0, 7)
    attn_norm = rng.uniform(0.1, 2.0, 7)
    radial = rng.uniform(-1.0, 1.0, 7) * attn_norm
    laws = scheme.speed_laws()
    assert laws[0][0] == 0.0 and [t for t, _ in laws] == sorted(t for t, _ in laws)
    for t in (0.0, 0.3, 0.5, 0.7, 4.0):
        law = _law_at(scheme, t)
        s = (
            (np.sqrt(t + 1.0) if law.sqrt_time else 1.0)
            * (r if law.radius else 1.0)
            * (attn_norm if law.attention else 1.0)
            / law.alpha
        )
        rho = r * radial / s if law.radius else np.zeros_like(r)
        args = (jnp.asarray(t, jnp.float32), jnp.asarray(r, jnp.float32))
        got_s = scheme.speed(*args, jnp.asarray(attn_norm, jnp.float32))
        got_rho = scheme.radial_rate(
            *args, jnp.asarray(radial, jnp.float32), jnp.asarray(attn_norm, jnp.float32)
        )
        np.testing.assert_allclose(got_s, s, rtol=1e-6)
        np.testing.assert_allclose(got_rho, rho, rtol=1e-6, atol=1e-7)


def test_what_a_scheme_says_about_itself():
    # The numbers a summary shows, the switch read as a fraction of a stack, and an α(t)
    # that the closed forms cannot take.
    assert PostLN().parameters == {} and NGPT(alpha=0.5).parameters == {"alpha": 0.5}
    assert MixLN(tau=0.5).parameters == {"tau": 0.5}
    assert float(MixLN(tau=0.25).scale_switch(8).tau) == 2.0  # type: ignore[attr-defined]
    scheme = SqrtScaling()
    assert scheme.scale_switch(8) is scheme
    ((_, law),) = NGPT(alpha_schedule=lambda t: 2.0 + t).speed_laws()
    assert law.alpha == 2.0 and not law.constant
    assert [law.post_ln_map for law in SCHEMES] == [True] + [False] * 5
