"""``_core.linalg.matmul``: the same product in whichever form it picks."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attndyn._core import linalg


def _has_dot(f, *args) -> bool:
    return any(e.primitive.name == "dot_general" for e in jax.make_jaxpr(f)(*args).jaxpr.eqns)


@pytest.mark.default_case("32-16-32-False")
@pytest.mark.parametrize(
    ("m", "k", "n", "summed"),
    [
        (2, 4, 2, True),  # a small product
        (50, 4, 50, True),  # a short contraction (d = 4), however many tokens
        (50, 3, 50, True),
        (50, 5, 50, False),  # longer contractions of large products stay dots
        (32, 16, 32, False),
    ],
)
def test_matmul_is_the_product_in_either_form(m, k, n, summed):
    a = jax.random.normal(jax.random.key(0), (3, m, k))
    b = jax.random.normal(jax.random.key(1), (3, k, n))
    assert _has_dot(linalg.matmul, a, b) is not summed
    exact = np.einsum("bmk,bkn->bmn", np.asarray(a, np.float64), np.asarray(b, np.float64))
    got = np.asarray(jax.jit(linalg.matmul)(a, b), np.float64)
    # float32 sums of k products of N(0, 1) entries: error ≲ k·ε·Σ|a||b| ≤ k²·ε·max|a||b|.
    bound = k * k * np.finfo(np.float32).eps * np.max(np.abs(a)) * np.max(np.abs(b))
    assert np.max(np.abs(got - exact)) <= bound
    # Under vmap (how the models call it) the form is the one of a single product.
    assert _has_dot(jax.vmap(linalg.matmul), a, b) is not summed


def test_summed_form_keeps_full_precision_without_a_dot():
    # The summed form has no dot to ask for HIGHEST precision: it multiplies and adds
    # float32 elementwise, which every backend does in float32.
    a = jnp.ones((10, 4, 1), jnp.float32)
    b = jnp.full((10, 1, 4), 1 + 2**-20, jnp.float32)
    np.testing.assert_array_equal(linalg.matmul(a, b), np.full((10, 4, 4), 1 + 2**-20, np.float32))
