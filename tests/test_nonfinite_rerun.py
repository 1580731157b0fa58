"""Issue 42: default runs that stopped on one float32 trajectory.

``attndyn phase-diagram --beta 3 --dim 4 --n-tokens 3 --n-trajectories 8000 --depth 100
--horizon 20 --seed 55`` exited 1: trajectory 838 left the unit sphere. Its tokens 0 and 1
had merged to float32 resolution and token 2 sat near their antipode; the frame route's
LQ step (unrolled Householder) had its reflections fused by XLA into their consumers,
which recomputed row 1's residual (a difference of nearly equal numbers, ~10⁻⁸) in
several fusions, contracted into fused multiply-adds in some and not in others. The
second reflection took its norm from one recomputation and its vector from another, so
it was not orthogonal, and row 2 came out with |row|² − 1 = 1.6·10⁻⁵ at layer 1098 and
1.9·10⁻³ at the last layer (1999), past the invariant check: the trajectory counted as
broken and the run stopped. The fix (:func:`attndyn._models.reduced.frame.carried_lq`)
reads each reflection's rows from a loop carry; the safety net reruns any trajectory that
float32 still breaks in float64, from the same random numbers.
"""

import re
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attndyn as ad
from attndyn._estimate.keys import trajectory_key
from attndyn._estimate.plan import to_float64
from attndyn._models.base import route_of
from attndyn._models.reduced.frame import carried_lq, pair_gaps
from attndyn.studies.phase import phase_model
from tests.helpers import binomial_se

#: The point and seed of the CLI run, and the trajectory that broke.
POINT = {"dim": 4, "n_tokens": 3, "beta": 3.0}
SEED, INDEX = 55, 838
#: Trajectory 838's frame coordinates (float32 bits) before layers 1098 and 1999 of that
#: run (9f5b4a1, CPU): rows 0 and 1 within 10⁻⁷ of each other, row 2 near their antipode.
STATES = {
    1098: [
        [1065353216, 2147483648, 2147483648],
        [1065353213, 868548602, 2147483648],
        [3212834587, 3162640860, 999201503],
    ],
    1999: [
        [1065353215, 2147483648, 2147483648],
        [1065353213, 862750811, 2147483648],
        [3212812440, 3173407886, 1024776801],
    ],
}


def _frame_model():
    """The CLI's model of the point (Post-LN, Gaussian values, L = 100, T = 20), on the
    route the estimator runs (the frame route: N = 3 < d = 4)."""
    user = phase_model(**POINT, depth=100, horizon=20.0)
    model, route, _ = route_of(user, 3, 4, "auto")
    assert route == "reduced"
    return model


@eqx.filter_jit
def _layers(model, c, start, stop, keys):
    """Layers [start, stop) of a batch, as the estimator runs them (the route's own
    compiled loop, :meth:`AbstractFrameRoute.run`)."""
    return model.run(c, start, stop, keys)


@eqx.filter_jit
def _layer64(model, c, n, key):
    return model.layer(c, n, key=key)


@pytest.mark.parametrize("layer", [1098, 1999])
def test_trajectory_838_stays_on_the_sphere_at_the_layers_where_it_broke(layer):
    # The trajectory's own key and its state before the layer, through the route's
    # compiled layer loop. On 9f5b4a1 row 2's |row|² − 1 was 1.6e-5 (layer 1098) and
    # 1.9e-3 (layer 1999; the invariant check allows 1e-3); the layer normalises every
    # row (Post-LN) and the LQ step is orthogonal, so a sound layer leaves each row a unit
    # vector to a few ulps (about d·eps ≈ 5e-7 here; 16·eps ≈ 1.9e-6 allowed).
    model = _frame_model()
    # runner.begin_tile's split: (start key, noise key) of the trajectory's key.
    _, noise_key = jax.random.split(trajectory_key(jax.random.key(SEED), POINT, INDEX))
    state = np.asarray(STATES[layer], np.uint32).view(np.float32)
    after = _layers(
        model, jnp.asarray(state)[None], jnp.int32(layer), jnp.int32(layer + 1), noise_key[None]
    )
    after = np.asarray(after[0], np.float64)
    rows = np.sum(after**2, axis=-1)
    assert np.all(np.abs(rows - 1) <= 16 * np.finfo(np.float32).eps), rows - 1
    # The same layer in float64 from the same state and noise (every random number is a
    # float32 number): the Gram matrix agrees to float32's resolution of the layer.
    with jax.enable_x64(True):
        exact = _layer64(
            to_float64(model), jnp.asarray(state, jnp.float64), jnp.int32(layer), noise_key
        )
        exact = np.asarray(exact)
    np.testing.assert_allclose(after @ after.T, exact @ exact.T, atol=1e-5)


#: Rows of a cluster (three within 10⁻⁷ of each other) and one near its antipode, as
#: float32: the configuration of trajectory 838 with one more token.
def _cluster(exponent: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    base = rng.standard_normal(6)
    base /= np.linalg.norm(base)
    offsets = 10.0**-exponent * rng.standard_normal((4, 6))
    rows = np.concatenate([base + offsets[:3], -base + offsets[3:]])
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


@jax.jit
def _factor(x):
    c = jax.vmap(carried_lq)(x)
    return c, jax.vmap(pair_gaps)(c)


@pytest.mark.parametrize("exponent", [3, 7, 9])
def test_carried_lq_keeps_gram_matrix_and_gaps(exponent):
    # A batch (so that the reflections are fused as in the estimator) of clusters 10^-e
    # apart with a token near their antipode: C Cᵀ = X Xᵀ to float32 rounding of |x|²,
    # every row a unit vector, the factor lower-triangular with a non-negative diagonal,
    # and each gap 1 ∓ z to its relative precision ε/√gap (as linalg.lq's test).
    x = np.stack([_cluster(exponent, seed) for seed in range(16)])
    c, (plus, minus) = _factor(jnp.asarray(x))
    c64, x64 = np.asarray(c, np.float64), np.asarray(x, np.float64)
    np.testing.assert_allclose(
        c64 @ np.swapaxes(c64, 1, 2), x64 @ np.swapaxes(x64, 1, 2), atol=4e-7
    )
    assert np.all(np.triu(c64, 1) == 0) and np.all(np.diagonal(c64, axis1=1, axis2=2) >= 0)
    theta = x64 / np.linalg.norm(x64, axis=-1, keepdims=True)
    eps = float(np.finfo(np.float32).eps)
    i, j = np.triu_indices(4, 1)
    for gap, sign in ((np.asarray(plus, np.float64), -1), (np.asarray(minus, np.float64), 1)):
        exact = 0.5 * np.sum((theta[:, :, None] + sign * theta[:, None]) ** 2, axis=-1)
        close = exact[:, i, j] < 0.5
        err = np.abs(gap[:, i, j] - exact[:, i, j])[close]
        bound = (16 * eps * np.sqrt(2 * exact[:, i, j]) + (8 * eps) ** 2)[close]
        assert np.all(err <= bound), (err, bound)


# --- the safety net: broken trajectories rerun in float64 ---------------------------------


class Blowup(ad.AbstractModel):
    """Each token scaled by exp(c·u²) (u a standard normal drawn in float32, one per token)
    and normalised: the direction never changes, but the scale overflows float32 from
    c·u² ≈ 88.7 (its square from 44.4) and float64 from 709.8 (354.9). A trajectory that
    float32 breaks is, in float64, the same path run through."""

    scale: jax.Array
    same_path_in_float64: ClassVar[bool] = True

    @property
    def save_times(self):
        return np.array([1.0])

    def simulate(self, x0, keys):
        def one(x, key):
            u = jax.random.normal(key, x.shape[:1], jnp.float32).astype(x.dtype)
            return ad.normalize(x * jnp.exp(self.scale.astype(x.dtype) * u**2)[:, None])[None]

        return jax.vmap(one)(x0, keys)


def _blowup(scale: float, *, on_nonfinite="raise", n=64):
    return ad.estimate_probabilities(
        lambda dim, n_tokens, scale: Blowup(jnp.asarray(scale, jnp.float32)),
        [{"dim": 3, "n_tokens": 2, "scale": scale}],
        key=jax.random.key(3),
        n_trajectories=n,
        progress=False,
        on_nonfinite=on_nonfinite,
    )


def _broken_in(scale: float, dtype, n=64) -> np.ndarray:
    """The trajectories whose scale overflows ``dtype`` (squared: where the norm does)."""
    limit = 0.5 * np.log(float(np.finfo(dtype).max))
    point = {"dim": 3, "n_tokens": 2, "scale": scale}
    broken = []
    for index in range(n):
        _, noise = jax.random.split(trajectory_key(jax.random.key(3), point, index))
        u = np.asarray(jax.random.normal(noise, (2,), jnp.float32), np.float64)
        broken.append(bool(np.any(scale * u**2 > limit)))
    return np.flatnonzero(broken)


def test_trajectories_float32_breaks_are_rerun_in_float64_and_counted():
    # c = 30: float32 breaks the trajectories with a token past |u| = 1.22 (about 40 % of
    # 64), float64 none (|u| > 3.4: 0.07 %, and not at this key). On 9f5b4a1 the study
    # stopped with a NonFiniteError.
    expected = _broken_in(30.0, np.float32)
    assert expected.size > 0 and _broken_in(30.0, np.float64).size == 0
    ds = _blowup(30.0)
    assert int(ds["n_nonfinite"][0]) == 0 and int(ds["n_valid"][0]) == 64
    assert ad.provenance(ds)["nonfinite_rerun"] == [expected.size]


def test_trajectories_float64_breaks_too_are_named_by_index_and_key():
    # c = 300: float64 breaks a trajectory too (|u| > 1.09); the error names the first of
    # them and its key, from which the breakage is reproduced (the key's second split is
    # the noise key).
    both = _broken_in(300.0, np.float64)
    assert both.size > 0
    with pytest.raises(ad.NonFiniteError) as raised:
        _blowup(300.0)
    message = str(raised.value)
    assert f"The first is trajectory {both[0]}, key jax.random.wrap_key_data" in message
    assert "again when rerun in float64" in message and "its layer map" in message
    data = message.split("np.uint32(")[1].split(")")[0]
    point = {"dim": 3, "n_tokens": 2, "scale": 300.0}
    key = trajectory_key(jax.random.key(3), point, int(both[0]))
    assert data == str(np.asarray(jax.random.key_data(key)).tolist())
    with pytest.warns(UserWarning, match="excluded from the probabilities"):
        ds = _blowup(300.0, on_nonfinite="exclude")
    assert int(ds["n_nonfinite"][0]) == both.size
    assert ad.provenance(ds)["nonfinite_rerun"] == [_broken_in(300.0, np.float32).size]


@pytest.mark.slow
def test_the_issue_42_run_exits_0_and_agrees_with_x64(tmp_path):
    # The issue's command (seed 55; seeds 56 and 57 broke one trajectory each as well),
    # in float32 and with --x64: both finish, no trajectory lost, and P(single) and
    # P(antipodal) agree within 4 standard errors of their difference (two runs of the
    # same keys: their trajectories are the same paths up to rounding, so the difference
    # is far smaller than √2 SE; 4·√2 SE is the bound of independent runs). About 40 s CPU.
    from click.testing import CliRunner

    from attndyn.cli import main

    args = [
        "phase-diagram", "--beta", "3", "--dim", "4", "--n-tokens", "3",
        "--n-trajectories", "8000", "--depth", "100", "--horizon", "20", "--seed", "55",
        "--no-progress",
    ]  # fmt: skip
    runs = []
    for extra in ([], ["--x64"]):
        out = tmp_path / (extra[0][2:] if extra else "f32")
        result = CliRunner().invoke(main, [*args, *extra, "--out", str(out)])
        assert result.exit_code == 0, result.output
        ds = ad.open_dataset(out / "phase_diagram.nc")
        assert int(ds["n_nonfinite"].sum()) == 0 and int(ds["n_valid"].sum()) == 8000
        runs.append(ds)
    for outcome in ("single", "antipodal"):
        a, b = (float(ds["probability"].sel(outcome=outcome).squeeze()) for ds in runs)
        assert abs(a - b) <= 4 * np.sqrt(2) * binomial_se(b, 8000), (outcome, a, b)


# --- what a run says before it runs long -----------------------------------------------


def test_a_run_says_its_cost_after_the_first_tile_and_a_resumed_run_says_so(tmp_path, capsys):
    # Issue 42 items 1 and 9: nothing warned that N = 5 runs at ~100 trajectories/s, and
    # a resumed run printed no line. The first tile's rate and the projected time of the
    # rest, above the bar; a second run of the same checkpoint says it resumes.
    checkpoint = tmp_path / "study.nc"

    def run():
        return ad.estimate_probabilities(
            lambda dim, n_tokens, scale: Blowup(jnp.asarray(scale, jnp.float32)),
            [{"dim": 3, "n_tokens": 2, "scale": 0.0}, {"dim": 3, "n_tokens": 2, "scale": 1.0}],
            key=jax.random.key(3),
            n_trajectories=64,
            checkpoint=checkpoint,
        )

    run()
    first = capsys.readouterr().err
    # One tile per device (16 trajectories each here) ran first; the rest of both points
    # is left.
    said = re.search(r"/s on the first tile \((\d+) at \{'dim': 3.* the (\d+) left", first)
    assert said is not None, first
    assert int(said[2]) == 128 - int(said[1]) and "resuming" not in first
    run()
    again = capsys.readouterr().err
    assert f"resuming from {checkpoint}: 128 of 128 trajectories done" in again
    assert "first tile" not in again  # nothing left to time
