"""Devices and processes: every trajectory runs exactly once and the numbers never change."""

import json
import os
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest

import attndyn as ad
from attndyn import _estimate
from attndyn._distributed import combine_tallies, initialize, process_chunk_starts

POINTS = [{"dim": 4, "tokens": 2, "beta": 3.0}, {"dim": 3, "tokens": 3, "beta": 1.0}]


def _model(beta, dim, tokens):
    del dim, tokens
    return ad.DiscreteTransformer(ad.Attention(beta), ad.MatrixValues(1.0), depth=10, horizon=3.0)


def _run(**kwargs):
    kwargs = {"key": jax.random.key(5), "n_trajectories": 90, "progress": False, **kwargs}
    return ad.estimate_probabilities(_model, POINTS, **kwargs)


@pytest.mark.parametrize(("n", "chunk", "count"), [(1, 1, 1), (90, 8, 3), (100, 10, 4), (7, 16, 2)])
def test_process_slices_cover_every_trajectory_exactly_once(n, chunk, count):
    seen = np.zeros(n, int)
    for p in range(count):
        for start in process_chunk_starts(n, chunk, p, count):
            seen[start : min(start + chunk, n)] += 1
    assert np.all(seen == 1)


def test_slices_are_refused_when_malformed():
    with pytest.raises(ad.ParameterError, match="process_index"):
        process_chunk_starts(10, 2, 3, 3)
    with pytest.raises(ad.ParameterError, match="process_id"):
        initialize("localhost:1234", 2, 2)
    with pytest.raises(ad.ParameterError, match="coordinator"):
        initialize(None, 2, 0)


def test_processes_combined_give_the_single_process_numbers(monkeypatch):
    # Run the study as each of 3 processes would (same arguments, own slice), keep each
    # process's own tallies, combine them once, and compare with one process.
    single = _run(chunk_size=8)
    parts = []
    monkeypatch.setattr(_estimate, "gather_tallies", lambda fields: list(fields))
    for p in range(3):
        monkeypatch.setattr(_estimate, "process_layout", lambda p=p: (p, 3))
        ds = _run(chunk_size=8)
        parts.append([ds["count"].values, ds["n_valid"].values])
    counts, n_valid = combine_tallies(parts)
    np.testing.assert_array_equal(counts, single["count"].values)
    np.testing.assert_array_equal(n_valid, single["n_valid"].values)
    # Each process alone saw only part of the trajectories.
    assert all(int(part[1][0]) < 90 for part in parts)


_CHILD = textwrap.dedent(
    """
    import json, jax, attndyn as ad
    from tests.test_distributed import _run
    out = {}
    for route in ("auto", "full"):
        for chunk in (8, 90):
            ds = _run(route=route, chunk_size=chunk)
            out[f"{route}-{chunk}"] = [ds["count"].values.tolist(),
                                       ds["mean_cosine"].values.tolist(), len(jax.devices())]
    print(json.dumps(out))
    """
)


def test_one_and_two_devices_and_any_chunk_give_identical_numbers():
    # This process has 2 CPU devices (conftest); the child has 1. Counts and mean cosines
    # must agree bit for bit, on both routes and for two chunk sizes.
    env = dict(os.environ)
    env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=1"
    env["JAX_PLATFORMS"] = "cpu"
    child = subprocess.run(
        [sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, check=True
    )
    one_device = json.loads(child.stdout.strip().splitlines()[-1])
    assert len(jax.devices()) == 2
    for route in ("auto", "full"):
        for chunk in (8, 90):
            ds = _run(route=route, chunk_size=chunk)
            counts, cosines, n_dev = one_device[f"{route}-{chunk}"]
            assert n_dev == 1
            np.testing.assert_array_equal(ds["count"].values, np.asarray(counts))
            np.testing.assert_array_equal(ds["mean_cosine"].values, np.asarray(cosines))
            reference = one_device[f"{route}-8"]
            np.testing.assert_array_equal(np.asarray(counts), np.asarray(reference[0]))
            np.testing.assert_array_equal(np.asarray(cosines), np.asarray(reference[1]))


def test_more_trajectories_keep_chunk_sized_device_work(monkeypatch):
    # Peak memory is set by what one chunk holds on the devices: the compiled step only ever
    # sees chunk-sized inputs (so its buffers are chunk-sized whatever n is) and nothing
    # stays alive on the devices between chunks or after the run.
    shapes = []
    original = _estimate._chunk_statistics

    def recording(*args):
        shapes.append(args[2].shape)
        return original(*args)

    monkeypatch.setattr(_estimate, "_chunk_statistics", recording)
    live = []
    for n in (16, 160):
        _run(n_trajectories=n, chunk_size=16)
        live.append(sum(a.nbytes for a in jax.live_arrays()))
    assert set(shapes) == {(16,)}
    assert len(shapes) == 2 * (1 + 10)
    assert live[1] <= live[0]


def test_default_chunk_follows_memory_not_trajectories():
    small = ad.default_chunk_size(10**3, n_tokens=2, dim=4, n_saves=1, n_devices=2)
    large = ad.default_chunk_size(10**9, n_tokens=2, dim=4, n_saves=1, n_devices=2)
    assert small == 10**3
    assert large <= 1 << 16  # capped: more trajectories mean more chunks, not bigger ones
