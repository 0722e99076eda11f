"""Load what a setting or a command names as ``module:attribute``, with errors that say why.

The one loader of hopchain: ``--contracts``, ``HOPCHAIN_CONTRACTS`` and ``hopchain policy
show`` all use it.

``hopchain schema export out --contracts claims.topics:registry`` imports ``claims.topics`` and
takes its ``registry``. As with ``uvicorn`` and ``faststream run``, the directory the command
runs in is searched first, so a project's modules load without installing the project.
"""

from __future__ import annotations

import difflib
import importlib
import re
import sys
from pathlib import Path

from hopchain.exceptions import ConfigurationError
from hopchain.schemas import ContractRegistry

__all__ = ["LoadError", "load_object", "load_registry"]

_DOTTED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
_REGISTRY_ATTRIBUTES = ("registry", "contracts")


class LoadError(ConfigurationError):
    """A ``module:attribute`` could not be loaded, or is not what the command needs.

    Attributes:
        spec: the text given on the command line.
    """

    def __init__(self, spec: str, message: str) -> None:
        self.spec = spec
        super().__init__(message)


def load_object(spec: str, *, search_path: Path | None = None) -> object:
    """Import ``module`` and return its ``attribute`` (which may be dotted: ``app.registry``).

    ``search_path`` (default: the working directory) is put first on ``sys.path`` when it is
    not there yet, and stays there: the loaded module may import its siblings later.

    Raises:
        LoadError: the spec is malformed, the module cannot be imported (or raised while
            importing), or it has no such attribute. The message names which, and what to try.
    """
    module_name, colon, attribute = spec.partition(":")
    if not colon or not _DOTTED.fullmatch(module_name) or not _DOTTED.fullmatch(attribute):
        raise LoadError(
            spec,
            f"expected MODULE:ATTRIBUTE, like 'claims.topics:registry'; got {spec!r}",
        )
    where = str((search_path or Path.cwd()).resolve())
    if where not in sys.path:
        sys.path.insert(0, where)
    importlib.invalidate_caches()  # modules written since the last import are found too
    try:
        loaded: object = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and f"{module_name}.".startswith(f"{exc.name}."):
            raise LoadError(
                spec,
                f"no module named {exc.name!r} (searched {where} and the installed packages); "
                "run the command from the project's directory or install the project",
            ) from exc
        raise LoadError(
            spec, f"importing {module_name!r} failed: it imports {exc.name!r}, which is missing"
        ) from exc
    except Exception as exc:
        # The user's module raised while it was imported: show what, not our traceback.
        raise LoadError(
            spec, f"importing {module_name!r} raised {type(exc).__name__}: {exc}"
        ) from exc
    for depth, part in enumerate(attribute.split(".")):
        try:
            loaded = getattr(loaded, part)
        except AttributeError:
            owner = ".".join([module_name, *attribute.split(".")[:depth]])
            names = [name for name in dir(loaded) if not name.startswith("_")]
            close = difflib.get_close_matches(part, names, n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise LoadError(spec, f"{owner!r} has no attribute {part!r}{hint}") from None
    return loaded


def load_registry(spec: str, *, search_path: Path | None = None) -> ContractRegistry:
    """Load a :class:`ContractRegistry` named as ``module:attribute``.

    The attribute may be the registry, an object holding it as ``registry`` or
    ``contracts``, or a callable of no arguments returning one.

    An application object that keeps its registry as ``app.registry`` can be named directly.

    Raises:
        LoadError: as :func:`load_object`, or the object holds no registry.
    """
    loaded = load_object(spec, search_path=search_path)
    if callable(loaded) and not isinstance(loaded, type | ContractRegistry):
        try:
            loaded = loaded()
        except Exception as exc:
            raise LoadError(spec, f"calling {spec} raised {type(exc).__name__}: {exc}") from exc
    if isinstance(loaded, ContractRegistry):
        return loaded
    for name in _REGISTRY_ATTRIBUTES:
        candidate = getattr(loaded, name, None)
        if isinstance(candidate, ContractRegistry):
            return candidate
    raise LoadError(
        spec,
        f"{spec} is a {type(loaded).__name__}, not a ContractRegistry, and has no "
        "'registry' or 'contracts' attribute holding one",
    )
