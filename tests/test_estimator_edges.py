"""Issue 42 items 7 and 9, the estimator's part: arguments refused by name, no temporary
file left by a Ctrl-C during the final write, and the point index of every results file."""

import json
import re
import signal
import threading
import time

import numpy as np
import pytest
import xarray as xr

import attndyn as ad
from attndyn.cli._output import Output
from tests.helpers import run_untyped

#: Tried in a child process (``run_untyped``): here the tests' runtime type checker would
#: refuse these kinds first, and a user's process has only attndyn's own checks.
_REFUSALS_CHILD = """
import json, jax, attndyn as ad

def model(beta, dim, n_tokens):
    raise AssertionError("a model was built: the argument was not checked first")

cases = {
    "tol": {"tol": "0.001"},
    "checkpoint": {"checkpoint": 123},
    "empty": {"checkpoint": ""},
    "progress": {"progress": "no"},
    "none": {"model_fn": None},
    "int": {"model_fn": 3},
}
for name, change in cases.items():
    args = {"model_fn": model, "key": jax.random.key(0), "n_trajectories": 8, "progress": False}
    args.update(change)
    model_fn = args.pop("model_fn")
    try:
        ad.estimate_probabilities(model_fn, ad.grid(dim=[3], n_tokens=[2], beta=[1.0]), **args)
        print(json.dumps([name, "ran", ""]))
    except Exception as error:
        print(json.dumps([name, type(error).__name__, str(error)]))
"""


def test_estimator_arguments_are_refused_by_name():
    # On 9f5b4a1: a TypeError from pathlib (checkpoint=123) or from calling None; a truthy
    # string switched the bar on. Refused by name before any model is built.
    expected = {
        "tol": "tol='0.001'",
        "checkpoint": "checkpoint=123 must be a file path",
        "empty": "checkpoint='' must be a file path",
        "progress": "progress='no' must be True or False",
        "none": "model_fn must be a function that builds the model of a point.* got NoneType",
        "int": "model_fn must be a function that builds the model of a point.* got int",
    }
    seen = [json.loads(line) for line in run_untyped(_REFUSALS_CHILD).splitlines()]
    assert [name for name, _, _ in seen] == list(expected)
    for name, kind, message in seen:
        assert kind == "ParameterError" and re.search(expected[name], message), (name, message)


_MAIN = threading.main_thread().ident or 0


def test_a_ctrl_c_during_the_final_write_leaves_no_temporary_file(tmp_path):
    # The write runs in a worker a Ctrl-C cannot stop; the interrupt was raised after it,
    # before its temporary file was staged, so nothing removed it (the safety guide says
    # the interrupted write's temporary files are removed). Here the SIGINT arrives while
    # the worker writes.
    writing = threading.Event()

    def slow_write(path):
        writing.set()
        time.sleep(0.3)
        path.write_bytes(b"new")

    def interrupt_when_writing():
        if writing.wait(30):
            time.sleep(0.05)
            signal.pthread_kill(_MAIN, signal.SIGINT)

    out = tmp_path / "out"
    helper = threading.Thread(target=interrupt_when_writing)
    with Output(str(out), dataset="x.nc", figures=[], arguments={}, overwrite=False) as output:
        helper.start()
        with pytest.raises(KeyboardInterrupt):
            output.stage("x.nc", slow_write)
            time.sleep(1)  # an interrupt that was not raised yet is raised here
    helper.join()
    assert sorted(p.name for p in out.glob("*")) == [] and not list(out.glob(".*.partial"))


def _unindexed() -> xr.Dataset:
    """A dataset along ``point`` as the modes study writes it: a plain ``point`` coordinate
    and the parameters as coordinates along it, no index over them."""
    return xr.Dataset(
        {"n_clusters": (("point", "time"), np.arange(8.0).reshape(4, 2))},
        coords={
            "point": np.arange(4),
            "time": [0.0, 1.0],
            "dim": ("point", [2, 2, 3, 3]),
            "n_tokens": ("point", [64, 64, 64, 64]),
            "beta": ("point", [4.0, 9.0, 4.0, 9.0]),
        },
    )


def test_open_dataset_indexes_the_points_of_a_file_written_without_an_index(tmp_path):
    # modes.nc has no point_index attribute: ad.open_dataset gave plain coordinates, and
    # .sel(beta=..., dim=...) failed (issue 42 item 9). The numbers are untouched.
    path = tmp_path / "modes.nc"
    ad.to_netcdf(_unindexed(), path)
    back = ad.open_dataset(path)
    assert list(back.indexes["point"].names) == ["dim", "n_tokens", "beta"]
    assert float(back.sel(beta=9.0, dim=3)["n_clusters"].isel(time=1).item()) == 7.0
    np.testing.assert_array_equal(back["n_clusters"].values, _unindexed()["n_clusters"].values)


def test_plain_xarray_selects_after_one_documented_line(tmp_path):
    # netCDF cannot hold a MultiIndex and xarray indexes only a coordinate named as its
    # dimension: plain xr.open_dataset gives plain coordinates. The file names its index
    # (point_index), from which one line restores it (docs: estimating guide).
    from attndyn._io.metadata import index_points

    path = tmp_path / "study.nc"
    ad.to_netcdf(index_points(_unindexed()), path)
    with xr.open_dataset(path) as plain:
        with pytest.raises((KeyError, ValueError)):
            plain.sel(beta=9.0, dim=3)
        indexed = plain.set_xindex(plain.attrs["point_index"].split())
        assert float(indexed.sel(beta=9.0, dim=3)["n_clusters"].isel(time=1).item()) == 7.0
