"""What-if replay as a DataFrame: `rk.replay_hooks(traces, hooks, limits=...)`.

A thin face over `rollkit.core.replay`: it runs the replay (from sync code,
a notebook cell or a running loop, like the rest of the notebook layer) and
hands back one row per (trace, turn, hook or limit): `fired` (the stop would
have fired, the limit been reached, the rewrite changed something),
`changed` and `diff` for rewrites, `error` when a hook raised, and
`ends_after`, the turn each trace would have ended after (NaN: never).
`rk.plots.hook_matrix(frame)` draws it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pandas as pd

from ..core.replay import REPLAY_COLUMNS, replay
from ..core.trace import Trace
from . import sync_loop
from ..analysis.frames import trace_list

__all__ = ["replay_hooks", "replay_hooks_async"]


async def replay_hooks_async(traces: Iterable[Trace] | Trace, hooks: Any = (), *, limits: Any = None) -> pd.DataFrame:
    """`await rk.notebook.whatif.replay_hooks_async(...)`: the async form."""
    columns = await replay(trace_list(traces), hooks, limits=limits)
    frame = pd.DataFrame(columns, columns=list(REPLAY_COLUMNS))
    return frame.astype({"fired": "bool", "ends_after": "float"})


def replay_hooks(traces: Iterable[Trace] | Trace, hooks: Any = (), *, limits: Any = None) -> pd.DataFrame:
    """Replay `hooks` (a Task subclass, a Task, or @rk.stop / @rk.intercept
    functions) and `limits` over recorded traces, with no model calls; see
    rollkit.core.replay for what each row means."""
    return sync_loop.run(replay_hooks_async(traces, hooks, limits=limits))
