"""Plotly figures from traces and frames, and live ones fed by rollout events.

From data to picture in one call; every function returns a figure:

- `budget_burn(trace)`: cumulative turns, tokens and agent time per turn,
  against their limits, with the segment boundaries (where the user spoke)
  drawn, so waiting for the user visibly costs no agent time.
- `phase_timeline(trace)`: the five phases of one rollout on a time axis,
  with its segments and model calls beneath the agent phase.
- `phase_durations(traces)`: stacked phase durations across many rollouts,
  the agent phase split into model and harness time.
- `rewards(traces)`: each reward and metric's values per signal, with how
  many are missing drawn as missing, never as zero.
- `hook_matrix(frame)`: a what-if replay (`rk.replay_hooks`): which hook
  or limit fired at which turn on how many traces, and when they would end.
- `stop_reasons(traces)`: what actually ended each rollout (a limit, a
  stop, a failure, done), counted.
- `compare(a, b)`: a paired comparison of two runs (rk.compare): each
  signal's difference with its interval, and a per-task scatter of A vs B.
- `forest(a, b)`: the same comparison as a forest plot, each signal's
  B - A with its interval and B's wins / ties / losses beside it.
- `reward_distribution(run)` and `phase_timing(run)`: a run of any size in
  a few bars: how many rollouts got each reward, and each phase's median
  and 95th percentile duration (what `rollkit view` draws per run).
- `branches(traces)`: an original rollout and its forks side by side, one
  row per branch: the turns it shares with its parent in grey, its own in
  colour from the split on, its reward and stop at the end.

`LiveBudgetBurn(rollout)`, `LivePhaseTimeline(rollout)` and `LiveRewards()`
(which `watch(rollout)`s any number of rollouts) hold a plotly
`FigureWidget` that subscribes to the rollout's events and redraws only what
an event changed; nothing polls. They accept a core `Rollout` or a notebook
`NotebookRollout` (anything with `.subscribe` and `.trace`).

Plotly renders a subset of HTML in titles, labels and hover text (links,
bold, inline styles), so every string taken from a trace (task keys, signal
names, category labels) passes through `_text` (`html.escape`) before it
enters a figure: a task named `<a href=...>` is shown, never followed.

This module reads traces and frames; it runs nothing.
"""

from __future__ import annotations

import html
import os
import time
from collections.abc import Iterable
from typing import Any

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..analysis import frames as frame_tables
from ..core.events import Event
from ..core.session import LIMIT_STOPS
from ..core.trace import PHASES, Trace
from ..tables.lazyrun import LazyRun

__all__ = [
    "budget_burn",
    "phase_timeline",
    "phase_durations",
    "rewards",
    "branches",
    "hook_matrix",
    "stop_reasons",
    "compare",
    "forest",
    "reward_distribution",
    "phase_timing",
    "LiveBudgetBurn",
    "LivePhaseTimeline",
    "LiveRewards",
    "segment_boundaries",
    "turn_values",
    "drop_turns",
    "ab",
]

_COLORS = {
    "turns": "#4e79a7",
    "input": "#f28e2b",
    "output": "#59a14f",
    "total": "#9c755f",
    "agent time": "#e15759",
    "boot": "#bab0ac",
    "setup": "#76b7b2",
    "agent": "#4e79a7",
    "agent · model": "#4e79a7",
    "agent · harness": "#a0cbe8",
    "waiting for the user": "#eeeeee",
    "finalize": "#edc948",
    "scoring": "#b07aa1",
    "segments": "#e15759",
    "model calls": "#f28e2b",
}

# Rows of the budget burn chart: (row, line name, trace attribute of the
# cumulative value, limit key in trace.limits / trace.timeouts).
_BURN_LINES = (
    (1, "turns", "cum_turns", ("limits", "max_turns")),
    (2, "input", "cum_input_tokens", ("limits", "max_input_tokens")),
    (2, "output", "cum_output_tokens", ("limits", "max_output_tokens")),
    (2, "total", "cum_total_tokens", ("limits", "max_total_tokens")),
    (3, "agent time", "cum_agent_time", ("timeouts", "agent")),
)


def _text(value: Any) -> str:
    """A string from trace data, made safe for plotly's HTML subset."""
    return html.escape(str(value))


def _traces(data: Any) -> list[Trace]:
    if isinstance(data, Trace):
        return [data]
    return frame_tables.trace_list(data)


# ---- budget burn ---------------------------------------------------------------


# Bottom margin of the budget burn chart: tick labels, the axis title and
# up to two rows of legend (six entries wrap once at the panel's 460 px).
_BURN_LEGEND_MARGIN = 112


def _burn_figure(trace: Trace, factory: type = go.Figure, *, width: int | None = None, height: int | None = None) -> Any:
    fig = make_subplots(
        rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.07,
        subplot_titles=("turns", "tokens (cumulative)", "agent time (s)"),
    )
    for row, name, _attr, _limit in _BURN_LINES:
        fig.add_trace(
            go.Scatter(x=[], y=[], name=name, mode="lines+markers", line={"color": _COLORS[name]},
                       legendgroup=name, hovertemplate=f"turn %{{x}}<br>{name} %{{y}}<extra></extra>"),
            row=row, col=1,
        )
    # All segment boundaries are one path shape (shape 0): adding a shape per
    # segment would make plotly revalidate every shape on each new segment.
    fig.add_shape(type="path", xref="x", yref="paper", path="M0,0", visible=False,
                  line={"color": "#888", "dash": "dot", "width": 1})
    # A shape has no legend entry: this empty line gives the dotted one its
    # words, which a long axis title used to carry (and collided with).
    fig.add_trace(go.Scatter(x=[None], y=[None], mode="lines", name="the user spoke (new segment)",
                             line={"color": "#888", "dash": "dot", "width": 1}, hoverinfo="skip"), row=1, col=1)
    for row, name, _attr, (table, key) in _BURN_LINES:
        limit = getattr(trace, table).get(key)
        if limit is not None:
            # A limit is a horizontal line across its row, labelled with its name.
            yref = "y" if row == 1 else f"y{row}"
            fig.add_shape(type="line", xref="paper", x0=0, x1=1, yref=yref, y0=limit, y1=limit,
                          line={"color": _COLORS[name], "dash": "dash", "width": 1})
            fig.add_annotation(xref="paper", x=1, yref=yref, y=limit, text=f"{key} {limit:g}",
                               showarrow=False, xanchor="right", yanchor="bottom", font={"size": 10})
    # The legend sits at the foot of the figure (container coordinates), in a
    # bottom margin of its own beneath the tick labels and the axis title: a
    # legend placed at a fraction of the plot's height lands on the title.
    fig.update_layout(
        title={"text": f"budget burn · {_text(trace.task.key)}"}, height=height or 480, width=width,
        margin={"l": 50, "r": 20, "t": 60, "b": _BURN_LEGEND_MARGIN},
        legend={"orientation": "h", "yref": "container", "y": 0, "yanchor": "bottom", "x": 0, "xanchor": "left",
                "font": {"size": 11}},
        template="plotly_white",
    )
    fig.update_xaxes(title_text="turn", title_standoff=4, row=3, col=1, rangemode="tozero")
    # Turns are whole numbers: show at least 0..5 so a short chart gets whole ticks.
    fig.update_xaxes(tickformat="d", rangemode="tozero", autorangeoptions={"include": [0, 5]})
    # A little space between the y labels and the axis: the "0"s of the x
    # and y axes otherwise touch at the corner.
    fig.update_yaxes(rangemode="tozero", ticklabelstandoff=4)
    # Wrap last: a FigureWidget sends later layout changes as messages to the
    # views that exist, so anything set before the first view must be in the
    # figure it starts from.
    return fig if factory is go.Figure else factory(fig)


def _boundary_path(boundaries: list[float]) -> str:
    return " ".join(f"M{x:g},0 L{x:g},1" for x in boundaries)


def segment_boundaries(fig: Any) -> list[float]:
    """The x positions of the segment boundaries a budget burn chart draws."""
    path = fig.layout.shapes[0].path or ""
    return [float(move.split(",")[0]) for move in path.split("M")[1:]]


def budget_burn(trace: Trace, *, forecast: bool = True, agent_time: float | None = None) -> go.Figure:
    """Cumulative turns, tokens and agent time after each turn of one
    rollout, against their limits (dashed), with dotted lines where a new
    segment began (the user spoke): agent time does not rise across them, because waiting
    for the user costs nothing (L9). With `forecast` (and a limit that will
    bind) a running rollout's lines go on, dotted and faint, at their rate so
    far up to the turn the binding limit ends the run, and the title says
    which (rollkit.core.forecast). `agent_time` is the time charged so far
    for a rollout still running (`Rollout.agent_time`)."""
    if not isinstance(trace, Trace):
        raise TypeError(f"budget_burn draws one rk.Trace, got {type(trace).__name__}")
    fig = _burn_figure(trace)
    committed = trace.turns
    for i, (_row, _name, attr, _limit) in enumerate(_BURN_LINES):
        fig.data[i].x = [call.cum_turns for call in committed]
        fig.data[i].y = [getattr(call, attr) for call in committed]
    _draw_boundaries(fig, [s.turns_before + 0.5 for s in trace.segments[1:]])
    if forecast and committed:
        _draw_projection(fig, trace, committed, agent_time)
    return fig


def _draw_projection(fig: Any, trace: Trace, committed: list[Any], agent_time: float | None) -> None:
    from ..core.forecast import ended, forecast as forecast_rows, forecast_text, per_turn_rate

    if ended(trace) is not None:
        return  # a run that is over has its end drawn already: no projection
    rows = forecast_rows(trace, agent_time=agent_time)
    first = next((r for r in rows if r.binds_first), None)
    n = len(committed)
    if first is None or first.ends_after is None or first.ends_after <= n:
        return
    end = first.ends_after
    for row, name, attr, _limit in _BURN_LINES:
        series = [getattr(call, attr) for call in committed]
        if attr == "cum_agent_time":
            # As the forecast goes: the time charged so far, at its average per turn.
            used = series[-1] if agent_time is None else agent_time
            rate = used / n
        else:
            used, rate = series[-1], per_turn_rate(series) or 0.0
        at_end = used + rate * (end - n)
        fig.add_trace(go.Scatter(x=[n, end], y=[used, at_end], mode="lines", name=f"{name} (forecast)",
                                 line={"color": _COLORS[name], "dash": "dot", "width": 1}, opacity=0.6,
                                 legendgroup=name, showlegend=False,
                                 hovertemplate=f"forecast: turn %{{x}}<br>{name} %{{y:.4g}}<extra></extra>"),
                      row=row, col=1)
    fig.layout.title.text = f"{fig.layout.title.text} · {_text(forecast_text(trace, rows=rows))}"


def _draw_boundaries(fig: Any, boundaries: list[float]) -> None:
    if boundaries:
        fig.layout.shapes[0].update(path=_boundary_path(boundaries), visible=True)


class LiveBudgetBurn:
    """A budget burn chart that grows one point per turn as the rollout runs.

    It subscribes to the rollout's events: each `turn` appends the totals
    of the turn just committed, each new segment draws its boundary. Call
    `close()` to stop listening."""

    def __init__(self, rollout: Any, *, width: int | None = None, height: int | None = None) -> None:
        self.trace: Trace = rollout.trace
        self.figure = _burn_figure(self.trace, go.FigureWidget, width=width, height=height)
        self._points = 0
        self._calls_seen = 0  # model_calls only ever grows: read each once
        self._segments_drawn = 1
        self._boundaries: list[float] = []
        # Catch up with what happened before this chart was made.
        self._sync()
        self._unsubscribe = rollout.subscribe(self._on_event)

    def _on_event(self, event: Event) -> None:
        if event.kind in ("turn", "segment_start"):
            self._sync()

    def _sync(self) -> None:
        calls = self.trace.model_calls
        new = [c for c in calls[self._calls_seen:] if c.committed]
        self._calls_seen = len(calls)
        segments = self.trace.segments[self._segments_drawn:]
        if not new and not segments:
            return
        with self.figure.batch_update():
            for i, (_row, _name, attr, _limit) in enumerate(_BURN_LINES):
                data = self.figure.data[i]
                data.x = (*data.x, *(c.cum_turns for c in new))
                data.y = (*data.y, *(getattr(c, attr) for c in new))
            if segments:
                self._boundaries.extend(s.turns_before + 0.5 for s in segments)
                _draw_boundaries(self.figure, self._boundaries)
        if new:
            self._points = new[-1].cum_turns
        self._segments_drawn += len(segments)

    @property
    def points(self) -> int:
        """How many turns the chart shows."""
        return self._points

    def close(self) -> None:
        self._unsubscribe()

    def _ipython_display_(self) -> None:
        ipython_display.display(self.figure)


# ---- phase timing ------------------------------------------------------------------


def _timeline_rows(trace: Trace, now: float | None = None) -> list[tuple[str, str, float, float, str]]:
    """(row, colour key, start offset, duration, hover) for one rollout."""
    # Rows are named by the PHASES key, never Span.name: a loaded trace file
    # can hold any text there.
    spans = [(p, trace.phases[p]) for p in PHASES if p in trace.phases]
    if not spans:
        return []
    now = now or time.time()
    t0 = min(span.start for _, span in spans)
    rows = []
    for phase, span in spans:
        end = span.end if span.end is not None else now
        state = "" if span.end is not None else " (running)"
        rows.append((phase, phase, span.start - t0, end - span.start,
                     f"{phase}{state}: {(end - span.start) * 1000:.1f} ms"))
    for segment in trace.segments:
        end = segment.end if segment.end is not None else now
        rows.append(("agent: segments", "segments", segment.start - t0, end - segment.start,
                     f"segment {segment.index}: {segment.turns_added} turns, charged {segment.charged * 1000:.1f} ms"))
    for call in trace.model_calls:
        rows.append(("agent: model calls", "model calls", call.start - t0, call.end - call.start,
                     f"model call {call.index}: " + ("latency unknown (the source did not time it)"
                                                      if call.latency != call.latency else f"{call.latency * 1000:.1f} ms")))
    return rows


_TIMELINE_ORDER = ["scoring", "finalize", "agent: model calls", "agent: segments", "agent", "setup", "boot"]


def _timeline_traces(trace: Trace, now: float | None = None) -> list[dict[str, Any]]:
    by_colour: dict[str, list[tuple[str, float, float, str]]] = {}
    for row, colour, start, duration, hover in _timeline_rows(trace, now):
        by_colour.setdefault(colour, []).append((row, start, duration, hover))
    out = []
    for colour in (*PHASES, "segments", "model calls"):
        items = by_colour.get(colour, [])
        out.append({
            "name": colour,
            "y": [r for r, _, _, _ in items],
            "base": [s for _, s, _, _ in items],
            "x": [d for _, _, d, _ in items],
            "hovertext": [h for _, _, _, h in items],
        })
    return out


def _timeline_figure(trace: Trace, factory: type = go.Figure) -> Any:
    fig = go.Figure()
    for item in _timeline_traces(trace):
        fig.add_trace(go.Bar(orientation="h", marker={"color": _COLORS[item["name"]]}, hoverinfo="text", **item))
    fig.update_layout(
        title={"text": f"phase timeline · {_text(trace.task.key)}"}, barmode="overlay", height=320,
        xaxis={"title": {"text": "seconds since boot"}, "rangemode": "tozero"},
        yaxis={"categoryorder": "array", "categoryarray": _TIMELINE_ORDER},
        margin={"l": 130, "r": 20, "t": 50, "b": 40}, template="plotly_white", showlegend=False,
    )
    return fig if factory is go.Figure else factory(fig)


def phase_timeline(trace: Trace) -> go.Figure:
    """The five phases of one rollout as bars on a time axis, with its
    segments (agent time charged) and model calls beneath: gaps between
    segments are time the rollout waited for the user."""
    if not isinstance(trace, Trace):
        raise TypeError(f"phase_timeline draws one rk.Trace, got {type(trace).__name__}")
    return _timeline_figure(trace)


class LivePhaseTimeline:
    """A phase timeline redrawn on every phase, segment and model-call event."""

    _KINDS = frozenset({"phase_start", "phase_end", "segment_start", "segment_end", "call_end", "closed"})

    def __init__(self, rollout: Any) -> None:
        self.trace: Trace = rollout.trace
        self.figure = _timeline_figure(self.trace, go.FigureWidget)
        self._unsubscribe = rollout.subscribe(self._on_event)

    def _on_event(self, event: Event) -> None:
        if event.kind in self._KINDS:
            self._sync()

    def _sync(self) -> None:
        with self.figure.batch_update():
            for data, item in zip(self.figure.data, _timeline_traces(self.trace)):
                data.y, data.base, data.x, data.hovertext = item["y"], item["base"], item["x"], item["hovertext"]

    def close(self) -> None:
        self._unsubscribe()

    def _ipython_display_(self) -> None:
        ipython_display.display(self.figure)


# The phases of the phase-timing chart: (name, rollouts frame column).
_PHASE_PARTS = (
    ("boot", "phase.boot"), ("setup", "phase.setup"), ("agent · model", "model_time"),
    ("agent · harness", "harness_time"), ("waiting for the user", "wait_time"), ("finalize", "phase.finalize"),
    ("scoring", "phase.scoring"),
)


def _rollout_frame(data: Any) -> pd.DataFrame:
    if isinstance(data, pd.DataFrame):
        if "id" not in data.columns or "phase.agent" not in data.columns:
            raise ValueError("pass traces, or the frame rk.frames.rollouts(traces) made")
        return data
    if isinstance(data, (str, os.PathLike, LazyRun)):
        return frame_tables.rollouts(data)  # a run's path or lazy run: from its tables, no Trace built
    return frame_tables.rollouts(_traces(data))


def phase_durations(data: Any, *, by: str = "id") -> go.Figure:
    """Stacked phase durations (ms) for many rollouts: boot, setup, the agent
    phase split into model time, harness time and waiting for the user,
    then finalize and scoring. `data` is traces or `rk.frames.rollouts(...)`;
    `by` names the column that labels the bars."""
    frame = _rollout_frame(data)
    if by not in frame.columns:
        raise ValueError(
            f"phase_durations(by={by!r}): the rollouts frame has no column {by!r}; "
            f"pick one of: {', '.join(map(str, frame.columns))}"
        )
    parts = [(name, frame[column]) for name, column in _PHASE_PARTS]
    labels = [_text(label) for label in frame[by]]
    fig = go.Figure()
    for name, values in parts:
        if name == "waiting for the user" and not (values.fillna(0) > 0).any():
            continue  # a batch run never waits: leave the legend clean
        fig.add_trace(go.Bar(x=labels, y=values * 1000, name=name, marker={"color": _COLORS[name]},
                             hovertemplate=f"%{{x}}<br>{name}: %{{y:.2f}} ms<extra></extra>"))
    fig.update_layout(
        title={"text": f"phase durations · {len(frame)} rollouts"}, barmode="stack", template="plotly_white",
        yaxis={"title": {"text": "milliseconds"}}, xaxis={"title": {"text": _text(by)}}, height=380,
        margin={"l": 60, "r": 20, "t": 50, "b": 60},
    )
    return fig


def _rewards_figure(names: list[str], xs: list[str], ys: list[float], present: list[int],
                    missing: list[int], n: int, factory: type = go.Figure) -> Any:
    # One shared x axis: the signal names are written once, under the lower
    # row. Written under both, the upper row's (turned when names are long)
    # ran into the lower plot, and the lower ones ran off the figure.
    fig = make_subplots(rows=2, cols=1, row_heights=[0.65, 0.35], vertical_spacing=0.1, shared_xaxes=True,
                        subplot_titles=("values (missing left out)", "rollouts with / without a value"))
    # One box trace for all signals (a box per x category), so a live chart
    # only ever appends points to the same three traces.
    fig.add_trace(go.Box(x=xs, y=ys, name="values", boxpoints="all", jitter=0.4, pointpos=0,
                         marker={"size": 5}, showlegend=False), row=1, col=1)
    fig.add_trace(go.Bar(x=names, y=present, name="present", marker={"color": "#4e79a7"}), row=2, col=1)
    fig.add_trace(go.Bar(x=names, y=missing, name="missing", marker={"color": "#e15759"}), row=2, col=1)
    fig.update_layout(
        title={"text": f"rewards and metrics · {n} rollouts"}, barmode="stack", template="plotly_white",
        height=480, margin={"l": 50, "r": 20, "t": 60, "b": 40},
    )
    # automargin: the bottom margin grows to hold the names, turned or not.
    fig.update_xaxes(categoryorder="array", categoryarray=names, automargin=True)
    return fig if factory is go.Figure else factory(fig)


def rewards(data: Any) -> go.Figure:
    """Each reward and metric: its values (top, one box of points per signal)
    and how many rollouts have it versus miss it (bottom, missing in red).
    `data` is traces or `rk.frames.rollouts(...)`. A missing value is never
    drawn as zero: it is left out of the top and counted at the bottom."""
    frame = _rollout_frame(data)
    names = [c for c in frame.columns if c.startswith(("reward.", "metric."))]
    xs: list[str] = []
    ys: list[float] = []
    present: list[int] = []
    for name in names:
        values = frame[name].dropna()
        xs.extend([_text(name)] * len(values))
        ys.extend(values.tolist())
        present.append(len(values))
    missing = [len(frame) - p for p in present]
    return _rewards_figure([_text(n) for n in names], xs, ys, present, missing, len(frame))


def branches(data: Any) -> go.Figure:
    """The branches of forked rollouts (rk.fork) side by side: one row per
    branch (`rk.frames.branches`), turns on the x axis, the part a fork
    shares with its parent grey, its own turns coloured by reward (grey when
    missing), the reward and stop written at the end. `data` is traces or
    that frame."""
    frame = data if isinstance(data, pd.DataFrame) else frame_tables.branches(_traces(data))
    if "split_turn" not in frame.columns:
        raise ValueError("pass traces, or the frame rk.frames.branches(traces) made")
    fig = go.Figure()
    labels = [_text(f"{row.branch} · {row.id}") for row in frame.itertuples()]
    ends: list[int] = []  # the length of the text written past each row's end
    for label, row in zip(labels, frame.itertuples()):
        split = 0 if pd.isna(row.split_turn) else int(row.split_turn)
        reward = row.reward
        colour = "#bab0ac" if pd.isna(reward) else ("#59a14f" if reward >= 0.5 else "#e15759")
        shown = "missing" if pd.isna(reward) else f"{reward:.3g}"
        end = f"reward {shown} · {row.stop or 'done'}"
        ends.append(len(end))
        if split:
            fig.add_trace(go.Scatter(x=[0, split], y=[label, label], mode="lines", line={"color": "#cccccc", "width": 6},
                                     showlegend=False, hovertemplate=f"shared with its parent: turns 1-{split}<extra></extra>"))
        fig.add_trace(go.Scatter(
            x=[split, row.turns], y=[label, label], mode="lines+markers+text", line={"color": colour, "width": 6},
            marker={"size": [6, 12], "color": colour}, text=["", _text(end)],
            textposition="middle right", showlegend=False, cliponaxis=False,
            hovertemplate=_text(f"{row.branch}: turns {split + 1}-{row.turns}, {row.total_tokens} tokens") + "<extra></extra>",
        ))
    roots = frame["root"].nunique() if len(frame) else 0
    # The reward and stop are written past the end of each row, in the right
    # margin: sized to the longest of them (about 7 px a character at 12 px).
    fig.update_layout(
        title={"text": f"branches · {len(frame)} rollouts from {roots} original(s)"}, template="plotly_white",
        xaxis={"title": {"text": "turn"}, "dtick": 1, "rangemode": "tozero"},
        yaxis={"autorange": "reversed", "categoryorder": "array", "categoryarray": labels, "automargin": True},
        height=max(220, 60 + 40 * len(frame)), margin={"l": 20, "r": 30 + 7 * max(ends, default=0), "t": 50, "b": 40},
    )
    return fig


def hook_matrix(frame: pd.DataFrame) -> go.Figure:
    """What-if replay (`rk.replay_hooks`) at a glance: for each hook or limit
    (rows) and turn (columns), how many of the traces it fired on (a stop, a
    limit reached, a rewrite that changed something), hook errors counted
    apart; beneath, after how many turns the traces would have ended."""
    needed = {"hook", "turn", "fired", "error", "ends_after", "id"}
    if not isinstance(frame, pd.DataFrame) or not needed <= set(frame.columns):
        raise ValueError("hook_matrix draws the frame rk.replay_hooks(traces, hooks) made")
    skipped = frame["id"][frame["kind"].eq("skipped")].nunique() if "kind" in frame.columns else 0
    if skipped:
        frame = frame[frame["kind"].ne("skipped")]
    hooks = list(dict.fromkeys(frame["hook"]))
    turns = sorted(frame["turn"].unique().tolist()) if len(frame) else []
    fired = frame[frame["fired"]].groupby(["hook", "turn"]).size()
    errors = frame[frame["error"].notna()].groupby(["hook", "turn"]).size()
    z = [[int(fired.get((h, k), 0)) for k in turns] for h in hooks]
    text = [[f"{z[i][j]}" + (f" ({int(errors.get((h, k), 0))} errors)" if errors.get((h, k), 0) else "")
             for j, k in enumerate(turns)] for i, h in enumerate(hooks)]
    traces = frame["id"].nunique()
    fig = make_subplots(rows=2, cols=1, row_heights=[0.65, 0.35], vertical_spacing=0.18,
                        subplot_titles=("traces it fired on, by turn (0: the prompt at open)",
                                        "traces by the turn they would have ended after"))
    fig.add_trace(go.Heatmap(z=z, x=turns, y=[_text(h) for h in hooks], text=text, texttemplate="%{text}",
                             colorscale="Blues", showscale=False,
                             hovertemplate="%{y} at turn %{x}: %{z} traces<extra></extra>"), row=1, col=1)
    ends = frame.groupby("id")["ends_after"].first()
    labels = ["never"] + [str(int(k)) for k in sorted(ends.dropna().unique())]
    counts = [int(ends.isna().sum())] + [int((ends == float(k)).sum()) for k in labels[1:]]
    fig.add_trace(go.Bar(x=labels, y=counts, marker={"color": "#4e79a7"}, showlegend=False,
                         hovertemplate="ends after %{x}: %{y} traces<extra></extra>"), row=2, col=1)
    left_out = f" ({skipped} with rewritten history left out)" if skipped else ""
    fig.update_layout(title={"text": f"what-if replay · {len(hooks)} hooks and limits over {traces} traces{left_out}"},
                      template="plotly_white", height=max(360, 220 + 32 * len(hooks)),
                      margin={"l": 140, "r": 20, "t": 70, "b": 40})
    fig.update_xaxes(dtick=1, row=1, col=1)
    return fig


# What ended a rollout, by kind: the one map the bars' colours and the
# legend's words both come from, so they cannot disagree.
_STOP_KINDS = {
    "done": ("the agent finished", "#59a14f"),
    "limit": ("a limit", "#f28e2b"),
    "stop": ("a stop (hook or user)", "#4e79a7"),
    "failure": ("a failure or abort", "#e15759"),
}


def _stop_kind(reason: str, outcome: str) -> str:
    """The kind (a key of `_STOP_KINDS`) of what ended a rollout, from its
    outcome's kind (rollkit.core.outcome) and its stop reason."""
    if outcome == "ok":
        return "done"
    if outcome in ("failed", "aborted", "incomplete"):
        return "failure"
    return "limit" if reason in LIMIT_STOPS else "stop"  # a @stop or a user's stop


def stop_reasons(data: Any) -> go.Figure:
    """What ended each rollout: its stop condition (a limit, a @stop, a
    user's stop), its error type, or "done" (the agent finished), counted
    over many traces, coloured by kind (`_STOP_KINDS`), with a legend of
    the kinds present."""
    traces = _traces(data)
    counts: dict[str, int] = {}
    outcome_kinds: dict[str, str] = {}
    for trace in traces:
        outcome = trace.outcome
        reason = {"ok": "done", "stopped": outcome.reason, "failed": outcome.error_type}.get(outcome.kind, outcome.kind)
        counts[reason] = counts.get(reason, 0) + 1
        outcome_kinds[reason] = outcome.kind
    names = sorted(counts, key=lambda r: (-counts[r], r))
    kinds = [_stop_kind(n, outcome_kinds[n]) for n in names]
    fig = go.Figure(go.Bar(x=[_text(n) for n in names], y=[counts[n] for n in names], showlegend=False,
                           marker={"color": [_STOP_KINDS[k][1] for k in kinds]},
                           customdata=[_STOP_KINDS[k][0] for k in kinds],
                           hovertemplate="%{x} (%{customdata}): %{y} rollouts<extra></extra>"))
    # The legend: one empty bar per kind present, in the kind's colour.
    for kind, (words, colour) in _STOP_KINDS.items():
        if kind in kinds:
            fig.add_trace(go.Bar(x=[None], y=[None], name=words, marker={"color": colour}, hoverinfo="skip"))
    fig.update_layout(title={"text": f"what ended {len(traces)} rollouts"}, template="plotly_white", height=360,
                      margin={"l": 50, "r": 20, "t": 60, "b": 60}, yaxis={"title": {"text": "rollouts"}},
                      legend={"title": {"text": "kind"}}, barmode="overlay")
    return fig


def compare(a: Any, b: Any = None, *, signal: str | None = None, **options: Any) -> go.Figure:
    """A paired comparison of two runs (`rk.compare`) in one picture: left,
    the difference B - A of each signal with its bootstrap 95% interval
    (the dotted line is no difference); right, one point per task, its
    value in A against B for `signal` (default the first compared, usually
    `reward`): points above the diagonal are tasks where B did better; tasks
    with the same two values share a point, sized and labelled by their count. `a`
    is a `Comparison`, or two runs and the options of `rk.compare`."""
    from ..analysis.compare import Comparison, compare as compare_traces

    comparison = a if isinstance(a, Comparison) else compare_traces(a, b, **options)
    compared = [s for s in comparison.signals if s.diff is not None]
    if signal is None:
        signal = compared[0].signal if compared else comparison.signals[0].signal
    comparison.signal(signal)  # a KeyError naming the signals there are
    fig = make_subplots(rows=1, cols=2, column_widths=[0.55, 0.45], horizontal_spacing=0.18,
                        subplot_titles=("B - A with 95% interval", _text(f"{signal} per {comparison._unit}")))
    fig.add_trace(_forest_points(compared), row=1, col=1)
    fig.add_vline(x=0, line={"dash": "dot", "color": "#888"}, row=1, col=1)
    pairs = [r for r in comparison.rows if r["signal"] == signal and r["a"] is not None and r["b"] is not None]
    values = [r["a"] for r in pairs] + [r["b"] for r in pairs] or [0.0, 1.0]
    low, high = min(values), max(values)
    fig.add_trace(go.Scatter(x=[low, high], y=[low, high], mode="lines", line={"dash": "dot", "color": "#888"},
                             hoverinfo="skip", showlegend=False), row=1, col=2)
    # Tasks with the same pair of values (a 0/1 reward gives at most four)
    # are one point, sized and labelled by how many: one dot per task would
    # draw 30 tasks as two dots.
    at: dict[tuple[float, float], list[str]] = {}
    for r in pairs:
        at.setdefault((r["a"], r["b"]), []).append(str(r["key"]))
    counts = [len(keys) for keys in at.values()]
    fig.add_trace(go.Scatter(
        x=[a for a, _ in at], y=[b for _, b in at], mode="markers+text", showlegend=False, name="tasks",
        marker={"size": [8 + 5 * (n - 1) ** 0.5 for n in counts], "opacity": 0.7, "color": "#4e79a7"},
        text=[f"{n} {comparison._unit}s" if n > 1 else "" for n in counts], textposition="middle right",
        cliponaxis=False,
        customdata=[[n, _text(_some(keys))] for n, keys in zip(counts, at.values())],
        hovertemplate="%{customdata[0]} tasks: A %{x:.3f}, B %{y:.3f}<br>%{customdata[1]}<extra></extra>",
    ), row=1, col=2)
    fig.update_xaxes(title={"text": "B - A"}, row=1, col=1)
    # Room around the values for the largest point and its count, written to its right.
    span = (high - low) or 1.0
    fig.update_xaxes(title={"text": _text(f"A: {comparison.label_a}")}, range=[low - 0.12 * span, high + 0.3 * span],
                     row=1, col=2)
    fig.update_yaxes(title={"text": _text(f"B: {comparison.label_b}")}, range=[low - 0.12 * span, high + 0.12 * span],
                     row=1, col=2)
    fig.update_layout(
        title={"text": _text(f"{comparison.label_b} vs {comparison.label_a} · {comparison.common} "
                             f"{comparison._unit}s paired")},
        template="plotly_white", height=max(360, 200 + 30 * len(compared)), margin={"l": 160, "r": 20, "t": 70, "b": 50},
    )
    return fig


def _forest_points(compared: list[Any]) -> go.Scatter:
    """One point per compared signal at its B - A, with its interval as an
    error bar: green when the interval is above 0, red below, blue across."""
    return go.Scatter(
        x=[s.diff for s in compared], y=[_text(s.signal) for s in compared], mode="markers", name="B - A",
        showlegend=False,
        marker={"size": 9, "color": ["#59a14f" if s.low > 0 else "#e15759" if s.high < 0 else "#4e79a7"
                                     for s in compared]},
        # one colour for the bars: plotly takes no per-point array there (it would warn, and draw black)
        error_x={"type": "data", "symmetric": False, "array": [s.high - s.diff for s in compared],
                 "arrayminus": [s.diff - s.low for s in compared], "color": "#555"},
        customdata=[[s.pairs, s.p_value, s.wins, s.ties, s.losses] for s in compared],
        hovertemplate=("%{y}: %{x:.3f} over %{customdata[0]} pairs, p %{customdata[1]:.3f}<br>"
                       "wins / ties / losses of B: %{customdata[2]} / %{customdata[3]} / %{customdata[4]}<extra></extra>"),
    )


def forest(a: Any, b: Any = None, **options: Any) -> go.Figure:
    """The comparison of two runs (`rk.compare`) as a forest plot: one row per
    compared signal, B - A with its bootstrap 95% interval (the dotted line is
    no difference), and beside each row B's wins / ties / losses over the
    pairs. `a` is a `Comparison`, or two runs and the options of `rk.compare`."""
    from ..analysis.compare import Comparison, compare as compare_traces

    comparison = a if isinstance(a, Comparison) else compare_traces(a, b, **options)
    compared = [s for s in comparison.signals if s.diff is not None]
    fig = go.Figure(_forest_points(compared))
    fig.add_vline(x=0, line={"dash": "dot", "color": "#888"})
    for s in compared:
        fig.add_annotation(x=1.02, xref="paper", y=_text(s.signal), yref="y", xanchor="left", showarrow=False,
                           text=f"{s.wins} / {s.ties} / {s.losses}", font={"size": 12})
    fig.add_annotation(x=1.02, xref="paper", y=1, yref="paper", yanchor="bottom", xanchor="left", showarrow=False,
                       text="<b>W / T / L</b>", font={"size": 12})
    fig.update_yaxes(autorange="reversed", automargin=True)  # the first signal (reward) on top
    fig.update_xaxes(title={"text": "B - A (95% interval)"}, zeroline=False)
    fig.update_layout(
        title={"text": _text(f"{comparison.label_b} vs {comparison.label_a} · {comparison.common} "
                             f"{comparison._unit}s paired")},
        template="plotly_white", height=max(240, 130 + 40 * len(compared)),
        margin={"l": 40, "r": 130, "t": 60, "b": 50},
    )
    return fig


def reward_distribution(data: Any, *, bins: int = 20) -> go.Figure:
    """How the rewards of a run are spread: for `reward` (the scored total)
    and each `reward.<name>`, how many rollouts have each value (a signal with
    at most `bins` distinct values) or fall in each of `bins` equal bins.
    Counted here, so a run of a million rollouts is a few bars, not a million
    points. Rollouts without a value are counted in the legend, never drawn
    as 0. `data` is traces, a lazy run, a run's path or `rk.frames.rollouts(...)`."""
    frame = _rollout_frame(data)
    names = ["reward", *sorted(c for c in frame.columns if c.startswith("reward."))]
    fig = go.Figure()
    for name in names:
        values = pd.to_numeric(frame[name], errors="coerce").dropna().to_numpy(dtype=float)
        missing = len(frame) - len(values)
        label = _text(name) + (f" ({missing} without)" if missing else "")
        distinct = np.unique(values)
        if len(distinct) <= bins:
            xs, counts = distinct, [int((values == v).sum()) for v in distinct]
            width = None
        else:
            counted, edges = np.histogram(values, bins=bins)
            xs, counts = (edges[:-1] + edges[1:]) / 2, counted.tolist()
            width = float(edges[1] - edges[0])
        fig.add_trace(go.Bar(x=[float(x) for x in xs], y=counts, name=label, width=width,
                             hovertemplate=f"{_text(name)} %{{x:.3g}}: %{{y}} rollouts<extra></extra>"))
    fig.update_layout(
        title={"text": f"reward distribution · {len(frame)} rollouts"}, barmode="group", template="plotly_white",
        xaxis={"title": {"text": "value"}}, yaxis={"title": {"text": "rollouts"}}, height=320,
        margin={"l": 60, "r": 20, "t": 50, "b": 50}, legend={"orientation": "h", "y": -0.25},
    )
    return fig


def phase_timing(data: Any) -> go.Figure:
    """Where a run's time went, phase by phase: the median and the 95th
    percentile duration (ms) of each phase over all rollouts, the agent
    phase split into model and harness time (waiting for the user left out
    when no rollout waited). A summary, so it draws the same few bars for
    ten rollouts or a million; `phase_durations` draws one bar per rollout.
    `data` is traces, a lazy run, a run's path or `rk.frames.rollouts(...)`."""
    frame = _rollout_frame(data)
    parts = [(name, pd.to_numeric(frame[column], errors="coerce").dropna() * 1000) for name, column in _PHASE_PARTS]
    parts = [(name, v) for name, v in parts if name != "waiting for the user" or (v > 0).any()]
    names = [name for name, _ in parts]
    fig = go.Figure()
    for stat, q, colour in (("median", 0.5, "#4e79a7"), ("95th percentile", 0.95, "#f28e2b")):
        fig.add_trace(go.Bar(
            y=names, x=[float(v.quantile(q)) if len(v) else 0.0 for _, v in parts], name=stat, orientation="h",
            marker={"color": colour}, hovertemplate=f"%{{y}}: {stat} %{{x:.2f}} ms<extra></extra>",
        ))
    fig.update_layout(
        title={"text": f"phase timing · {len(frame)} rollouts"}, barmode="group", template="plotly_white",
        xaxis={"title": {"text": "milliseconds"}}, yaxis={"autorange": "reversed"}, height=320,
        margin={"l": 120, "r": 20, "t": 50, "b": 50}, legend={"orientation": "h", "y": -0.25},
    )
    return fig


def _some(keys: list[str], shown: int = 6) -> str:
    """The first few of `keys`, and how many more there are."""
    more = f" and {len(keys) - shown} more" if len(keys) > shown else ""
    return ", ".join(keys[:shown]) + more


def _signal_values(trace: Trace) -> dict[str, float | None]:
    """Values by category label (escaped, as `rewards` labels them)."""
    values: dict[str, float | None] = {_text(f"reward.{k}"): v for k, v in trace.rewards.items()}
    values.update({_text(f"metric.{k}"): v for k, v in trace.metrics.items()})
    return values


class LiveRewards:
    """A rewards chart that grows as rollouts finish.

    `watch(rollout)` adds the rollout's trace when it closes (its `closed`
    event); `add(trace)` adds a finished trace directly (e.g. from a batch
    run). Each addition appends its values; a signal missing from a rollout,
    including every signal of a failed one, counts as missing."""

    def __init__(self, traces: Iterable[Trace] = ()) -> None:
        self._n = 0
        self._present: dict[str, int] = {}
        self._seen: set[str] = set()
        self._unsubscribes: list[Any] = []
        self.figure = _rewards_figure([], [], [], [], [], 0, go.FigureWidget)
        for trace in traces:
            self.add(trace)

    def add(self, trace: Trace) -> None:
        if trace.id in self._seen:
            return
        self._seen.add(trace.id)
        self._n += 1
        xs, ys = [], []
        for name, value in _signal_values(trace).items():
            self._present.setdefault(name, 0)
            if value is not None:
                self._present[name] += 1
                xs.append(name)
                ys.append(value)
        names = list(self._present)
        box, present, missing = self.figure.data
        with self.figure.batch_update():
            if xs:
                box.x = (*box.x, *xs)
                box.y = (*box.y, *ys)
            present.x = missing.x = names
            present.y = [self._present[n] for n in names]
            missing.y = [self._n - self._present[n] for n in names]
            self.figure.layout.title.text = f"rewards and metrics · {self._n} rollouts"
            self.figure.update_xaxes(categoryarray=names)

    def watch(self, rollout: Any) -> None:
        """Add `rollout`'s trace when it closes."""

        def on_event(event: Event) -> None:
            if event.kind == "closed":
                self.add(rollout.trace)

        self._unsubscribes.append(rollout.subscribe(on_event))

    @property
    def rollouts(self) -> int:
        return self._n

    def close(self) -> None:
        for unsubscribe in self._unsubscribes:
            unsubscribe()
        self._unsubscribes.clear()

    def _ipython_display_(self) -> None:
        ipython_display.display(self.figure)


# Where a rollout went wrong and whether B beats A: drawn in .decide, named here too.
from .decide import ab, drop_turns, turn_values  # noqa: E402
from ..core.dependencies import ipython_display, np
