"""Devices and processes: every trajectory runs exactly once and the numbers never change."""

import json
import os
import re
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest

import attndyn as ad
from attndyn._estimate import estimator as _estimator
from attndyn._estimate.runner import default_chunk_size
from attndyn._io.distributed import (
    combine_tallies,
    initialize_distributed,
    process_block,
)
from attndyn._models.reduced.absorbing import AbsorbingRoute
from tests.markers import two_cpu_devices

POINTS = [{"dim": 4, "n_tokens": 2, "beta": 3.0}, {"dim": 3, "n_tokens": 3, "beta": 1.0}]


def _model(beta, dim, n_tokens):
    del dim, n_tokens
    return ad.DiscreteTransformer(
        ad.Attention(beta), ad.MatrixValues(1.0), depth=10, saveat=ad.SaveAt(3.0)
    )


def _run(**kwargs):
    kwargs = {"key": jax.random.key(5), "n_trajectories": 90, "progress": False, **kwargs}
    return ad.estimate_probabilities(_model, POINTS, **kwargs)


@pytest.mark.parametrize(("n", "count"), [(1, 1), (90, 3), (100, 4), (7, 2), (3, 5)])
def test_process_blocks_cover_every_trajectory_exactly_once(n, count):
    seen = np.zeros(n, int)
    for p in range(count):
        start, stop = process_block(n, p, count)
        seen[start:stop] += 1
    assert np.all(seen == 1)


def test_slices_are_refused_when_malformed():
    with pytest.raises(ad.ParameterError, match="process_index"):
        process_block(10, 3, 3)
    with pytest.raises(ad.ParameterError, match="process_id"):
        initialize_distributed("localhost:1234", 2, 2)
    with pytest.raises(ad.ParameterError, match="coordinator"):
        initialize_distributed(None, 2, 0)
    for bad in ("notahost", "host:", "host:0", "host:99999", ":123"):
        with pytest.raises(ad.ParameterError, match=r"must be HOST:PORT"):
            initialize_distributed(bad, 2, 0)
    # A process id without a coordinator would be ignored: refused instead.
    with pytest.raises(ad.ParameterError, match="process_id=1 needs a coordinator"):
        initialize_distributed(None, None, 1)


def test_processes_combined_give_the_single_process_numbers(monkeypatch, tile):
    tile(4)  # 23 tiles of 4 per point: blocks of 7 or 8 tiles for 3 processes
    # Run the study as each of 3 processes would (same arguments, own slice), keep each
    # process's own tallies, combine them once, and compare with one process.
    single = _run(chunk_size=8)
    parts = []
    monkeypatch.setattr(_estimator, "gather_tallies", lambda fields: list(fields))
    for p in range(3):
        monkeypatch.setattr(_estimator, "process_layout", lambda p=p: (p, 3))
        ds = _run(chunk_size=8)
        parts.append([ds["count"].values, ds["n_valid"].values])
    counts, n_valid = combine_tallies(parts)
    np.testing.assert_array_equal(counts, single["count"].values)
    np.testing.assert_array_equal(n_valid, single["n_valid"].values)
    # Each process alone saw only part of the trajectories.
    assert all(int(part[1][0]) < 90 for part in parts)


_CHILD = textwrap.dedent(
    """
    import json, sys, jax, attndyn as ad
    from tests.test_distributed import _run
    out = {}
    for route, chunk in json.loads(sys.argv[1]):
        ds = _run(route=route, chunk_size=chunk)
        out[route] = [ds["count"].values.tolist(), ds["mean_cosine"].values.tolist(),
                      len(jax.devices()), ds["pair_density"].values.tolist(),
                      ds["span_dim"].values.tolist()]
    print(json.dumps(out))
    """
)


# Both routes in the slow run; the default run's smoke takes the full route only (the same
# child, the same comparison, half the compilations: ~25 s CPU less).
@pytest.mark.slow
@two_cpu_devices
@pytest.mark.parametrize(
    "routes",
    [
        pytest.param((("auto", 90), ("full", 8)), marks=pytest.mark.slow, id="both-routes"),
        pytest.param((("full", 8),), id="full-route"),
    ],
)
def test_one_and_two_devices_and_any_chunk_give_identical_numbers(routes):
    # This process has 2 CPU devices (conftest); the child has 1. Every number must agree
    # bit for bit, on both routes and across chunk sizes: each trajectory runs in the same
    # compiled tile program at the same place (XLA compiles each batch shape differently,
    # so before tiles the mean cosines differed in their last bits, 2e-8 relative).
    env = dict(os.environ)
    env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=1"
    env["JAX_PLATFORMS"] = "cpu"
    # The child runs each route with the other chunk size.
    other = [[route, 90 if chunk == 8 else 8] for route, chunk in routes]
    child = subprocess.run(
        [sys.executable, "-c", _CHILD, json.dumps(other)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    one_device = json.loads(child.stdout.strip().splitlines()[-1])
    assert len(jax.devices()) == 2
    # Each route runs here with the other chunk size: one comparison covers both the device
    # count and the chunking.
    for route, chunk in routes:
        ds = _run(route=route, chunk_size=chunk)
        counts, cosines, n_dev, densities, spans = one_device[route]
        assert n_dev == 1
        np.testing.assert_array_equal(ds["count"].values, np.asarray(counts))
        np.testing.assert_array_equal(ds["mean_cosine"].values, np.asarray(cosines))
        np.testing.assert_array_equal(ds["pair_density"].values, np.asarray(densities))
        np.testing.assert_array_equal(ds["span_dim"].values, np.asarray(spans))


@pytest.mark.slow
def test_more_trajectories_keep_chunk_sized_device_work(monkeypatch, tile):
    tile(8)  # one tile of 8 per device: calls of 8 trajectories a device
    # Peak memory is set by what one tile per device holds: the compiled step only ever
    # sees tile-sized inputs (so its buffers are tile-sized whatever n is) and nothing
    # stays alive on the devices between calls or after the run.
    shapes = []
    original = _estimator.chunk_statistics

    def recording(*args, **kwargs):
        shapes.append(args[2].shape)
        return original(*args, **kwargs)

    monkeypatch.setattr(_estimator, "chunk_statistics", recording)
    live = []
    for n in (16, 160):
        _run(n_trajectories=n, chunk_size=16)
        live.append(sum(a.nbytes for a in jax.live_arrays()))
    # 2 XLA host devices on CPU (calls of 16), one GPU (calls of 8): each point's 16 and
    # 160 trajectories are 2 and 20 tiles, one per device and call.
    n_devices = len(jax.local_devices())
    assert set(shapes) == {(8 * n_devices,)}
    assert len(shapes) == len(POINTS) * (2 + 20) // n_devices
    assert live[1] <= live[0]


@two_cpu_devices
def test_a_tile_fits_in_memory_and_does_not_follow_the_device_count():
    from attndyn._estimate.runner import CPU_TILE, round_up, tile_size, trajectories_in_memory

    # Small tokens: the fewest tiles of at most CPU_TILE, of equal size (10**6 = 245 tiles
    # of 4,088 minus 560: not 245 full tiles and a 246th padded); a quarter of a small
    # study (rounded up to 8).
    small = {"n_tokens": 2, "dim": 4, "n_saves": 1}
    assert tile_size(10**6, **small) == 4088
    assert tile_size(4 * CPU_TILE, **small) == CPU_TILE
    assert tile_size(4 * CPU_TILE + 1, **small) == round_up(-(-(4 * CPU_TILE + 1) // 5), 8)
    assert tile_size(100, **small) == 32
    # 256 tokens in R^512 take ~31 MB a trajectory: a tile of 4,096 would need 128 GB.
    big = {"n_tokens": 256, "dim": 512, "n_saves": 1}
    assert tile_size(10**6, **big) <= trajectories_in_memory(**big) < 32


def test_an_accelerator_runs_a_small_study_in_one_tile(monkeypatch):
    # Measured on one H100: W3's 40,000 trajectories a point ran 3.7x faster as one tile
    # than as four tiles of 10,000, and the chain fills the GPU only near 131,072 side by
    # side. The backend, not the device count, picks the tile; early absorption's
    # compaction tile follows it.
    from attndyn._estimate import runner
    from attndyn._models.reduced import absorption

    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    small = {"n_tokens": 2, "dim": 4, "n_saves": 1}
    assert runner.tile_size(40_000, **small) == 40_000
    assert runner.tile_size(2 * runner.ACCELERATOR_TILE, **small) == 1 << 17
    assert runner.tile_size(140_000, **small) == 70_000  # two equal tiles, not 2 × 131,072
    assert runner.tile_size(100, **small) == 104  # a multiple of 8
    model = ad.DiscreteTransformer(ad.Attention(2.0), ad.MatrixValues(1.0), depth=10)
    reduced = model.reduction(2, 4).model
    assert reduced is not None

    def absorb_tile() -> int:
        absorbing = reduced.with_absorption(tol=1e-3, bound=1e-7, dim=4)
        assert isinstance(absorbing, AbsorbingRoute)
        return absorbing.absorb_tile

    assert absorb_tile() == absorption.ACCELERATOR_ABSORB_TILE
    # And on CPU (patched too, so the test also runs where the suite runs on a GPU).
    monkeypatch.setattr(jax, "default_backend", lambda: "cpu")
    assert runner.tile_size(40_000, **small) == 4000  # ten equal CPU tiles
    assert absorb_tile() == absorption.CPU_ABSORB_TILE


def test_default_chunk_follows_memory_not_trajectories():
    small = default_chunk_size(10**3, n_tokens=2, dim=4, n_saves=1, n_devices=2)
    large = default_chunk_size(10**9, n_tokens=2, dim=4, n_saves=1, n_devices=2)
    assert small == 10**3
    assert large <= 1 << 16  # capped: more trajectories mean more chunks, not bigger ones


def _cli_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env["JAX_PLATFORMS"] = "cpu"
    return env


_CLI = [sys.executable, "-c", "from attndyn.cli import main; main()"]


def _two_processes(args: list[str], tmp_path) -> list[tuple[int, str, str]]:
    """Run the CLI with ``args`` as processes 1 and 0 of a two-process jax.distributed run
    on localhost (each with its own --out); (status, stdout, stderr) of each, 1 first."""
    import socket

    with socket.socket() as s:
        s.bind(("localhost", 0))
        port = s.getsockname()[1]
    procs = []
    for pid in (1, 0):
        penv = {
            **_cli_env(),
            "ATTNDYN_COORDINATOR": f"localhost:{port}",
            "ATTNDYN_PROCESS_COUNT": "2",
            "ATTNDYN_PROCESS_ID": str(pid),
        }
        procs.append(
            subprocess.Popen(
                [*_CLI, *args, "--out", str(tmp_path / f"p{pid}")],
                env=penv,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    outputs = [p.communicate(timeout=240) for p in procs]
    return [(p.returncode, out, err) for p, (out, err) in zip(procs, outputs)]


@pytest.mark.slow
def test_two_processes_on_localhost_with_jax_distributed(tmp_path):
    # A real two-process run through jax.distributed (CPU collectives over gloo) must give
    # exactly the single-process numbers, and only process 0 writes the outputs.
    args = ["phase-diagram", "--beta", "1,2", "--dim", "4", "--n-trajectories", "120", "--depth",
            "5", "--horizon", "4", "--chunk-size", "20", "--no-progress", "--json"]  # fmt: skip
    runs = _two_processes(args, tmp_path)
    for status, _, err in runs:
        assert status == 0, err[-2000:]
    single = subprocess.run(
        [*_CLI, *args, "--out", str(tmp_path / "single")],
        env=_cli_env(),
        capture_output=True,
        text=True,
        timeout=240,
        check=True,
    )
    # gloo prints a connection line on stdout: the JSON object is the last line.
    combined = json.loads(runs[1][1].strip().splitlines()[-1])
    reference = json.loads(single.stdout.strip().splitlines()[-1])
    for a, b in zip(combined["points"], reference["points"]):
        assert a["trajectories"] == b["trajectories"] == 120
        for key in ("p_single", "p_antipodal", "p_unclustered"):
            assert a[key] == b[key]
    assert (tmp_path / "p0" / "phase_diagram.nc").exists()
    assert not (tmp_path / "p1" / "phase_diagram.nc").exists()


@pytest.mark.slow  # three CLI runs of the modes study, ~40 s of CPU
def test_modes_on_two_processes_writes_the_one_process_dataset(tmp_path):
    # attndyn modes on two processes (jax.distributed on localhost): process 0 writes a
    # dataset whose every data variable equals the one-process run's, bit for bit; process
    # 1 writes nothing. 16 trajectories of 256 tokens are 2 tiles of 8: one a process.
    # The default run's smoke: test_modes_study's two-process test (the layout faked).
    import xarray as xr

    args = ["modes", "--n-tokens", "256", "--dim", "2", "--beta", "4", "--horizon", "2",
            "--depth", "20", "--saves", "5", "--n-trajectories", "16", "--no-progress"]  # fmt: skip
    runs = _two_processes(args, tmp_path)
    for status, _, err in runs:
        assert status == 0, err[-2000:]
    subprocess.run(
        [*_CLI, *args, "--out", str(tmp_path / "single")],
        env=_cli_env(),
        capture_output=True,
        text=True,
        timeout=240,
        check=True,
    )
    assert not (tmp_path / "p1" / "modes.nc").exists()
    with (
        xr.open_dataset(tmp_path / "p0" / "modes.nc") as two,
        xr.open_dataset(tmp_path / "single" / "modes.nc") as one,
    ):
        assert set(two.data_vars) == set(one.data_vars)
        for name in one.data_vars:
            np.testing.assert_array_equal(two[name].values, one[name].values, err_msg=name)
        assert json.loads(two.attrs["provenance"])["process_count"] == 2
        assert json.loads(one.attrs["provenance"])["process_count"] == 1


@pytest.mark.slow  # two processes, ~7 s; test_two_processes_on_localhost is the smoke
def test_a_merge_stops_every_process_alike(tmp_path):
    # Each process sees only its own trajectories: had one raised at its first merge, the
    # other would wait for it at the gather. The check runs on the totals, so both stop,
    # with the same line, and neither hangs (the communicate timeout would fail the test).
    # 16 trajectories: one merges (index < 4), in one process's block only; --on-merged
    # raise stops at it (the default would rerun or bound it).
    args = ["phase-diagram", "--beta", "4", "--dim", "3", "--n-tokens", "2", "--route", "full",
            "--n-trajectories", "16", "--horizon", "30", "--depth", "5", "--no-progress",
            "--on-merged", "raise"]  # fmt: skip
    runs = _two_processes(args, tmp_path)
    lines = []
    for status, _, err in runs:
        assert status == 1, err[-2000:]
        lines.append([line for line in err.splitlines() if "merged numerically" in line])
    assert len(lines[0]) == len(lines[1]) == 1 and lines[0] == lines[1]
    # Which trajectories merge is float32 rounding: on one H100 a second one merged. The
    # CPU's single merge is the case this test is about (the other process has none).
    merges = "1" if jax.default_backend() == "cpu" else r"\d+"
    assert re.search(rf"merged numerically in {merges} of 16 trajectories", lines[0][0])


_MANY_TOKENS_CHILD = textwrap.dedent(
    """
    import jax
    import attndyn as ad

    assert len(jax.devices()) == 2
    ds = ad.estimate_probabilities(
        lambda beta, dim, n_tokens: ad.DiscreteTransformer(
            ad.Attention(beta), ad.MatrixValues(1.0), depth=100, saveat=ad.SaveAt(1.0)
        ),
        [{"dim": 16, "n_tokens": 32, "beta": 1.0}],
        key=jax.random.key(0),
        n_trajectories=512,
        progress=False,
    )
    print(float(ds["span_dim"].values.ravel()[0]))
    """
)


@pytest.mark.slow  # 512 trajectories of 32 tokens in a child; the smoke is below
def test_many_tokens_on_two_devices_do_not_deadlock():
    # jaxlib 0.10's batched eigvalsh (the span dimension of N ≥ 3 tokens) splits its batch
    # over the intra-op thread pool and waits; with both devices inside it at once every
    # pool thread waited and this run hung every time (XLA then aborts the process after
    # 40 s). The estimator now takes one matrix at a time when several devices run.
    last = _on_two_devices(_MANY_TOKENS_CHILD, timeout=120)
    # A mean span dimension: between one cluster and all of R^16.
    assert 1.0 <= float(last) <= 16.0


def _on_two_devices(script: str, *, timeout: float) -> str:
    """Run ``script`` in a child process with 2 CPU devices (a hang fails at ``timeout``);
    the last line it printed."""
    env = dict(os.environ)
    env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
    env["JAX_PLATFORMS"] = "cpu"
    child = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=timeout
    )
    assert child.returncode == 0, child.stderr[-2000:]
    return child.stdout.strip().splitlines()[-1]


_IMPLICIT_CHILD = textwrap.dedent(
    """
    import warnings
    import diffrax, jax, numpy as np
    import attndyn as ad

    def model(beta, dim, n_tokens):
        del dim, n_tokens
        integrator = ad.ODEIntegrator(diffrax.Kvaerno3(), rtol=1e-3, atol=1e-5)
        return ad.NormalizedAttentionODE(
            ad.Attention(beta), ad.PostLN(), saveat=ad.SaveAt(0.2), integrator=integrator
        )

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ds = ad.estimate_probabilities(
            model, [dict(dim=4, n_tokens=8, beta=1.0)], key=jax.random.key(0),
            n_trajectories=96, progress=False,
        )
    assert any("runs on 1 of the 2 CPU devices" in str(w.message) for w in caught)
    print(int(ds["count"].values.sum()))
    """
)


@pytest.mark.slow  # 96 Kvaerno3 trajectories in a child; the smoke is below
def test_an_implicit_solver_on_two_devices_does_not_deadlock():
    # An implicit solver's Newton steps run lineax LU, a batched LAPACK getrf under vmap:
    # the same jaxlib 0.10 deadlock as the span dimension's eigvalsh (this run hung every
    # time on 2 devices). The estimator runs such models on one CPU device.
    # Every trajectory classified (one save).
    assert int(_on_two_devices(_IMPLICIT_CHILD, timeout=150)) == 96


_SMOKE_CHILD = textwrap.dedent(
    """
    import warnings
    import diffrax, jax
    import attndyn as ad

    assert len(jax.devices()) == 2
    span = ad.estimate_probabilities(
        lambda beta, dim, n_tokens: ad.DiscreteTransformer(
            ad.Attention(beta), ad.MatrixValues(1.0), depth=5, saveat=ad.SaveAt(1.0)
        ),
        [{"dim": 4, "n_tokens": 3, "beta": 1.0}],
        key=jax.random.key(0), n_trajectories=64, progress=False,
    )["span_dim"].values.ravel()[0]

    def implicit(beta, dim, n_tokens):
        del dim, n_tokens
        integrator = ad.ODEIntegrator(diffrax.Kvaerno3(), rtol=1e-3, atol=1e-5)
        return ad.NormalizedAttentionODE(
            ad.Attention(beta), ad.PostLN(), saveat=ad.SaveAt(0.2), integrator=integrator
        )

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ds = ad.estimate_probabilities(
            implicit, [dict(dim=3, n_tokens=3, beta=1.0)], key=jax.random.key(0),
            n_trajectories=16, progress=False,
        )
    assert any("runs on 1 of the 2 CPU devices" in str(w.message) for w in caught)
    print(float(span), int(ds["count"].values.sum()))
    """
)


@pytest.mark.slow
def test_eigvalsh_and_an_implicit_solver_on_two_devices_smoke():
    # Smoke of the two deadlock tests above (slow), in one child process: the span
    # dimension of N = 3 tokens (batched eigvalsh) on both devices, and an implicit solver
    # (batched LU) sent to one device with its warning. A hang fails at the timeout (the
    # child took 25 s CPU, 119 s wall at a load of 15 on 2 cores: the two slow tests' 120 +
    # 150 s, with room).
    span, count = _on_two_devices(_SMOKE_CHILD, timeout=400).split()
    assert 1.0 <= float(span) <= 3.0  # three tokens span at most R^3
    assert int(count) == 16
