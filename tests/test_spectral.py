"""The spectral route (Attention(implementation="spectral")): the kernel's harmonic expansion
on S¹ and S² against the direct sum in float64, its truncation bound, its rows attended
directly, its refusals and auto's choice of it."""

import functools
import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import special

import attndyn as ad
from attndyn._core import spectral
from attndyn._core.attention import AUTO_BLOCKWISE_TOKENS

EPS32 = float(np.finfo(np.float32).eps)


def _unit(a: np.ndarray) -> np.ndarray:
    return a / np.linalg.norm(a, axis=-1, keepdims=True)


def configurations(n: int, dim: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Unit tokens (float64): uniform; four tight clusters; two antipodal clusters; a
    cluster with a lone antipodal token and a lone token 90° off (their denominators are
    ~1 beside terms of size N: the case float32 cannot sum to rounding); tokens near the
    pole of S² (where the harmonics' ρ^m factors are small)."""
    rng = np.random.default_rng(seed)
    centres = _unit(rng.normal(size=(4, dim)))
    a = centres[:1]
    lone = _unit(a + 0.02 * rng.normal(size=(n, dim)))
    lone[0] = -a[0]
    lone[1] = _unit(np.cross(a, np.eye(dim)[:1]) if dim == 3 else a[:, ::-1] * [1, -1])[0]
    pole = np.zeros((1, dim))
    pole[0, -1] = 1
    return {
        "uniform": _unit(rng.normal(size=(n, dim))),
        "clusters": _unit(centres[rng.integers(0, 4, n)] + 0.01 * rng.normal(size=(n, dim))),
        "antipodal": _unit(
            np.where(rng.random((n, 1)) < 0.5, a, -a) + 1e-3 * rng.normal(size=(n, dim))
        ),
        "lone": lone,
        "pole": _unit(pole + 0.05 * rng.normal(size=(n, dim))),
    }


def exact(x: np.ndarray, beta: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """float64 direct sums: softmax output, unnormalised output, each row's scale
    (1/N) Σ_j e^{s_ij} (the unnormalised output's natural size)."""
    x = np.asarray(x, np.float64)
    s = beta * x @ x.T
    top = s.max(axis=1, keepdims=True)
    w = np.exp(s - top)
    soft = (w @ x) / w.sum(axis=1, keepdims=True)
    scale = np.exp(top[:, 0]) * w.sum(axis=1) / len(x)
    return soft, np.exp(top) * (w @ x) / len(x), scale


@functools.partial(jax.jit, static_argnames=("degree",))
def _parts(x, beta, degree):
    return spectral.spectral_parts(x, beta, degree=degree, block=64)


def _outputs(x, beta: float, dtype, *, fresh: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Softmax and unnormalised outputs of the spectral route (float64 NumPy); ``fresh``:
    traced anew (module constants patched by a test are read at tracing)."""
    n, dim = x.shape
    degree = spectral.DEGREES[spectral.degree_index(np.asarray(beta, dtype), n, dim, dtype)]
    xs = jnp.asarray(np.asarray(x, dtype))
    parts = (
        jax.jit(lambda x, b: spectral.spectral_parts(x, b, degree=degree, block=64))
        if fresh
        else functools.partial(_parts, degree=degree)
    )
    num, den, top = (np.asarray(a, np.float64) for a in parts(xs, jnp.asarray(beta, dtype)))
    soft = num / den[:, None]
    unnorm = num * np.exp(top - math.log(n))[:, None]
    return soft, unnorm


def _check_against_exact(x, beta: float, dtype, *, fresh: bool = False) -> None:
    soft, unnorm = _outputs(x, beta, dtype, fresh=fresh)
    rounded = np.asarray(np.asarray(x, dtype), np.float64)  # the tokens as the route saw them
    ref_soft, ref_unnorm, scale = exact(rounded, beta)
    eps = float(np.finfo(dtype).eps)
    # The promise: accepted rows within ROW_TOLERANCE·max(1, β)·ε (the direct route's own
    # scores carry ~β ε), plus 1/8 ε of truncation; rows attended directly carry the
    # direct route's rounding, ~β ε times a few.
    tol = (spectral.ROW_TOLERANCE * max(1.0, beta) + 1) * eps
    assert np.max(np.abs(soft - ref_soft)) <= tol
    assert np.max(np.abs(unnorm - ref_unnorm) / scale[:, None]) <= tol


# The default run: β = 4 in float32, both spheres (two compiled programs, every
# configuration through each); the grid β = 0.5 … 64 in both dtypes is slow.
GRID = [
    pytest.param(dim, beta, dtype, id=f"d{dim}-b{beta}-{np.dtype(dtype).name}")
    for dtype in (np.float32, np.float64)
    for dim in (2, 3)
    for beta in (4.0, 0.5, 16.0, 64.0, 250.0)
    if beta < 250 or dtype == np.float32  # float64 at β = 250 needs a degree past 128
]


@pytest.mark.default_case("d2-b4.0-float32", "d3-b4.0-float32")
@pytest.mark.parametrize(("dim", "beta", "dtype"), GRID)
def test_spectral_equals_the_direct_sum_to_rounding(dim, beta, dtype):
    with jax.enable_x64(dtype == np.float64):
        for x in configurations(300, dim).values():
            _check_against_exact(x, beta, dtype)


@pytest.fixture
def float64_pass_always(monkeypatch):
    """The float64 pass at any count of rows (by default it runs only where it costs less
    than attending those rows directly: never at N = 300)."""
    monkeypatch.setattr(spectral, "HOST_PASS_S", 0.0)
    monkeypatch.setattr(spectral, "HOST_PASS_FACTOR", 0.0)


def test_the_float64_pass_runs_where_it_pays():
    """One flagged row of 300 is attended directly (the pass would cost ~5,000 such
    rows); at N = 10⁵ the pass pays from ~600 flagged rows on S¹, at 10⁶ from ~580."""
    u = jnp.asarray(configurations(300, 2)["lone"], jnp.float32)
    w = spectral.kernel_weights(jnp.float32(4.0), 2, 20, jnp.float32)
    good = np.asarray(jax.jit(lambda *a: spectral._sums(*a))(u, jnp.float32(4.0), w)[2])
    assert not good[0] and good[2:].all()
    for n, low, high in ((300, 3000, 10**5), (10**5, 300, 1000), (10**6, 300, 1000)):
        cost = spectral.HOST_PASS_S + spectral.HOST_PASS_FACTOR * spectral.spectral_cost(n, 2, 20)
        assert low < cost / spectral.direct_cost_per_row(n) < high


@pytest.mark.usefixtures("float64_pass_always")
@pytest.mark.parametrize("dim", [2, 3])
def test_a_lone_token_is_summed_again_in_float64(dim):
    """Beside a cluster of 299 tokens at β = 4 the antipodal token's denominator is ~1
    while the terms summed are ~N: the expansion in float32 misses its output by ~10⁻⁵
    and flags the row (checked here, so the test fails if the rows stop being redone);
    the float64 pass sums it again and gets it to rounding, marked good, so that it is
    not attended directly (O(N) per row)."""
    x = configurations(300, dim)["lone"]
    _check_against_exact(x, 4.0, np.float32, fresh=True)
    u = jnp.asarray(x, jnp.float32)
    w = spectral.kernel_weights(jnp.float32(4.0), dim, 20, jnp.float32)
    tolerance = spectral.ROW_TOLERANCE * 4.0 * EPS32
    num, den, good = jax.jit(spectral._rows_within)(u, w, jnp.float32(tolerance))
    assert not bool(good[0]) and bool(np.all(np.asarray(good)[2:]))
    reference = exact(np.asarray(u, np.float64), 4.0)[0][0]
    alone = np.asarray(num[0], np.float64) / float(den[0])
    assert np.max(np.abs(alone - reference)) > 1e-6
    num, den, good = jax.jit(lambda *a: spectral._sums(*a))(u, jnp.float32(4.0), w)
    assert bool(np.all(np.asarray(good)))
    again = np.asarray(num[0], np.float64) / float(den[0])
    assert np.max(np.abs(again - reference)) <= (spectral.ROW_TOLERANCE * 4.0 + 1) * EPS32


@pytest.mark.usefixtures("float64_pass_always")
def test_rows_summed_again_under_vmap():
    """Under vmap the float64 pass runs for the batch when one trajectory needs it (a
    while loop, not a select of both sides): a lone token in one, uniform tokens in the
    other, each row to rounding."""
    confs = configurations(300, 2)
    xs = np.stack([confs["lone"], confs["uniform"]]).astype(np.float32)
    batched = jax.vmap(lambda x: spectral.spectral_parts(x, jnp.float32(4.0), degree=20, block=64))
    num, den, _ = (np.asarray(a, np.float64) for a in jax.jit(batched)(jnp.asarray(xs)))
    for b in range(2):
        ref = exact(np.asarray(xs[b], np.float64), 4.0)[0]
        soft = num[b] / den[b][:, None]
        assert np.max(np.abs(soft - ref)) <= (spectral.ROW_TOLERANCE * 4.0 + 1) * EPS32


def test_tokens_off_the_sphere_are_attended_directly():
    """The expansion holds for unit tokens: at |x| = 1.01 every row is attended directly
    and the output is the direct one (whose scores use the real norms)."""
    x = 1.01 * configurations(200, 2)["uniform"].astype(np.float32)
    assert bool(jax.jit(spectral._unit)(jnp.asarray(x), jnp.float32(4.0))[2])
    soft, _ = _outputs(x, 4.0, np.float32)
    np.testing.assert_allclose(soft, exact(x, 4.0)[0], atol=20 * EPS32)


@pytest.mark.parametrize("dim", [2, 3])
def test_truncation_bound_is_honoured(dim):
    """In float64, at a degree far too low for β = 4, the realised error is within the
    bound (and not far below it: the bound is not vacuous), and the degree chosen for
    float32 meets 1/8 ε while the one below it does not."""
    n, beta, degree = 200, 4.0, 6
    bound = spectral.truncation_bound(beta, n, dim, degree)
    with jax.enable_x64(True):
        x = configurations(n, dim)["clusters"]
        num, den, _ = _parts(jnp.asarray(x), jnp.asarray(beta), degree)
        err = np.max(np.abs(np.asarray(num) / np.asarray(den)[:, None] - exact(x, beta)[0]))
    assert 1e-5 < err <= bound
    chosen = spectral.needed_degree(beta, n, dim, np.float32)
    assert chosen is not None
    target = spectral.TRUNCATION_FRACTION * EPS32
    assert spectral.truncation_bound(beta, n, dim, chosen) <= target
    lower = spectral.DEGREES[spectral.DEGREES.index(chosen) - 1]
    assert spectral.truncation_bound(beta, n, dim, lower) > target


@pytest.mark.parametrize("dim", [2, 3])
def test_weights_are_the_scaled_bessel_coefficients(dim):
    """The in-program continued fraction against SciPy, and Σ_ℓ w_ℓ = e^{β(1 − 1)} = 1."""
    betas = np.array([0.0, 0.5, 4.0, 64.0], np.float32)
    got = np.asarray(
        jax.jit(jax.vmap(lambda b: spectral.kernel_weights(b, dim, 40, jnp.float32)))(betas)
    )
    for beta, row in zip(betas, got):
        want = spectral.kernel_weights_host(float(beta), dim, 40)
        big = want > 1e-30
        np.testing.assert_allclose(row[big], want[big], rtol=2e-5)
        assert abs(spectral.kernel_weights_host(float(beta), dim, 200).sum() - 1) < 1e-12


@pytest.mark.default_case("12")
@pytest.mark.parametrize("degree", [12, 128])
def test_legendre_table_gives_the_addition_theorem(degree):
    """Σ_m S_ℓm(x) S_ℓm(y) = P_ℓ(⟨x, y⟩) with S_ℓm = (Σ_k A[m, ℓ, k] T_k(z)) ρ^{m mod 2}
    (cos mφ, sin mφ): the table against Legendre polynomials, in float64 NumPy, up to the
    largest degree (the recurrence run on coefficient vectors had lost it past ℓ ≈ 90:
    Σ_k |A| reached 2·10⁹ at ℓ = 128, where it must stay below ~2 max |Q_ℓm| ≲ 2ℓ)."""
    table = spectral.legendre_chebyshev(degree)
    assert np.abs(table).sum(axis=-1).max() <= 2 * degree
    x, y = configurations(2, 3, seed=3)["uniform"]

    def harmonics(p):
        z, rho = p[2], math.hypot(p[0], p[1])
        phi, theta = math.atan2(p[1], p[0]), math.acos(z)
        cheb = np.cos(np.arange(degree + 1) * theta)
        out = []
        for ell in range(degree + 1):
            for m in range(ell + 1):
                q = table[m, ell] @ cheb * rho ** (m % 2)
                out.append((ell, q * math.cos(m * phi)))
                if m:
                    out.append((ell, q * math.sin(m * phi)))
        return out

    hx, hy = harmonics(x), harmonics(y)
    for ell in range(degree + 1):
        total = sum(a * b for (la, a), (_, b) in zip(hx, hy) if la == ell)
        assert abs(total - special.eval_legendre(ell, float(x @ y))) < 1e-12


def test_chunk_sums_are_compensated():
    """1 followed by 4,095 copies of 2⁻²⁴: summed naively in float32 every small term is
    lost (1 + 2⁻²⁴ rounds to 1); the two-sum tree keeps them."""
    values = np.full(4096, 2.0**-24, np.float32)
    values[0] = 1.0
    exact_sum = 1.0 + 4095 * 2.0**-24
    got = float(jax.jit(spectral.chunked_sum)(jnp.asarray(values)))
    assert abs(got - exact_sum) <= EPS32 * exact_sum
    naive = np.float32(0)
    for v in values:
        naive = np.float32(naive + v)
    assert abs(float(naive) - exact_sum) > 100 * EPS32


def test_degree_chosen_at_run_time_agrees_with_the_known_beta():
    limits = spectral.degree_limits(5000, 3, "float32")
    above = np.nextafter(np.float32(limits[3]), np.float32(np.inf))
    betas = np.array([0.3, 4.0, 9.0, 30.0, limits[3], above], np.float32)
    traced = jax.jit(jax.vmap(lambda b: spectral.degree_index(b, 5000, 3, jnp.float32)))(betas)
    known = [spectral.degree_index(b, 5000, 3, np.float32) for b in betas]
    assert list(np.asarray(traced)) == known
    assert known[4] == 3 and known[5] == 4


@pytest.mark.default_case("unnormalized")
@pytest.mark.parametrize("kind", ["unnormalized", "softmax"])
def test_attention_spectral_matches_dense_in_both_kinds_and_scaled(kind):
    """Through Attention (one compiled program): ``__call__`` and ``scaled`` of the
    spectral route against the dense form (softmax's ``scaled`` is its call)."""
    x = jnp.asarray(configurations(300, 3)["uniform"], jnp.float32)
    fast = ad.Attention(4.0, kind=kind, implementation="spectral")
    dense = ad.Attention(4.0, kind=kind, implementation="dense")

    def both(x, fast=fast, dense=dense):
        (a, m), (b, k) = fast.scaled(x), dense.scaled(x)
        return fast(x), dense(x), a, m, b, k

    out, ref, a, m, b, k = jax.jit(both)(x)
    scale = float(jnp.max(jnp.abs(ref)))
    assert float(jnp.max(jnp.abs(out - ref))) <= 40 * EPS32 * scale
    if kind == "unnormalized":  # e^m Ã is the output; β < 20 leaves m = 0
        assert float(jnp.max(jnp.abs(m))) == 0 and float(jnp.max(jnp.abs(k))) == 0
    assert float(jnp.max(jnp.abs(a - b))) <= 40 * EPS32 * scale


def test_spectral_degree_names_the_truncation():
    att = ad.Attention(4.0)
    assert att.spectral_degree(16384, dim=3) == 20
    assert att.spectral_degree(1000, dim=3) is None  # auto: dense up to 2,048 tokens
    assert ad.Attention(4.0, implementation="spectral").spectral_degree(1000, dim=3) == 20
    assert att.spectral_degree(16384, dim=8) is None
    with pytest.raises(ad.ParameterError, match="known"):
        jax.jit(lambda b: ad.Attention(b).spectral_degree(16384, dim=3))(1.0)


def test_auto_takes_the_spectral_route_where_it_is_cheaper():
    att = ad.Attention(4.0)
    n = AUTO_BLOCKWISE_TOKENS * 8
    assert att.implementation_for(AUTO_BLOCKWISE_TOKENS, dim=3) == "dense"
    assert att.implementation_for(n, dim=2) == "spectral"
    assert att.implementation_for(n, dim=3) == "spectral"
    assert att.implementation_for(n, dim=8) == "blockwise"
    assert att.implementation_for(n) == "blockwise"  # no dim: never named
    # β = 64 on S² needs degree 64: (67 × 131) entries a token cost more than N/4 pairs.
    assert ad.Attention(64.0).implementation_for(n, dim=3) == "blockwise"
    assert ad.Attention(4.0, query=jnp.eye(3)).implementation_for(n, dim=3) == "blockwise"
    assert ad.Attention(4.0, n_heads=3).implementation_for(n, dim=3) == "blockwise"


def test_spectral_beta_max_is_checked():
    with pytest.raises(ad.ParameterError, match="spectral_beta_max"):
        ad.Attention(1.0, spectral_beta_max=-1.0)


@pytest.mark.parametrize(
    ("options", "why"),
    [
        ({"query": jnp.eye(3)}, "query is given"),
        ({"key_matrix": jnp.eye(3)}, "key_matrix is given"),
        ({"value": jnp.eye(3)}, "value is given"),
        ({"output": jnp.eye(3)}, "output is given"),
        ({"n_heads": 3}, "n_heads"),
        ({"laplacian": True}, "Laplacian"),
        ({"n_heads": 1, "n_laplacian_heads": 1}, "Laplacian"),
        ({"causal": True}, "causal"),
        ({"self_mask": True}, "self_mask"),
        ({"diagonal_shift": 1.0}, "diagonal_shift"),
    ],
)
def test_spectral_is_refused_where_it_does_not_apply(options, why):
    with pytest.raises(ad.ParameterError, match=why):
        ad.Attention(2.0, implementation="spectral", **options)


def test_spectral_refuses_other_dimensions():
    att = ad.Attention(2.0, implementation="spectral")
    with pytest.raises(ad.ParameterError, match="dim=4"):
        att.check_dim(4)
    with pytest.raises(ad.ParameterError, match="dim=4"):
        eqx.filter_jit(lambda a, x: a(x))(att, jnp.ones((5, 4)) / 2)


@pytest.mark.slow
def test_a_traced_beta_picks_its_degree_at_run_time():
    """One compiled program over β (a leaf, traced): each β runs the degree it needs."""
    x = jnp.asarray(configurations(128, 2)["uniform"], jnp.float32)
    run = jax.jit(lambda b, x: ad.Attention(b, implementation="spectral")(x))
    for beta in (0.5, 20.0):
        ref = exact(np.asarray(x, np.float64), beta)[0]
        err = np.max(np.abs(np.asarray(run(jnp.float32(beta), x)) - ref))
        assert err <= (spectral.ROW_TOLERANCE * max(1.0, beta) + 1) * EPS32


@pytest.mark.default_case("softmax")
@pytest.mark.parametrize("kind", ["softmax", "unnormalized"])
def test_a_layer_map_runs_on_the_spectral_route(kind):
    """Post-LN layers with the spectral route against the dense form (the unnormalised
    kind through ``scaled``). Inside the model β is traced: ``spectral_beta_max`` compiles
    the one degree it needs."""
    x0 = jnp.asarray(configurations(96, 3, seed=5)["uniform"], jnp.float32)
    key = jax.random.key(0)
    attentions = (
        ad.Attention(3.0, kind=kind, implementation="spectral", spectral_beta_max=3.0),
        ad.Attention(3.0, kind=kind, implementation="dense"),
    )
    runs = [
        ad.DiscreteTransformer(att, ad.DeterministicValues(), depth=10, saveat=ad.SaveAt(0.5))
        for att in attentions
    ]
    a, b = (jax.jit(lambda x, m=m: m.trajectory(x, key=key))(x0) for m in runs)
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=2e-6)


def test_beta_past_spectral_beta_max_is_attended_directly():
    """With ``spectral_beta_max = 1`` the compiled degree is too low for β = 8: that β
    runs the direct route (to rounding), β = 0.5 the spectral one."""
    x = jnp.asarray(configurations(128, 2)["clusters"], jnp.float32)
    run = jax.jit(lambda b, x: ad.Attention(b, implementation="spectral", spectral_beta_max=1.0)(x))
    for beta in (0.5, 8.0):
        err = np.max(np.abs(np.asarray(run(jnp.float32(beta), x)) - exact(np.asarray(x), beta)[0]))
        assert err <= (spectral.ROW_TOLERANCE * beta + 1) * EPS32


def _noise_and_schemes():
    saveat = ad.SaveAt(0.2)
    sde = ad.SDEIntegrator(dt=0.02)

    def build(name, att):
        if name == "matrix-noise SDE":
            return ad.TransformerSDE(att, sigma=0.5, saveat=saveat, integrator=sde)
        if name == "scalar-noise SDE":
            return ad.HybridSDE(att, eps=0.3, saveat=saveat, integrator=sde)
        scheme = {"pre-ln": ad.PreLN(), "ngpt": ad.NGPT()}[name]
        return ad.DiscreteTransformer(
            att, ad.MatrixValues(0.5), depth=20, scheme=scheme, saveat=saveat
        )

    return build


@pytest.mark.slow
@pytest.mark.parametrize("name", ["matrix-noise SDE", "scalar-noise SDE", "pre-ln", "ngpt"])
def test_noise_models_and_schemes_run_on_the_spectral_route(name):
    """Item 4 of issue 43: the noise models and the schemes call the same attention on the
    directions, so the spectral route serves them; same key, same states to rounding."""
    build = _noise_and_schemes()
    x0 = jnp.asarray(configurations(64, 3, seed=7)["uniform"], jnp.float32)
    key = jax.random.key(3)
    fast = ad.Attention(2.0, implementation="spectral", spectral_beta_max=2.0)
    models = [build(name, att) for att in (fast, ad.Attention(2.0, implementation="dense"))]
    states = [np.asarray(jax.jit(lambda x, m=m: m.trajectory(x, key=key))(x0)) for m in models]
    np.testing.assert_allclose(states[0], states[1], atol=2e-5)


def test_spectral_differentiates_in_forward_mode():
    """jax.jvp through the spectral route (as implicit solvers use it) equals the dense
    form's along the sphere, to rounding. (The route attends the directions x/|x|: off
    the sphere it is attended directly, and its derivative across the sphere is that of
    the directions, not the dense form's.)"""
    x = jnp.asarray(configurations(64, 2, seed=2)["uniform"], jnp.float32)
    t = jnp.asarray(configurations(64, 2, seed=3)["uniform"], jnp.float32)
    t = t - jnp.sum(t * x, axis=1, keepdims=True) * x  # tangent at each token

    @jax.jit
    def tangents(x, t):
        return tuple(
            jax.jvp(ad.Attention(2.0, implementation=i), (x,), (t,))[1]
            for i in ("spectral", "dense")
        )

    fast, dense = tangents(x, t)
    assert float(jnp.max(jnp.abs(fast - dense))) <= 1e-5 * float(jnp.max(jnp.abs(dense)))


@pytest.mark.usefixtures("float64_pass_always")
def test_rows_summed_again_differentiate_as_the_float32_expansion():
    """jax.jvp through a row summed again in float64 (a host callback, which has no
    derivative) gives the float32 expansion's tangent, and the float64 value."""
    u = jnp.asarray(configurations(300, 2)["lone"], jnp.float32)
    t = jnp.asarray(configurations(300, 2, seed=3)["uniform"], jnp.float32)
    t = t - jnp.sum(t * u, axis=1, keepdims=True) * u
    w = spectral.kernel_weights(jnp.float32(4.0), 2, 20, jnp.float32)
    tolerance = jnp.float32(spectral.ROW_TOLERANCE * 4.0 * EPS32)

    @jax.jit
    def both(u, t):
        again = jax.jvp(lambda v: spectral._sums(v, jnp.float32(4.0), w)[:2], (u,), (t,))
        plain = jax.jvp(lambda v: spectral._rows_within(v, w, tolerance)[:2], (u,), (t,))
        return again, plain

    (value, tangent), (plain_value, plain_tangent) = both(u, t)
    assert float(jnp.abs(value[1][0] - plain_value[1][0])) > 0  # row 0 was summed again
    for a, b in zip(tangent, plain_tangent, strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("route", ["direct", "float64"])
@pytest.mark.parametrize("dim", [2, 3])
def test_clusters_forming_amid_scattered_tokens(dim, route, monkeypatch):
    """The state the flow passes through as clusters form (three tight clusters, a fifth
    of the tokens scattered between them): float32 flags several per cent of the rows,
    and every row of the route is within the promise against a float64 direct sum,
    whether those rows are attended directly (the default at N = 2,000) or summed again
    in float64."""
    if route == "float64":
        monkeypatch.setattr(spectral, "HOST_PASS_S", 0.0)
        monkeypatch.setattr(spectral, "HOST_PASS_FACTOR", 0.0)
    rng = np.random.default_rng(7)
    n = 2000
    centres = _unit(rng.normal(size=(3, dim)))
    tight = centres[rng.integers(0, 3, n)] + 0.002 * rng.normal(size=(n, dim))
    x = _unit(np.where(rng.random((n, 1)) < 0.8, tight, rng.normal(size=(n, dim))))
    u = jnp.asarray(x, jnp.float32)
    w = spectral.kernel_weights(jnp.float32(4.0), dim, 20, jnp.float32)
    tolerance = jnp.float32(spectral.ROW_TOLERANCE * 4.0 * EPS32)
    flagged = ~np.asarray(jax.jit(spectral._rows_within)(u, w, tolerance)[2])
    assert flagged.mean() > 0.01
    _check_against_exact(x, 4.0, np.float32, fresh=True)
