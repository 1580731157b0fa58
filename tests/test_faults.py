"""Faults (issues 12 and 29): ``kill -9`` and Ctrl-C at random moments, resumes with other
chunk sizes, in another process and in the same one (a notebook), another σ after a kill,
two runs into one folder, a damaged checkpoint, and a file system that fills up under the
checkpoint and the final outputs.

The tests that run the ``attndyn`` command line in subprocesses are slow (JAX starts in
every process) and marked so; the default run keeps the in-process versions, with a model
that compiles in a fraction of a second. The other in-process guarantees are in
``tests/test_safety.py``.
"""

import contextlib
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import xarray as xr

import attndyn as ad
from attndyn._models.base import advance_saves, begin_saves

#: The main thread, whose ident is set (pthread_kill needs an int).
_MAIN_THREAD = threading.main_thread().ident or 0


@pytest.fixture(autouse=True)
def sigint_raises():
    """Ctrl-C as in a terminal: SIGINT raises KeyboardInterrupt. A suite started in the
    background of a non-interactive shell (``pytest ... &``) inherits SIGINT ignored, which
    attndyn leaves alone as the user's choice (:func:`attndyn._io.interrupts.watching`),
    and these tests would then see no interrupt at all."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


STUDY = ["phase-diagram", "--beta", "0.5,1,1.5,2,2.5,3", "--dim", "4", "--n-trajectories", "3000"]
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


@pytest.mark.slow
def test_kill_9_at_random_moments_then_resume_is_bit_identical(tmp_path, reference):
    # Same chunk size as the reference: every number is bit for bit the uninterrupted one.
    out = tmp_path / "out"
    _kill_at_random_moments(out, ["500", "500", "500"], random.Random(12))
    numbers = _finish(out, "500")
    for name, value in reference.items():
        np.testing.assert_array_equal(numbers[name], value, err_msg=name)


@pytest.mark.slow
def test_kill_9_and_resume_with_other_chunk_sizes(tmp_path, reference):
    # Other chunk sizes at every resume: every number is still bit for bit the
    # uninterrupted one (each trajectory runs in the same compiled tile program).
    out = tmp_path / "out"
    _kill_at_random_moments(out, ["300", "700", "128"], random.Random(7))
    numbers = _finish(out, "900")
    for name, value in reference.items():
        np.testing.assert_array_equal(numbers[name], value, err_msg=name)


@pytest.mark.slow
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


@pytest.mark.slow
def test_two_runs_into_one_folder(tmp_path):
    out = tmp_path / "out"
    # 60,000 trajectories a point (~20 s): the study of 3,000 could finish while the second
    # process was still importing, on a loaded machine, and the second then met the
    # finished results instead of the lock.
    big = ("--n-trajectories", "60000")
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


@pytest.mark.slow
def test_damaged_checkpoint_is_reported_and_fresh_recovers(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "phase_diagram.checkpoint.nc").write_bytes(b"\x89HDF\r\n\x1a\n" + b"\0" * 64)
    small = ["--n-trajectories", "40", "--beta", "1"]
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


# --- issue 29: Ctrl-C that stops at once, in the same process and in another ----------------


class Walk(ad.AbstractModel):
    """A random walk of N tokens on the sphere, run a block of steps at a time
    (:meth:`AbstractModel.advance`): it compiles in a fraction of a second, and a run of a
    few thousand steps is long enough to be interrupted anywhere."""

    sigma: jax.Array
    n_steps: int = eqx.field(static=True)

    @property
    def save_times(self):
        return np.array([0.5, 1.0])

    @property
    def _saves(self) -> np.ndarray:
        return np.array([self.n_steps // 2, self.n_steps])

    def stepping(self):
        return self.n_steps, 1

    def begin(self, x0, keys):
        return x0, begin_saves(self._saves, x0)

    def advance(self, state, keys, start, stop):
        def run(x, lo, hi, anchor):
            def step(n, x):
                noise = jax.vmap(lambda k: jax.random.normal(jax.random.fold_in(k, n), x.shape[1:]))
                return ad.normalize(x + self.sigma * noise(keys))

            return jax.lax.fori_loop(lo, hi, step, x)

        x, saves = state
        return advance_saves(self._saves, x, saves, start, stop, run, lambda x: x)

    def finish(self, state):
        return jnp.swapaxes(state[1], 0, 1)

    def simulate(self, x0, keys):
        state = self.advance(self.begin(x0, keys), keys, jnp.int32(0), jnp.int32(self.n_steps))
        return self.finish(state)


WALK_POINTS = ad.grid(dim=[3], n_tokens=[3], beta=[0.3, 0.6])
TALLIES = ("count", "n_valid", "n_nonfinite", "n_merged", "mean_cosine", "pair_density")


def _walk(checkpoint=None, *, chunk_size, n_steps=1500, n_trajectories=32):
    return ad.estimate_probabilities(
        lambda beta, dim, n_tokens: Walk(jnp.asarray(beta, jnp.float32), n_steps),
        WALK_POINTS,
        key=jax.random.key(5),
        n_trajectories=n_trajectories,
        chunk_size=chunk_size,
        checkpoint=checkpoint,
        progress=False,
        on_merged="count",
    )


class _InterruptAfter:
    """Send SIGINT to the main thread ``delay`` seconds into the ``with`` block, unless the
    block ended first (never after it: the interrupt must not reach the test runner)."""

    def __init__(self, delay: float):
        self.lock = threading.Lock()
        self.running = True
        self.sent = False
        self.timer = threading.Timer(delay, self._send)

    def _send(self):
        with self.lock:
            if self.running:
                self.sent = True
                signal.pthread_kill(_MAIN_THREAD, signal.SIGINT)

    def __enter__(self):
        self.timer.start()
        return self

    def __exit__(self, *exc):
        with self.lock:
            self.running = False
        self.timer.cancel()
        self.timer.join()
        time.sleep(0.01)  # a signal sent just before is raised here, inside the caller's try
        return False


def _interrupted_walk(checkpoint, *, chunk_size, delay):
    """Run the walk study, Ctrl-C'd ``delay`` s in; whether it was, and how long it took to
    stop after the signal."""
    started = time.monotonic()
    interrupt = _InterruptAfter(delay)
    try:
        with interrupt:
            _walk(checkpoint, chunk_size=chunk_size)
    except KeyboardInterrupt:
        assert interrupt.sent
        return True, time.monotonic() - started - delay
    return False, 0.0


def _same_numbers(a, b):
    for name in TALLIES:
        np.testing.assert_array_equal(a[name].values, b[name].values, err_msg=name)


@pytest.fixture(scope="module")
def walk_reference():
    """The uninterrupted walk study (compiles its programs once for the module) and the
    seconds a run takes once compiled."""
    with pytest.MonkeyPatch.context() as patch:
        from attndyn._estimate import runner

        patch.setattr(runner, "CPU_TILE", 8)
        patch.setattr(runner, "ACCELERATOR_TILE", 8)
        _walk(chunk_size=16)
        started = time.monotonic()
        reference = _walk(chunk_size=16)
        return reference, time.monotonic() - started


def _ctrl_c_and_resume(tmp_path, walk_reference, tile, chunks, rng):
    tile(8)
    reference, seconds = walk_reference
    checkpoint = tmp_path / "walk.nc"
    interrupted = 0
    for chunk in chunks:
        was, stopped_in = _interrupted_walk(
            checkpoint, chunk_size=chunk, delay=rng.uniform(0.05, 0.8) * seconds
        )
        interrupted += was
        # Stopped within a block of device work and a checkpoint write (blocks are about
        # 0.5 s; on a loaded 2-core machine allow 10 s).
        assert stopped_in < 10, stopped_in
        assert not (tmp_path / "walk.nc.lock").exists()  # released
    # A second call in the same process resumes (no lock of xarray's or ours left held),
    # with another chunk size, to the numbers of the uninterrupted run.
    _same_numbers(_walk(checkpoint, chunk_size=24), reference)
    return interrupted


def test_ctrl_c_at_a_random_moment_then_resume_in_the_same_process(tmp_path, walk_reference, tile):
    # A notebook user's interrupt: the checkpoint is saved, the lock released, and calling
    # again in the same process resumes (it deadlocked in 2 of 9 trials on a lock of
    # xarray's that an interrupted write left taken).
    _ctrl_c_and_resume(tmp_path, walk_reference, tile, [16], random.Random(29))


@pytest.mark.slow
def test_ctrl_c_at_many_random_moments_then_resume_in_the_same_process(
    tmp_path, walk_reference, tile
):
    interrupted = _ctrl_c_and_resume(
        tmp_path, walk_reference, tile, [16, 8, 40, 24, 16, 8, 32, 16], random.Random(7)
    )
    assert interrupted >= 2  # most delays fall inside the run


def test_an_interrupt_during_a_checkpoint_write_waits_for_the_write(
    tmp_path, walk_reference, tile, monkeypatch
):
    # The write runs in a worker that a Ctrl-C cannot stop midway: xarray's and netCDF's
    # locks are always released, and the file is whole. The interrupt then stops the run.
    tile(8)
    reference, _ = walk_reference
    writing = threading.Event()
    threads = []
    original = xr.Dataset.to_netcdf

    def slow_write(self, *args, **kwargs):
        threads.append(threading.current_thread() is threading.main_thread())
        writing.set()
        time.sleep(0.3)  # inside the write: the interrupt arrives now
        return original(self, *args, **kwargs)

    monkeypatch.setattr(xr.Dataset, "to_netcdf", slow_write)

    def interrupt_when_writing():
        if writing.wait(60):
            time.sleep(0.05)
            signal.pthread_kill(_MAIN_THREAD, signal.SIGINT)

    helper = threading.Thread(target=interrupt_when_writing)
    helper.start()
    checkpoint = tmp_path / "walk.nc"
    with pytest.raises(KeyboardInterrupt):
        _walk(checkpoint, chunk_size=16)
    helper.join()
    assert threads and not any(threads)  # every write in a worker, never the main thread
    monkeypatch.setattr(xr.Dataset, "to_netcdf", original)
    done = threading.Event()
    result = {}

    def resume():  # in a thread, so that a deadlock fails the test instead of hanging it
        result["ds"] = _walk(checkpoint, chunk_size=16)
        done.set()

    worker = threading.Thread(target=resume, daemon=True)
    worker.start()
    assert done.wait(300), "the second call in the same process did not finish (deadlock?)"
    _same_numbers(result["ds"], reference)


def _stop_time(out: Path, delay: float, command: list[str]) -> tuple[int, float, str]:
    """Start ``command``, send SIGINT after ``delay`` s; (status, seconds it took to stop
    after the signal, stderr)."""
    process = subprocess.Popen(
        [*CLI, *command, "--out", str(out)],
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(delay)
    sent = time.monotonic()
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=600)
    return process.returncode, time.monotonic() - sent, stderr


#: The audit's command (depth 10⁶: a chunk ran for minutes; exit 130 came 96 s after
#: Ctrl-C, and evolution once swallowed the interrupt and finished with status 0).
DEEP = ["--dim", "4", "--beta", "1", "--n-trajectories", "64", "--depth", "1000000"]
DEEP += ["--horizon", "10", "--route", "full", "--early-absorption", "off", "--no-progress"]
DEEP_COMMANDS = {
    "phase_diagram": ["phase-diagram", *DEEP],
    "evolution": ["evolution", *DEEP, "--n-tokens", "2", "--saves", "2"],
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(DEEP_COMMANDS))
def test_ctrl_c_stops_a_deep_cli_run_within_seconds(tmp_path, name):
    out = tmp_path / "out"
    rng = random.Random(130)
    for _ in range(2):
        status, seconds, stderr = _stop_time(out, rng.uniform(15, 30), DEEP_COMMANDS[name])
        assert status == 130, stderr[-2000:]
        # Measured 1.4-2.5 s on a loaded 2-core machine (the "Interrupted" line within half a
        # second, then the interpreter's exit); it was 96 s. 10 s leaves room for the load.
        assert seconds < 10, seconds
        assert "Interrupted. Rerun the same command to resume" in stderr
        assert "Traceback" not in stderr and "Exception ignored" not in stderr
        assert not (out / ".attndyn.lock").exists()
        assert (out / f"{name}.checkpoint.nc").exists()


@pytest.mark.slow
def test_ctrl_c_at_random_moments_then_resume_in_another_process(tmp_path, reference):
    # The CLI study of the kill -9 tests, interrupted by SIGINT instead: every stop is a
    # clean exit 130 with its checkpoint, and the resume (other chunk sizes) is bit for bit.
    out = tmp_path / "out"
    rng = random.Random(31)
    checkpoint = out / "phase_diagram.checkpoint.nc"
    for chunk in ["500", "300", "700"]:
        saved = checkpoint.stat().st_mtime_ns if checkpoint.exists() else None
        process = _start(out, "--chunk-size", chunk)
        _wait_for_save(checkpoint, saved, process)
        time.sleep(rng.uniform(0.0, 1.5))
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=600)
        if process.returncode == 0:
            break  # finished before the interrupt
        assert process.returncode == 130, stderr[-2000:]
    numbers = _finish(out, "900")
    for name, value in reference.items():
        np.testing.assert_array_equal(numbers[name], value, err_msg=name)


# --- issue 29: a file system that fills up --------------------------------------------------


@contextlib.contextmanager
def _tmpfs(path: Path, size: str):
    """A tmpfs of ``size`` mounted at ``path`` (root on Linux only; skipped otherwise)."""
    if not sys.platform.startswith("linux") or os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root on Linux")
    path.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()!r}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def _fill(folder: Path, leave: int) -> Path:
    """Fill ``folder``'s file system but ``leave`` bytes."""
    stats = os.statvfs(folder)
    filler = folder / "filler"
    with open(filler, "wb") as handle:
        handle.write(b"\0" * max(0, stats.f_bavail * stats.f_frsize - leave))
    return filler


def test_a_full_disk_under_the_checkpoint_keeps_it_usable(tmp_path, walk_reference, tile):
    # The full disk gave an 85-line "RuntimeError: NetCDF: HDF error" traceback (audit).
    tile(8)
    reference, _ = walk_reference
    with _tmpfs(tmp_path / "disk", "2m") as disk:
        checkpoint = disk / "walk.nc"
        with pytest.raises(KeyboardInterrupt):  # stopped after point 0 and its checkpoint
            _walk_until_first_save(checkpoint)
        saved = checkpoint.read_bytes()
        filler = _fill(disk, leave=4096)
        with pytest.raises(OSError) as failed:
            _walk(checkpoint, chunk_size=16)
        message = str(failed.value.strerror)
        assert "walk.nc" in message and "free on its file system" in message, message
        assert "\n" not in message
        assert checkpoint.read_bytes() == saved  # the previous checkpoint, whole
        assert sorted(p.name for p in disk.iterdir()) == ["filler", "walk.nc"]  # no partial
        filler.unlink()
        _same_numbers(_walk(checkpoint, chunk_size=16), reference)


def _walk_until_first_save(checkpoint: Path) -> None:
    from attndyn._estimate import estimator, study

    original = study.Study.save  # what _Study runs (its merge mixin only declares it)

    def save_then_stop(self):
        original(self)
        if int(self.tallies.n_done[0]) == 32:  # point 0 is done and saved
            raise KeyboardInterrupt

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(estimator._Study, "save", save_then_stop)
        _walk(checkpoint, chunk_size=16)


def test_a_full_disk_at_the_final_write_changes_no_output(tmp_path, monkeypatch):
    # A --seed 5 --overwrite rerun into a finished folder that failed on a full disk left its
    # phase_diagram.nc beside the seed-0 phase_diagram.png (audit). The outputs are written
    # first and renamed together: either all of them are replaced, or none.
    import matplotlib.figure
    from click.testing import CliRunner

    import attndyn.plot
    from attndyn._estimate.dataset import attach_provenance, provenance_record
    from attndyn.cli import _phase, main

    filler = {}

    def study(kind, spec, mc, points, *, checkpoint, progress, metadata):
        del kind, mc, progress
        if "path" in filler:  # the rerun: the disk fills up while it computes
            filler["file"] = _fill(filler["path"], leave=16 * 1024)
        ds = xr.Dataset({"count": ("point", np.arange(len(points) * 40_000))})
        return attach_provenance(ds, provenance_record(0.0, engine=spec.engine, **metadata))

    monkeypatch.setattr(_phase, "phase_diagram_study", study)
    monkeypatch.setattr(attndyn.plot, "phase_diagram", lambda ds: matplotlib.figure.Figure())
    with _tmpfs(tmp_path / "disk", "4m") as disk:
        run = ["phase-diagram", "--beta", "1", "--dim", "4", "--no-progress", "--out", str(disk)]
        assert CliRunner().invoke(main, run).exit_code == 0
        before = {p.name: p.read_bytes() for p in disk.iterdir()}
        assert set(before) == {"phase_diagram.nc", "phase_diagram.png"}
        (disk / "phase_diagram.checkpoint.nc").write_bytes(b"progress of the rerun")
        filler["path"] = disk
        result = CliRunner().invoke(main, [*run, "--seed", "5", "--overwrite"])
        assert result.exit_code == 1, result.output
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("Error: writing phase_diagram"), lines
        assert "previous outputs are unchanged" in lines[0]
        after = {p.name: p.read_bytes() for p in disk.iterdir() if p.name != "filler"}
        assert after == {**before, "phase_diagram.checkpoint.nc": b"progress of the rerun"}
        # A disk too small for the outputs is refused before anything is computed.
        filler["file"].unlink()
        _fill(disk, leave=64 * 1024)
        del filler["path"]
        result = CliRunner().invoke(main, [*run, "--seed", "6", "--overwrite"])
        assert result.exit_code == 1 and "nothing was computed" in result.output, result.output


def test_a_ctrl_c_that_python_swallows_is_raised_again(capfd):
    # evolution once printed "Exception ignored in: <function _xla_gc_callback ...>
    # KeyboardInterrupt" and finished with status 0 (audit): a KeyboardInterrupt raised in a
    # garbage-collection callback is swallowed by Python. The signal is recorded first, and
    # raised again at the next check (between blocks, points, and before the outputs).
    import gc

    from attndyn._io import interrupts

    def collected(phase, info):
        if phase == "start" and not fired:
            fired.append(True)
            signal.pthread_kill(_MAIN_THREAD, signal.SIGINT)
            sum(range(100))  # the handler runs here, inside the callback

    fired = []
    swallowed = False
    gc.callbacks.append(collected)
    try:
        with pytest.raises(KeyboardInterrupt), interrupts.watching():
            gc.collect()  # swallowed here
            swallowed = True
            interrupts.check()
    finally:
        gc.callbacks.remove(collected)
    assert fired and swallowed
    assert "Exception ignored" not in capfd.readouterr().err
    interrupts.check()  # outside a run: nothing left to raise
