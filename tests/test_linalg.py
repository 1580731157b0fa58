"""``_core.linalg.matmul``: the same product in whichever form it picks."""

import jax
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
    # Any N(0, 1) entries: drawn in NumPy (JAX's sampler compiles a program per shape).
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, m, k)).astype(np.float32)
    b = rng.standard_normal((3, k, n)).astype(np.float32)
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
    # One program (eagerly each operation of the summed form compiles).
    a = np.ones((10, 4, 1), np.float32)
    b = np.full((10, 1, 4), 1 + 2**-20, np.float32)
    got = jax.jit(linalg.matmul)(a, b)
    np.testing.assert_array_equal(got, np.full((10, 4, 4), 1 + 2**-20, np.float32))
