"""Names a package hands out on first use, so importing it stays cheap.

Each layer's package lists the names whose modules load heavy dependencies
(the openai SDK, aiohttp, pandas, ipywidgets, ...) and gets a module
`__getattr__` from `lazy_names`: the first access imports the module, keeps
the value in the package's globals (later accesses cost nothing) and returns
it. This module imports nothing of rollkit.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_names"]


def lazy_names(package: str, namespace: dict[str, Any], names: Mapping[str, tuple[str, str | None]]) -> Callable[[str], Any]:
    """A module `__getattr__` for `package`: `names` maps a public name to
    (module, attribute), the module absolute or relative to `package`
    (".frames"), the attribute None for the module itself."""

    def __getattr__(name: str) -> Any:
        if name not in names:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module_name, attribute = names[name]
        module = importlib.import_module(module_name, package)
        value = module if attribute is None else getattr(module, attribute)
        namespace[name] = value
        return value

    return __getattr__
