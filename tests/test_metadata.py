"""The datasets' CF metadata and point index (attndyn._io.metadata), on datasets built
by hand: no simulation."""

import numpy as np
import pytest
import xarray as xr

import attndyn as ad
from attndyn._io.metadata import (
    POINT_INDEX,
    VARIABLES,
    Variable,
    describe,
    for_netcdf,
    index_points,
    register,
)


def _points() -> xr.Dataset:
    """Four points of an evolution-like study: a string model, NaN ε where it has none."""
    return xr.Dataset(
        {"probability": (("point", "time"), np.arange(8.0).reshape(4, 2) / 8)},
        coords={
            "point": np.arange(4),
            "time": [0.0, 1.0],
            "model": ("point", ["full", "full", "hybrid", "hybrid"]),
            "dim": ("point", [4, 4, 4, 4]),
            "eps": ("point", [np.nan, np.nan, 1.0, 1.0]),
            "beta": ("point", [0.5, 2.0, 0.5, 2.0]),
        },
    )


def test_points_select_by_value_and_survive_netcdf(tmp_path):
    ds = index_points(_points())
    assert float(ds.sel(model="hybrid", beta=2.0)["probability"].isel(time=1).item()) == 7 / 8
    assert ds.sel(beta=0.5, model="full").sizes["point"] == 1
    path = tmp_path / "points.nc"
    ad.to_netcdf(ds, path)
    with xr.open_dataset(path) as plain:  # plain coordinates, their names recorded
        assert plain.attrs[POINT_INDEX] == "model dim eps beta"
        assert "point" not in plain.coords
        assert "_FillValue" not in plain["beta"].encoding  # CF: coordinates have none
    back = ad.open_dataset(path)
    assert list(back.indexes["point"].names) == ["model", "dim", "eps", "beta"]
    assert back.indexes["point"].equals(ds.indexes["point"])
    np.testing.assert_array_equal(back["probability"].values, ds["probability"].values)
    assert np.isnan(back.sel(model="full", beta=0.5)["eps"].item())


def test_a_dataset_without_point_coordinates_is_left_alone():
    ds = xr.Dataset({"x": ("point", [1.0, 2.0])})
    assert index_points(ds) is ds
    assert POINT_INDEX not in for_netcdf(ds).attrs


def test_describe_writes_units_long_names_and_the_global_attributes():
    ds = describe(_points(), title="a test")
    for name in ("probability", "time", "dim", "eps", "beta"):
        assert ds[name].attrs["units"] == "1" and ds[name].attrs["long_name"], name
    assert "units" not in ds["model"].attrs  # a name, not a quantity
    assert ds["model"].attrs["long_name"] and ds["model"].attrs["description"]
    assert ds.attrs["Conventions"] == "CF-1.10" and ds.attrs["title"] == "a test"
    assert "arXiv:2601.21942" in ds.attrs["references"]


def test_a_study_registers_its_own_variables_and_cannot_redefine_one():
    entry = Variable("mode amplitude", "a new study's variable")
    register({"test_mode_amplitude": entry})
    try:
        ds = describe(xr.Dataset({"test_mode_amplitude": ("x", [1.0])}), title="modes")
        assert ds["test_mode_amplitude"].attrs["long_name"] == "mode amplitude"
        register({"test_mode_amplitude": entry})  # the same meaning again: fine
        with pytest.raises(ValueError, match="probability"):
            register({"probability": Variable("something else", "another meaning")})
    finally:
        del VARIABLES["test_mode_amplitude"]
