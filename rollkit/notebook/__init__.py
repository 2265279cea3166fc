"""The notebook face: step rollouts by hand, watch them, explore traces.

    ro = rk.notebook.open(agent, task)   # a NotebookRollout, opened
    ro.step()                            # or ro.step("user text"); await ro.step_async(...)
    ro.panel()                           # the widget: chat, Send/Step/Close/Abort, gauges, chart
    ro.close()                           # finalize and score; returns the trace
    rk.notebook.TraceBrowser(traces)     # many traces: pick one, read it, see its plots
    rk.notebook.RunMonitor(run)          # a batch run live: counts, lanes, means, slowest/failed
    rk.frames.rollouts(traces)           # DataFrames (rollkit.analysis.frames, the runs layer)
    rk.plots.rewards(traces)             # plotly figures (rollkit.notebook.plots)

What this layer owns: the synchronous facade over the async core
(`stepping`, over a loop of its own in a thread: `sync_loop`), the rollout panel and
agent's seat (`panel`, `seat`: they type against the facade's protocol in
`_view` and never reach the core), the trace browser, the run monitor and the
page of `rollkit view` (`viewpage`; its list of runs, `runslist`) (ipywidgets), HTML of traces (`display`, standard library
only) and figures (`plots`, plotly). DataFrames are the runs layer's
(rollkit.analysis.frames).

It imports the core, programs and runs layers, never `rollkit.examples`.
Widgets stay thin: no lifecycle logic lives here. Its modules load
ipywidgets, plotly and pandas, so this package's own import
loads none of them: the names below are imported on first use. Importing it
plugs in how a `Trace` shows itself as HTML (see `rollkit.core.plugins`).
`rk.evaluate` and `rk.ab_test` are this layer's (`running`): the runs
layer's, plus `monitor=True`, so the runs layer never reaches up for a widget.
"""

from __future__ import annotations

from typing import Any

from ..core.lazy import lazy_names
from ..core.plugins import plug
from ..core.dependencies import ipython_display

_LAZY = {
    "NotebookRollout": (".stepping", "NotebookRollout"),
    "RolloutEnded": (".stepping", "RolloutEnded"),
    "Status": (".stepping", "Status"),
    "StepResult": (".stepping", "StepResult"),
    "open": (".stepping", "open"),
    "RolloutPanel": (".panel", "RolloutPanel"),
    "TraceBrowser": (".browser", "TraceBrowser"),
    "RunMonitor": (".monitor", "RunMonitor"),
    "view": (".viewpage", "view"),
    "chat_html": (".display", "chat_html"),
    "replay_hooks": (".whatif", "replay_hooks"),
    "trace_html": (".display", "trace_html"),
    "TurnValueView": (".decide", "TurnValueView"),
    "ABMonitor": (".decide", "ABMonitor"),
}
_LAZY.update({module: (f".{module}", None) for module in ("display", "plots")})

__all__ = [*_LAZY, "show"]

__getattr__ = lazy_names(__name__, globals(), _LAZY)


def show(trace: Any, *, logprobs: bool = False) -> None:
    """Display a trace as HTML in the notebook (what leaving it as a cell's
    last expression does too); `logprobs=True` colours each reply whose
    call kept its token logprobs by them."""
    from .display import trace_html

    ipython_display.display(ipython_display.HTML(trace_html(trace, logprobs=logprobs)))


def _trace_html(trace: Any) -> str:
    from .display import trace_html

    return trace_html(trace)


plug("trace_html", _trace_html)
