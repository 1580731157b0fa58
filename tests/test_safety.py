"""Nothing lost, nothing mixed (issue 12): checkpoints tied to the whole study, resume by
trajectory index with any chunk size, damaged checkpoints reported, locks, atomic writes,
and output folders that never mix or lose results.

Each test names the item of the issue's "Why" list it guards. The simulations are tiny
and share one compiled kernel per chunk size; the CLI folder tests replace the study by a
stub (what they test is the folder, not the numbers).
"""

import functools
import json
import os
import sys
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import matplotlib.figure
import numpy as np
import pytest
import xarray as xr
from click.testing import CliRunner
from jaxtyping import Array, Float

import attndyn as ad
import attndyn.plot
from attndyn._core.attention import as_float
from attndyn._estimate import estimator as _estimator
from attndyn._estimate.checkpoint import load_checkpoint, study_record, write_checkpoint
from attndyn._estimate.dataset import attach_provenance, provenance_record
from attndyn._estimate.keys import check_key
from attndyn._estimate.plan import make_plan
from attndyn._estimate.tallies import Tallies
from attndyn._io.files import Lock, LockBusy, atomic_write
from attndyn.cli import _phase, main
from tests.markers import two_cpu_devices

N = 40
POINTS = ad.grid(dim=[4], n_tokens=[2], beta=[1.0, 2.5])


class Toy(ad.AbstractTrajectoryModel):
    """A one-step random model that compiles in a fraction of a second: the bookkeeping of
    the estimator is what these tests check, not the dynamics."""

    sigma: Float[Array, ""] = eqx.field(converter=as_float)

    @property
    def save_times(self):
        return np.array([0.5, 1.0])

    def trajectory(self, x0, *, key):
        step = ad.normalize(x0 + self.sigma * jax.random.normal(key, x0.shape, x0.dtype))
        return jnp.stack([step, ad.normalize(step + jnp.roll(step, 1, axis=0))])


def _toy(beta, dim, n_tokens, sigma=1.0):
    del dim, n_tokens
    return Toy(beta * sigma)


def _model(beta, dim, n_tokens, sigma=1.0, drift=0.0, query=None, depth=4, scheme=None):
    del dim, n_tokens
    return ad.DiscreteTransformer(
        ad.Attention(beta, query=None if query is None else jnp.asarray(query, jnp.float32)),
        ad.MatrixValues(sigma, drift=drift),
        scheme=scheme or ad.PostLN(),
        depth=depth,
        saveat=ad.SaveAt(1.0, (0.5, 1.0)),
    )


def _estimate(checkpoint=None, *, chunk_size, sigma=1.0):
    return ad.estimate_probabilities(
        functools.partial(_toy, sigma=sigma),
        POINTS,
        key=jax.random.key(3),
        n_trajectories=N,
        chunk_size=chunk_size,
        checkpoint=checkpoint,
        progress=False,
        # The toy's second step maps both tokens to one point (x₁ + x₂ normalised). It does
        # not declare tokens_can_meet, so the estimator sees numerical merges: counted, so
        # that the merge tallies are resumed too.
        on_merged="count",
    )


def _interrupt_after(monkeypatch, n_chunks: int) -> dict:
    """Make the estimator's n-th chunk raise KeyboardInterrupt (a Ctrl-C mid-point)."""
    calls = {"n": 0}
    original = _estimator.chunk_statistics

    def interrupting(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == n_chunks + 1:
            raise KeyboardInterrupt
        return original(*args, **kwargs)

    monkeypatch.setattr(_estimator, "chunk_statistics", interrupting)
    return calls


@pytest.fixture(scope="module", autouse=True)
def small_tiles():
    """Tiles of 3 trajectories on each of the 2 devices (conftest): a chunk of 6 is one
    call, so a point of 40 trajectories takes several chunks and checkpoints."""
    from attndyn._estimate import runner

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(runner, "CPU_TILE", 3)
        patch.setattr(runner, "ACCELERATOR_TILE", 3)  # the same when the suite runs on a GPU
        yield


@pytest.fixture(scope="module")
def reference():
    return _estimate(chunk_size=8)


# --- Why 1 and 2: the checkpoint covers the study; any chunk size resumes exactly ------------


@two_cpu_devices
def test_resume_with_another_chunk_size_counts_every_trajectory_once(
    tmp_path, monkeypatch, reference
):
    # Why 2: 3 chunks of 6 finished (n_done = 18 at the first point), then a resume with
    # chunk 8 must run indices 18..39 and nothing twice: the numbers of an uninterrupted run.
    path = tmp_path / "ck.nc"
    _interrupt_after(monkeypatch, 3)
    with pytest.raises(KeyboardInterrupt):
        _estimate(path, chunk_size=6)
    with xr.open_dataset(path) as ck:
        assert ck["n_done"].values.tolist() == [18, 0]
    calls = _interrupt_after(monkeypatch, 10**9)
    resumed = _estimate(path, chunk_size=8)
    # Calls of one tile per device (6 trajectories): ⌈22/6⌉ left at the first point, ⌈40/6⌉
    # at the second.
    assert calls["n"] == 4 + 7
    assert resumed["n_valid"].values.tolist() == [N, N]
    for name in resumed.data_vars:
        np.testing.assert_array_equal(resumed[name].values, reference[name].values, name)


def test_checkpoint_of_another_sigma_is_refused(tmp_path, monkeypatch):
    # Why 1: σ is not a grid coordinate; resuming a σ = 1 checkpoint with σ = 2 used to
    # merge the two studies. Refused, naming σ and the way out; the checkpoint is kept.
    path = tmp_path / "ck.nc"
    _interrupt_after(monkeypatch, 2)
    with pytest.raises(KeyboardInterrupt):
        _estimate(path, chunk_size=6)
    before = path.read_bytes()
    message = r"the model's sigma at point .* is 1\.0 there and 2\.0 in this run.*delete the"
    with pytest.raises(ad.ParameterError, match=message):
        _estimate(path, chunk_size=6, sigma=2.0)
    assert path.read_bytes() == before


def _record(model=None, *, make=_model, **options):
    plan_options = {
        "n_trajectories": N,
        "tol": 1e-3,
        "radius": 1.0,
        "chunk_size": None,
        "route": "auto",
        "early_absorption": False,
        "on_nonfinite": "raise",
        "on_merged": "count",  # as _estimate: the record says how merges are tallied
    }
    key = options.pop("key", [0, 3])
    plan_options.update(options)
    plan = make_plan(functools.partial(make, **(model or {})), POINTS, **plan_options)
    return study_record(plan, key, "threefry2x32", (0, 1))


QUERY_A = np.eye(4) + 0.1 * np.arange(16).reshape(4, 4) / 16
QUERY_B = QUERY_A.copy()
QUERY_B[3, 3] += 1e-6


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"model": {"drift": 0.5}}, "the model's values.drift"),
        ({"model": {"sigma": 2.0}}, "the model's values.sigma"),
        ({"model": {"depth": 5}}, "the model's depth"),
        ({"model": {"scheme": ad.PreLN()}}, "the model's scheme.class"),
        ({"n_trajectories": N + 1}, "n_trajectories"),
        ({"tol": 2e-3}, "tol"),
        ({"radius": 0.5}, "radius"),
        ({"key": [0, 4]}, "the PRNG key"),
        ({"route": "full"}, "route at point"),
    ],
)
def test_every_field_of_the_study_is_in_the_checkpoint(tmp_path, change, named):
    # Why 1: model fields (array leaves, static fields, sub-modules), the sample, the key
    # and the route each make another study; the message names which.
    path = tmp_path / "ck.nc"
    base = _record()
    write_checkpoint(path, base, Tallies.zeros(2, 2), POINTS, np.array([0.5, 1.0]))
    other = _record(**change)
    with pytest.raises(ad.ParameterError, match=f"different study: {named}"):
        load_checkpoint(path, other, np.array([N, N]))


def test_matrices_are_compared_by_hash_and_chunk_size_is_not_compared(tmp_path):
    path = tmp_path / "ck.nc"
    q_model = {"query": QUERY_A}
    base = _record(q_model)
    write_checkpoint(path, base, Tallies.zeros(2, 2), POINTS, np.array([0.5, 1.0]))
    # Another chunk size is the same study: it resumes.
    load_checkpoint(path, _record(q_model, chunk_size=7), np.array([N, N]))
    message = r"the model's attention.query at point .* is a 4×4 array \(SHA-256 .* there"
    with pytest.raises(ad.ParameterError, match=message):
        load_checkpoint(path, _record({"query": QUERY_B}), np.array([N, N]))


# --- Why 6: damaged checkpoints are reported with the way out -------------------------------


@pytest.mark.parametrize("damage", ["empty", "garbage", "truncated", "tampered", "no study"])
def test_damaged_checkpoint_is_reported_with_the_way_out(tmp_path, damage):
    path = tmp_path / "ck.nc"
    record = _record(make=_toy)
    tallies = Tallies.zeros(2, 2)
    tallies.n_done[:] = tallies.n_valid[:] = 4
    write_checkpoint(path, record, tallies, POINTS, np.array([0.5, 1.0]))
    data = path.read_bytes()
    if damage == "empty":
        path.write_bytes(b"")
    elif damage == "garbage":
        path.write_bytes(b"not a netCDF file\n" * 10)
    elif damage == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "tampered":  # a valid file whose tallies were edited: checksum differs
        with xr.open_dataset(path) as ds:
            ds = ds.load()
        ds["n_valid"].values[0] = 3
        path.unlink()
        ds.to_netcdf(path)
    else:  # its record of the study removed: it was called "another attndyn version
        # (format 3, this version writes 3)" (audit)
        with xr.open_dataset(path) as ds:
            ds = ds.load().drop_vars("study")
        path.unlink()
        ds.to_netcdf(path)
    with pytest.raises(ad.ParameterError, match=r"damaged.*delete the file \(the CLI's --fresh"):
        load_checkpoint(path, record, np.array([N, N]))
    # The estimator refuses it before anything is compiled.
    with pytest.raises(ad.ParameterError, match="is damaged"):
        _estimate(path, chunk_size=8)


# --- Why 6: bad arguments of the API are named ---------------------------------------------


def test_api_refuses_a_non_key_and_a_folder_as_checkpoint(tmp_path):
    make = functools.partial(_model)
    # estimate_probabilities starts with check_key (called directly here: the test run's
    # runtime type checker would refuse key=0 at the call already).
    for bad in (0, np.zeros(3, np.uint32), jax.random.split(jax.random.key(0), 2)):
        with pytest.raises(ad.ParameterError, match=r"is not a JAX PRNG key|a single PRNG key"):
            check_key(bad)
    assert check_key(jax.random.PRNGKey(1)).shape == (2,)  # raw uint32 keys are accepted
    with pytest.raises(ad.ParameterError, match=r"checkpoint=.* is a folder"):
        ad.estimate_probabilities(
            make, POINTS, key=jax.random.key(0), n_trajectories=4, checkpoint=tmp_path
        )


# --- Why 3: locks and atomic writes --------------------------------------------------------


def test_a_live_lock_is_refused_and_a_dead_one_taken_over(tmp_path):
    path = tmp_path / "x.lock"
    with Lock(path):
        assert path.read_text().split()[0] == str(os.getpid())
        with pytest.raises(LockBusy, match=f"pid {os.getpid()}"):
            Lock(path)
    assert not path.exists()  # released and removed
    # A lock file left by a process that died (kill -9) holds no flock: taken over.
    path.write_text("999999999 somehost 2020-01-01T00:00:00\n")
    with Lock(path):
        assert path.read_text().split()[0] == str(os.getpid())


def test_checkpoint_in_use_is_refused(tmp_path):
    path = tmp_path / "ck.nc"
    with Lock(tmp_path / "ck.nc.lock"), pytest.raises(ad.ParameterError, match="in use by"):
        _estimate(path, chunk_size=8)


def test_interrupted_write_leaves_the_previous_file(tmp_path):
    path = tmp_path / "result.nc"
    path.write_bytes(b"finished results")

    def crash(temporary):
        temporary.write_bytes(b"half of the new")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        atomic_write(path, crash)
    assert path.read_bytes() == b"finished results"
    assert [p.name for p in tmp_path.iterdir()] == ["result.nc"]


# --- Why 3 and 4: output folders (the study itself is a stub here) ------------------------


CLI = ["phase-diagram", "--beta", "0.5", "--dim", "4", "--n-trajectories", "8", "--no-progress"]


@pytest.fixture
def stub_study(monkeypatch):
    """Replace the phase-diagram study and its figure by instant stand-ins."""
    calls = []

    def study(kind, spec, mc, points, *, checkpoint, progress, metadata):
        del kind, progress
        calls.append(checkpoint)
        ds = xr.Dataset({"count": ("point", np.arange(len(points)))})
        return attach_provenance(ds, provenance_record(0.0, engine=spec.engine, **metadata))

    monkeypatch.setattr(_phase, "phase_diagram_study", study)
    monkeypatch.setattr(attndyn.plot, "phase_diagram", lambda ds: matplotlib.figure.Figure())
    return calls


def _files(folder):
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_ctrl_c_says_how_to_resume(tmp_path, monkeypatch):
    # Click printed "Aborted!" alone (audit); the checkpoint was kept but nothing said so.
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(_phase, "phase_diagram_study", interrupted)
    result = CliRunner().invoke(main, [*CLI, "--out", str(tmp_path)])
    assert result.exit_code == 130
    assert "Interrupted. Rerun the same command to resume" in result.output
    assert "Traceback" not in result.output and "Aborted!" not in result.output


def test_busy_output_folder_is_refused(tmp_path, stub_study):
    # Why 3: two runs into one --out at once; the second is refused, naming the first.
    with Lock(tmp_path / ".attndyn.lock"):
        result = CliRunner().invoke(main, [*CLI, "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert f"is in use by another attndyn run (pid {os.getpid()}" in result.output
    assert stub_study == []


def test_finished_results_of_other_arguments_are_kept(tmp_path, stub_study):
    # Why 3: a later run with other arguments used to replace the .nc and .png silently.
    first = CliRunner().invoke(main, [*CLI, "--out", str(tmp_path)])
    assert first.exit_code == 0, first.output
    written = _files(tmp_path)
    assert set(written) == {"phase_diagram.nc", "phase_diagram.png"}
    other = CliRunner().invoke(main, [*CLI, "--sigma", "2", "--out", str(tmp_path)])
    assert other.exit_code == 2
    assert "holds phase_diagram.nc, made with --sigma 1.0 (this run: --sigma 2.0)" in other.output
    assert "--overwrite" in other.output
    assert _files(tmp_path) == written and len(stub_study) == 1
    # The same arguments again replace their own results (bit-identical numbers, whatever
    # the chunk size or the compilation cache, which are not arguments of the results);
    # --overwrite replaces others'.
    assert CliRunner().invoke(main, [*CLI, "--out", str(tmp_path)]).exit_code == 0
    again = [*CLI, "--no-cache", "--chunk-size", "7", "--out", str(tmp_path)]
    assert CliRunner().invoke(main, again).exit_code == 0
    result = CliRunner().invoke(main, [*CLI, "--sigma", "2", "--overwrite", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    with xr.open_dataset(tmp_path / "phase_diagram.nc") as ds:
        assert json.loads(ds.attrs["provenance"])["arguments"]["sigma"] == 2.0


def test_a_figure_without_its_dataset_is_not_replaced(tmp_path, stub_study):
    (tmp_path / "phase_diagram.png").write_bytes(b"someone's figure")
    result = CliRunner().invoke(main, [*CLI, "--out", str(tmp_path)])
    assert result.exit_code == 2 and "phase_diagram.png from another run" in result.output
    assert (tmp_path / "phase_diagram.png").read_bytes() == b"someone's figure"


@pytest.fixture
def stub_evolution(monkeypatch, tmp_path):
    """Replace the evolution study and its two figures by instant stand-ins; the heatmap
    records whether the dataset was already on disk when it was drawn (it never is: the
    outputs are renamed into place together, after all of them are written)."""
    from attndyn.cli import _evolution

    drawn = []

    def study(spec, mc, points, *, saves, checkpoint, progress, metadata):
        del spec, mc, saves, checkpoint, progress
        ds = xr.Dataset({"count": ("point", np.arange(len(points)))})
        return attach_provenance(ds, provenance_record(0.0, engine="discrete", **metadata))

    def heatmap(ds):
        drawn.append((tmp_path / "evolution.nc").exists())
        return matplotlib.figure.Figure()

    monkeypatch.setattr(_evolution, "evolution_study", study)
    monkeypatch.setattr(_evolution, "series", lambda ds: [])
    monkeypatch.setattr(attndyn.plot, "evolution", lambda ds, **kw: matplotlib.figure.Figure())
    monkeypatch.setattr(attndyn.plot, "pair_density", heatmap)
    return drawn


EVOLUTION = [
    "evolution",
    "--beta",
    "1",
    "--n-tokens",
    "3",
    "--n-trajectories",
    "8",
    "--no-progress",
]


def test_evolution_writes_its_heatmap_after_the_dataset_and_guards_it(tmp_path, stub_evolution):
    # The pair-density heatmap was written before the dataset and was not among the files
    # an --out of other arguments protects (audit): a run that died in between left a
    # figure no dataset explains, which the next run replaced silently.
    (tmp_path / "evolution_pair_density.png").write_bytes(b"someone's heatmap")
    refused = CliRunner().invoke(main, [*EVOLUTION, "--out", str(tmp_path)])
    assert refused.exit_code == 2
    assert "evolution_pair_density.png from another run" in refused.output
    assert (tmp_path / "evolution_pair_density.png").read_bytes() == b"someone's heatmap"
    assert stub_evolution == []
    (tmp_path / "evolution_pair_density.png").unlink()
    result = CliRunner().invoke(main, [*EVOLUTION, "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert stub_evolution == [False]  # staged, not yet in place while the heatmap is drawn
    assert set(_files(tmp_path)) == {"evolution.nc", "evolution.png", "evolution_pair_density.png"}


def test_outputs_replace_the_old_ones_together_or_not_at_all(tmp_path, stub_evolution):
    # A --overwrite rerun that failed on a full disk left its new dataset beside the old
    # figure (audit): the outputs are now written first and renamed together.
    import attndyn.plot

    first = CliRunner().invoke(main, [*EVOLUTION, "--out", str(tmp_path)])
    assert first.exit_code == 0, first.output
    before = _files(tmp_path)

    class FullDisk(matplotlib.figure.Figure):
        def savefig(self, *args, **kwargs):
            raise OSError(28, "No space left on device")

    attndyn.plot.pair_density = lambda ds: FullDisk()  # the last of the three files written
    rerun = [*EVOLUTION, "--seed", "5", "--overwrite", "--out", str(tmp_path)]
    result = CliRunner().invoke(main, rerun)
    assert result.exit_code == 1
    assert result.output.count("Error:") == 1 and "No space left" in result.output
    assert "previous outputs are unchanged" in result.output
    assert _files(tmp_path) == before  # the old three, and no temporary file


def test_output_that_is_a_file_or_unwritable_fails_before_computing(
    tmp_path, stub_study, monkeypatch
):
    # Why 4: `schemes --out afile` failed after 52 s of computing; a read-only --out after
    # the first point. Both are refused before anything runs.
    import attndyn.cli._schemes as schemes_cli

    monkeypatch.setattr(schemes_cli, "schemes_study", lambda **kw: pytest.fail("computed"))
    afile = tmp_path / "afile"
    afile.write_text("keep me")
    result = CliRunner().invoke(main, ["schemes", "--out", str(afile)])
    assert result.exit_code == 2 and "is a file, not a folder" in result.output
    assert afile.read_text() == "keep me"
    unwritable = ["/proc/attndyn-out"]  # /proc refuses new entries, even to root
    if sys.platform == "linux" and os.geteuid() != 0:
        locked = tmp_path / "read-only"
        locked.mkdir(mode=0o500)
        unwritable.append(str(locked))
    for folder in unwritable if sys.platform == "linux" else []:
        result = CliRunner().invoke(main, [*CLI, "--out", folder])
        assert result.exit_code == 2 and "is not a writable folder" in result.output
    assert stub_study == []


def test_validation_comes_before_the_folder_and_a_refused_run_leaves_none(
    tmp_path, stub_study, monkeypatch
):
    out = tmp_path / "new" / "folder"
    result = CliRunner().invoke(main, [*CLI, "--tol", "2", "--out", str(out)])
    assert result.exit_code == 2 and not out.exists()

    def refusing(*args, **kwargs):
        raise ad.ParameterError("early_absorption does not apply here.")

    monkeypatch.setattr(_phase, "phase_diagram_study", refusing)
    result = CliRunner().invoke(main, [*CLI, "--out", str(out)])
    assert result.exit_code == 2 and not out.exists()  # the folder it created is gone


def test_fresh_deletes_only_under_the_lock(tmp_path, stub_study):
    (tmp_path / "phase_diagram.checkpoint.nc").write_bytes(b"another run's progress")
    with Lock(tmp_path / ".attndyn.lock"):
        busy = CliRunner().invoke(main, [*CLI, "--fresh", "--out", str(tmp_path)])
    assert busy.exit_code == 2
    assert (tmp_path / "phase_diagram.checkpoint.nc").exists()  # the live run keeps it
    assert CliRunner().invoke(main, [*CLI, "--fresh", "--out", str(tmp_path)]).exit_code == 0
    assert not (tmp_path / "phase_diagram.checkpoint.nc").exists()


def test_a_checkpoint_of_the_other_precision_names_x64(tmp_path):
    # Resuming a float32 checkpoint in float64 said "the model's attention.beta ... is 0.0
    # there and 0.0 in this run" (audit): every parameter's dtype changes with x64, and
    # the nested points were compared before x64 itself. Plain entries come first now.
    path = tmp_path / "ck.nc"
    write_checkpoint(path, _record(), Tallies.zeros(2, 2), POINTS, np.array([0.5, 1.0]))
    with jax.enable_x64(True):
        other = _record(x64=True)
    with pytest.raises(
        ad.ParameterError,
        match=r"different study: the precision, x64 \(CLI: --x64\), is false there and true",
    ):
        load_checkpoint(path, other, np.array([N, N]))


def test_equal_values_of_other_types_show_their_dtypes():
    from attndyn._estimate.checkpoint import _mismatch

    def beta(dtype):
        return {"beta": {"dtype": dtype, "shape": [], "value": [0.0]}}

    message = _mismatch(Path("ck.nc"), beta("float32"), beta("float64"))
    assert "beta is 0.0 (float32) there and 0.0 (float64) in this run" in message
