"""One model interface: a model defined here plugs into the estimator unchanged, and every
built-in model offers the same batch-level methods."""

import functools
from typing import ClassVar, final

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attndyn as ad
from attndyn._models.reduced.chain import TwoTokenChain
from tests.helpers import binomial_se


@final
class CoinModel(ad.AbstractModel):
    """Token 2 jumps onto token 1 with probability p, else onto its antipode: P(single) = p
    and P(antipodal) = 1 − p exactly, whatever the start."""

    p: jax.Array = eqx.field(converter=jnp.asarray)
    saveat: ad.SaveAt = ad.SaveAt(1.0)
    tokens_can_meet: ClassVar[bool] = True  # its jump is dynamics, not a numerical merge

    @property
    def save_times(self) -> np.ndarray:
        return self.saveat.times

    def simulate(self, x0, keys):
        heads = jax.vmap(lambda k: jax.random.bernoulli(k, self.p))(keys)
        sign = jnp.where(heads, 1.0, -1.0).astype(x0.dtype)
        moved = x0.at[:, 1].set(sign[:, None] * x0[:, 0])
        return moved[:, None]


@final
class UndeclaredCoinModel(ad.AbstractModel):
    """:class:`CoinModel` without ``tokens_can_meet``: its jumps look like merges."""

    coin: CoinModel

    @property
    def save_times(self) -> np.ndarray:
        return self.coin.save_times

    def simulate(self, x0, keys):
        return self.coin.simulate(x0, keys)


def test_a_new_model_plugs_into_the_estimator():
    # 4,000 trajectories a point: the fraction has SE √(p(1−p)/4000) ≤ 0.008; 4.5 SE
    # fails a correct estimator with probability 7e-6 (fixed seed).
    points = ad.grid(dim=[3, 5], n_tokens=[2], p=[0.2, 0.7])
    ds = ad.estimate_probabilities(
        lambda dim, n_tokens, p: CoinModel(p),
        points,
        key=jax.random.key(0),
        n_trajectories=4000,
        progress=False,
    )
    prov = ad.provenance(ds)
    assert prov["routes"] == ["full"] * 4
    single = ds["probability"].sel(outcome="single").isel(time=-1).values
    antipodal = ds["probability"].sel(outcome="antipodal").isel(time=-1).values
    for i, point in enumerate(points):
        p = point["p"]
        assert abs(single[i] - p) < 4.5 * binomial_se(p, 4000)
        assert single[i] + antipodal[i] == pytest.approx(1.0)


def test_tokens_that_meet_are_a_merge_unless_the_model_says_they_can():
    # The estimator cannot tell an exact coincidence of the dynamics from rounding; a model
    # declares which it is. Undeclared, every trajectory is a (numerical) merge.
    run = functools.partial(
        ad.estimate_probabilities,
        points=[{"dim": 3, "n_tokens": 2, "p": 0.5}],
        key=jax.random.key(0),
        n_trajectories=8,
        progress=False,
    )
    with pytest.raises(ad.NumericalMergeError, match="8 of 8"):
        run(lambda dim, n_tokens, p: UndeclaredCoinModel(CoinModel(p)))
    ds = run(lambda dim, n_tokens, p: CoinModel(p))
    assert int(ds["n_merged"].max()) == 0


def test_model_fn_must_return_a_model():
    with pytest.raises(ad.ParameterError, match="AbstractModel"):
        ad.estimate_probabilities(
            lambda dim, n_tokens: object(),  # type: ignore[arg-type,return-value]
            [{"dim": 3, "n_tokens": 2}],
            key=jax.random.key(0),
            n_trajectories=2,
            progress=False,
        )


def _models():
    att = ad.Attention(1.0)
    saveat = ad.SaveAt(0.2, (0.1, 0.2))
    discrete = ad.DiscreteTransformer(att, depth=10, saveat=saveat)
    return {
        "discrete": discrete,
        "reduced": discrete.reduction(2, 4).model,
        "ode": ad.NormalizedAttentionODE(att, saveat=saveat),
        "transformer-sde": ad.TransformerSDE(att, saveat=saveat),
        "hybrid-sde": ad.HybridSDE(att, eps=0.5, saveat=saveat),
        "overlap": ad.OverlapSDE(1.0, dim=4, saveat=saveat),
        "symmetric": ad.SymmetricODE(ad.PostLN(), 1.0, n_tokens=2, saveat=saveat),
    }


@pytest.mark.default_case("hybrid-sde")
@pytest.mark.parametrize("name", list(_models()))
def test_every_model_simulates_a_batch(name):
    model = _models()[name]
    assert isinstance(model, ad.AbstractModel)
    keys = jax.random.split(jax.random.key(1), 3)
    # Starts drawn and states checked in NumPy: the JAX sampler and each eager op compile.
    y = np.random.default_rng(1).standard_normal((3, 2, 4))
    x0 = jnp.asarray((y / np.linalg.norm(y, axis=-1, keepdims=True)).astype(np.float32))
    states = np.asarray(model.simulate(x0, keys))
    assert states.shape[:3] == (3, len(model.save_times), 2)
    theta = states / np.linalg.norm(states, axis=-1, keepdims=True)
    gram = np.einsum("bsik,bsjk->bsij", theta, theta)
    assert bool(np.all(np.abs(gram) <= 1 + 1e-5))
    np.testing.assert_allclose(model.save_times, [0.1, 0.2], atol=1e-12)


def test_routes_are_chosen_by_the_model():
    model = ad.DiscreteTransformer(ad.Attention(1.0), depth=5)
    assert isinstance(ad.select_route(model, n_tokens=2, dim=4).model, TwoTokenChain)
    assert isinstance(ad.select_route(model, n_tokens=3, dim=4).model, ad.ReducedTransformer)
    assert ad.select_route(model, n_tokens=2, dim=4, route="full").model is model
    full = ad.select_route(model, n_tokens=4, dim=4)
    assert full.name == "full" and "N = 4" in full.reason
    with pytest.raises(ad.ParameterError, match="route"):
        ad.select_route(model, n_tokens=4, dim=4, route="reduced")
    ode = ad.NormalizedAttentionODE(ad.Attention(1.0))
    assert ad.select_route(ode, n_tokens=2, dim=4).name == "full"


def test_saveat_is_validated_once_for_every_model():
    # A time given twice would be two rows of one time coordinate (audit): refused.
    cases = (((1.0, 3.0), "saveat"), ((), "saveat"), ((2.0, 1.0), "increasing"))
    for bad, needle in (*cases, ((0.5, 0.5), "increasing")):
        with pytest.raises(ad.ParameterError, match=needle):
            ad.SaveAt(2.0, bad)
    with pytest.raises(ad.ParameterError, match="horizon"):
        ad.SaveAt(0.0)
    np.testing.assert_array_equal(ad.SaveAt(2.0).times, [2.0])
    np.testing.assert_array_equal(ad.SaveAt(1.0, (0.26, 1.0)).steps(0.1), [3, 10])


@pytest.mark.parametrize("engine", ["discrete", "sde"])
def test_save_times_that_round_to_one_step_are_refused(engine):
    # 11 saves in [0, 1] on a grid of step 1/2 (or dt = 1/4) snapped to repeated layers:
    # the dataset had the time coordinate [0, 0, 0, 0.5, 0.5, ...] (audit).
    # The discrete model refuses where it is built (its __check_init__), the SDE at the
    # first read of its save times.
    saveat = ad.SaveAt(1.0, tuple(np.linspace(0.0, 1.0, 11)))
    with pytest.raises(ad.ParameterError, match="round to the same step"):
        if engine == "discrete":
            model = ad.DiscreteTransformer(ad.Attention(1.0), depth=2, saveat=saveat)
        else:
            model = ad.TransformerSDE(
                ad.Attention(1.0), saveat=saveat, integrator=ad.SDEIntegrator(dt=0.25)
            )
        _ = model.save_times
    fine = ad.SaveAt(1.0, (0.0, 0.5, 1.0))
    assert np.array_equal(
        ad.DiscreteTransformer(ad.Attention(1.0), depth=2, saveat=fine).save_times, [0.0, 0.5, 1.0]
    )


@pytest.mark.slow
def test_symmetric_ode_frames_carry_the_cosine():
    sym = ad.SymmetricODE(ad.PostLN(), 2.0, n_tokens=3, saveat=ad.SaveAt(3.0, (1.0, 3.0)))
    sol = sym.solve()
    x0 = jnp.zeros((2, 3, 5))
    states = sym.simulate(x0, jax.random.split(jax.random.key(0), 2))
    cos = jax.vmap(jax.vmap(ad.mean_cosine))(states)
    np.testing.assert_allclose(np.asarray(cos[0]), np.asarray(sol.gamma), rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(cos[0]), np.asarray(cos[1]))


def test_concrete_models_are_final():
    with pytest.raises(TypeError, match="final"):

        class Changed(ad.DiscreteTransformer):  # pyright: ignore[reportGeneralTypeIssues]
            pass
