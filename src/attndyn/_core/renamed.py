"""The spellings of 0.4 that 0.5 renamed, kept working for one release with a
:class:`DeprecationWarning` (docs/reference/parameters.md lists them).

:func:`renamed` wraps a function, or a dataclass's ``__init__`` (then the old names also
read as deprecated attributes), so that ``old=value`` is taken as ``new=value``. Imports
nothing heavy: the command line uses the table without importing JAX.
"""

import functools
import warnings
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, cast

from .names import EVOLUTION_MODELS

#: 0.4's names of the value noises (phase diagrams, evolution), read as today's with a
#: deprecation warning (:func:`attndyn.studies.spec.noise_name`).
RENAMED_NOISES: dict[str, str] = {"full": "matrix", "hybrid": "scalar"}


def _noises_of_models(text: str) -> str:
    """0.4's ``--model`` list (evolution's model names) as a ``--noise`` list."""
    listed = [part.strip() for part in str(text).split(",") if part.strip()]
    for name in listed:
        if name not in EVOLUTION_MODELS:
            from .errors import ParameterError  # imports JAX: only when needed

            raise ParameterError(
                f"--model={name!r} must be one of {', '.join(EVOLUTION_MODELS)} (deprecated: "
                "use --noise none, scalar or matrix)."
            )
    return ",".join(EVOLUTION_MODELS[name] for name in listed)


#: The command line's options renamed in 0.5 (by their Python names, as 0.4's recorded
#: arguments name them): old → (new, how an
#: old value reads in the new option). Each old flag stays, hidden, for one release.
DEPRECATED_FLAGS: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "tokens": ("n_tokens", lambda value: value),
    "trajectories": ("n_trajectories", lambda value: value),
    "exclude_nonfinite": ("on_nonfinite", lambda flag: "exclude" if flag else "raise"),
    "models": ("noise", _noises_of_models),
    "layers": ("rw_n_layers", lambda value: value),
    "runs": ("rw_n_trajectories", lambda value: value),
    "kind": ("diagram", lambda value: value),
}
#: The release that removes the old spellings.
REMOVED_IN = "0.6"

F = TypeVar("F", bound=Callable[..., Any])


def deprecation(old: str, new: str, where: str) -> str:
    return f"{where}: {old!r} is deprecated, use {new!r} (the old name goes in {REMOVED_IN})."


#: A new name, or a new name and how an old value reads in it.
Rename = str | tuple[str, Callable[[Any], Any]]


def translate(
    kwargs: dict[str, Any], renames: Mapping[str, Rename], where: str, *, stacklevel: int = 3
) -> dict[str, Any]:
    """``kwargs`` with each old name of ``renames`` replaced by its new one (its value
    converted where the rename says how), warning once per name; both spellings given at
    once are refused."""
    for old, target in renames.items():
        if old not in kwargs:
            continue
        new, convert = (target, None) if isinstance(target, str) else target
        if new in kwargs:
            from .errors import ParameterError  # imports JAX: only when needed

            raise ParameterError(f"{where}: give {new} only ({old} is its deprecated name).")
        warnings.warn(deprecation(old, new, where), DeprecationWarning, stacklevel=stacklevel)
        value = kwargs.pop(old)
        kwargs[new] = value if convert is None else convert(value)
    return kwargs


def renamed(**renames: Rename) -> Callable[[F], F]:
    """Accept ``old=`` for ``new=`` (``renamed(tokens="n_tokens")``) on a function or a
    dataclass, with a :class:`DeprecationWarning`."""

    def decorate(target: F) -> F:
        if isinstance(target, type):
            _rename_class(target, renames)
            return cast(F, target)
        where = f"{target.__qualname__}()"

        @functools.wraps(target)
        def wrapper(*args, **kwargs):
            return target(*args, **translate(kwargs, renames, where))

        return wrapper  # type: ignore[return-value]

    return decorate


def _rename_class(cls: type, renames: Mapping[str, Rename]) -> None:
    init = cls.__init__
    where = cls.__name__

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        init(self, *args, **translate(kwargs, renames, where))

    cls.__init__ = __init__  # type: ignore[method-assign]
    for old, new in renames.items():
        if isinstance(new, str):  # a converted value has no old attribute to read
            setattr(cls, old, old_attribute(old, new, where))


def old_attribute(old: str, new: str, where: str) -> property:
    def get(self):
        warnings.warn(deprecation(old, new, where), DeprecationWarning, stacklevel=2)
        return getattr(self, new)

    return property(get, doc=f"Deprecated: {new}.")
