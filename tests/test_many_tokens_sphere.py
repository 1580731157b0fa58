"""Many tokens on S² without pairs (attndyn._core.many_tokens above 2,048 tokens): the
interaction energy from spherical harmonics, the clusters from grid cells and the minimum
distance from a k-d tree, each against the pair route on uniform, clustered and antipodal
configurations."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attndyn._core import grid, many_tokens as mt


def _configuration(kind: str, n: int, seed: int = 0) -> np.ndarray:
    """Unit tokens in float64: uniform, seven tight clusters with a few lone tokens, two
    antipodal clusters, or a chain of clusters spaced near the joining distance."""
    rng = np.random.default_rng(seed)
    if kind == "uniform":
        x = rng.standard_normal((n, 3))
    elif kind == "clusters":
        centres = rng.standard_normal((7, 3))
        centres /= np.linalg.norm(centres, axis=1, keepdims=True)
        x = centres[rng.integers(0, 7, n)] + 0.01 * rng.standard_normal((n, 3))
        x[:5] = rng.standard_normal((5, 3))
    elif kind == "antipodal":
        pole = np.array([0.0, 0.6, 0.8])
        x = np.where(rng.random(n)[:, None] < 0.5, pole, -pole)
        x = x + 1e-4 * rng.standard_normal((n, 3))
    else:  # clusters of radius 0.004 every 0.043 rad along a great circle (tol 1e-3: 0.0447)
        phi = 0.043 * rng.integers(0, 30, n) + 0.004 * rng.standard_normal(n)
        x = np.stack([np.cos(phi), np.sin(phi), 0.002 * rng.standard_normal(n)], axis=1)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


KINDS = ("uniform", "clusters", "antipodal", "chain")


def _pair_energy_float64(x: np.ndarray, beta: float) -> float:
    """log Σ_ij e^{β⟨x_i, x_j⟩} by the pairs in float64 NumPy: the independent route."""
    g = beta * (x @ x.T)
    top = g.max()
    return float(top + np.log(np.exp(g - top).sum()))


@pytest.mark.parametrize(("dtype", "betas"), [("float32", (0.5, 16.0)), ("float64", (4.0, 64.0))])
def test_sphere_energy_by_harmonics_equals_the_pairs(dtype, betas):
    # Σ_ij e^{β⟨x_i, x_j⟩} = e^β Σ_ℓ w_ℓ Σ_m (Σ_j S_ℓm(x_j))²: every term ≥ 0 and the
    # tail below ε/8 relative, so log of it must equal a float64 pair sum to the rounding
    # of the coefficients: a few ε of the value in the dtype (log Σ ≈ β + 2 log N ≈ 12-76
    # here; float32's ulp there is ~1e-6-8e-6). The tolerance, 8 ε |value| + 4 ε, is
    # argued from that; the truncation alone, at one degree lower, misses it by far at
    # β = 16 and 64 (checked: the tail is then ~1e-4 relative).
    with jax.enable_x64(dtype == "float64"):
        eps = float(np.finfo(dtype).eps)
        for beta in betas:  # one compiled degree per β (a traced β compiles them all)
            energy = jax.jit(lambda t, beta=beta: mt._sphere_log_energy(t, beta, lambda: jnp.nan))
            for kind in KINDS[:3]:
                theta = jax.device_put(_configuration(kind, 400).astype(dtype))
                got = float(energy(theta))
                want = _pair_energy_float64(np.asarray(theta, np.float64), beta)
                assert abs(got - want) <= 8 * eps * abs(want) + 4 * eps, (kind, beta, got, want)


def _labels_sizes(theta: jax.Array, tol: float) -> np.ndarray:
    labels = np.asarray(_pair_labels(theta, jnp.asarray(tol, theta.dtype)))
    sizes = np.bincount(labels, minlength=len(labels))
    return np.sort(sizes[sizes > 0])


_pair_labels = jax.jit(lambda x, tol: mt.cluster_labels(x, tol, block=256))


@pytest.mark.parametrize("kind", KINDS)
def test_grid_clusters_equal_the_pair_route(kind):
    """The grid route's cluster sizes equal the label propagation over all pairs (N =
    1,500, float32), at tolerances whose joining distance is far above, near and far
    below the clusters' spacing: every stage of the grid route (boxes, witnesses, all pairs
    of a cell pair) decides some pairs of cells in these."""
    theta = mt.normalize(jax.device_put(_configuration(kind, 1500).astype(np.float32)))
    host = np.asarray(theta)
    for tol in (1e-5, 1e-3, 3e-2):
        sizes = grid.cluster_sizes_host(host, np.float32(tol))
        assert sizes.sum() == 1500
        np.testing.assert_array_equal(np.sort(sizes[sizes > 0]), _labels_sizes(theta, tol))


def test_grid_clusters_and_distance_run_inside_jit_and_vmap():
    """Above GRID_TOKENS the public functions take the grid route, also batched (the
    callback runs one configuration at a time) and with a traced tolerance; the counts
    equal the pair route's on each configuration."""
    n = mt.GRID_TOKENS + 100
    xs = np.stack([_configuration(k, n, seed=1) for k in ("clusters", "antipodal")])
    xs = jax.device_put(xs.astype(np.float32))

    @jax.jit
    def observe(x, tol):
        found = mt.clusters(x, tol)
        return found.n_clusters, found.largest, mt.min_distance(x)

    counts, largest, distance = jax.vmap(observe, in_axes=(0, None))(xs, jnp.float32(1e-3))
    for i in range(2):
        sizes = _labels_sizes(mt.normalize(xs[i]), 1e-3)
        assert int(counts[i]) == len(sizes) and int(largest[i]) == sizes[-1]
        pairs = float(_pair_distance(xs[i]))
        assert float(distance[i]) == pytest.approx(pairs, rel=4 * float(np.finfo(np.float32).eps))


_pair_distance = jax.jit(lambda x: mt.min_distance(x, block=512))


@pytest.mark.parametrize("kind", ["uniform", "clusters", "duplicates"])
def test_grid_minimum_distance_equals_the_pair_route(kind):
    # The k-d tree finds each token's nearest in float64; the distance is then computed
    # as the pair route computes it, so on the same directions it equals the pair route's
    # arithmetic over all pairs ((g_x² + g_y²) + g_z² in float32, here in NumPy) to the
    # rounding of one squared distance, and 0 exactly where two tokens coincide. Against
    # the jitted pair route itself the directions differ by the normalisation's rounding
    # (jit and eager normalise to different ulps): an absolute few ε.
    eps = float(np.finfo(np.float32).eps)
    x = _configuration("clusters" if kind == "duplicates" else kind, 1500, seed=2)
    if kind == "duplicates":
        x[7] = x[900]
    tokens = jax.device_put(x.astype(np.float32))
    theta = np.asarray(mt.normalize(tokens))
    got = float(grid.min_distance_host(theta))
    gap = theta[:, None, :] - theta[None, :, :]
    squared = (gap[..., 0] * gap[..., 0] + gap[..., 1] * gap[..., 1]) + gap[..., 2] * gap[..., 2]
    np.fill_diagonal(squared, np.inf)
    assert got == pytest.approx(float(np.sqrt(squared.min())), rel=2 * eps)
    assert got == pytest.approx(float(_pair_distance(tokens)), abs=4 * eps)
    if kind == "duplicates":
        assert got == 0.0


def test_grid_routes_report_non_finite_configurations():
    x = np.asarray(_configuration("uniform", 50), np.float32)
    x[3, 1] = np.nan
    assert np.all(grid.cluster_sizes_host(x, np.float32(1e-3)) == 0)
    assert np.isnan(grid.min_distance_host(x))
