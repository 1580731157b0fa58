"""What a study command writes and says: its checked output folder and checkpoint, the
dataset and figures (with provenance in the PNGs), and its report, one JSON object or one
line per file and per merged point."""

from __future__ import annotations

import functools
import json
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from ._output import Output


def emit_json(payload: dict[str, Any]) -> None:
    from .._core.serialize import plain

    click.echo(json.dumps(plain(payload)))


def say(message: str) -> None:
    click.echo(message, err=True)


def command_line() -> str:
    return " ".join(["attndyn", *sys.argv[1:]])


def study_output(
    options: Mapping[str, Any],
    name: str,
    *,
    writer: bool,
    n_cells: int,
    more_figures: Sequence[str] = (),
) -> Output:
    """The checked, locked ``--out`` folder of a Monte Carlo study (``name``.nc and .png,
    and ``more_figures``; ``n_cells``: points × save times, for the space it needs)."""
    from ._output import Output, result_arguments

    return Output(
        options["out"],
        dataset=f"{name}.nc",
        figures=[f"{name}.png", *more_figures],
        arguments=result_arguments(options),
        overwrite=options["overwrite"],
        writer=writer,
        needs=output_bytes(n_cells, n_figures=1 + len(more_figures)),
    )


def output_bytes(n_cells: int, *, n_figures: int) -> int:
    """About what a study's dataset, checkpoint and figures take on disk (``n_cells``:
    points × save times), with a margin: the netCDF files hold ~20 numbers of 8 bytes a
    cell and outcome beside ~40 KiB of headers, a figure up to a few hundred KiB."""
    return 2 * (64 * 2**10 + 20 * 8 * 4 * n_cells) + n_figures * 512 * 2**10


def study_checkpoint(out: Output, name: str, *, fresh: bool) -> Path | None:
    """Where a study keeps its resumable tallies (``None`` in a multi-process run, where
    each process holds only its own share and a shared file would mix them). Called with
    the folder locked, so ``--fresh`` never deletes another run's checkpoint."""
    import jax

    if jax.process_count() > 1:
        return None
    checkpoint = out.folder / f"{name}.checkpoint.nc"
    if fresh:
        checkpoint.unlink(missing_ok=True)
    return checkpoint


def study_metadata(out: Output) -> dict[str, Any]:
    """Provenance of the command: its line and the arguments that determine the results."""
    return {"command": command_line(), "arguments": out.arguments}


def save_png(figure, path: Path, *, dpi: int, metadata: Mapping[str, str]) -> None:
    """Write ``figure`` as a PNG carrying ``metadata`` (:func:`png_metadata`) in its text
    chunks; matplotlib adds no date, so the same figure and metadata give the same bytes."""
    figure.savefig(path, format="png", dpi=dpi, metadata=dict(metadata))


def png_metadata(ds, dataset: str) -> dict[str, str]:
    """The PNG text chunks of a figure of ``ds``, so that it can be traced without its
    dataset: ``attndyn:provenance``, the dataset's provenance record (its
    ``attrs["provenance"]`` JSON, verbatim); ``Description``, the command that made it;
    ``Source``, the dataset's file name (``dataset``) beside it; ``Software``, the version."""
    record = json.loads(ds.attrs["provenance"])
    return {
        "Software": f"attndyn {record['attndyn_version']}",
        "Source": dataset,
        "Description": record["command"],
        "attndyn:provenance": ds.attrs["provenance"],
    }


def finish(
    ds,
    name: str,
    out: Output,
    checkpoint: Path | None,
    figure,
    options: Mapping[str, Any],
    started: float,
    more_figures: Mapping[str, Callable] = MappingProxyType({}),
    *,
    study: str,
    diagram: str | None = None,
    **extra,
) -> None:
    """Write the dataset, its figure (``figure(ds)``) and ``more_figures`` (file name →
    draw function, each path also reported under ``<stem>_figure``), and replace the old
    ones with them together (:meth:`Output.commit`); drop the checkpoint they supersede;
    then report, with the seconds since ``started`` (the command's start): one JSON object
    on stdout with ``--json``, else one line on stderr. Every figure carries the dataset's
    provenance (:func:`png_metadata`)."""
    from .._estimate.dataset import study_fields
    from .._io.metadata import to_netcdf
    from ..studies.summary import json_points

    warn_merged(ds)
    # The point MultiIndex is written as plain coordinates; attndyn.open_dataset restores it.
    dataset_path = out.stage(f"{name}.nc", functools.partial(to_netcdf, ds))
    save = functools.partial(save_png, dpi=130, metadata=png_metadata(ds, dataset_path.name))
    figure_path = out.stage(f"{name}.png", functools.partial(save, figure(ds)))
    written = [dataset_path, figure_path]
    for file, draw in more_figures.items():
        path = out.stage(file, functools.partial(save, draw(ds)))
        extra[f"{Path(file).stem.removeprefix(name + '_')}_figure"] = str(path)
        written.append(path)
    out.commit()
    if checkpoint is not None:
        checkpoint.unlink(missing_ok=True)
    seconds = time.perf_counter() - started
    if options["as_json"]:
        payload = {**study_fields(study, diagram), "engine": ds.attrs["engine"]}
        payload.update(points=json_points(ds), **extra)
        payload.update(seconds=seconds, dataset=str(dataset_path), figure=str(figure_path))
        emit_json(payload)
    else:  # every file written, the extra figures too
        files = ", ".join(str(path) for path in written[:-1])
        say(f"wrote {files} and {written[-1]} in {seconds:.1f} s")


def warn_merged(ds) -> None:
    """One line on stderr per point whose tokens merged numerically (the run went on, with
    --on-merged exclude or count); under auto, one line saying what it did, where it
    did something."""
    if "n_merged" not in ds:
        return
    record = json.loads(ds.attrs.get("provenance", "{}"))
    if record.get("on_merged", "auto") == "auto":
        say_resolved(ds)
        return
    done = "counted in their class" if record.get("on_merged") == "count" else "excluded"
    most = ds["n_merged"].max("time").values
    dtype = record.get("dtype", "float32")
    # Under --x64 already, only a reduced route resolves smaller gaps.
    way_out = "A reduced route" if dtype == "float64" else "--x64 or a reduced route"
    for i in [i for i, n in enumerate(most) if n > 0]:
        row = ds.isel(point=i)
        params = ", ".join(
            f"{k}={row[k].item()}" for k in ("beta", "eps", "dim", "n_tokens") if k in row.coords
        )
        say(
            f"warning: {int(most[i])} of {int(row['n_valid'])} trajectories at {params} have "
            f"tokens that merged numerically ({dtype} cannot resolve their gap, so the "
            f"arithmetic fixed their class); they are {done} (n_merged). {way_out} resolves "
            "far smaller gaps."
        )


def say_resolved(ds) -> None:
    """Under --on-merged auto: one line on stderr where trajectories were rerun in float64
    or merged tokens were counted with a bound (nothing where nothing merged)."""
    if "n_rerun" not in ds or "merge_bound" not in ds:
        return
    rerun = int(ds["n_rerun"].sum())
    merged = int(ds["n_merged"].max("time").sum())
    if not rerun and not merged:
        return
    bound = float(ds["merge_bound"].max())
    say(
        f"note: tokens merged numerically in float32 in some trajectories: {rerun} rerun in "
        f"float64 from the same random numbers; {merged} left merged, counted in their class "
        f"with a summed bound of {bound:.2g} on those in a wrong class (merge_bound, "
        "merge_ci)."
    )
