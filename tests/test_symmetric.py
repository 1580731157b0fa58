"""Symmetric orthogonal start: reduced ODEs (seed 004 Thm 4.1) against the full system."""

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attndyn
from attndyn import (
    NGPT,
    Attention,
    MixLN,
    NormalizedAttentionODE,
    ParameterError,
    PeriLN,
    PostLN,
    PreLN,
    SaveAt,
    SqrtScaling,
    SymmetricODE,
    symmetric_start,
)
from attndyn.theory import initial_slope, terminal_rate_theory

SCHEMES = [PostLN(), PreLN(), MixLN(tau=1.5), PeriLN(), NGPT(alpha=0.6), SqrtScaling()]
IDS = [s.name for s in SCHEMES]
#: The start as one program (eagerly, jnp.eye and the product compile four).
_start = jax.jit(symmetric_start, static_argnums=(0, 1, 2))


@eqx.filter_jit
def _velocity(model, theta, r, step):
    """dθ/dt at t = 0, one program (op by op, each op of the attention would compile)."""
    return model.vector_field(jnp.zeros(()), (theta, r), step)[0]


@pytest.mark.default_case("pre-ln")
@pytest.mark.parametrize("scheme", SCHEMES, ids=IDS)
def test_reduced_ode_matches_full_system(scheme):
    """γ(t), r(t) of the reduced ODE = every pairwise cosine and radius of the n-particle ODE."""
    n, d, beta, r0 = 5, 7, 1.5, 1.7
    ts = tuple(np.linspace(0.0, 12.0, 7))
    reduced = SymmetricODE(scheme, beta, n_tokens=n, r0=r0, saveat=SaveAt(12.0, ts)).solve()
    full = NormalizedAttentionODE(Attention(beta), scheme, saveat=SaveAt(12.0, ts)).solve(
        _start(n, d, r0)
    )
    theta = np.asarray(full.theta)  # the Gram matrices in NumPy: eager einsum compiles
    gram = np.einsum("sid,sjd->sij", theta, theta)
    off = ~np.eye(n, dtype=bool)
    # The symmetry survives: all off-diagonal cosines agree with the reduced γ.
    np.testing.assert_allclose(
        gram[:, off],
        np.repeat(np.asarray(reduced.gamma)[:, None], off.sum(), 1),
        atol=2e-5,
    )
    np.testing.assert_allclose(full.r, np.repeat(np.asarray(reduced.r)[:, None], n, 1), rtol=2e-5)
    assert float(np.asarray(reduced.gamma)[-1]) > 0.3  # the test horizon sees real motion


@pytest.mark.default_case()
@pytest.mark.parametrize("scheme", SCHEMES, ids=IDS)
@pytest.mark.parametrize(("beta", "n", "r0"), [(0.0, 2, 1.0), (1.0, 6, 2.5), (3.0, 16, 0.4)])
def test_initial_slope_closed_forms(scheme, beta, n, r0):
    """γ'(0) from the n-particle vector field equals Thm 4.1's closed form."""
    # Inputs and the slope's arithmetic in NumPy (float32): eager JAX ops compile.
    theta0 = np.asarray(_start(n, n, r0)) / np.float32(r0)
    model = NormalizedAttentionODE(Attention(beta), scheme)
    # The sphere schemes (and Mix-LN's Post-LN phase) run at r = 1; the others at r0.
    r = np.full((n,), r0 if isinstance(scheme, PreLN | PeriLN) else 1.0, np.float32)
    step = PostLN() if isinstance(scheme, MixLN) else scheme
    dtheta = np.asarray(_velocity(model, jnp.asarray(theta0), jnp.asarray(r), step))
    slope = 2 * float(np.sum(dtheta[0] * theta0[1]))  # d⟨θ_1, θ_2⟩/dt at t = 0
    assert slope == pytest.approx(initial_slope(scheme, beta=beta, n_tokens=n, r0=r0), rel=1e-5)


def test_initial_slope_values():
    # Post: 2/(e^β + n − 1); Peri: 2/(r0 √(e^{2β} + n − 1)); nGPT: 2α/√(e^{2β} + n − 1).
    assert initial_slope(PostLN(), beta=0.0, n_tokens=3) == pytest.approx(2 / 3)
    assert initial_slope(PreLN(), beta=0.0, n_tokens=3, r0=2.0) == pytest.approx(1 / 3)
    assert initial_slope(PeriLN(), beta=0.0, n_tokens=4, r0=2.0) == pytest.approx(0.5)
    assert initial_slope(NGPT(alpha=3.0), beta=0.0, n_tokens=4) == pytest.approx(3.0)
    assert initial_slope(MixLN(tau=0.0), beta=0.0, n_tokens=3, r0=2.0) == pytest.approx(1 / 3)
    assert initial_slope(MixLN(tau=0.1), beta=0.0, n_tokens=3, r0=2.0) == pytest.approx(2 / 3)


def test_reduced_slope_matches_closed_form():
    scheme, h = PeriLN(), 1e-3
    solution = SymmetricODE(scheme, 2.0, n_tokens=10, r0=1.5, saveat=SaveAt(h)).solve()
    gamma = np.asarray(solution.gamma)[-1]
    # γ(h)/h = γ'(0) + O(h): the second derivative is O(1) here.
    assert float(gamma) / h == pytest.approx(
        initial_slope(scheme, beta=2.0, n_tokens=10, r0=1.5), rel=5e-3
    )


def test_large_beta_does_not_overflow():
    sol = SymmetricODE(PostLN(), 200.0, n_tokens=8, saveat=SaveAt(10.0)).solve()
    assert np.all(np.isfinite(np.asarray(sol.log_gap)))


def test_theory_table():
    assert terminal_rate_theory(PostLN()).law == "exponential"
    assert terminal_rate_theory(PreLN()).value == 2.0
    assert terminal_rate_theory(SqrtScaling()).value == 4.0
    assert terminal_rate_theory(NGPT(alpha=0.5)).value == pytest.approx(1.0)
    with pytest.raises(ParameterError, match="alpha"):
        terminal_rate_theory(NGPT(alpha_schedule=lambda t: 1.0 + t))


@pytest.mark.slow
def test_ngpt_schedule_in_reduced_ode():
    """With α(t) = 2 the schedule gives the constant-α solution."""
    ts = (1.0, 3.0)
    const = SymmetricODE(NGPT(alpha=2.0), 1.0, n_tokens=4, saveat=SaveAt(3.0, ts)).solve()
    sched = SymmetricODE(
        NGPT(alpha_schedule=lambda t: 2.0 + 0.0 * t), 1.0, n_tokens=4, saveat=SaveAt(3.0, ts)
    ).solve()
    np.testing.assert_allclose(const.log_gap, sched.log_gap, rtol=1e-5)


def test_bad_input():
    with pytest.raises(ParameterError, match="n_tokens <= dim"):
        symmetric_start(5, 4)
    with pytest.raises(ParameterError, match="r0"):
        symmetric_start(2, 4, r0=0.0)
    with pytest.raises(ParameterError, match="r0"):
        SymmetricODE(PostLN(), 1.0, n_tokens=3, r0=-1.0)
    with pytest.raises(ParameterError, match="saveat"):
        SymmetricODE(PostLN(), 1.0, n_tokens=3, saveat=SaveAt(2.0, (3.0,)))
    with pytest.raises(ParameterError, match="r0"):
        initial_slope(PreLN(), beta=1.0, n_tokens=3, r0=0.0)
    assert math.isfinite(initial_slope(PreLN(), beta=1.0, n_tokens=3))
    # Compiled: op by op, the start compiles four programs.
    assert jax.jit(attndyn.symmetric_start, static_argnums=(0, 1))(2, 2).shape == (2, 2)


def test_a_scheme_without_closed_forms_is_refused_by_name():
    # The theory asks the scheme for its speed laws; a user's scheme that gives none (the
    # default) has no closed form, and each function says so instead of guessing.
    from attndyn.theory._symmetric import time_to_gap

    class Halved(attndyn.AbstractScheme):
        name = "halved"
        keeps_radius = False

        def layer(self, x, update, *, layer, depth):
            return self.norm(x + update(self.norm(x)) / 2)

        def speed(self, t, r, attn_norm):
            return 2.0 * jnp.ones_like(r)

    with pytest.raises(ParameterError, match="no closed-form slope for scheme 'halved'"):
        initial_slope(Halved(), beta=1.0, n_tokens=3)
    with pytest.raises(ParameterError, match="no terminal-rate theory for scheme 'halved'"):
        terminal_rate_theory(Halved())
    with pytest.raises(ParameterError, match="no reduced ODE for scheme 'halved'"):
        time_to_gap(Halved(), beta=1.0, n_tokens=3)
