"""The trace browser: many traces as a table; pick one to read it.

`TraceBrowser(traces)` shows one row per trace (task, ok, stop, reward,
turns, tokens), a filter box, and below it the picked trace: its HTML view
(`display.trace_html`) and its budget burn and phase timeline figures.
It reads traces only; a trace loaded with `rk.load` shows the same as one
that just ran.
"""

from __future__ import annotations

import html
import os
from collections.abc import Iterable
from typing import Any

import ipywidgets as widgets

from ..core.trace import Trace
from ..tables.lazyrun import Hits, LazyRun
from .display import trace_html
from .outputs import show

__all__ = ["TraceBrowser"]


def _row(trace: Trace) -> str:
    value = trace.scored_reward
    reward = "   –  " if value is None else f"{value:6.3f}"
    ok = {True: "ok  ", False: "FAIL", None: "open"}[trace.ok]
    stop = (trace.stop or "")[:18]
    return (f"{trace.task.key[:16]:<16} {ok} {reward} {trace.num_turns:>5} "
            f"{'NA' if trace.num_total_tokens is None else trace.num_total_tokens:>7} {stop:<18} {trace.id}")


_HEADER = f"{'task':<16} {'ok':<4} {'reward':>6} {'turns':>5} {'tokens':>7} {'stop':<18} trace"

# The header's columns line up with the rows' only if both are drawn in one
# fixed-width font, at one size, starting at the same x: the rows' text
# starts after the list box's border and the option's padding, so the
# header is indented by the same. (The front end's own styles would give the
# list a proportional font and the header another.)
_TABLE_STYLE = """<style>
.rk-trace-table select, .rk-trace-table select option, .rk-trace-header pre {
  font-family: var(--jp-code-font-family, monospace) !important; font-size: 12px !important;
  line-height: 1.4 !important; letter-spacing: normal !important;
}
.rk-trace-table select { padding: 0 !important; border-width: 1px !important; }
.rk-trace-table select option { padding: 0 0 0 4px !important; }
.rk-trace-header pre { margin: 0 !important; padding: 0 0 0 5px !important; border: 0 !important; }
</style>"""


class TraceBrowser(widgets.VBox):
    """A table of traces; selecting a row shows that trace and its plots.
    `select(i)` does from code what a click does."""

    def __new__(cls, traces: Any = None, *args: Any, **kwargs: Any) -> Any:
        # A lazy run, a search's hits, a run folder or a trace file: paged from its tables (runbrowser).
        if isinstance(traces, (LazyRun, Hits, str, os.PathLike)):
            from .runbrowser import RunBrowser

            return RunBrowser(traces, *args, **kwargs)
        return super().__new__(cls, traces, *args, **kwargs)

    def __init__(self, traces: Iterable[Trace], *, plots: bool = True) -> None:
        self.traces = list(traces)
        for i, trace in enumerate(self.traces):
            if not isinstance(trace, Trace):
                raise TypeError(f"TraceBrowser shows rk.Trace objects; item {i} is a {type(trace).__name__}")
        self._plots = plots
        self.filter = widgets.Text(placeholder="filter: task key, stop, trace id…", continuous_update=False)
        self.filter.observe(self._on_filter, names="value")
        self.table = widgets.Select(rows=min(12, max(2, len(self.traces))), layout=widgets.Layout(width="100%"))
        self.table.add_class("rk-trace-table")
        self.table.observe(self._on_pick, names="value")
        self.detail = widgets.HTML()
        self.detail.add_class("rk-trace-detail")
        self.figures = widgets.Output()
        ok = sum(1 for t in self.traces if t.ok)
        rewards = [t.scored_reward for t in self.traces if t.scored_reward is not None]
        mean = f"{sum(rewards) / len(rewards):.3f}" if rewards else "–"
        self.summary = widgets.HTML(
            f"<b>{len(self.traces)} traces</b> · {ok} ok · {len(self.traces) - ok} not ok · mean reward {mean}"
        )
        header = widgets.HTML(f"{_TABLE_STYLE}<pre>{html.escape(_HEADER)}</pre>")
        header.add_class("rk-trace-header")
        super().__init__([self.summary, self.filter, header, self.table, self.detail, self.figures])
        self._show()

    @staticmethod
    def _matches(trace: Trace, needle: str) -> bool:
        # A trace with no stop has nothing to match there: str(None) would
        # make "none" (or "no") match every trace that ran to its end.
        return (not needle or needle in trace.task.key.lower() or needle in trace.id.lower()
                or needle in (trace.stop or "").lower())

    def _show(self, needle: str = "") -> None:
        # Options carry the trace's position, so a filtered table still picks
        # the right trace.
        self.table.options = [(_row(t), i) for i, t in enumerate(self.traces) if self._matches(t, needle)]

    def _on_filter(self, change: dict[str, Any]) -> None:
        self._show(change["new"].strip().lower())

    def select(self, index: int) -> Trace:
        """Show trace number `index` (its position in the list given). A
        filter that hides that trace is cleared, so the pick is always seen
        in the table."""
        if not 0 <= index < len(self.traces):
            raise IndexError(f"there are {len(self.traces)} traces; pick 0..{len(self.traces) - 1}, not {index}")
        if not self._matches(self.traces[index], self.filter.value.strip().lower()):
            self.filter.value = ""  # its observer redraws the table with every trace
        self.table.value = index
        return self.traces[index]

    @property
    def selected(self) -> Trace | None:
        return None if self.table.value is None else self.traces[self.table.value]

    def _on_pick(self, change: dict[str, Any]) -> None:
        index = change["new"]
        show(self.figures)  # first: a pick whose trace or plots fail shows no other trace's plots
        if index is None:
            self.detail.value = ""
            return
        trace = self.traces[index]
        self.detail.value = trace_html(trace)
        if self._plots:
            from .plots import budget_burn, phase_timeline

            show(self.figures, budget_burn(trace), phase_timeline(trace))
