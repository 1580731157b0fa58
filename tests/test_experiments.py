"""The figure scripts' outputs: a ``--full`` run never writes over a reduced-scale one.

The scripts are not imported (they run studies at import of ``main``); their sources are
read, and the shared naming helper is called directly.
"""

import ast
import importlib.util
import types
from pathlib import Path

import numpy as np
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


def test_checkpoints_are_one_file_per_study(tmp_path):
    common = _common()
    args = common.parser("doc", x64=True).parse_args(["--checkpoint-dir", str(tmp_path / "c")])
    first = common.checkpoint_of(args, "fig9_metastability_beta0.5_discrete_full")
    second = common.checkpoint_of(args, "fig9_metastability_beta4.5_discrete_full")
    assert first == tmp_path / "c" / "fig9_metastability_beta0.5_discrete_full.ckpt.nc"
    assert first != second and first.parent.is_dir()  # the folder is made for the user
    assert common.checkpoint_of(common.parser("doc", x64=True).parse_args([]), "x") is None
    with pytest.raises(SystemExit):
        common.parser("doc").parse_args(["--checkpoint-dir", "c"])  # would be ignored


def test_every_estimating_script_passes_its_checkpoint_on():
    for path in EXPERIMENTS.glob("fig*.py"):
        source = path.read_text()
        if "x64=True" in source:  # the scripts whose studies go through _common.run
            assert "checkpoint_of(" in source or "evolution_run(" in source, path.name


@pytest.mark.slow
def test_a_script_study_resumes_from_its_checkpoint(tmp_path):
    import attndyn as ad

    run = _common().run
    points = ad.grid(dim=[3], n_tokens=[3], beta=[1.0])
    kwargs = {"n_trajectories": 16, "attention": "softmax", "depth": 5, "horizon": 1.0}
    ckpt = tmp_path / "study.ckpt.nc"
    ds = run(points, seed=0, checkpoint=ckpt, **kwargs)
    assert ckpt.exists()
    again = run(points, seed=0, checkpoint=ckpt, **kwargs)  # the finished study, read back
    assert (again["count"].values == ds["count"].values).all()
    with pytest.raises(ad.ParameterError, match="checkpoint"):
        run(points, seed=1, checkpoint=ckpt, **kwargs)  # another study's file is refused


def _dests(source: str) -> set[str]:
    """The attribute names of the flags a parser in ``source`` declares (``--n-tokens`` →
    ``n_tokens``; an explicit ``dest=`` wins)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument"):
            continue
        dest = next((k.value for k in node.keywords if k.arg == "dest"), None)
        flags = [
            a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)
        ]
        if isinstance(dest, ast.Constant) and isinstance(dest.value, str):
            found.add(dest.value)
        elif flags:
            long = next((f for f in flags if f.startswith("--")), flags[0])
            found.add(long.lstrip("-").replace("-", "_"))
    return found


@pytest.mark.parametrize(
    "script",
    sorted(p.name for p in EXPERIMENTS.glob("*.py") if not p.name.startswith("_")),
)
def test_every_flag_a_script_reads_is_one_it_declares(script):
    # fig2_symmetric, fig3_ngpt_alpha and schemes_noise read args.tokens after the flag
    # became --n-tokens, and crashed at their figure's title.
    source = (EXPERIMENTS / script).read_text()
    declared = _dests(source) | _dests((EXPERIMENTS / "_common.py").read_text())
    read = {
        node.attr
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "args"
    }
    assert read - declared == set(), script


def _depth_horizon_bias() -> types.ModuleType:
    path = EXPERIMENTS / "depth_horizon_bias.py"
    spec = importlib.util.spec_from_file_location("depth_horizon_bias", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # main() is not run at import
    return module


def test_the_depth_bias_fits_tell_the_laws_apart():
    # Exact data of each law: its own one-parameter fit returns the amplitude with χ² = 0,
    # the other law's leaves χ² far above its 4 dof, and the free exponent lands on the law.
    # Weights are 1/SE²: a point with a huge SE must not move the amplitude.
    m = _depth_horizon_bias()
    depths = np.array([30, 50, 100, 300, 1000], float)
    se = np.full(5, 1e-4)
    for law, other in ((1.0, 0.5), (0.5, 1.0)):
        bias = -0.3 * depths**-law
        own = m.fit_power(depths, bias, se, law)
        assert own["amplitude"] == pytest.approx(-0.3, rel=1e-12)
        assert own["chi2"] < 1e-20 and own["dof"] == 4
        # The amplitude's SE of weighted least squares through 0: (Σ f²/σ²)^(-1/2).
        assert own["amplitude_se"] == pytest.approx(1e-4 / np.sqrt(np.sum(depths ** (-2 * law))))
        assert m.fit_power(depths, bias, se, other)["chi2"] > 100
        free = m.fit_exponent(depths, bias, se)
        assert free["exponent"] == pytest.approx(law, abs=0.011)
        assert free["interval"][0] <= law <= free["interval"][1] and free["dof"] == 3
    outlier = -0.3 / depths
    outlier[0] += 1.0
    noisy = np.array([1e6, 1e-3, 1e-3, 1e-3, 1e-3])
    assert m.fit_power(depths, outlier, noisy, 1.0)["amplitude"] == pytest.approx(-0.3, rel=1e-6)
