"""Other tools' traces as rollkit traces, and rollkit traces in their formats.

What this package owns: one module per peer format, each reading that
tool's record (and, where one exists, writing it):

    messages      OpenAI-format chat transcripts (read and write, "messages")
    inspect_log   inspect-ai eval logs read, through inspect-ai's models and reader ("inspect")
    inspect_write rollkit traces written as an inspect-ai eval log, through inspect-ai's writer
    verifiers     verifiers' results.jsonl ("verifiers") and v1 traces.jsonl ("verifiers-v1")
    tau2          tau2-bench simulation results, one file or a folder ("tau2")
    trajectory    mini-swe-agent / SWE-agent trajectory files ("trajectory")
    atif          Harbor's Agent Trajectory Interchange Format (read and write, "atif")

Importing this package registers them in the core's format table (each
module is imported when its format is first sniffed, read or written)
(`rollkit.core.store.register_format`), so `rk.load(path)` recognises them
by parsing their content (`docparse`, not by a key in the first bytes) and `rk.save(traces, path, format=...)` writes them. The modules
import only the standard library and the core, never `rollkit.notebook` or
`rollkit.examples`; inspect-ai is imported when an inspect log is read or
written.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from ...core.lazy import lazy_names
from ...core.store import TraceFormat, register_format

_MODULES = ("atif", "inspect_log", "inspect_write", "messages", "tau2", "trajectory", "verifiers")
__all__ = list(_MODULES)

# The readers are imported when a file is first sniffed, read or written,
# not by `import rollkit` (they build pydantic models, which is slow to import).
__getattr__ = lazy_names(__name__, globals(), {name: (f".{name}", None) for name in _MODULES})


def _deferred(module: str, function: str) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        return getattr(importlib.import_module(f"{__name__}.{module}"), function)(*args, **kwargs)

    call.__qualname__ = call.__name__ = f"{module}.{function}"
    return call


# The order the sniffers run in, after rollkit's own: the most specific
# first, plain transcripts (which most JSON with messages resembles) last.
register_format(TraceFormat("inspect", "inspect-ai eval logs (.eval, .json)",
                            sniff_file=_deferred("inspect_log", "sniff"), read=_deferred("inspect_log", "read"),
                            write=_deferred("inspect_write", "write"), needs="rollkit[inspect]"))
register_format(TraceFormat("atif", "Harbor ATIF trajectories (.json, one a line in .jsonl)",
                            sniff_file=_deferred("atif", "sniff"), read=_deferred("atif", "read"),
                            write=_deferred("atif", "write")))
register_format(TraceFormat("trajectory", "mini-swe-agent / SWE-agent trajectories (.traj.json, .traj)",
                            sniff_file=_deferred("trajectory", "sniff"), read=_deferred("trajectory", "read")))
register_format(TraceFormat("tau2", "tau2-bench results (.json, or its folder with simulations/)",
                            sniff_file=_deferred("tau2", "sniff"), read=_deferred("tau2", "read")))
register_format(TraceFormat("verifiers", "verifiers results.jsonl",
                            sniff_file=_deferred("verifiers", "sniff"), read=_deferred("verifiers", "read")))
register_format(TraceFormat("verifiers-v1", "verifiers v1 traces.jsonl (one episode a line)",
                            sniff_file=_deferred("verifiers", "sniff_v1"), read=_deferred("verifiers", "read_v1")))
register_format(TraceFormat("messages", "OpenAI-format chat transcripts (.json, .jsonl)",
                            sniff=_deferred("messages", "sniff"), read=_deferred("messages", "read"),
                            write=_deferred("messages", "write")))
