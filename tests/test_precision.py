"""Full float32 arithmetic on every backend: no TF32 dots.

Found by running the suite on an H100 (benchmarks/README.md, "GPU"), where JAX's default
precision rounds float32 dot operands to TF32. CI has no GPU, so these tests check the
programs: every dot asks for ``Precision.HIGHEST``.
"""

import diffrax
import jax
import numpy as np
import pytest

import attndyn as ad
from attndyn._core.linalg import lq
from attndyn._estimate.runner import chunk_statistics

HIGHEST = (jax.lax.Precision.HIGHEST, jax.lax.Precision.HIGHEST)

# The jaxprs are made from abstract keys and NumPy-made arrays: eagerly, making a key, a
# split or jnp.arange each compiles a program.
KEY = jax.eval_shape(lambda: jax.random.key(0))


def _dot_precisions(jaxpr) -> list:
    """The precision of every dot_general in a jaxpr and all of its sub-jaxprs."""
    found = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "dot_general":
            found.append(eqn.params["precision"])
        for value in eqn.params.values():
            for sub in value if isinstance(value, list | tuple) else [value]:
                if hasattr(sub, "eqns"):
                    found += _dot_precisions(sub)
                elif hasattr(sub, "jaxpr") and hasattr(sub.jaxpr, "eqns"):
                    found += _dot_precisions(sub.jaxpr)
    return found


MODELS = {
    # N·d·N > SMALL_PRODUCT: the attention and value products are dots.
    "discrete": (ad.DiscreteTransformer(ad.Attention(1.0), ad.MatrixValues(1.0), depth=4), 8, 16),
    "ode": (ad.NormalizedAttentionODE(ad.Attention(1.0), saveat=ad.SaveAt(0.5)), 8, 16),
    # diffrax's stochastic Runge–Kutta combines its stages with its own dots.
    "sde": (
        ad.TransformerSDE(
            ad.Attention(1.0),
            saveat=ad.SaveAt(0.2),
            integrator=ad.SDEIntegrator(diffrax.SPaRK(), dt=0.1),
        ),
        8,
        16,
    ),
}


@pytest.mark.parametrize("name", list(MODELS))
def test_every_dot_of_a_study_asks_for_full_precision(name):
    model, n_tokens, dim = MODELS[name]
    indices, n_total, tol, radius = jax.device_put(
        (np.arange(4, dtype=np.int32), np.int32(4), np.float32(1e-3), np.float32(1.0))
    )

    def tile(key):
        return chunk_statistics(model, key, indices, n_total, tol, radius, n_tokens, dim)

    precisions = _dot_precisions(jax.make_jaxpr(tile)(KEY).jaxpr)
    assert precisions, "the study's program has no dot: the model no longer tests anything"
    assert all(p == HIGHEST for p in precisions), precisions


def test_a_model_simulated_directly_asks_for_full_precision():
    # Outside the estimator (a user's own vmap) attndyn's products still ask for HIGHEST.
    model, n_tokens, dim = MODELS["discrete"]
    x0 = np.full((2, n_tokens, dim), 1 / np.sqrt(dim), np.float32)
    keys = jax.eval_shape(lambda: jax.random.split(jax.random.key(0), 2))
    precisions = _dot_precisions(jax.make_jaxpr(model.simulate)(x0, keys).jaxpr)
    assert precisions and all(p == HIGHEST for p in precisions), precisions


def test_lq_of_a_row_a_hair_off_the_span_stays_finite():
    # Row 2 is row 0 plus 1e-20: its residual after the first reflection is ~1e-20.
    rng = np.random.default_rng(4)
    base = rng.standard_normal(7)
    base /= np.linalg.norm(base)
    rows = np.stack([base, rng.standard_normal(7), base + 1e-20 * rng.standard_normal(7)])
    c = np.asarray(jax.jit(lq)(rows.astype(np.float32)))
    assert np.all(np.isfinite(c))
    np.testing.assert_allclose(c[2], c[0], atol=1e-6)  # the same direction as row 0


# One program per shape: eagerly each of its operations compiled.
_merged = jax.jit(ad.numerically_merged)


def _tokens_one_ulp_apart(sign: float) -> np.ndarray:
    rng = np.random.default_rng(5)
    theta = rng.standard_normal(5).astype(np.float32)
    theta /= np.linalg.norm(theta).astype(np.float32)
    other = sign * theta.copy()
    other[2] = np.nextafter(other[2], np.float32(np.inf))  # one unit in the last place
    return np.stack([theta, other, rng.standard_normal(5).astype(np.float32)])


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_tokens_one_ulp_apart_count_as_merged(sign):
    # An H100 left two merged tokens one ulp apart in a coordinate (1 − z = 0 exactly):
    # exact equality of directions missed them, so a float32 merge went unreported.
    x = _tokens_one_ulp_apart(sign)
    assert bool(_merged(x))
    assert not bool(_merged(x[[0, 2]]))


@pytest.mark.default_case("40")
@pytest.mark.parametrize("block_elements", [1, 40, 1 << 18])
def test_merges_are_found_in_blocks_of_rows_as_at_once(block_elements, monkeypatch):
    # Large N × d compare blocks of rows (all at once needed N²d numbers: 6.9 GB at
    # N = d = 1,500): the same pairs are found whatever the block, with a merged pair
    # in the last rows, in the first, or none.
    from attndyn._core import observables

    monkeypatch.setattr(observables, "MERGE_BLOCK_ELEMENTS", block_elements)
    monkeypatch.setattr(observables, "SMALL_AXIS", 0)  # d ≤ 8 compares by coordinates
    rng = np.random.default_rng(11)
    x = rng.standard_normal((7, 5)).astype(np.float32)
    last, first = x.copy(), x.copy()
    last[6] = -last[5]
    first[3] = first[0]
    # One program for the three (a fresh function: traced with the patched constants).
    merged = jax.jit(lambda x: observables.numerically_merged(x))
    for n_tokens, expected in ((x, False), (last, True), (first, True)):
        assert bool(merged(n_tokens)) is expected


def test_frame_coordinates_with_a_tiny_gap_are_not_merged():
    # The reduced routes carry a gap in its own coordinate (sin φ against 0): resolved, not
    # merged, however small, as long as it is a normal float.
    for gap in (1e-7, 1e-20, 1e-30):
        c = np.asarray([[1.0, 0.0], [np.sqrt(1 - gap**2), gap]], np.float32)
        assert not bool(_merged(c)), gap
