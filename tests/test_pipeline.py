"""The estimator's stages one at a time: keys, plan, tallies, checkpoint, dataset."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attndyn as ad
from attndyn._estimate.checkpoint import load_checkpoint, study_record, write_checkpoint
from attndyn._estimate.dataset import probabilities_dataset, provenance_record
from attndyn._estimate.keys import point_id, point_key, trajectory_key
from attndyn._estimate.plan import check_options, make_plan
from attndyn._estimate.tallies import FIXED_POINT, Tallies, fixed_point_sums


def _model(beta, dim, n_tokens):
    del dim, n_tokens
    return ad.DiscreteTransformer(ad.Attention(beta), depth=5, saveat=ad.SaveAt(1.0, (0.4, 1.0)))


def _options(**kw):
    options = {
        "n_trajectories": 10,
        "tol": 1e-3,
        "radius": 1.0,
        "chunk_size": None,
        "route": "auto",
        "early_absorption": False,
        "on_nonfinite": "raise",
    }
    options.update(kw)
    return options


def _plan(**kw):
    return make_plan(_model, ad.grid(dim=[3, 4], n_tokens=[2], beta=[1.0]), **_options(**kw))


def test_point_ids_are_stable_and_ignore_order():
    # Frozen: these identifiers seed every published number.
    assert point_id({"dim": 4, "n_tokens": 2, "beta": 1.0}) == point_id(
        {"beta": 1.0, "n_tokens": 2, "dim": 4}
    )
    assert point_id({"dim": 4, "n_tokens": 2, "beta": 1.0}) != point_id(
        {"dim": 4, "n_tokens": 2, "beta": 1.5}
    )
    assert point_id({"dim": np.int64(4)}) == point_id({"dim": 4})
    key = jax.random.key(0)
    p = {"dim": 4}
    np.testing.assert_array_equal(
        jax.random.key_data(trajectory_key(key, p, 3)),
        jax.random.key_data(jax.random.fold_in(point_key(key, p), 3)),
    )


def test_plan_routes_each_point_and_options_are_checked_where_they_enter():
    plan = _plan()
    assert plan.routes == ["reduced", "reduced"]
    assert [p.dim for p in plan.points] == [3, 4]
    np.testing.assert_allclose(plan.save_times, [0.4, 1.0])
    assert _plan(route="full").routes == ["full", "full"]
    for bad, needle in (
        ({"n_trajectories": 0}, "n_trajectories"),
        ({"tol": 1.0}, "tol"),
        ({"radius": -1.0}, "radius"),
        ({"chunk_size": 0}, "chunk_size"),
        ({"route": "fast"}, "route"),
        ({"on_nonfinite": "ignore"}, "on_nonfinite"),
        ({"on_merged": "ignore"}, "on_merged"),
        ({"early_absorption": 2.0}, "early_absorption"),
    ):
        # Checked once, where they enter (estimate_probabilities, MonteCarlo): the plan
        # below trusts them.
        with pytest.raises(ad.ParameterError, match=needle):
            check_options(**_options(**bad))


def test_plan_refuses_absorption_where_it_is_not_quantified():
    with pytest.raises(ad.ParameterError, match=r"early_absorption.*full route"):
        _plan(early_absorption=True, route="full")
    plan = _plan(early_absorption=1e-7)
    gaps = [p.model.absorption_gaps() for p in plan.points]
    # δ₊ = tol·(ε/2)^{1/κ₊}, κ₊ = (d − 1)/2: d = 3 gives 5e-11, d = 4 about 1.4e-8.
    assert gaps[0] is not None and gaps[0][0] == pytest.approx(1e-3 * 5e-8, rel=1e-6)
    assert gaps[1] is not None and gaps[1][0] == pytest.approx(1e-3 * (5e-8) ** (2 / 3), rel=1e-6)


def test_auto_absorption_applies_where_quantified_and_nowhere_else():
    # "auto" (the CLI's default): the default bound where the route supports it, nothing
    # (and no error) where it does not; an unknown word is refused.
    plan = _plan(early_absorption="auto")
    assert plan.absorption_bound == 1e-7
    assert all(p.model.absorption_gaps() is not None for p in plan.points)
    full = _plan(early_absorption="auto", route="full")
    assert all(p.model.absorption_gaps() is None for p in full.points)
    with pytest.raises(ad.ParameterError, match="early_absorption"):
        _plan(early_absorption="always")


def test_fixed_point_sums_are_exact_and_order_free():
    rng = np.random.default_rng(0)
    cosines = rng.uniform(-1, 1, size=(1000, 3))
    a = fixed_point_sums(cosines)
    b = fixed_point_sums(cosines[::-1])
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    np.testing.assert_allclose(a[0] / FIXED_POINT, cosines.sum(axis=0), atol=1000 / FIXED_POINT)
    # Split into chunks and added: the same bits.
    c = [fixed_point_sums(part) for part in np.array_split(cosines, 7)]
    np.testing.assert_array_equal(sum(x[0] for x in c), a[0])


def _tallies():
    t = Tallies.zeros(2, 2)
    t.counts[0] = [[3, 1, 1, 0], [4, 0, 0, 0]]
    t.n_valid[:] = 4
    t.n_done[:] = 4
    t.cosine_sum[0] = [int(2 * FIXED_POINT), int(4 * FIXED_POINT)]  # int64 units of 2⁻³²
    t.cosine_sumsq[0] = [int(2 * FIXED_POINT), int(4 * FIXED_POINT)]
    return t


def test_totals_beyond_two_million_trajectories_do_not_depend_on_chunk_order():
    # float64 totals in units of 2⁻³² are exact only below 2²¹; the tallies keep int64
    # totals (to 2³¹), so chunks added in any order give the same bits. Start both at
    # 3·2²¹ cosines, as after 6 million trajectories of clustered tokens.
    rng = np.random.default_rng(1)
    chunks = [rng.uniform(-1, 1, size=(50, 1)) for _ in range(20)]
    totals = []
    for order in (chunks, chunks[::-1]):
        t = Tallies.zeros(1, 1)
        t.cosine_sum[0] = 3 * 2**21 * 2**32
        for values in order:
            merged = np.zeros((50, 1), bool)
            t.add_chunk(0, np.zeros((1, 4), int), 0, 0, values, values, values, merged, 0)
        totals.append(t.cosine_sum.copy())
    np.testing.assert_array_equal(totals[0], totals[1])
    assert totals[0].dtype == np.int64
    expected = 3 * 2**21 + np.concatenate(chunks).sum()
    np.testing.assert_allclose(totals[0][0, 0] / FIXED_POINT, expected, rtol=1e-15)


def test_excluding_merged_trajectories_is_the_estimate_over_the_others():
    # Two routes to one number: the dataset built with on_merged="exclude" from the tallies
    # (all trajectories, and the merged ones apart) against NumPy over the unmerged
    # trajectories alone, per save time, for the counts, probabilities and the means.
    from attndyn._estimate.dataset import probabilities_dataset

    rng = np.random.default_rng(7)
    n, saves = 200, 3
    classes = rng.random((n, saves, 4)) < 0.4
    values = rng.uniform(-1, 1, (n, saves))
    merged = np.cumsum(rng.random((n, saves)) < 0.2, axis=1) > 0  # merges are absorbing
    t = Tallies.zeros(1, saves)
    for part in np.array_split(np.arange(n), 7):  # several chunks, as the estimator adds
        c, m = classes[part], merged[part]
        t.add_chunk(0, c.sum(0), len(part), 0, values[part], values[part], values[part], m,
                    (c & m[..., None]).sum(0))  # fmt: skip
    t.n_done[0] = n
    times = np.arange(1.0, saves + 1)
    ds = probabilities_dataset(t, [{"dim": 3}], times, on_merged="exclude")
    kept = ~merged
    np.testing.assert_array_equal(ds["n_counted"].values[0], kept.sum(0))
    np.testing.assert_array_equal(ds["n_merged"].values[0], merged.sum(0))
    np.testing.assert_array_equal(ds["count"].values[0], (classes & kept[..., None]).sum(0))
    for s in range(saves):
        mine = values[kept[:, s], s]
        # Each value is rounded to 2⁻³² before it is summed: agreement to ~1e-9.
        np.testing.assert_allclose(ds["mean_cosine"].values[0, s], mine.mean(), atol=1e-8)
        np.testing.assert_allclose(
            ds["mean_cosine_se"].values[0, s], mine.std(ddof=1) / np.sqrt(mine.size), rtol=1e-6
        )
        np.testing.assert_allclose(
            ds["probability"].values[0, s], (classes[kept[:, s], s]).mean(0), rtol=1e-12
        )
    counted = probabilities_dataset(t, [{"dim": 3}], times, on_merged="count")
    np.testing.assert_array_equal(counted["count"].values[0], classes.sum(0))
    np.testing.assert_allclose(counted["mean_cosine"].values[0], values.mean(0), atol=1e-8)
    # The merge-robust interval, from the trajectories themselves: Wilson's lower bound of
    # the unmerged count and upper bound of it plus every merged trajectory, over all n;
    # the same whatever the policy. It contains the Wilson interval of any class the
    # merged trajectories could have had: the arithmetic's (count) and random ones.
    from attndyn._estimate.stats import wilson_interval

    unmerged = (classes & kept[..., None]).sum(0)
    lower, _ = wilson_interval(unmerged, n)
    _, upper = wilson_interval(unmerged + merged.sum(0)[:, None], n)
    for built in (ds, counted):
        np.testing.assert_array_equal(built["merge_ci_lower"].values[0], lower)
        np.testing.assert_array_equal(built["merge_ci_upper"].values[0], upper)
    assert np.all(upper - lower > counted["ci_upper"].values[0] - counted["ci_lower"].values[0])
    for seed in range(20):
        other = rng.random((n, saves, 4)) < seed / 20
        k = (np.where(merged[..., None], other, classes)).sum(0)
        lo, hi = wilson_interval(k, n)
        assert np.all(lo >= lower) and np.all(hi <= upper)
    # Counted or excluded without a bound, their error is unknown: merge_bound says so.
    assert np.all(np.isnan(counted["merge_bound"].values[0][merged.sum(0) > 0]))


def test_auto_widens_the_wilson_interval_by_the_merges_its_bound_allows():
    # Under on_merged="auto" the merged trajectories are counted with a bound on the
    # expected number in a wrong class (merge_bound, tallied in units of 2⁻³²): by Markov,
    # more than m are wrong with probability <= bound/(m + 1), so merge_ci is Wilson's
    # interval of the count -/+ m with m the least count making that <= 1e-3; m = 0 (the
    # Wilson interval itself) below a summed bound of 1e-3.
    from attndyn._estimate.stats import wilson_interval

    times = np.array([0.4, 1.0])
    t = _tallies()
    t.n_valid[:] = t.n_done[:] = 40
    t.counts[1] = [[10, 20, 20, 10], [30, 5, 5, 5]]
    t.merge_bound[:] = np.array([[0.0, 0.5e-3], [0.0045, 0.0125]]) * 2.0**32
    ds = probabilities_dataset(t, [{"dim": 3}, {"dim": 4}], times, on_merged="auto")
    np.testing.assert_allclose(ds["merge_bound"].values, t.merge_bound / 2.0**32)
    n = t.n_valid[:, None, None]
    for wrong, (p, s) in ((0, (0, 0)), (0, (0, 1)), (4, (1, 0)), (12, (1, 1))):
        count = t.counts[p, s]
        lo, _ = wilson_interval(np.maximum(count - wrong, 0), n[p, 0])
        _, hi = wilson_interval(np.minimum(count + wrong, n[p, 0]), n[p, 0])
        np.testing.assert_array_equal(ds["merge_ci_lower"].values[p, s], lo)
        np.testing.assert_array_equal(ds["merge_ci_upper"].values[p, s], hi)
    np.testing.assert_array_equal(ds["merge_ci_lower"].values[0], ds["ci_lower"].values[0])


def test_a_checkpoint_of_format_2_is_read_as_integers(tmp_path, monkeypatch):
    # attndyn 0.4.0 wrote the means' sums as float64 multiples of 2⁻³²: they are read back
    # as the same integers, so a study interrupted before the upgrade resumes.
    from attndyn._estimate import checkpoint

    plan = _plan()
    record = study_record(plan, [0, 0], "threefry2x32", (0, 1))
    path = tmp_path / "old.nc"
    old = _tallies()
    for name in ("cosine_sum", "cosine_sumsq"):
        setattr(old, name, getattr(old, name) / FIXED_POINT)  # as 0.4.0 kept them
    monkeypatch.setattr(checkpoint, "FORMAT", 2)
    write_checkpoint(path, record, old, [p.point for p in plan.points], plan.save_times)
    monkeypatch.undo()
    back = load_checkpoint(path, record, np.asarray([10, 10]))
    for a, b in zip(back.arrays(), _tallies().arrays()):
        assert a.dtype == np.int64
        np.testing.assert_array_equal(a, b)


def test_tallies_cross_processes_bit_for_bit_without_x64():
    # JAX without x64 carries int64 as int32 and float64 as float32 (what
    # process_allgather did to the tallies: 2⁴⁰ + 1 came back as 1); the words go instead.
    from attndyn._io.distributed import _gather_exactly

    def allgather(x):  # two processes holding the same array, through JAX's types
        return np.stack([np.asarray(jnp.asarray(x))] * 2)

    big = np.asarray([[2**40 + 1, -3]], np.int64)
    fine = np.asarray([0.1, 1 / 3], np.float64)
    assert allgather(big)[0, 0, 0] != 2**40 + 1  # the failure this guards against
    np.testing.assert_array_equal(_gather_exactly(allgather, big), np.stack([big, big]))
    np.testing.assert_array_equal(_gather_exactly(allgather, fine), np.stack([fine, fine]))


def test_checkpoint_round_trip_and_refusal(tmp_path):
    plan = _plan()
    record = study_record(plan, [0, 0], "threefry2x32", (0, 1))
    path = tmp_path / "c.nc"
    points = [p.point for p in plan.points]
    sizes = np.asarray([10, 10])
    write_checkpoint(path, record, _tallies(), points, plan.save_times)
    back = load_checkpoint(path, record, sizes)
    for a, b in zip(back.arrays(), _tallies().arrays()):
        np.testing.assert_array_equal(a, b)
    other = study_record(_plan(tol=2e-3), [0, 0], "threefry2x32", (0, 1))
    with pytest.raises(ad.ParameterError, match=r"different study: tol is 0.001 there and 0.002"):
        load_checkpoint(path, other, sizes)
    assert [p.name for p in tmp_path.iterdir()] == ["c.nc"]  # no temporary file left


def test_dataset_has_probabilities_and_wilson_bounds():
    ds = probabilities_dataset(_tallies(), [{"dim": 3}, {"dim": 4}], np.array([0.4, 1.0]))
    p = ds["probability"].isel(point=0, time=0).values
    np.testing.assert_allclose(p, [0.75, 0.25, 0.25, 0.0])
    lo, hi = ad.wilson_interval(3, 4)
    assert float(ds["ci_lower"].isel(point=0, time=0, outcome=0)) == pytest.approx(float(lo))
    assert float(ds["ci_upper"].isel(point=0, time=0, outcome=0)) == pytest.approx(float(hi))
    assert float(ds["mean_cosine"].isel(point=0, time=1)) == pytest.approx(1.0)
    record = provenance_record(1.5, kind="test", seed=3)
    assert record["kind"] == "test" and record["seconds"] == 1.5 and "attndyn_version" in record
