"""Centred LayerNorm (spec §0): the geometry, every scheme, and the reduction to d − 1.

With U a d × (d − 1) orthonormal basis of the mean-zero hyperplane, centred tokens are
θ = U c with c on S^{d−2}; the LayerNorm model in d dimensions must be the RMS model in
d − 1 dimensions on c: exactly for deterministic and scalar values, in law for Gaussian
value matrices (two-token Monte Carlo against the exact curve of d − 1 dimensions).
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.linalg import null_space

import attndyn as ad
from attndyn._models.reduced.route import AbstractFrameRoute
from tests.helpers import binomial_se, sphere_rows

SCHEMES = ["post-ln", "pre-ln", "mix-ln", "peri-ln", "ngpt", "sqrt-scaling"]
#: The default run checks a sphere scheme, a radius scheme and nGPT; -m slow checks all six.
FAST = ("post-ln", "pre-ln", "ngpt")


def _schemes():
    return [n if n in FAST else pytest.param(n, marks=pytest.mark.slow) for n in SCHEMES]


def _basis(dim: int) -> np.ndarray:
    """U: orthonormal columns spanning {y : Σ y_k = 0}."""
    return null_space(np.ones((1, dim)))


@jax.jit
def _norms(y, gain, bias, flat):
    """The norms the test below checks, as one program (op by op, each op of the norms and
    their unrolled sums would compile)."""
    return {
        "layernorm": ad.LayerNorm()(y),
        "moved": ad.LayerNorm()(2.5 * y - 7.0),
        "affine": ad.LayerNorm(gain, bias)(y),
        "rms": ad.RMSNorm()(y),
        "normalize": ad.normalize(y),
        "safe": ad.LayerNorm().safe(flat),
    }


def test_layernorm_centres_and_normalises():
    # Inputs made and results checked in NumPy: eager JAX ops compile one by one.
    y = (np.random.default_rng(0).standard_normal((5, 6)) + 3.0).astype(np.float32)
    gain, bias = np.arange(1.0, 7.0, dtype=np.float32), np.full((6,), 0.5, np.float32)
    flat = np.ones((2, 6), np.float32)
    flat[1] = np.arange(6.0)
    out = jax.tree.map(np.asarray, _norms(*map(jnp.asarray, (y, gain, bias, flat))))
    u = out["layernorm"]
    np.testing.assert_allclose(np.sum(u, axis=-1), 0.0, atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(u, axis=-1), 1.0, atol=1e-6)
    # Invariant under shifts along (1, …, 1) and positive scalings: what "centring" means.
    np.testing.assert_allclose(out["moved"], u, atol=1e-5)
    # A real LayerNorm, (y − ȳ)/std(y), is √d times this one (radius √d); gain and bias
    # act afterwards.
    real = (y - y.mean(-1, keepdims=True)) / np.std(y, axis=-1, keepdims=True)
    np.testing.assert_allclose(np.sqrt(6) * u, real, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out["affine"], u * gain[None] + bias[None], atol=1e-6)
    assert out["rms"] == pytest.approx(out["normalize"])
    # safe: an all-equal row has no direction and maps to 0, not NaN.
    safe = out["safe"]
    np.testing.assert_array_equal(safe[0], 0.0)
    assert bool(np.all(np.isfinite(safe)))


def test_norm_is_validated():
    with pytest.raises(ad.ParameterError, match="norm"):
        ad.PostLN(norm="batchnorm")

    # Arrays made in NumPy and the norm traced, not run op by op: the refusal comes while
    # tracing, and eagerly each op before it compiled.
    def ones(*shape):
        return jnp.asarray(np.ones(shape, np.float32))

    with pytest.raises(ad.ParameterError, match="gain"):
        ad.LayerNorm(gain=ones(2, 3))
    with pytest.raises(ad.ParameterError, match="gain"):
        eqx.filter_jit(ad.LayerNorm(gain=ones(4)))(ones(2, 5))
    with pytest.raises(ad.ParameterError, match="gain or bias"):
        ad.NormalizedAttentionODE(ad.Attention(1.0), ad.PostLN(norm=ad.LayerNorm(ones(3))))


@pytest.mark.default_case("pre-ln")
@pytest.mark.parametrize("name", _schemes())
def test_every_scheme_keeps_tokens_in_the_hyperplane(name):
    """Sphere schemes: unit and mean-zero rows; radius schemes: attention sees the same."""
    scheme = ad.scheme_from_name(name, norm="layernorm")
    assert scheme.norm.name == "layernorm"
    x0 = sphere_rows(1, 4, 5, radius=1.3)
    model = ad.DiscreteTransformer(
        ad.Attention(1.5), ad.MatrixValues(0.5), scheme, depth=10, saveat=ad.SaveAt(1.0)
    )
    out = np.asarray(model.trajectory(jnp.asarray(x0), key=jax.random.key(2)))[-1]
    assert bool(np.all(np.isfinite(out)))
    if not scheme.keeps_radius:
        np.testing.assert_allclose(np.sum(out, axis=-1), 0.0, atol=1e-5)
        np.testing.assert_allclose(np.linalg.norm(out, axis=-1), 1.0, atol=1e-5)


@pytest.mark.default_case("scalar-pre-ln")
@pytest.mark.parametrize("name", _schemes())
@pytest.mark.parametrize(
    "values", ["scalar", pytest.param("deterministic", marks=pytest.mark.slow)]
)
def test_layernorm_in_d_is_rms_in_d_minus_1_path_by_path(name, values):
    # Deterministic and scalar values commute with U, so the identity is exact path by path
    # (the scalar v_n come from the same layer keys in both models). Tolerance: float32
    # rounding over 20 layers.
    dim = 5
    u = _basis(dim)
    c0 = sphere_rows(3, 3, dim - 1, radius=1.2)
    x0 = jnp.asarray((c0 @ u.T).astype(np.float32))  # centred start in R^5
    vals = ad.DeterministicValues() if values == "deterministic" else ad.ScalarValues(0.7)
    saveat = ad.SaveAt(2.0, (1.0, 2.0))
    layer_norm = ad.DiscreteTransformer(
        ad.Attention(2.0), vals, ad.scheme_from_name(name, norm="layernorm"), depth=10,
        saveat=saveat,
    )  # fmt: skip
    rms = ad.DiscreteTransformer(
        ad.Attention(2.0), vals, ad.scheme_from_name(name), depth=10, saveat=saveat
    )
    key = jax.random.key(4)
    big = np.asarray(layer_norm.trajectory(x0, key=key))
    small = np.asarray(rms.trajectory(jnp.asarray(c0), key=key))
    np.testing.assert_allclose(big @ u, small, atol=2e-5)
    np.testing.assert_allclose(big.sum(-1), 0.0, atol=2e-5)


@pytest.mark.slow
@pytest.mark.parametrize(
    "name", ["pre-ln", pytest.param("post-ln", marks=pytest.mark.slow),
             pytest.param("peri-ln", marks=pytest.mark.slow)]
)  # fmt: skip
def test_layernorm_ode_is_the_rms_ode_in_d_minus_1(name):
    dim = 6
    u = _basis(dim)
    x0 = 1.5 * ad.uniform_sphere(key=jax.random.key(5), n_tokens=4, dim=dim)
    c0 = jnp.asarray(np.asarray(x0) @ u, jnp.float32)  # the centred part, in the basis U
    saveat = ad.SaveAt(3.0, (1.0, 3.0))
    big = ad.NormalizedAttentionODE(
        ad.Attention(1.0), ad.scheme_from_name(name, norm="layernorm"), saveat=saveat
    ).solve(x0)
    small = ad.NormalizedAttentionODE(
        ad.Attention(1.0), ad.scheme_from_name(name), saveat=saveat
    ).solve(c0)
    # Two adaptive solves (rtol 1e-6) of the same flow in two frames.
    np.testing.assert_allclose(np.asarray(big.x) @ u, np.asarray(small.x), atol=1e-4)


def test_theory_of_layernorm_is_rms_in_d_minus_1():
    for d in (4, 5, 8):
        assert ad.theory.beta_critical(d, "layernorm") == ad.theory.beta_critical(d - 1)
        assert ad.theory.effective_dim(d, norm="layernorm") == d - 1
        for beta in (0.5, 1.2, 3.0):
            assert ad.theory.p_antipodal_uniform(beta, d, "layernorm") == pytest.approx(
                ad.theory.p_antipodal_uniform(beta, d - 1), abs=1e-12
            )
    # Threshold d − 3 < cosh 2β: at d = 5, β_c = ½ arccosh 2.
    assert ad.theory.beta_critical(5, "layernorm") == pytest.approx(0.5 * np.arccosh(2.0))
    assert not ad.theory.antipodal_reachable(0.6, 5, "layernorm")
    assert ad.theory.antipodal_reachable(0.7, 5, "layernorm")
    with pytest.raises(ad.ParameterError, match="dim"):
        ad.theory.beta_critical(2, "layernorm")


def test_layernorm_runs_on_the_reduced_route_of_d_minus_1():
    # Post-LN with a centred LayerNorm is, in law, the RMS model in d − 1 dimensions (spec
    # §0): the reduced route runs that one, its start centred and normalised first.
    model = ad.studies.phase_model(beta=1.0, dim=5, n_tokens=2, norm="layernorm")
    route = ad.select_route(model, n_tokens=2, dim=5)
    reduced = route.model
    assert isinstance(reduced, AbstractFrameRoute) and reduced.dim == 4
    assert reduced.start.name == "layernorm" and reduced.model.scheme.norm.name == "rms"
    # Three tokens at d = 3 do not fit the hyperplane's d − 1 = 2 (N = d − 1 = 2 does).
    assert ad.select_route(model, n_tokens=3, dim=3).name == "full"
    plane = ad.select_route(model, n_tokens=2, dim=3).model
    assert isinstance(plane, AbstractFrameRoute) and plane.dim == 2
    # A gain or bias, or another scheme, leaves the hyperplane's sphere: no reduction.
    affine = ad.DiscreteTransformer(
        ad.Attention(1.0),
        scheme=ad.PostLN(norm=ad.LayerNorm(gain=jnp.asarray(np.full(5, 2.0, np.float32)))),
    )
    pre = ad.DiscreteTransformer(ad.Attention(1.0), scheme=ad.PreLN(norm="layernorm"))
    for refused in (affine, pre):
        route = ad.select_route(refused, n_tokens=2, dim=5)
        assert route.name == "full" and "d − 1" in route.reason
        with pytest.raises(ad.ParameterError, match="layernorm"):
            ad.select_route(refused, n_tokens=2, dim=5, route="reduced")


def _two_token_layernorm(points, *, n_trajectories, depth, horizon, seed, route="full"):
    """P(antipodal) of Post-LN with full Gaussian value noise and centred LayerNorm, N = 2,
    against the exact t = ∞ curves of d − 1 (the claim) and of d (what RMS would give),
    on the N × d model itself (``route="full"``: the claim, independently of the reduced
    route that assumes it) or on the reduced route of d − 1."""
    ds = ad.estimate_probabilities(
        lambda **p: ad.studies.phase_model(**p, depth=depth, horizon=horizon, norm="layernorm"),
        points,
        key=jax.random.key(seed),
        n_trajectories=n_trajectories,
        progress=False,
        route=route,
    )
    assert ad.provenance(ds)["route"] == ("full" if route == "full" else "reduced")
    for i, p in enumerate(points):
        exact = ad.theory.p_antipodal_uniform(p["beta"], p["dim"] - 1)
        wrong = ad.theory.p_antipodal_uniform(p["beta"], p["dim"])
        got = float(ds["probability"].isel(point=i, time=-1).sel(outcome="antipodal"))
        assert abs(got - exact) < 4 * binomial_se(exact, n_trajectories), (p, got, exact)
        assert abs(got - wrong) > 8 * binomial_se(wrong, n_trajectories), (p, got, wrong)


@pytest.mark.slow
def test_two_token_layernorm_matches_the_exact_curve_of_d_minus_1():
    # d = 5, β = 1, L = 20, T = 30, 2000 trajectories: SE = √(0.12·0.88/2000) = 0.0073,
    # tolerance 4 SE = 0.029; the L = 20 discretisation bias of the RMS chain was measured
    # at ≈ −0.012, leaving > 2 SE of room. The exact curve of d = 5 (0.035) is 0.085 away,
    # 20 of its SEs: the test tells d − 1 from d.
    _two_token_layernorm(
        [{"dim": 5, "n_tokens": 2, "beta": 1.0}],
        n_trajectories=2000,
        depth=20,
        horizon=30.0,
        seed=21,
    )


@pytest.mark.slow
def test_two_token_layernorm_matches_the_exact_curve_of_d_minus_1_at_depth():
    # L = 100, T = 60, 20000 trajectories: SE ≤ 0.0032 and the discretisation bias is
    # five times smaller than at L = 20.
    points = [
        {"dim": 5, "n_tokens": 2, "beta": 1.0},
        {"dim": 4, "n_tokens": 2, "beta": 2.0},
        {"dim": 7, "n_tokens": 2, "beta": 2.5},
    ]
    _two_token_layernorm(points, n_trajectories=20000, depth=100, horizon=60.0, seed=22)
    # The reduced route (the default) runs the RMS chain of d − 1: the same curve.
    _two_token_layernorm(
        points, n_trajectories=20000, depth=100, horizon=60.0, seed=23, route="auto"
    )
