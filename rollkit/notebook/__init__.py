"""rollkit in a notebook: step rollouts by hand, watch them, browse traces.

    ro = rk.notebook.open(agent, task)   # a NotebookRollout, opened
    ro.step()                            # or ro.step("user text"); await ro.astep(...)
    ro.panel()                           # the widget: chat, Send/Step/Close/Abort, gauges, chart
    ro.close()                           # finalize and score; returns the trace
    rk.notebook.TraceBrowser(traces)     # many traces: pick one, read it, see its plots

A trace shows itself as HTML in any notebook (`rk.Trace._repr_html_`, drawn
by `rollkit.display`); this package needs the notebook extra (ipywidgets, plotly,
anywidget, nest-asyncio); the core never imports it.
"""

from __future__ import annotations

from .browser import TraceBrowser
from ..display import chat_html, trace_html
from .panel import RolloutPanel
from .stepping import NotebookRollout, RolloutEnded, Status, StepResult, open

__all__ = [
    "NotebookRollout",
    "RolloutEnded",
    "RolloutPanel",
    "Status",
    "StepResult",
    "TraceBrowser",
    "chat_html",
    "open",
    "show",
    "trace_html",
]


def show(trace):  # type: ignore[no-untyped-def]
    """Display a trace as HTML in the notebook (what leaving it as a cell's
    last expression does once this package is imported)."""
    from IPython.display import HTML, display

    display(HTML(trace_html(trace)))

