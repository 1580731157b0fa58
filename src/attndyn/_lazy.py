"""Public names loaded on first use (PEP 562), so that ``attndyn --help`` starts without
importing JAX: the one lazy-loading mechanism of the package (``attndyn``,
``attndyn.studies``, ``attndyn.theory``, ``attndyn.plot``).

A module lists its lazy names once, as ``from .module import name as name`` lines in an
``if TYPE_CHECKING:`` block: what type checkers, go-to-definition and the documentation
(griffe) read, as ordinary imports. :func:`attach` reads the same block from the module's
source and returns its ``__getattr__`` and ``__dir__``: the first access to a name imports
its module; ``__all__`` is the block's public names. A name is added by adding its line,
and nothing else lists it.

A module that uses a lazy name in its own functions reads it as an attribute of the module
(a plain global lookup does not reach ``__getattr__``), e.g. a command of the CLI::

    if TYPE_CHECKING:
        from ..studies.phase import phase_points as phase_points

    __getattr__, __dir__ = attach(__name__, __file__, globals())

    def command():
        from . import _phase as run  # this module: its lazy names, typed

        run.phase_points(...)  # imported now; a test can still replace it
"""

import ast
import importlib
from collections.abc import Callable
from typing import Any


def exports(init_file: str) -> dict[str, tuple[str, str | None]]:
    """``name → (relative module, attribute or None for a submodule)`` of every import in
    the ``if TYPE_CHECKING:`` blocks of ``init_file``."""
    with open(init_file, encoding="utf-8") as source:  # not pathlib: 3 ms of import
        text = source.read()
    # Only the blocks are parsed, not the module: a command's whole source took 0.7-2.9 ms
    # (attndyn --help attaches four), its block ~0.05 ms.
    try:
        tree = ast.parse("".join(_type_checking_blocks(text)))
    except SyntaxError:  # such a line in a string, not a block: the module, where it is one
        tree = ast.parse(text)
    found: dict[str, tuple[str, str | None]] = {}
    for node in tree.body:
        if not (isinstance(node, ast.If) and _is_type_checking(node.test)):
            continue
        for statement in node.body:
            if not isinstance(statement, ast.ImportFrom):
                continue
            base = "." * statement.level + (statement.module or "")
            for alias in statement.names:
                name = alias.asname or alias.name
                if statement.module is None:  # from . import plot: a submodule
                    found[name] = (base + alias.name, None)
                else:
                    found[name] = (base, alias.name)
    return found


def _type_checking_blocks(text: str) -> list[str]:
    """The source of each module-level ``if TYPE_CHECKING:`` block: its line (at column 0)
    and the lines after it that are indented, blank or comments."""
    lines = text.splitlines(keepends=True)
    blocks = []
    for i, line in enumerate(lines):
        if not line.startswith("if TYPE_CHECKING:"):
            continue
        end = i + 1
        while end < len(lines) and (lines[end][:1] in (" ", "\t", "#") or not lines[end].strip()):
            end += 1
        blocks.append("".join(lines[i:end]))
    return blocks


def _is_type_checking(test: ast.expr) -> bool:
    return isinstance(test, ast.Name) and test.id == "TYPE_CHECKING"


def attach(
    package: str,
    init_file: str,
    namespace: dict[str, Any],
    *,
    deprecated: dict[str, str] | None = None,
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` of the module ``package`` (a package's ``__init__`` or a
    plain module, its source at ``init_file``, its globals ``namespace``): a name is
    imported on first access and then kept in the namespace, so later accesses cost
    nothing. Sets the module's ``__all__`` to its public names (``from attndyn import *``
    and ``dir(attndyn)`` list only those). ``deprecated``: old name → its new name, read
    as the new one with a :class:`DeprecationWarning` for one release (never listed, never
    kept in the namespace, so that each access warns)."""
    table = exports(init_file)
    old_names = dict(deprecated or {})
    # Relative imports resolve from the module's package: itself for an __init__, its
    # parent for a plain module (what Python sets as __package__).
    anchor = namespace.get("__package__") or package

    def __getattr__(name: str) -> Any:
        if name in old_names:
            import warnings

            from ._core.renamed import deprecation

            new = old_names[name]
            warnings.warn(deprecation(name, new, package), DeprecationWarning, stacklevel=2)
            return namespace[new] if new in namespace else __getattr__(new)
        if name not in table:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module_name, attribute = table[name]
        module = importlib.import_module(module_name, anchor)
        value = module if attribute is None else getattr(module, attribute)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        # The public names and the module's dunders: not TYPE_CHECKING, not helpers.
        dunders = {name for name in namespace if name.startswith("__")}
        return sorted({*dunders, *public})

    public = sorted(name for name in table if not name.startswith("_"))
    namespace["__all__"] = public
    return __getattr__, __dir__
