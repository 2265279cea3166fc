"""The heavy third-party modules rollkit uses, named in one place and
imported on first use.

A module that needs pyarrow, pandas, numpy, DuckDB, plotly, IPython, tqdm,
inspect-ai or reasoning-gym imports its name from here at its top (`from
..core.dependencies import pa`), so its dependencies read where a reader
looks for them, while `import rollkit` loads none of them: each name is a
stand-in module that imports the real one when an attribute is first read
(`pa.table(...)`), and then is that module's attributes. A missing optional
package surfaces there as rollkit's `Unavailable`, naming the extra that
brings it. Code that asks whether a package is installed (try/except
ImportError) imports it itself. A module is imported with the cyclic
collector paused (rollkit.core.gcpause, keep=True): an import makes many
objects it keeps, which the collector would otherwise walk
several times over while pandas or DuckDB loads, and again once they are old.
This module imports nothing of rollkit but the error tree and that pause.
"""

from __future__ import annotations

import importlib
import types
from typing import Any

from .errors import Unavailable
from .gcpause import paused

__all__ = ["duckdb", "go", "inspect_ai", "inspect_ai_constants", "inspect_ai_dataset", "inspect_ai_event",
           "inspect_ai_log", "inspect_ai_model", "inspect_ai_scorer", "inspect_ai_solver", "inspect_ai_tool",
           "ipython", "ipython_display", "ipython_formatters", "load", "np", "pa", "pandas", "pc", "pd", "pq", "reasoning_gym", "tqdm_auto"]


class _Deferred(types.ModuleType):
    """A module imported when one of its attributes is first read."""

    def __init__(self, name: str, extra: str | None = None) -> None:
        super().__init__(name)
        self.__dict__["_extra"] = extra
        self.__dict__["_module"] = None

    def _load(self) -> types.ModuleType:
        module = self.__dict__["_module"]
        if module is None:
            try:
                with paused(keep=True):
                    module = importlib.import_module(self.__name__)
            except ImportError as exc:
                extra = self.__dict__["_extra"]
                hint = f"pip install 'rollkit[{extra}]'" if extra else f"pip install {self.__name__.split('.')[0]}"
                raise Unavailable(f"{self.__name__} is not installed ({exc}); {hint}") from exc
            self.__dict__["_module"] = module
        return module

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self._load(), attribute)

    def __repr__(self) -> str:
        loaded = "loaded" if self.__dict__["_module"] is not None else "not loaded yet"
        return f"<module {self.__name__!r}, imported on first use: {loaded}>"


def load(*modules: _Deferred) -> None:
    """Import these stand-ins' modules now (a build imports one beside its work)."""
    for module in modules:
        module._load()


pa = _Deferred("pyarrow")
pq = _Deferred("pyarrow.parquet")
pc = _Deferred("pyarrow.compute")
np = _Deferred("numpy")
pd = pandas = _Deferred("pandas")
duckdb = _Deferred("duckdb")
go = _Deferred("plotly.graph_objects")
ipython = _Deferred("IPython")
ipython_display = _Deferred("IPython.display")
ipython_formatters = _Deferred("IPython.core.formatters")
tqdm_auto = _Deferred("tqdm.auto")
inspect_ai = _Deferred("inspect_ai", "inspect")
inspect_ai_constants = _Deferred("inspect_ai._util.constants", "inspect")
inspect_ai_dataset = _Deferred("inspect_ai.dataset", "inspect")
inspect_ai_event = _Deferred("inspect_ai.event", "inspect")
inspect_ai_log = _Deferred("inspect_ai.log", "inspect")
inspect_ai_model = _Deferred("inspect_ai.model", "inspect")
inspect_ai_scorer = _Deferred("inspect_ai.scorer", "inspect")
inspect_ai_solver = _Deferred("inspect_ai.solver", "inspect")
inspect_ai_tool = _Deferred("inspect_ai.tool", "inspect")
reasoning_gym = _Deferred("reasoning_gym", "reasoning-gym")
