"""A real-valued layer step η (t = nη), horizons off the layer grid, and the schemes that had
no direction where A_i = 0 (Peri-LN, nGPT)."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attndyn as ad


def _start() -> np.ndarray:
    """Some fixed start, drawn in NumPy (float32): at import, in every xdist worker, the
    JAX sampler would compile a random program."""
    y = np.random.default_rng(0).standard_normal((4, 5))
    return (y / np.linalg.norm(y, axis=-1, keepdims=True)).astype(np.float32)


X = jnp.asarray(_start())


@pytest.mark.slow
def test_step_one_over_l_is_depth_l():
    saveat = ad.SaveAt(1.0, (0.5, 1.0))
    by_depth = ad.DiscreteTransformer(ad.Attention(1.0), depth=10, saveat=saveat)
    by_step = ad.DiscreteTransformer(ad.Attention(1.0), step=0.1, saveat=saveat)
    np.testing.assert_allclose(by_step.save_times, by_depth.save_times)
    key = jax.random.key(1)
    np.testing.assert_array_equal(by_step.trajectory(X, key=key), by_depth.trajectory(X, key=key))


@jax.jit
def _euler_by_hand(x, eta):
    """Three steps normalize(x + η A(x)) as one program (op by op, each op of the attention
    and of its sums would compile)."""
    for _ in range(3):
        x = ad.normalize(x + eta * ad.Attention(1.3)(x))
    return x


def test_a_real_step_is_an_euler_step_of_size_eta():
    """Deterministic Post-LN at step η: normalize(x + η A(x)), t = nη, written out."""
    eta = 0.07 * np.exp(-0.5)  # e.g. the peers' 0.1·e^{−β}-style steps
    model = ad.DiscreteTransformer(
        ad.Attention(1.3), ad.DeterministicValues(), step=eta, saveat=ad.SaveAt(3 * eta)
    )
    assert model.n_layers == 3 and model.save_times[-1] == pytest.approx(3 * eta)
    x = _euler_by_hand(X, eta)
    out = np.asarray(model.trajectory(X, key=jax.random.key(0)))[-1]
    np.testing.assert_allclose(out, x, atol=2e-6)


def test_horizons_off_the_grid_warn_with_the_layer_count_or_are_refused():
    with pytest.warns(UserWarning, match="running 3 layers"):
        model = ad.DiscreteTransformer(ad.Attention(1.0), depth=10, saveat=ad.SaveAt(0.34))
    assert model.save_times[-1] == pytest.approx(0.3)
    with pytest.raises(ad.ParameterError, match="0 layers"):
        ad.DiscreteTransformer(ad.Attention(1.0), depth=10, saveat=ad.SaveAt(0.05))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a horizon on the grid says nothing
        ad.DiscreteTransformer(ad.Attention(1.0), step=0.1, saveat=ad.SaveAt(0.7))
    with pytest.raises(ad.ParameterError, match="not both"):
        ad.DiscreteTransformer(ad.Attention(1.0), depth=10, step=0.1)
    with pytest.raises(ad.ParameterError, match="step"):
        ad.DiscreteTransformer(ad.Attention(1.0), step=-0.1)


def test_step_through_phase_model_and_the_reduced_route():
    model = ad.studies.phase_model(beta=1.0, dim=5, n_tokens=3, step=0.05, horizon=1.0)
    assert model.save_times[-1] == pytest.approx(1.0)
    assert ad.select_route(model, n_tokens=3, dim=5).name == "reduced"


@pytest.mark.slow
def test_the_reduced_route_runs_with_a_real_step():
    model = ad.studies.phase_model(beta=1.0, dim=5, n_tokens=3, step=0.05, horizon=1.0)
    reduced = ad.select_route(model, n_tokens=3, dim=5).model
    keys = jax.random.split(jax.random.key(2), 3)
    x0 = jax.vmap(lambda k: ad.uniform_sphere(key=k, n_tokens=3, dim=5))(keys)
    assert bool(jnp.all(jnp.isfinite(reduced.simulate(x0, keys))))


# A_i = 0 at β = 0. Made in NumPy: jnp.array of a list compiles a conversion at import.
ANTIPODAL = np.array([[1.0, 0.0, 0.0], [-1.0, 0.0, 0.0]], np.float32)


@pytest.mark.default_case("ngpt")
@pytest.mark.parametrize("scheme", [ad.PeriLN(), ad.NGPT(alpha=0.5)], ids=["peri-ln", "ngpt"])
def test_no_move_where_the_attention_output_vanishes(scheme):
    model = ad.DiscreteTransformer(
        ad.Attention(0.0), ad.DeterministicValues(), scheme, depth=10, saveat=ad.SaveAt(1.0)
    )
    # Inputs made and outputs checked in NumPy: eager JAX ops compile one by one.
    antipodal = jnp.asarray(ANTIPODAL)
    saves = np.asarray(model.trajectory(antipodal, key=jax.random.key(0)))
    np.testing.assert_array_equal(saves[-1], ANTIPODAL)
    ode = ad.NormalizedAttentionODE(ad.Attention(0.0), scheme, saveat=ad.SaveAt(1.0))
    np.testing.assert_array_equal(np.asarray(ode.solve(antipodal).x)[-1], ANTIPODAL)
    # Laplacian attention on two coincident tokens: A_i = ½x + ½x − x = 0 exactly. (With
    # weights that round, A_i is a rounding error and the map still takes its direction.)
    same = np.tile(np.array([[1.0, 2.0, 2.0]], np.float32) / 3, (2, 1))
    lap = ad.DiscreteTransformer(
        ad.Attention(2.0, laplacian=True), ad.DeterministicValues(), scheme, depth=10,
        saveat=ad.SaveAt(1.0),
    )  # fmt: skip
    out = np.asarray(lap.trajectory(jnp.asarray(same), key=jax.random.key(0)))[-1]
    np.testing.assert_allclose(out, same, atol=1e-7)
    # Elsewhere the map is unchanged: a finite start moves.
    part = _start()[:2, :3]
    moved = model.trajectory(jnp.asarray(part / np.linalg.norm(part, axis=-1, keepdims=True)),
                             key=jax.random.key(0))  # fmt: skip
    assert bool(np.all(np.isfinite(np.asarray(moved))))
