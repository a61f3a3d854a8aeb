"""Loading a handler from a ``MODULE:FUNCTION`` specification (the CLI's ``--handler``)."""

from __future__ import annotations

import importlib
import inspect
import re
import sys
from collections.abc import Callable

from shardq.errors import InvalidHandler

_SPEC = re.compile(
    r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$"
)


def load_handler(spec: str) -> Callable[..., object]:
    """Import ``MODULE:FUNCTION`` (the current directory is importable, as with ``python -m``)
    and return the function: a sync function or an ``async def`` one (an instance with
    ``__call__`` too). A class or anything not callable raises :class:`InvalidHandler` with one
    clear line."""
    target = load_attribute(spec, "handler", "function")
    if inspect.isclass(target):
        raise InvalidHandler(
            f"handler {spec!r} is a class, not a function (give a function of one task, "
            "sync or async, or an instance with __call__)"
        )
    if not callable(target):
        raise InvalidHandler(f"handler {spec!r} is a {type(target).__name__}, not a function")
    return target


def load_attribute(spec: str, what: str = "handler", kind: str = "function") -> object:
    """Import ``MODULE:ATTRIBUTE`` and return the attribute; :class:`InvalidHandler` (one line
    naming ``what``) when the spec is malformed, the module does not import or has no such
    attribute."""
    if not isinstance(spec, str) or not _SPEC.match(spec):
        raise InvalidHandler(f"{what} must look like module.path:{kind}, got {spec!r}")
    module_name, attribute = spec.split(":", 1)
    if "" not in sys.path:
        sys.path.insert(0, "")
    try:
        target = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - ImportError, or the module raising while it loads
        raise InvalidHandler(f"cannot import {what} module {module_name!r}: {type(exc).__name__}: {exc}") from None
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise InvalidHandler(f"module {module_name!r} has no attribute {attribute!r}") from None
    return target


def noop(task: object) -> None:
    """A handler that does nothing (benchmarks, demos)."""
    return None
