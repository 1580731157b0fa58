"""The package's shape: imports run one way, the estimator knows no concrete model, and
``import attndyn`` stays light."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "attndyn"

#: Layer of each subpackage; a module may import only from its own layer or lower ones.
LAYERS = {
    "_core": 0,
    "theory": 1,
    "_models": 2,
    "_estimate": 3,
    "studies": 4,
    "plot": 4,
    "cli": 5,
}


def _modules():
    for path in sorted(SRC.rglob("*.py")):
        parts = path.relative_to(SRC).parts
        if len(parts) > 1:
            yield parts[0], path


def _imported_subpackages(path: Path) -> set[str]:
    """The attndyn subpackages that ``path`` imports (relative or absolute imports)."""
    tree = ast.parse(path.read_text())
    depth = len(path.relative_to(SRC).parts) - 1  # package nesting below attndyn
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level == 0 and node.module and node.module.startswith("attndyn."):
                found.add(node.module.split(".")[1])
            elif node.level > depth and node.module:
                # ``from ..x import`` from attndyn/<pkg>/...: x is a top-level subpackage.
                found.add(node.module.split(".")[0])
            elif node.level > depth:
                found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("attndyn."):
                    found.add(alias.name.split(".")[1])
    return found


@pytest.mark.parametrize(("package", "path"), list(_modules()), ids=lambda v: str(v))
def test_imports_run_one_way(package, path):
    own = LAYERS[package]
    for other in _imported_subpackages(path):
        if other in LAYERS and other != package:
            assert LAYERS[other] < own, f"{path.relative_to(SRC)} imports attndyn.{other}"


def test_the_estimator_names_no_concrete_model():
    concrete = (
        "DiscreteTransformer",
        "ReducedTransformer",
        "NormalizedAttentionODE",
        "TransformerSDE",
        "HybridSDE",
        "OverlapSDE",
        "SymmetricODE",
    )
    # Names in code (imports, references, attributes), not in docstrings.
    for path in (SRC / "_estimate").glob("*.py"):
        names = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Name):
                names.add(node.id)
            elif isinstance(node, ast.Attribute):
                names.add(node.attr)
            elif isinstance(node, ast.ImportFrom | ast.Import):
                names.update(alias.name for alias in node.names)
        assert not names & set(concrete), f"{path.name} names {names & set(concrete)}"


def test_no_function_is_longer_than_120_lines():
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = node.end_lineno - node.lineno + 1  # type: ignore[operator]
                assert length <= 120, f"{path.relative_to(SRC)}:{node.name} has {length} lines"


def test_import_attndyn_loads_neither_click_nor_matplotlib():
    code = (
        "import sys, attndyn; print(sorted(m for m in ('click', 'matplotlib') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_plot_and_studies_load_on_first_use():
    code = (
        "import sys, attndyn as ad; assert 'matplotlib' not in sys.modules; "
        "ad.plot.phase_diagram; ad.studies.phase_model; "
        "import matplotlib; print(matplotlib.get_backend() != '' and 'ok')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "ok"


def test_the_command_line_starts_without_jax():
    # `attndyn --help`, a command's --help and an option's own error (a bad choice) load
    # neither JAX, xarray nor matplotlib: the CLI imports what a command runs when it runs.
    code = (
        "import sys\n"
        "from click.testing import CliRunner\n"
        "from attndyn.cli import main\n"
        "runner = CliRunner()\n"
        "for args in (['--help'], ['phase-diagram', '--help'], ['evolution', '--help'],\n"
        "             ['schemes', '--help'], ['phase-diagram', '--kind', 'nope']):\n"
        "    result = runner.invoke(main, args)\n"
        "    assert result.exit_code == (2 if 'nope' in args else 0), result.output\n"
        "heavy = ('jax', 'numpy', 'xarray', 'matplotlib', 'equinox', 'scipy')\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_public_api_lists_user_names_only():
    # dir() and `import *` give the documented names, not helpers (TYPE_CHECKING, _attach,
    # importlib were listed before), and every listed name resolves.
    import attndyn
    import attndyn.studies
    import attndyn.theory

    for module in (attndyn, attndyn.studies, attndyn.theory):
        public = module.__all__
        assert public == sorted(set(public)), module.__name__
        assert all(not name.startswith("_") for name in public)
        extra = [n for n in dir(module) if not n.startswith("__") and n not in public]
        if module is not attndyn.theory:  # a plain module also lists its submodules
            assert not extra, (module.__name__, extra)
        for name in public:
            assert getattr(module, name) is not None
