"""Public names loaded on first use (PEP 562), so that ``attndyn --help`` starts without
importing JAX.

A package lists its public names once, as ``from .module import name as name`` lines in an
``if TYPE_CHECKING:`` block (what type checkers and documentation tools read);
:func:`attach` reads that block from the package's source and returns the module's
``__getattr__`` and ``__dir__``: the first access to a name imports its module.
"""

import ast
import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any


def exports(init_file: str) -> dict[str, tuple[str, str | None]]:
    """``name → (relative module, attribute or None for a submodule)`` of every import in
    the ``if TYPE_CHECKING:`` blocks of ``init_file``."""
    tree = ast.parse(Path(init_file).read_text())
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


def _is_type_checking(test: ast.expr) -> bool:
    return isinstance(test, ast.Name) and test.id == "TYPE_CHECKING"


def attach(
    package: str, init_file: str, namespace: dict[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` of ``package`` (its ``__init__`` at ``init_file``, its
    globals ``namespace``): a name is imported on first access and then kept in the
    namespace, so later accesses cost nothing. Sets the package's ``__all__`` to its
    public names (``from attndyn import *`` and ``dir(attndyn)`` list only those)."""
    table = exports(init_file)

    def __getattr__(name: str) -> Any:
        if name not in table:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module_name, attribute = table[name]
        module = importlib.import_module(module_name, package)
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
