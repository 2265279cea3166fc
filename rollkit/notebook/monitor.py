"""The run monitor: a widget over a batch run going on, or finished.

`RunMonitor(source)` shows done / in flight / failed with rate and ETA, one
lane per rollout in flight (phase, turns and tokens against their limits,
agent time), the dollars spent so far and the reward per dollar, each signal's running mean with a 95% interval and n scored /
n total, stop reasons and error types so far, and the slowest and failed
rollouts: picking one opens it in a `TraceBrowser` below. `source` is

- an `rk.evaluate_async(...)` awaitable in this kernel (the run feeds the monitor
  as it goes; `rk.evaluate(..., monitor=True)` makes and displays one),
- an `EvalResult` or a list of traces (a finished run), or
- a run folder written by another process (`rollkit eval ... --out DIR`):
  followed with rollkit.runs.live.FolderFollower every `poll_every` seconds
  on the kernel's event loop (`poll()` does one step by hand).

Redraws are coalesced: a change draws at once if the last draw is at least
`interval` seconds old, otherwise one draw is scheduled for then; however
many rollouts finish in between, the front end gets at most 1 / `interval`
redraws a second (plus the final one, drawn at once). `clock` and
`schedule` are injectable, so the coalescing can be tested without waiting.

`on_final` holds callables called once when the run ends (the page of
`rollkit view`, rollkit.notebook.viewpage, redraws its charts then).
Everything a model or task wrote is escaped before it becomes HTML. The widget holds view state only: the run's
numbers live in rollkit.runs.live.RunState.
"""

from __future__ import annotations

import asyncio
import html
import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import ipywidgets as widgets

from ..core.trace import Trace
from ..runs.live import Finished, FolderFollower, RunState
from .browser import TraceBrowser
from .sync_loop import kernel_loop
from .display import STYLE, error_html

__all__ = ["RunMonitor", "MAX_LANES"]

MAX_LANES = 20  # lanes drawn; the rest are counted

Schedule = Callable[[float, Callable[[], None]], Any]  # (delay, fn) -> a handle with .cancel()


def _loop_schedule(delay: float, fn: Callable[[], None]) -> Any:
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return None  # no loop to wait on: the caller draws at once
    return loop.call_later(delay, fn)


def _seconds(value: float | None) -> str:
    if value is None:
        return "–"
    if value < 60:
        return f"{value:.1f} s"
    return f"{int(value // 60)} min {int(value % 60)} s"


def _against(value: Any, limit: Any) -> str:
    return f"{'NA' if value is None else value} / {'∞' if limit is None else limit}"


class RunMonitor(widgets.VBox):
    """See the module docstring. `redraws` counts the draws so far."""

    def __init__(self, source: Any, *, interval: float = 0.25, poll_every: float = 0.5,
                 clock: Callable[[], float] = time.monotonic, schedule: Schedule | None = None,
                 follow: bool = True) -> None:
        self.state = RunState()
        self.interval = interval
        self.poll_every = poll_every
        self._clock = clock
        self._schedule = schedule or _loop_schedule
        self._pending: Any = None
        self._last = -float("inf")
        self._task: asyncio.Task[None] | None = None
        self._batch: list[bool] | None = None  # while a poll reads: the changes seen (final or not)
        self.redraws = 0
        self.on_final: list[Callable[[], None]] = []
        self._final_seen = False
        self.follower: FolderFollower | None = None
        self.counts = widgets.HTML()
        self.counts.add_class("rk-monitor-counts")
        self.message = widgets.HTML()
        self.message.add_class("rk-monitor-message")
        self.lanes = widgets.HTML()
        self.lanes.add_class("rk-monitor-lanes")
        self.signals = widgets.HTML()
        self.signals.add_class("rk-monitor-signals")
        self.outcomes = widgets.HTML()
        self.outcomes.add_class("rk-monitor-outcomes")
        self.picks = widgets.Select(options=[], rows=6, layout=widgets.Layout(width="100%"))
        self.picks.add_class("rk-monitor-picks")
        self.picks.observe(self._on_pick, names="value")
        self.detail = widgets.VBox()
        self.detail.add_class("rk-monitor-detail")
        self._picked: list[Finished] = []
        super().__init__([
            widgets.HTML(STYLE), self.counts, self.message, self.lanes,
            widgets.HBox([self.signals, self.outcomes]),
            widgets.HTML("<b>slowest and failed rollouts</b> (pick one to read it)"), self.picks, self.detail,
        ])
        self.add_class("rk-monitor")
        self.state.on_change = self._changed
        self._attach(source, follow)
        self.draw()

    # ---- sources ---------------------------------------------------------------------
    def _attach(self, source: Any, follow: bool) -> None:
        if isinstance(source, (str, os.PathLike)):
            self.follower = FolderFollower(Path(source), self.state)
            self.poll()
            if follow:
                self.start()
            return
        attach = getattr(source, "attach", None)
        if callable(attach) and not isinstance(source, Trace):  # an rk.evaluate_async awaitable
            attach(self.state)
            return
        traces = getattr(source, "traces", source)
        if isinstance(traces, Iterable) and not isinstance(traces, (str, bytes)):
            listed = list(traces)
            for index, trace in enumerate(listed):
                if not isinstance(trace, Trace):
                    raise TypeError(f"RunMonitor: item {index} is a {type(trace).__name__}, not an rk.Trace")
            self.state.begin({"total": len(listed)})
            for trace in listed:
                self.state.finished(trace)
            self.state.end("done")
            return
        raise TypeError(
            f"RunMonitor watches an rk.evaluate_async(...) awaitable, an EvalResult, a list of traces or a run folder "
            f"path; got {type(source).__name__}"
        )

    def poll(self) -> bool:
        """Follow the folder one step (what the follow task does every
        `poll_every` seconds); True when anything changed."""
        if self.follower is None:
            raise RuntimeError("this monitor does not follow a folder: it was given a run in this kernel")
        # One poll can read thousands of lines: their changes make one redraw request.
        self._batch = []
        try:
            changed = self.follower.poll()
        finally:
            seen, self._batch = self._batch, None
        if seen:
            self._changed(any(seen))
        return changed

    def start(self) -> None:
        """Follow the folder on the running event loop (the kernel's) until `stop()`."""
        if self.follower is None or self._task is not None:
            return
        loop = kernel_loop()
        if loop is None:
            return  # no loop: poll() by hand
        self._task = loop.create_task(self._follow())

    async def _follow(self) -> None:
        while True:
            self.poll()
            await asyncio.sleep(self.poll_every)

    def stop(self) -> None:
        """Stop following and drop a scheduled redraw."""
        if self._task is not None:
            self._task.cancel()
            self._task = None
        if self._pending is not None:
            self._pending.cancel()
            self._pending = None

    def close(self) -> None:
        self.stop()
        super().close()

    # ---- coalesced redraws ----------------------------------------------------------------
    def _changed(self, final: bool = False) -> None:
        if self._batch is not None:
            self._batch.append(final)
            return
        if final:
            if self._pending is not None:
                self._pending.cancel()
                self._pending = None
            self.draw()
            return
        if self._pending is not None:
            return
        wait = self._last + self.interval - self._clock()
        if wait <= 0:
            self.draw()
            return
        self._pending = self._schedule(wait, self._fire)
        if self._pending is None:
            # No loop to wait on: draw now. Only a poll by hand gets here (a
            # run feeds its monitor from its own loop), and a poll is one batch.
            self.draw()

    def _fire(self) -> None:
        self._pending = None
        self.draw()

    def draw(self) -> None:
        """Redraw from the state now."""
        self.redraws += 1
        self._last = self._clock()
        state = self.state
        self.counts.value = self._counts_html(state)
        self.message.value = "".join(f"<p>{error_html(m)}</p>" for m in state.messages)
        self.lanes.value = self._lanes_html(state)
        self.signals.value = self._signals_html(state)
        self.outcomes.value = self._outcomes_html(state)
        picks = state.picks()
        if [r for _, r in picks] != self._picked:
            chosen = self.picks.value
            self._picked = [r for _, r in picks]
            self.picks.options = [(label, i) for i, (label, _) in enumerate(picks)]
            self.picks.value = chosen if chosen is not None and chosen < len(picks) else None
        if state.final is not None and not self._final_seen:
            self._final_seen = True
            for call in self.on_final:
                call()

    @staticmethod
    def _counts_html(state: RunState) -> str:
        total = "?" if state.total is None else state.total
        rate = state.rate()
        status = {None: "running", "done": "finished"}.get(state.final, state.final or "")
        if state.final is None and not state.in_flight and state.done == 0:
            status = "waiting"
        parts = [
            f"<b>{state.done} / {total} done</b>", f"{len(state.in_flight)} in flight", f"{state.failed} failed",
            f"{rate:.1f} rollouts/s" if rate else "– rollouts/s", f"ETA {_seconds(state.eta())}",
            html.escape(str(status)), html.escape(state.run_cost().text()),
        ]
        cost = state.run_cost().total
        return (f'<div class="rk-counts" data-done="{state.done}" data-inflight="{len(state.in_flight)}" data-failed="{state.failed}" '
                f'data-cost="{"" if cost is None else repr(cost)}" '
                f'data-status="{html.escape(str(status))}">{" · ".join(parts)}</div>')

    @staticmethod
    def _lanes_html(state: RunState) -> str:
        if not state.in_flight:
            return ""
        limits = state.limits
        rows = []
        lanes = list(state.in_flight.values())
        for lane in lanes[:MAX_LANES]:
            rows.append(
                f"<tr><td>{html.escape(lane.rollout_id)}</td><td>{html.escape(lane.phase)}</td>"
                f"<td>{_against(lane.turns, limits.get('max_turns'))}</td>"
                f"<td>{_against(lane.tokens, limits.get('max_total_tokens'))}</td>"
                f"<td>{lane.agent_time:.2f} s / {'∞' if state.agent_timeout is None else f'{state.agent_timeout:g} s'}</td></tr>"
            )
        more = f"<p>and {len(lanes) - MAX_LANES} more in flight</p>" if len(lanes) > MAX_LANES else ""
        return ('<table class="rk-table"><tr><th>in flight</th><th>phase</th><th>turns</th><th>tokens</th>'
                f"<th>agent time</th></tr>{''.join(rows)}</table>{more}")

    @staticmethod
    def _signals_html(state: RunState) -> str:
        rows = []
        for name, mean, half, scored, total in state.signal_means():
            shown = "–" if mean is None else f"{mean:.3f}"
            spread = "" if half is None else f" ± {half:.3f}"
            rows.append(f"<tr><td>{html.escape(name)}</td><td>{shown}{spread}</td><td>{scored} / {total}</td></tr>")
        if not rows:
            return ""
        return ('<table class="rk-table"><tr><th>signal</th><th>mean ± 95%</th><th>scored / total</th></tr>'
                f"{''.join(rows)}</table>")

    @staticmethod
    def _outcomes_html(state: RunState) -> str:
        if not state.outcomes:
            return ""
        rows = "".join(f"<tr><td>{html.escape(k)}</td><td>{v}</td></tr>" for k, v in state.outcomes.most_common())
        return f'<table class="rk-table"><tr><th>outcome</th><th>rollouts</th></tr>{rows}</table>'

    # ---- picking a rollout ------------------------------------------------------------------
    def show_rollout(self, record: Finished) -> TraceBrowser | None:
        """Show one finished rollout in a TraceBrowser below; a trace that
        cannot be read any more (its folder deleted) is said so instead."""
        try:
            trace = record.trace()
        except (FileNotFoundError, ValueError) as exc:
            self.detail.children = [widgets.HTML(error_html(str(exc)))]
            return None
        browser = TraceBrowser([trace])
        browser.select(0)
        self.detail.children = [browser]
        return browser

    def _on_pick(self, change: dict[str, Any]) -> None:
        if change["new"] is not None:
            self.show_rollout(self._picked[change["new"]])
