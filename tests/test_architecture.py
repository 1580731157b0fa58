"""The package's shape: imports run one way, the estimator knows no concrete model, and
``import attndyn`` stays light."""

import ast
import functools
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "attndyn"

#: Layer of each subpackage; a module may import only from its own layer or lower ones.
LAYERS = {
    "_core": 0,
    "theory": 1,
    "_io": 1,
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
    concrete = [name for name in _concrete_classes() if name in _model_classes()]
    assert {"DiscreteTransformer", "ReducedTransformer", "TwoTokenChain"} <= set(concrete)
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


def test_import_attndyn_loads_neither_click_nor_matplotlib_until_first_use():
    # One interpreter checks both (a Python start with JAX costs ~2 s of the suite's CPU):
    # `import attndyn` loads neither click nor matplotlib, and `ad.plot`/`ad.studies` load
    # on first use.
    code = (
        "import sys, attndyn as ad; "
        "print(sorted(m for m in ('click', 'matplotlib') if m in sys.modules)); "
        "ad.plot.phase_diagram; ad.studies.phase_model; "
        "import matplotlib; print(matplotlib.get_backend() != '' and 'ok')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["[]", "ok"]


def test_the_command_line_starts_without_jax():
    # `attndyn --help`, a command's --help and an option's own error (a bad choice) load
    # neither JAX, xarray nor matplotlib: the CLI imports what a command runs when it runs.
    code = (
        "import sys\n"
        "from click.testing import CliRunner\n"
        "from attndyn.cli import main\n"
        "runner = CliRunner()\n"
        "for args in (['--help'], ['phase-diagram', '--help'], ['evolution', '--help'],\n"
        "             ['schemes', '--help'], ['phase-diagram', '--diagram', 'nope']):\n"
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
    import attndyn.plot
    import attndyn.studies
    import attndyn.theory

    for module in (attndyn, attndyn.studies, attndyn.theory, attndyn.plot):
        public = module.__all__
        assert public == sorted(set(public)), module.__name__
        assert all(not name.startswith("_") for name in public)
        extra = [n for n in dir(module) if not n.startswith("__") and n not in public]
        assert not extra, (module.__name__, extra)
        for name in public:
            assert getattr(module, name) is not None


def _lazy_mechanism(tree: ast.Module) -> str | None:
    """``"attach"`` where a module takes its ``__getattr__`` from attndyn._lazy.attach,
    ``"other"`` where it defines one otherwise (or reads itself through sys.modules),
    ``None`` where it has none."""
    found = None
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Tuple | ast.Name) and "__getattr__" in ast.unparse(t)
            for t in node.targets
        ):
            attach = isinstance(node.value, ast.Call) and "attach" in ast.unparse(node.value.func)
            found = found or ("attach" if attach else "other")
        elif isinstance(node, ast.FunctionDef) and node.name in ("__getattr__", "lazy_names"):
            found = "other"
        elif isinstance(node, ast.Subscript) and ast.unparse(node) == "sys.modules[__name__]":
            found = "other"
    return found


def test_lazy_names_of_a_plain_module(tmp_path, monkeypatch):
    # attach serves a command module as it serves a package (the CLI's pattern in _lazy's
    # docstring): its relative imports resolve from the module's package.
    package = tmp_path / "lazy_pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "other.py").write_text("def f():\n    return 1\n")
    (package / "sub" / "command.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "from attndyn._lazy import attach\n"
        "if TYPE_CHECKING:\n"
        "    from ..other import f as f\n"
        "__getattr__, __dir__ = attach(__name__, __file__, globals())\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    command = importlib.import_module("lazy_pkg.sub.command")
    assert "lazy_pkg.other" not in sys.modules  # not before first use
    assert command.f is importlib.import_module("lazy_pkg.other").f
    assert command.__all__ == ["f"]
    for name in [n for n in sys.modules if n.startswith("lazy_pkg")]:
        monkeypatch.delitem(sys.modules, name)


def test_lazy_exports_read_the_blocks_as_the_module_reads_them(tmp_path):
    # _lazy.exports parses the TYPE_CHECKING blocks alone (attndyn --help's startup): the
    # names must be those of the module's own syntax tree, for every module.
    from attndyn import _lazy

    for name, path in MODULES.items():
        expected = {}
        for node in _tree(path).body:
            if isinstance(node, ast.If) and _lazy._is_type_checking(node.test):
                for statement in node.body:
                    if isinstance(statement, ast.ImportFrom):
                        base = "." * statement.level + (statement.module or "")
                        for alias in statement.names:
                            entry = (base + alias.name, None) if statement.module is None else None
                            expected[alias.asname or alias.name] = entry or (base, alias.name)
        assert _lazy.exports(str(path)) == expected, name
    # A string whose line reads as a block's start but not as a block: the whole module is
    # parsed, and only the real block counts.
    module = tmp_path / "strings.py"
    module.write_text(
        '"""Docs:\nif TYPE_CHECKING:\n    from .a import (\n"""\n'
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from .b import g as g\n"
    )
    assert _lazy.exports(str(module)) == {"g": (".b", "g")}


def test_one_lazy_loading_mechanism():
    kinds = {name: _lazy_mechanism(_tree(path)) for name, path in MODULES.items()}
    lazy = {name for name, kind in kinds.items() if kind == "attach"}
    # The one lazy-loading mechanism, attndyn._lazy.attach (names in an ``if
    # TYPE_CHECKING:`` block, which go-to-definition follows), everywhere: the packages
    # and the CLI's commands, which read their studies as ``run.<name>``.
    commands = {f"attndyn.cli._{name}" for name in ("evolution", "modes", "phase", "schemes")}
    assert {"attndyn", "attndyn.studies", "attndyn.theory", "attndyn.plot", *commands} <= lazy
    other = {name for name, kind in kinds.items() if kind == "other"} - {"attndyn._lazy"}
    assert not other, f"modules with a lazy-loading mechanism other than attach: {other}"
    # Every lazy name resolves to what its TYPE_CHECKING line names (read statically, as
    # pyright and go-to-definition read it).
    from attndyn import _lazy

    for name in lazy:
        module = importlib.import_module(name)
        package = name if MODULES[name].name == "__init__.py" else name.rpartition(".")[0]
        for public, (source, attribute) in _lazy.exports(str(MODULES[name])).items():
            target = importlib.import_module(source, package)
            expected = target if attribute is None else getattr(target, attribute)
            assert getattr(module, public) is expected, (name, public)


# --- Module graph, dispatch and declared shapes ---------------------------------------------


def _module_name(path: Path) -> str:
    parts = ("attndyn", *path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(path): path for path in sorted(SRC.rglob("*.py"))}


@functools.cache
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text())


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(path: Path, *, type_only: bool = True) -> set[str]:
    """The attndyn modules that ``path`` imports: at module level and inside functions
    alike (an import moved into a function still runs, and still ties the two modules
    together), and with ``type_only`` those under ``if TYPE_CHECKING:`` too (an import for
    annotations alone is still an edge: a reader, and a type checker, follows it)."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test) and not type_only:
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            for alias in node.names:
                # ``from . import x`` imports the module x; ``from .x import y`` the module x.
                sub = f"{target}.{alias.name}"
                found.add(sub if sub in MODULES else target)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(_tree(path))
    return (found & MODULES.keys()) - {name}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while not component or component[-1] != v:
                component.append(stack.pop())
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return found


def test_no_import_cycle():
    # Type-only imports count (issue 44): the reduced routes see the discrete model through
    # a Protocol of _models/base.py, not by importing _models/discrete.py, which imports them.
    graph = {name: _imports(path) for name, path in MODULES.items()}
    assert _cycles(graph) == []
    # The test sees a cycle where there is one, also through an import inside a function.
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    discrete = _imports(MODULES["attndyn._models.discrete"])
    assert "attndyn._models.base" in discrete
    # ... and one under TYPE_CHECKING, which the run-time graph leaves out.
    base = MODULES["attndyn._models.base"]
    assert "attndyn._models.merging" in _imports(base)
    assert "attndyn._models.merging" not in _imports(base, type_only=False)


#: The abstract roots of the classes that callers must ask by method, never by class.
_ROOTS = {"AbstractScheme", "AbstractModel", "AbstractValues", "AbstractNorm"}


@functools.cache
def _classes() -> dict[str, tuple[str, list[str], bool]]:
    """Every class of the package: name → (module, base names, whether ``@final``)."""
    out = {}
    for module, path in MODULES.items():
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.ClassDef):
                bases = [b.id if isinstance(b, ast.Name) else ast.unparse(b) for b in node.bases]
                decorators = {ast.unparse(d) for d in node.decorator_list}
                final = bool(decorators & {"final", "typing.final"})
                assert node.name not in out, f"two classes named {node.name}"
                out[node.name] = (module, bases, final)
    return out


def _concrete_classes() -> dict[str, str]:
    """The final schemes, models, value operators and norms: name → defining module."""
    classes = _classes()

    def rooted(name: str) -> bool:
        return name in _ROOTS or any(rooted(b) for b in classes.get(name, ("", [], False))[1])

    return {n: module for n, (module, _, final) in classes.items() if final and rooted(n)}


def _class_names(node: ast.expr) -> set[str]:
    """The names in an isinstance target: ``C``, ``m.C``, ``(C, D)``, ``C | D``."""
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} | {
        n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)
    }


def _class_tests(tree: ast.AST):
    """(class names, line) of every isinstance/issubclass call and ``type(x) is C``."""
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("isinstance", "issubclass")
            and len(node.args) == 2
        ):
            yield _class_names(node.args[1]), node.lineno
        elif (
            isinstance(node, ast.Compare)
            and isinstance(node.left, ast.Call)
            and ast.unparse(node.left.func) == "type"
        ):
            yield set().union(*map(_class_names, node.comparators)), node.lineno


#: Known exceptions, each with the work that removes it: the test fails once an entry is no
#: longer needed, so that the list only shrinks. (Issue 30 item 3 removed the last one,
#: integrators.py's Mix-LN split.)
_PENDING: set[tuple[str, str]] = set()


def test_no_isinstance_on_a_concrete_scheme_model_value_or_norm():
    # Callers ask a scheme, model, value operator or norm what they need (a method or a
    # property), so that a new one needs no change in them: no class tests outside the
    # class's own module.
    concrete = _concrete_classes()
    assert {"PostLN", "MixLN", "DiscreteTransformer", "MatrixValues", "RMSNorm"} <= set(concrete)
    found = set()
    for module, path in MODULES.items():
        for names, line in _class_tests(_tree(path)):
            for name in names & concrete.keys():
                if concrete[name] != module:
                    found.add((module, name, line))
    assert {(m, n) for m, n, _ in found} == _PENDING, sorted(found)
    # The test sees each form of a class test.
    code = "isinstance(s, PostLN)\nisinstance(s, (a.PreLN, int))\ntype(s) is MixLN | NGPT\n"
    assert [names for names, _ in _class_tests(ast.parse(code))] == [
        {"PostLN"},
        {"a", "PreLN", "int"},
        {"MixLN", "NGPT"},
    ]


def _model_classes() -> dict[str, str]:
    classes = _classes()

    def rooted(name: str) -> bool:
        return name == "AbstractModel" or any(
            rooted(b) for b in classes.get(name, ("", [], False))[1]
        )

    return {n: module for n, (module, _, _) in classes.items() if rooted(n)}


#: jaxtyping's array annotations.
_JAXTYPING = {"Float", "Shaped", "Int", "Bool", "Key", "Num", "Real", "Inexact"}


def _is_array_annotation(node: ast.expr | None, aliases: dict[str, ast.expr]) -> bool:
    if isinstance(node, ast.Name) and node.id in aliases:
        return _is_array_annotation(aliases[node.id], aliases)
    return (
        isinstance(node, ast.Subscript)
        and isinstance(node.value, ast.Name)
        and node.value.id in _JAXTYPING
    )


def _aliases() -> dict[str, ast.expr]:
    """Module-level ``Name = <annotation>`` assignments of the models (``States``)."""
    out = {}
    for module, path in MODULES.items():
        if module.startswith("attndyn._models"):
            for node in _tree(path).body:
                if isinstance(node, ast.Assign) and len(node.targets) == 1:
                    target = node.targets[0]
                    if isinstance(target, ast.Name):
                        out[target.id] = node.value
    return out


def test_every_simulate_declares_its_shapes():
    # Every model's simulate says what it returns, as jaxtyping shapes: the pytest hook
    # (pyproject's --jaxtyping-packages) checks them on every call in the tests.
    models, aliases = _model_classes(), _aliases()
    seen = []
    for name, module in models.items():
        for node in ast.walk(_tree(MODULES[module])):
            if isinstance(node, ast.ClassDef) and node.name == name:
                for item in node.body:
                    if isinstance(item, ast.FunctionDef) and item.name == "simulate":
                        seen.append(name)
                        where = f"{module}.{name}.simulate"
                        assert _is_array_annotation(item.returns, aliases), where
                        x0 = item.args.args[1].annotation
                        assert _is_array_annotation(x0, aliases), f"{where}: x0"
    assert {"AbstractModel", "AbstractFrameRoute", "AbsorbingRoute", "SymmetricODE"} <= set(seen)


def test_declared_shapes_are_checked_at_run_time(monkeypatch):
    # The jaxtyping hook instruments attndyn in the tests: a simulate whose saves come out
    # in the wrong order of axes is refused, at tracing (no compilation), by its annotation.
    import jax
    import jax.numpy as jnp
    from jaxtyping import TypeCheckError

    import attndyn as ad

    model = ad.DiscreteTransformer(ad.Attention(0.5), depth=3, saveat=ad.SaveAt(1.0, (0.0, 1.0)))
    reduced = ad.ReducedTransformer(model, 2, 5)
    x0 = jnp.zeros((3, 2, 5))
    keys = jax.random.split(jax.random.key(0), 3)
    good = jax.eval_shape(reduced.simulate, x0, keys)
    assert good.shape == (3, 2, 2, 2)  # (batch, saves, N, k)
    # Saves first, batch second: the batch axis no longer matches x0's. (Another batch
    # size, so that the program is traced again rather than taken from jit's cache.)
    monkeypatch.setattr(type(reduced), "finish", lambda self, state: state[1])
    with pytest.raises(TypeCheckError, match="simulate"):
        jax.eval_shape(reduced.simulate, x0[:1].repeat(4, 0), jax.random.split(keys[0], 4))


def test_the_multi_host_options_are_declared_once():
    # Every command that runs on several hosts takes the one declaration of their four
    # flags (cli/_options.MULTI_HOST_OPTIONS): attndyn modes declared its own copy.
    from attndyn.cli import _evolution, _modes, _phase

    flags = ("--coordinator", "--process-count", "--process-id", "--coordinator-timeout")
    sources = "".join(path.read_text() for path in (SRC / "cli").glob("*.py"))
    for flag in flags:
        assert sources.count(f'"{flag}",') == 1, flag
    for command in (_phase.phase_diagram, _evolution.evolution, _modes.modes):
        declared = {p.opts[0]: p for p in command.params if p.opts[0] in flags}
        assert set(declared) == set(flags), command.name
