"""Operator plugins: modules that register extra operators when imported.

A user's custom operator lives in an ordinary Python module that calls
``tunefleet.compiler.ops.registry.register(OpDef(...))`` at import, as the
built-in operators do. Naming it in ``TUNEFLEET_OPS_PLUGINS`` (module names
separated by commas, e.g. ``mylab.ops,mylab.fused``) makes every process that
builds or measures kernels import it: the CLI, the builder processes and each
measurement child (which receive the list explicitly, so they do not depend on
when their parent's environment was read).
"""

from __future__ import annotations

import importlib
import os
import re

__all__ = ["ENV_VAR", "plugin_modules", "load_plugins", "PluginError"]

ENV_VAR = "TUNEFLEET_OPS_PLUGINS"
_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")


class PluginError(ImportError):
    """A plugin module name is malformed or the module cannot be imported."""


def plugin_modules(value: str | None = None) -> tuple[str, ...]:
    """The module names listed in ``value`` (default: ``$TUNEFLEET_OPS_PLUGINS``), in order.

    Raises PluginError naming a malformed entry.
    """
    text = os.environ.get(ENV_VAR, "") if value is None else value
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    for name in names:
        if not _MODULE.fullmatch(name):
            raise PluginError(f"{ENV_VAR}: {name!r} is not a Python module name")
    return names


def load_plugins(modules: tuple[str, ...] | None = None) -> tuple[str, ...]:
    """Import ``modules`` (default: :func:`plugin_modules`) so their operators register; returns them.

    Importing twice is a no-op (Python caches modules). Raises PluginError
    naming the module and the import error.
    """
    modules = plugin_modules() if modules is None else modules
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            raise PluginError(f"{ENV_VAR}: cannot import operator plugin {name!r}: {exc}") from exc
    return modules
