"""The figure scripts' outputs: a ``--full`` run never writes over a reduced-scale one.

The scripts are not imported (they run studies at import of ``main``); their sources are
read, and the shared naming helper is called directly.
"""

import ast
import importlib.util
import types
from pathlib import Path

import pytest

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"


def _common() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location("_common", EXPERIMENTS / "_common.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_figure_stem_separates_the_two_scales():
    stem = _common().figure_stem
    reduced = stem("fig7_evolution_discrete", types.SimpleNamespace(full=False))
    full = stem("fig7_evolution_discrete", types.SimpleNamespace(full=True))
    assert reduced == "fig7_evolution_discrete"
    assert full == "fig7_evolution_discrete_full"
    both = stem("fig7_evolution_discrete", types.SimpleNamespace(full=True, x64=True))
    assert both == "fig7_evolution_discrete_full_x64"


def test_only_scripts_that_use_x64_accept_it():
    parser = _common().parser
    assert parser("doc", x64=True).parse_args(["--x64"]).x64 is True
    with pytest.raises(SystemExit):
        parser("doc").parse_args(["--x64"])  # fig4_beta_eps would ignore it


def _takes_full(source: str) -> bool:
    # Scripts get --full from _common.parser or declare it themselves.
    return "parser(__doc__" in source or '"--full"' in source or '"--full-size"' in source


@pytest.mark.parametrize(
    "script",
    sorted(p.name for p in EXPERIMENTS.glob("*.py") if not p.name.startswith("_")),
)
def test_a_full_run_writes_other_files(script):
    source = (EXPERIMENTS / script).read_text()
    ast.parse(source)  # the script is valid Python
    if not _takes_full(source):
        pytest.skip("no --full flag")
    # Every output name of a --full script depends on the scale: through figure_stem, or
    # an explicit "_full" suffix in its default output path.
    assert "figure_stem(" in source or "_full" in source, script
    for line in source.splitlines():
        if "savefig(FIGURES" in line or "FIGURES /" in line:
            assert "stem" in line, f"{script}: fixed output name in {line.strip()!r}"


def test_the_scale_flag_is_found_where_it_exists():
    # Guards the source check above: a script it fails to recognise would be skipped.
    found = {p.stem for p in EXPERIMENTS.glob("*.py") if _takes_full(p.read_text())}
    assert found >= {
        "fig3_beta_d",
        "fig4_beta_eps",
        "fig4_random_weights",
        "fig6_multitoken",
        "fig7_evolution",
        "fig8_horizons",
        "fig9_metastability",
        "limit_convergence",
    }
