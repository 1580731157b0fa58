import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attndyn as ad
from tests.helpers import sphere_points


def _run(model, n_tokens=3, dim=4, seed=0):
    """The saves, as a NumPy array: the tests' checks run in NumPy (eager JAX ops compile)."""
    return np.asarray(
        model.trajectory(sphere_points(seed, n_tokens, dim), key=jax.random.key(seed + 1))
    )


@pytest.mark.default_case("unnormalized-uniform")
@pytest.mark.parametrize("distribution", ad.DISTRIBUTIONS)
@pytest.mark.parametrize("kind", ["softmax", "unnormalized"])
def test_post_ln_tokens_stay_on_sphere(distribution, kind):
    model = ad.DiscreteTransformer(
        ad.Attention(2.0, kind=kind),
        ad.MatrixValues(1.0, distribution=distribution),
        depth=10,
        saveat=ad.SaveAt(5.0, (0.0, 1.0, 2.5, 5.0)),
    )
    saves = _run(model)
    assert saves.shape == (4, 3, 4)
    np.testing.assert_allclose(np.linalg.norm(saves, axis=-1), 1.0, atol=1e-5)


def test_scalar_noise_tokens_stay_on_sphere():
    model = ad.DiscreteTransformer(
        ad.Attention(1.0), ad.ScalarValues(2.0), depth=10, saveat=ad.SaveAt(5.0)
    )
    np.testing.assert_allclose(np.linalg.norm(_run(model), axis=-1), 1.0, atol=1e-5)


def test_save_times_and_first_save_is_start():
    model = ad.DiscreteTransformer(ad.Attention(1.0), depth=10, saveat=ad.SaveAt(2.0, (0.0, 2.0)))
    np.testing.assert_allclose(model.save_times, [0.0, 2.0])
    x0 = sphere_points(0, 2, 3)
    saves = np.asarray(model.trajectory(x0, key=jax.random.key(1)))
    np.testing.assert_array_equal(saves[0], np.asarray(x0))


@pytest.mark.slow
def test_eps_zero_two_tokens_collapse_to_one_cluster():
    # ε = 0 is the deterministic Post-LN flow: every non-antipodal start clusters.
    model = ad.DiscreteTransformer(
        ad.Attention(1.0), ad.ScalarValues(0.0), depth=10, saveat=ad.SaveAt(30.0)
    )
    keys = jax.random.split(jax.random.key(0), 200)
    x0 = jax.vmap(lambda k: ad.uniform_sphere(key=k, n_tokens=2, dim=3))(keys)
    final = jax.vmap(lambda x, k: model.trajectory(x, key=k)[-1])(x0, keys)
    classes = jax.vmap(ad.cluster_classes)(final)
    assert bool(jnp.all(classes[:, 0]))


def test_layer_noise_is_shared_by_tokens_and_fresh_each_layer():
    # With one layer of pure noise, V is common: two identical tokens stay identical.
    model = ad.DiscreteTransformer(
        ad.Attention(1.0), ad.MatrixValues(1.0), depth=4, saveat=ad.SaveAt(1.0)
    )
    x = jnp.asarray(np.tile(np.asarray(sphere_points(0, 1, 4)), (2, 1)))
    out = np.asarray(model.trajectory(x, key=jax.random.key(1)))[-1]
    np.testing.assert_allclose(out[0], out[1], atol=1e-6)
    # Layer keys differ, so consecutive layers draw different V.
    layer = jax.jit(lambda n: model.layer(x, n, key=jax.random.key(1)))
    a, b = layer(jnp.asarray(0)), layer(jnp.asarray(1))
    assert not np.allclose(a, b)


def test_trajectory_is_independent_of_batching():
    model = ad.DiscreteTransformer(ad.Attention(3.0), depth=10, saveat=ad.SaveAt(2.0))
    keys = jax.random.split(jax.random.key(0), 8)
    x0 = sphere_points(0, 8, 2, 4)
    batched = jax.jit(jax.vmap(lambda x, k: model.trajectory(x, key=k)))(x0, keys)
    # The fifth start and key are picked inside the program: eager indexing compiles.
    single = jax.jit(lambda x, k: model.trajectory(x[5], key=k[5]))(x0, keys)
    np.testing.assert_allclose(np.asarray(batched)[5], single, rtol=1e-5, atol=1e-6)


def test_deterministic_post_ln_is_euler_of_the_two_token_ode():
    # Two tokens, V = I/L: z' = 2 e^{βz}(1 − z)(1 + z)/(e^β + e^{βz}) (004 Thm 4.1 with
    # n = 2, written for a general start); the Euler error is O(1/L).
    beta, z0 = 1.0, 0.2
    x0 = jnp.asarray(np.array([[1.0, 0.0], [z0, np.sqrt(1 - z0**2)]], np.float32))
    from scipy.integrate import solve_ivp

    def rhs(t, z):
        return 2 * np.exp(beta * z) * (1 - z) * (1 + z) / (np.exp(beta) + np.exp(beta * z))

    exact = solve_ivp(rhs, (0, 1), [z0], rtol=1e-10, atol=1e-12).y[0, -1]
    errors = []
    for depth in (50, 200):
        model = ad.DiscreteTransformer(
            ad.Attention(beta), ad.DeterministicValues(), depth=depth, saveat=ad.SaveAt(1.0)
        )
        # The overlap in NumPy: ad.overlaps op by op would compile each op.
        xt = np.asarray(model.trajectory(x0, key=jax.random.key(0)))[-1]
        theta = xt / np.linalg.norm(xt, axis=-1, keepdims=True)
        errors.append(abs(float(theta[0] @ theta[1]) - exact))
    assert errors[1] < errors[0] / 3  # first order: 4× smaller for 4× depth


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"depth": 0}, "depth"), ({"horizon": 0.0}, "horizon"), ({"saveat": (3.0,)}, "saveat")],
)
def test_bad_model_input(kwargs, match):
    with pytest.raises(ad.ParameterError, match=match):
        args = {"depth": 10, "horizon": 1.0, "saveat": None, **kwargs}
        ad.DiscreteTransformer(
            ad.Attention(1.0),
            depth=args["depth"],
            saveat=ad.SaveAt(args["horizon"], args["saveat"]),
        )
