"""Figures for two decisions: where a rollout went wrong, and whether B beats A.

- `turn_values(tv)`: the success rate from each turn (rollkit.runs.turnvalues)
  with its 95% band, the largest drop and rise marked, each point's hover
  naming what the agent did at that turn;
- `TurnValueView(tv)`: that curve over the transcript at a chosen turn (the
  largest drop by default); clicking a point shows the transcript there;
- `drop_turns(batch)`: where failing rollouts go wrong, a histogram of the
  turns of their largest drop, by task;
- `ab(result)` and `ABMonitor`: an A/B test's anytime-valid interval for
  B - A narrowing pair by pair (rollkit.runs.ab), live in a FigureWidget.

Everything a model wrote reaches the page escaped (hover texts and the
transcript go through html.escape / rollkit.notebook.display).
"""

from __future__ import annotations

import html
from typing import Any

import ipywidgets as widgets
import plotly.graph_objects as go

from .display import chat_html

__all__ = ["turn_values", "TurnValueView", "drop_turns", "ab", "ABMonitor"]

_DROP, _RISE, _LINE = "#d62728", "#2ca02c", "#1f77b4"


def _escaped(text: str) -> str:
    return html.escape(text).replace("\n", "<br>")


def turn_values(tv: Any) -> go.Figure:
    """The success rate after each turn of a rollout, with its interval."""
    rows = [r for r in tv.rows if r["rate"] is not None]
    turns = [r["turn"] for r in rows]
    rates = [r["rate"] for r in rows]
    fig = go.Figure()
    fig.add_trace(go.Scatter(
        x=turns + turns[::-1], y=[r["high"] for r in rows] + [r["low"] for r in rows][::-1], fill="toself",
        fillcolor="rgba(31,119,180,0.15)", line={"width": 0}, hoverinfo="skip", name="95% interval",
    ))
    fig.add_trace(go.Scatter(
        x=turns, y=rates, mode="lines+markers", name="success rate", line={"color": _LINE},
        text=[_escaped(r["action"]) for r in rows],
        customdata=[[r["successes"], r["n"]] for r in rows],
        hovertemplate="turn %{x}: %{y:.2f} (%{customdata[0]}/%{customdata[1]})<br>%{text}<extra></extra>",
    ))
    for mark, colour, label in ((tv.drop, _DROP, "largest drop"), (tv.rise, _RISE, "largest rise")):
        if mark is not None:
            turn, change = mark
            rate = rates[turns.index(turn)]
            fig.add_trace(go.Scatter(
                x=[turn], y=[rate], mode="markers", marker={"size": 14, "color": colour, "symbol": "diamond"},
                name=f"{label}: turn {turn} ({change:+.2f})", hoverinfo="skip",
            ))
    fig.update_layout(
        title=f"Chance of success from each turn (trace {html.escape(tv.trace.id)})",
        xaxis={"title": "after turn", "dtick": 1}, yaxis={"title": "success rate", "range": [-0.05, 1.05]},
        height=320, margin={"l": 60, "r": 20, "t": 50, "b": 90},
        legend={"orientation": "h", "y": -0.3, "x": 0},
    )
    return fig


class TurnValueView(widgets.VBox):
    """The turn-value curve over the transcript at `turn` (default: the
    largest drop, else the last turn); `select(turn)` or a click on a point
    moves it."""

    def __init__(self, tv: Any, turn: int | None = None) -> None:
        self.tv = tv
        self.figure = go.FigureWidget(turn_values(tv))
        self.transcript = widgets.HTML()
        super().__init__([self.figure, self.transcript])
        self.figure.data[1].on_click(self._on_click)
        default = tv.drop[0] if tv.drop else tv.trace.num_turns
        self.select(default if turn is None else turn)

    def _on_click(self, trace: Any, points: Any, state: Any) -> None:
        if points.xs:
            self.select(int(points.xs[0]))

    def select(self, turn: int) -> None:
        """Show the transcript up to and including turn `turn`'s reply."""
        trace = self.tv.trace
        if not 0 <= turn <= trace.num_turns:
            raise ValueError(f"turn must be from 0 to {trace.num_turns}, got {turn}")
        self.turn = turn
        end = trace.sampled[turn - 1] + 1 if turn else next(
            (i + 1 for i, m in enumerate(trace.messages) if m.role == "user"), 0)
        row = next((r for r in self.tv.rows if r["turn"] == turn), None)
        rate = "-" if row is None or row["rate"] is None else f"{row['rate']:.2f} [{row['low']:.2f}, {row['high']:.2f}]"
        self.transcript.value = (
            f"<div><b>after turn {turn}</b>: success rate {rate}</div>"
            + chat_html(trace.messages[:end])
        )


def drop_turns(batch: Any, *, failing: bool = True) -> go.Figure:
    """Where rollouts go wrong: how many rollouts had their largest drop at
    each turn, one bar colour per task; only the rollouts that failed
    (`failing=False`: all). Those that never drop are counted in the title."""
    frame = batch.drops()
    if failing:
        frame = frame[frame["succeeded"] == False]  # noqa: E712 - a pandas mask, NA stays out
    dropped = frame.dropna(subset=["drop_turn"])
    fig = go.Figure()
    for example, part in dropped.groupby("example_id", sort=True):
        counts = part["drop_turn"].astype(int).value_counts().sort_index()
        fig.add_trace(go.Bar(x=list(counts.index), y=list(counts.values), name=html.escape(str(example))))
    fig.update_layout(
        barmode="stack",
        title=f"Turn of the largest drop, {'failed' if failing else 'all'} rollouts "
              f"({len(frame) - len(dropped)} of {len(frame)} never drop)",
        xaxis={"title": "turn", "dtick": 1}, yaxis={"title": "rollouts"}, height=320,
        margin={"l": 60, "r": 20, "t": 50, "b": 60},
    )
    return fig


def _ab_layout(fig: Any, signal: str, alpha: float, margin: float | None) -> None:
    fig.add_hline(y=0, line={"color": "grey", "dash": "dot"})
    if margin is not None:
        fig.add_hrect(y0=-margin, y1=margin, fillcolor="rgba(128,128,128,0.12)", line_width=0)
    fig.update_layout(
        title=f"B - A on {html.escape(signal)}: {100 * (1 - alpha):.0f}% anytime-valid interval",
        xaxis={"title": "pairs counted"}, yaxis={"title": "B - A"}, height=320,
        margin={"l": 60, "r": 20, "t": 50, "b": 90}, legend={"orientation": "h", "y": -0.3, "x": 0},
    )


def _ab_traces(states: list[Any]) -> list[Any]:
    xs = [s.pairs for s in states]
    return [
        go.Scatter(x=xs, y=[s.high for s in states], mode="lines", line={"color": _LINE}, name="upper"),
        go.Scatter(x=xs, y=[s.low for s in states], mode="lines", line={"color": _LINE}, fill="tonexty",
                   fillcolor="rgba(31,119,180,0.15)", name="lower"),
        go.Scatter(x=xs, y=[s.mean for s in states], mode="lines", line={"color": "black"}, name="mean B - A"),
    ]


def ab(result: Any) -> go.Figure:
    """An A/B test's interval after each pair, and where it stopped."""
    fig = go.Figure(_ab_traces(result.history))
    _ab_layout(fig, result.signal, result.alpha, result.margin)
    if result.history:
        fig.add_vline(x=result.pairs, line={"color": _DROP if result.decision else "grey"},
                      annotation_text=html.escape(f"{result.decision or 'undecided'} ({result.reason})"))
    return fig


class ABMonitor(widgets.VBox):
    """A live view of an A/B test: the interval narrowing as pairs land, and
    a line saying where it stands. `add(state)` is the test's on_pair;
    `ABMonitor.follow(DIR)` reads the DIR/ab.jsonl of a test run elsewhere
    (what `rollkit view DIR` shows)."""

    def __init__(self, signal: str, alpha: float, margin: float | None) -> None:
        self.states: list[Any] = []
        self.figure = go.FigureWidget(_ab_traces([]))
        _ab_layout(self.figure, signal, alpha, margin)
        self.status = widgets.HTML("waiting for the first pair")
        self.follower: Any = None
        super().__init__([self.status, self.figure])

    @classmethod
    def follow(cls, folder: Any, *, poll_every: float = 0.5) -> ABMonitor:
        """A monitor over the A/B test writing `folder` (its ab.jsonl), read
        every `poll_every` seconds while an event loop runs, until it ends."""
        from ..runs.ab import ABFollower

        follower = ABFollower(folder)
        states = follower.read()
        start = follower.start or {"signal": "reward", "alpha": 0.05, "margin": None}
        monitor = cls(start["signal"], start["alpha"], start["margin"])
        monitor.follower = follower
        for state in states:
            monitor.add(state)
        monitor._ended()
        monitor._poll_every = poll_every
        monitor._schedule_poll()
        return monitor

    def _schedule_poll(self) -> None:
        import asyncio

        if self.follower.ended is not None:
            return
        try:
            asyncio.get_running_loop().call_later(self._poll_every, self.poll)
        except RuntimeError:
            pass  # no loop to wait on: `poll()` reads on demand

    def poll(self) -> int:
        """Read what the followed test wrote since the last read; returns how many pairs."""
        states = self.follower.read()
        for state in states:
            self.add(state)
        self._ended()
        self._schedule_poll()
        return len(states)

    def _ended(self) -> None:
        if self.follower is not None and self.follower.ended is not None and not self.states:
            self.status.value = "the test ended before any pair counted"

    def add(self, state: Any) -> None:
        self.states.append(state)
        xs = [s.pairs for s in self.states]
        with self.figure.batch_update():
            self.figure.data[0].update(x=xs, y=[s.high for s in self.states])
            self.figure.data[1].update(x=xs, y=[s.low for s in self.states])
            self.figure.data[2].update(x=xs, y=[s.mean for s in self.states])
        mean = "-" if state.mean is None else f"{state.mean:+.3f}"
        self.status.value = html.escape(
            f"{state.pairs} of {state.planned} pairs ({state.missing} missing): B - A {mean} "
            f"[{state.low:+.3f}, {state.high:+.3f}] - {state.decision or 'undecided'}"
        )
