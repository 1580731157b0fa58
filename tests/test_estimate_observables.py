"""``estimate_observables``, the estimator's loop for per-trajectory observables (the modes
study runs on it): the rows never depend on the chunk size, an interruption, or the
process count; another study's checkpoint, a locked one and a trajectory that turns NaN
are refused or reported. A toy tile (numbers from each trajectory's key, no model) keeps
these tests to a fraction of a second."""

import jax
import numpy as np
import pytest

import attndyn as ad
from attndyn._core.errors import NonFiniteError
from attndyn._estimate import observables
from attndyn._estimate.keys import point_key
from attndyn._estimate.observables import estimate_observables
from attndyn._estimate.observations import Field
from attndyn._io.files import Lock

POINTS = [{"dim": 2, "n_tokens": 8, "beta": 1.0}, {"dim": 3, "n_tokens": 4, "beta": 2.0}]
TILES = [3, 4]
SAVES = np.linspace(0.0, 1.0, 3)
FIELDS = {
    "count": Field("int32"),
    "value": Field("float64", fill=float("nan")),
    "spectrum": Field("float64", (2,), fill=float("nan"), dims=("degree",)),
}


def _toy_tile(index, keys, count, bar):
    """Numbers from each trajectory's key alone (so from its index and point), as a
    simulation's are; the padding rows past ``count`` are computed too and dropped."""
    del index, count, bar
    data = np.asarray(jax.random.key_data(keys), np.uint64)[:, -1]  # (tile,)
    value = (data % 1_000_003)[:, None] / 7.0 + SAVES[None, :]
    spectrum = np.stack([value, -value], axis=-1)
    counts = ((data % 11)[:, None] + np.arange(len(SAVES))).astype(np.int32)
    return {"count": counts, "value": value, "spectrum": spectrum}, np.ones(len(data), bool)


def _estimate(run_tile=_toy_tile, **kwargs):
    options = {
        "fields": FIELDS,
        "tiles": TILES,
        "key": jax.random.key(4),
        "n_trajectories": 10,
        "save_times": SAVES,
        "record": {"beta": 1},
        "progress": False,
        "name": "toy",
        **kwargs,
    }
    return estimate_observables(run_tile, POINTS, **options)


def _same(a, b) -> None:
    for name in FIELDS:
        np.testing.assert_array_equal(a.arrays[name], b.arrays[name], err_msg=name)
    np.testing.assert_array_equal(a.n_done, b.n_done)


@pytest.fixture(scope="module")
def reference():
    return _estimate()


def test_every_row_is_its_trajectorys_whatever_the_chunk_and_an_interruption(reference, tmp_path):
    assert reference.n_done.tolist() == [10, 10]
    assert not np.isnan(reference.arrays["value"]).any()
    path = tmp_path / "toy.nc"
    calls = []

    def stop_at_the_third_tile(index, keys, count, bar):
        calls.append((index, count))
        if len(calls) == 3:
            raise KeyboardInterrupt
        return _toy_tile(index, keys, count, bar)

    with pytest.raises(KeyboardInterrupt):
        _estimate(stop_at_the_third_tile, checkpoint=path, chunk_size=1)
    assert path.exists() and not path.with_name("toy.nc.lock").exists()
    calls.clear()
    resumed = _estimate(_counted(calls), checkpoint=path, chunk_size=7)
    _same(resumed, reference)
    # Point 0's tiles of 3 at 0 and 3 were done; the resume ran 6, 9, then point 1's 3.
    assert calls == [(0, 3), (0, 1), (1, 4), (1, 4), (1, 2)]


def _counted(calls):
    def run(index, keys, count, bar):
        calls.append((index, count))
        return _toy_tile(index, keys, count, bar)

    return run


def test_processes_side_by_side_give_the_rows_of_one(reference, monkeypatch):
    """Three processes (jax.distributed's layout faked): each runs its block of tiles and
    process 0 receives every process's rows; placed side by side they are one process's,
    bit for bit, and each process ran only its own block."""
    own = {}

    def gather(fields):
        own[layout[0]] = [np.array(f) for f in fields]
        return [own.get(q, own[layout[0]]) for q in range(3)]

    monkeypatch.setattr(observables, "gather_parts", gather)
    for layout in ((2, 3), (1, 3), (0, 3)):
        monkeypatch.setattr(observables, "process_layout", lambda layout=layout: layout)
        combined = _estimate()
    _same(combined, reference)
    # n_done, the second-to-last field gathered: point 0's 4 tiles of 3 (the last one
    # short) in blocks of 1, 1 and 2 tiles; point 1's 3 tiles of 4 one a process.
    assert [own[q][-2].tolist() for q in range(3)] == [[3, 4], [3, 4], [4, 2]]


def test_another_study_and_a_locked_checkpoint_are_refused(tmp_path):
    path = tmp_path / "toy.nc"
    _estimate(checkpoint=path, n_trajectories=3)
    with pytest.raises(ad.ParameterError, match=r"another toy study: study\.beta is 1 there and 2"):
        _estimate(checkpoint=path, n_trajectories=3, record={"beta": 2})
    with pytest.raises(ad.ParameterError, match="n_trajectories is 3 there and 4"):
        _estimate(checkpoint=path, n_trajectories=4)
    lock = Lock(path.with_name("toy.nc.lock"))
    try:
        with pytest.raises(ad.ParameterError, match="is in use by"):
            _estimate(checkpoint=path, n_trajectories=3)
    finally:
        lock.release()


def _broken_at(trajectory: int, calls: list):
    """A tile of the toy in which trajectory ``trajectory`` of point 1 turned NaN."""
    table = {}
    for i in range(10):
        key = jax.random.fold_in(point_key(jax.random.key(4), POINTS[1]), i)
        table[tuple(np.asarray(jax.random.key_data(key)).tolist())] = i

    def run(index, keys, count, bar):
        calls.append((index, count))
        values, finite = _toy_tile(index, keys, count, bar)
        rows = np.asarray(jax.random.key_data(keys)).tolist()
        broken = [index == 1 and table.get(tuple(row)) == trajectory for row in rows]
        return values, finite & ~np.asarray(broken)

    return run


def test_a_trajectory_that_turns_nan_stops_every_process_alike(tmp_path, monkeypatch):
    path = tmp_path / "toy.nc"
    message = lambda i: f"trajectory broken at point {i}"  # noqa: E731
    calls = []
    with pytest.raises(NonFiniteError, match="trajectory broken at point 1"):
        _estimate(_broken_at(5, calls), checkpoint=path, nonfinite=message)
    # Alone, it stops at the tile that broke ([4, 8) of point 1), which the checkpoint
    # leaves out: a rerun runs that tile again, and stops again.
    calls.clear()
    with pytest.raises(NonFiniteError, match="trajectory broken at point 1"):
        _estimate(_broken_at(5, calls), checkpoint=path, nonfinite=message)
    assert calls == [(1, 4)]
    # Two processes: process 0 (point 1's tile [0, 4)) sees nothing broken and stops
    # too, at the totals, with the same line, rather than wait for the other at a gather.
    own = {}

    def gather(fields):
        own[layout[0]] = [np.array(f) for f in fields]
        return [own.get(q, own[layout[0]]) for q in range(2)]

    monkeypatch.setattr(observables, "gather_parts", gather)
    for layout in ((1, 2), (0, 2)):
        monkeypatch.setattr(observables, "process_layout", lambda layout=layout: layout)
        with pytest.raises(NonFiniteError, match="trajectory broken at point 1"):
            _estimate(_broken_at(5, []), nonfinite=message)
    assert own[0][-1].tolist() == [0, 0] and own[1][-1].tolist() == [0, 1]
