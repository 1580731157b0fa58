"""Every PNG the CLI writes carries its dataset's provenance in PNG text chunks, so that a
figure separated from its dataset can still be traced."""

import json

import pytest
import xarray as xr
from click.testing import CliRunner
from PIL import Image
from PIL.PngImagePlugin import PngImageFile

import attndyn as ad
from attndyn.cli import main
from attndyn.cli._schemes import FIGURES

PHASE = "--beta 0.5,2 --dim 4 --n-trajectories 40 --depth 5 --horizon 4 --no-progress"
SCHEMES = "--schemes post-ln --n-tokens 4 --dim 5 --beta 1 --horizon 8 --alpha 1,2 --rw-n-layers 4 "
SCHEMES += "--rw-n-trajectories 2 --no-progress"


def _run(command: str, out, monkeypatch) -> None:
    # The record's command is the process's argv: make it this command's, as a shell would
    # (under pytest it is pytest's own, or nothing at all under xdist).
    args = [*command.split(), "--out", str(out)]
    monkeypatch.setattr("sys.argv", ["attndyn", *args])
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output


def _text(path) -> dict[str, str]:
    """The PNG's tEXt/iTXt chunks."""
    with Image.open(path) as image:
        assert isinstance(image, PngImageFile)
        return dict(image.text)


def _check(figure, dataset, command: str) -> None:
    """The figure's text chunks name the dataset and hold its provenance record."""
    with xr.open_dataset(dataset) as ds:
        record = ad.provenance(ds)
        # The CF attributes (and the point index's names) describe the file, not the run.
        cf = {"provenance", "title", "Conventions", "history", "source", "references"}
        attrs = {k: v for k, v in ds.attrs.items() if k not in cf | {"point_index"}}
    text = _text(figure)
    assert json.loads(text["attndyn:provenance"]) == record
    # The dataset's other attributes are copies of the record's scalars: all are there.
    assert attrs and all(record[k] == v for k, v in attrs.items())
    assert text["Software"] == f"attndyn {ad.__version__}"
    assert record["attndyn_version"] == ad.__version__
    assert text["Source"] == dataset.name
    assert text["Description"] == record["command"]
    assert record["command"] == f"attndyn {command} --out {dataset.parent}"
    # matplotlib writes no date of its own (the record's "created" is the only one).
    assert set(text) == {"Software", "Source", "Description", "attndyn:provenance"}


def test_phase_diagram_figure_carries_the_provenance(tmp_path, monkeypatch):
    _run(f"phase-diagram {PHASE}", tmp_path, monkeypatch)
    dataset = tmp_path / "phase_diagram.nc"
    _check(tmp_path / "phase_diagram.png", dataset, f"phase-diagram {PHASE}")


@pytest.mark.slow  # a schemes run; the phase-diagram figure is the smoke of png_metadata
def test_every_schemes_figure_carries_the_provenance(tmp_path, monkeypatch):
    _run(f"schemes {SCHEMES}", tmp_path, monkeypatch)
    for key in FIGURES:
        _check(tmp_path / f"schemes_{key}.png", tmp_path / "schemes.nc", f"schemes {SCHEMES}")
