"""Faults with real processes (issue 12): ``kill -9`` at random moments, resumes with other
chunk sizes, another σ after a kill, two runs into one folder, a damaged checkpoint.

Each test runs the ``attndyn`` command line in subprocesses, so they are slow (JAX starts
in every process) and marked so; the in-process versions of the same guarantees are in
``tests/test_safety.py``.
"""

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

pytestmark = pytest.mark.slow

STUDY = ["phase-diagram", "--beta", "0.5,1,1.5,2,2.5,3", "--dim", "4", "--trajectories", "3000"]
STUDY += ["--depth", "20", "--horizon", "10", "--route", "full", "--no-progress"]
# The float32 N × d route merges a few pairs by T = 10 (11 of 1,504 at β = 0.5): counted,
# so that the kill and resume tests cover the merge tallies too.
STUDY += ["--on-merged", "count"]
CLI = [sys.executable, "-c", "from attndyn.cli import main; main()"]


def _env():
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    return {**env, "JAX_PLATFORMS": "cpu"}


def _start(out: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [*CLI, *STUDY, *extra, "--out", str(out)],
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _run(out: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*CLI, *STUDY, *extra, "--out", str(out)],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=900,
    )


def _numbers(out: Path) -> dict[str, np.ndarray]:
    with xr.open_dataset(out / "phase_diagram.nc") as ds:
        names = ("count", "n_valid", "n_nonfinite", "n_merged", "mean_cosine", "mean_cosine_se")
        return {name: ds[name].values for name in names}


def _wait_for(path: Path, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict[str, np.ndarray]:
    out = tmp_path_factory.mktemp("reference")
    result = _run(out, "--chunk-size", "500")
    assert result.returncode == 0, result.stderr[-2000:]
    return _numbers(out)


def _kill_at_random_moments(out: Path, chunks: list[str], rng: random.Random) -> None:
    """Start the study with each chunk size in turn and kill -9 it at a random moment after
    it has saved some progress of its own (so that every resume has something to keep)."""
    checkpoint = out / "phase_diagram.checkpoint.nc"
    for chunk in chunks:
        saved = checkpoint.stat().st_mtime_ns if checkpoint.exists() else None
        process = _start(out, "--chunk-size", chunk)
        _wait_for_save(checkpoint, saved, process)  # this run has made progress
        time.sleep(rng.uniform(0.0, 1.5))
        process.send_signal(signal.SIGKILL)
        process.wait()
        if (out / "phase_diagram.nc").exists():
            return  # the run finished before the kill: nothing left to interrupt


def _wait_for_save(checkpoint: Path, before: int | None, process, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while process.poll() is None:
        if checkpoint.exists() and checkpoint.stat().st_mtime_ns != before:
            return
        assert time.monotonic() < deadline, "the run saved no checkpoint"
        time.sleep(0.02)


def _finish(out: Path, chunk: str) -> dict[str, np.ndarray]:
    final = _run(out, "--chunk-size", chunk)
    assert final.returncode == 0, final.stderr[-2000:]
    numbers = _numbers(out)
    assert numbers["n_valid"].tolist() == [3000] * 6  # every trajectory counted once
    # Nothing but the results is left: no checkpoint, lock or half-written file.
    assert sorted(p.name for p in out.iterdir()) == ["phase_diagram.nc", "phase_diagram.png"]
    return numbers


def test_kill_9_at_random_moments_then_resume_is_bit_identical(tmp_path, reference):
    # Same chunk size as the reference: every number is bit for bit the uninterrupted one.
    out = tmp_path / "out"
    _kill_at_random_moments(out, ["500", "500", "500"], random.Random(12))
    numbers = _finish(out, "500")
    for name, value in reference.items():
        np.testing.assert_array_equal(numbers[name], value, err_msg=name)


def test_kill_9_and_resume_with_other_chunk_sizes(tmp_path, reference):
    # Other chunk sizes at every resume: every number is still bit for bit the
    # uninterrupted one (each trajectory runs in the same compiled tile program).
    out = tmp_path / "out"
    _kill_at_random_moments(out, ["300", "700", "128"], random.Random(7))
    numbers = _finish(out, "900")
    for name, value in reference.items():
        np.testing.assert_array_equal(numbers[name], value, err_msg=name)


def test_another_sigma_after_a_kill_is_refused_and_the_checkpoint_kept(tmp_path):
    out = tmp_path / "out"
    process = _start(out, "--chunk-size", "300")
    _wait_for(out / "phase_diagram.checkpoint.nc")
    process.send_signal(signal.SIGKILL)
    process.wait()
    saved = (out / "phase_diagram.checkpoint.nc").read_bytes()
    refused = _run(out, "--sigma", "2")
    assert refused.returncode == 2
    assert "values.sigma" in refused.stderr and "1.0 there and 2.0 in this run" in refused.stderr
    assert "--fresh" in refused.stderr
    assert (out / "phase_diagram.checkpoint.nc").read_bytes() == saved


def test_two_runs_into_one_folder(tmp_path):
    out = tmp_path / "out"
    # 60,000 trajectories a point (~20 s): the study of 3,000 could finish while the second
    # process was still importing, on a loaded machine, and the second then met the
    # finished results instead of the lock.
    big = ("--trajectories", "60000")
    first = _start(out, *big, "--chunk-size", "3000")
    _wait_for(out / ".attndyn.lock")
    second = _run(out, *big, "--sigma", "2")
    assert first.poll() is None, "the first run ended before the second was refused"
    assert second.returncode == 2 and "is in use by another attndyn run" in second.stderr
    assert first.wait(timeout=900) == 0, first.stderr.read() if first.stderr else ""
    written = {p.name: p.read_bytes() for p in out.iterdir()}
    # Finished: now the other arguments are refused for what the folder holds.
    third = _run(out, *big, "--sigma", "2")
    assert third.returncode == 2 and "made with --sigma 1.0" in third.stderr
    assert {p.name: p.read_bytes() for p in out.iterdir()} == written


def test_damaged_checkpoint_is_reported_and_fresh_recovers(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "phase_diagram.checkpoint.nc").write_bytes(b"\x89HDF\r\n\x1a\n" + b"\0" * 64)
    small = ["--trajectories", "40", "--beta", "1"]
    damaged = subprocess.run(
        [*CLI, *STUDY, *small, "--out", str(out)], env=_env(), capture_output=True, text=True
    )
    assert damaged.returncode == 2
    assert "is damaged or is not an attndyn checkpoint" in damaged.stderr
    assert "--fresh" in damaged.stderr and "Traceback" not in damaged.stderr
    fresh = subprocess.run(
        [*CLI, *STUDY, *small, "--fresh", "--out", str(out)],
        env=_env(),
        capture_output=True,
        text=True,
    )
    assert fresh.returncode == 0, fresh.stderr[-2000:]
