"""A rollout's timeline beside its transcript: `timeline_bars`, `rollout_html`.

`timeline_bars(trace)` lays one rollout out on one time axis, as data: a
`Bar` per phase of the lifecycle (open: boot and setup; step: the agent
phase and its segments; close: finalize and scoring), per model call (its
latency, tokens and cost), per round of tool calls (from the end of the
call that asked for them to the start of the next call, or the end of its
segment: the trace times no tool on its own), per user turn and for a fork
(a mark where the rollout starts, naming what it was forked from). Every
time is the trace's own, in seconds since the earliest it records; `left`
and `width` are the bar's place in percent of the axis. Geometry is
computed here, in Python, so a test can hold it against the trace.

`rollout_html(trace)` draws the bars next to the transcript: a bar is a
link to its message (clicking it scrolls the transcript there, no script
needed), a reply's reasoning is folded, a tool call is followed by its
result, and a reply whose call kept token logprobs gets a heat strip over
its tokens. Everything a model, a user, a tool or a task wrote is escaped
(`html.escape`) before it becomes HTML; labels and tooltips too.

It produces strings only (no widget, no script); the rollout page of
`rollkit view` (rollkit.notebook.viewpage) and its static export
(rollkit.notebook.export) show the same HTML.
"""

from __future__ import annotations

import html
import math
import re
from dataclasses import dataclass
from typing import Any

from ..core.prices import dollars
from ..core.trace import Trace
from .display import STYLE, message_html, token_chances, trace_html

__all__ = ["Bar", "LANES", "anchor", "heat_strip", "timeline_bars", "timeline_html", "transcript_html", "rollout_html",
           "TIMELINE_STYLE"]

LANES = ("open", "step", "segments", "model calls", "tools", "user", "fork", "close")
_LANE_OF_PHASE = {"boot": "open", "setup": "open", "agent": "step", "finalize": "close", "scoring": "close"}


@dataclass(frozen=True)
class Bar:
    """One bar of a rollout's timeline: `start` and `end` in seconds since
    the earliest time the trace records, `left` and `width` in percent of
    the axis, `target` the transcript message it scrolls to (None: none)."""

    kind: str  # phase, segment, model, tool, user, fork
    lane: str
    label: str
    start: float
    end: float
    left: float
    width: float
    tokens: int | None = None
    cost: float | None = None
    target: int | None = None
    note: str = ""
    timed: bool = True  # False: an imported call its source did not time (drawn at its one time)

    @property
    def latency(self) -> float:
        """end - start; NaN (unknown, never 0) for a bar that was not timed."""
        return self.end - self.start if self.timed else math.nan


def _times(trace: Trace) -> tuple[float, float]:
    """The earliest and the latest time the trace records (0, 0: none)."""
    starts = [s.start for s in trace.phases.values()] + [s.start for s in trace.segments]
    starts += [c.start for c in trace.model_calls]
    ends = [s.end for s in (*trace.phases.values(), *trace.segments) if s.end is not None]
    ends += [c.end for c in trace.model_calls]
    if not starts:
        return 0.0, 0.0
    return min(starts), max(starts + ends)


def _positions(trace: Trace) -> dict[int, int]:
    """Each message's place in the transcript, by its id()."""
    return {id(m): i for i, m in enumerate(trace.messages)}


def _place_of(trace: Trace, places: dict[int, int], message: Any) -> int | None:
    """Where `message` is in the transcript: itself, else an equal message (a fork's copy of its prefix)."""
    found = places.get(id(message))
    return found if found is not None else next((i for i, m in enumerate(trace.messages) if m == message), None)


def _tool_results(trace: Trace) -> dict[str, int]:
    """The transcript place of each tool result, by its tool call id."""
    return {m.tool_call_id: i for i, m in enumerate(trace.messages)
            if m.role == "tool" and getattr(m, "tool_call_id", None)}


def _raw_bars(trace: Trace, last: float) -> list[tuple[str, str, str, float, float, dict[str, Any]]]:
    """(kind, lane, label, start, end, extra) per bar, in the trace's times."""
    bars: list[tuple[str, str, str, float, float, dict[str, Any]]] = []
    for name, span in trace.phases.items():
        lane = _LANE_OF_PHASE.get(name, "step")
        end, note = (span.end, "") if span.end is not None else (last, "still running")
        bars.append(("phase", lane, name, span.start, end, {"note": note}))
    places, results = _positions(trace), _tool_results(trace)
    for segment in trace.segments:
        end = segment.end if segment.end is not None else last
        first = next((c.reply for c in trace.model_calls if c.segment == segment.index and c.reply is not None), None)
        bars.append(("segment", "segments", f"segment {segment.index}", segment.start, end,
                     {"note": f"{segment.turns_added} turns, charged {segment.charged:.3f} s",
                      "target": None if first is None else places.get(id(first))}))
    calls = trace.model_calls
    for n, call in enumerate(calls):
        untimed = call.latency != call.latency
        bars.append(("model", "model calls", f"model call {call.index}", call.start, call.end,
                     {"tokens": call.usage.total_tokens, "cost": call.cost_usd,
                      "target": places.get(id(call.reply)) if call.reply is not None else None,
                      "timed": not untimed,
                      "note": "latency unknown (the source did not time it)" if untimed else
                      ("" if call.error is None else f"failed: {call.error.type}")}))
        tool_calls = (call.reply.tool_calls or []) if call.reply is not None else []
        if not tool_calls or untimed:
            continue
        after = next((c for c in calls[n + 1:] if c.segment == call.segment), None)
        segment = next((s for s in trace.segments if s.index == call.segment), None)
        end = after.start if after is not None else (segment.end if segment is not None and segment.end else call.end)
        targets = [results[c.id] for c in tool_calls if c.id in results]
        bars.append(("tool", "tools", "tools: " + ", ".join(c.name for c in tool_calls), call.end, max(end, call.end),
                     {"target": min(targets) if targets else places.get(id(call.reply))}))
    for turn in trace.user_turns:
        segment = next((s for s in trace.segments if s.index == turn.segment), None)
        if segment is None:
            continue
        target = _place_of(trace, places, turn.messages[0]) if turn.messages else None
        bars.append(("user", "user", f"user turn {turn.index} ({turn.by})", segment.start, segment.start,
                     {"target": target}))
    forked = trace.info.get("forked_from")
    if isinstance(forked, list) and len(forked) == 2 and trace.phases:
        at = min(s.start for s in trace.phases.values())
        committed = [c for c in calls if c.committed]
        turn = forked[1] if isinstance(forked[1], int) else 0
        reply = committed[turn - 1].reply if 0 < turn <= len(committed) else None
        bars.append(("fork", "fork", f"forked from {forked[0]} after turn {turn}", at, at,
                     {"target": places.get(id(reply)) if reply is not None else None}))
    return bars


def timeline_bars(trace: Trace) -> list[Bar]:
    """The bars of `trace`'s timeline (see the module docstring), lane by
    lane in `LANES` order, each lane by start."""
    t0, last = _times(trace)
    axis = last - t0
    bars = []
    for kind, lane, label, start, end, extra in _raw_bars(trace, last):
        left = 0.0 if axis <= 0 else (start - t0) / axis * 100
        width = 0.0 if axis <= 0 else (end - start) / axis * 100
        bars.append(Bar(kind, lane, label, start - t0, end - t0, left, width, **extra))
    order = {lane: i for i, lane in enumerate(LANES)}
    return sorted(bars, key=lambda b: (order[b.lane], b.start))


def anchor(trace: Trace, index: int) -> str:
    """The HTML id of message `index` of `trace` in its rollout page."""
    return f"rk-{re.sub(r'[^A-Za-z0-9_-]', '_', trace.id)}-m{index}"


def _seconds(value: float) -> str:
    if value != value:
        return "unknown"
    return f"{value * 1e6:.0f} µs" if value < 0.001 else f"{value * 1000:.1f} ms" if value < 1 else f"{value:.2f} s"


def _axis(length: float) -> str:
    """The time axis under the lanes: ticks at each quarter."""
    ticks = "".join(f'<span class="rk-tl-tick" style="left:{q * 25}%">{_seconds(length * q / 4)}</span>'
                    for q in range(5))
    return f'<div class="rk-tl-lane rk-tl-axis"><span class="rk-tl-name"></span><div class="rk-tl-track">{ticks}</div></div>'



def _bar_text(bar: Bar) -> str:
    parts = [bar.label, f"at {_seconds(bar.start)}", f"takes {_seconds(bar.latency)}"]
    if bar.tokens is not None:
        parts.append(f"{bar.tokens:,} tokens")
    if bar.kind == "model":
        parts.append(f"cost {dollars(bar.cost)}")
    return " · ".join(parts + ([bar.note] if bar.note else []))


def _listed(trace: Trace, bar: Bar) -> str:
    """One bar as a row of the list under the axis."""
    name = html.escape(bar.label)
    if bar.target is not None:
        name = f'<a href="#{anchor(trace, bar.target)}">{name}</a>'
    tokens = "–" if bar.tokens is None else f"{bar.tokens:,}"
    cost = dollars(bar.cost) if bar.kind == "model" else ""
    return (f'<tr data-kind="{bar.kind}"><td>{name}</td><td class="rk-num">{_seconds(bar.start)}</td>'
            f'<td class="rk-num">{_seconds(bar.latency)}</td><td class="rk-num">{tokens}</td>'
            f'<td class="rk-num">{cost}</td><td>{html.escape(bar.note)}</td></tr>')


def timeline_html(trace: Trace, bars: list[Bar] | None = None) -> str:
    """The bars as HTML: a lane per row, each bar placed by its `left` and
    `width`, a link to its message, its numbers in its tooltip and in the
    list under the axis."""
    bars = timeline_bars(trace) if bars is None else bars
    t0, last = _times(trace)
    rows = []
    for lane in LANES:
        items = []
        for bar in (b for b in bars if b.lane == lane):
            href = "" if bar.target is None else f' href="#{anchor(trace, bar.target)}"'
            items.append(f'<a class="rk-tl-bar rk-tl-{bar.kind}"{href} data-start="{bar.start!r}" '
                         f'data-end="{bar.end!r}" style="left:min({bar.left:.4f}%, calc(100% - 3px));width:{bar.width:.4f}%" '
                         f'title="{html.escape(_bar_text(bar), quote=True)}"></a>')
        if items:
            rows.append(f'<div class="rk-tl-lane" data-lane="{lane}"><span class="rk-tl-name">{lane}</span>'
                        f'<div class="rk-tl-track">{"".join(items)}</div></div>')
    listing = "".join(_listed(trace, b) for b in bars)
    return (f'<div class="rk-timeline"><b>timeline</b> · {_seconds(last - t0)} in all'
            f'{"".join(rows)}{_axis(last - t0)}<details><summary>the bars ({len(bars)})</summary><table class="rk-table rk-tl-list">'
            "<tr><th>bar</th><th>at</th><th>takes</th><th>tokens</th><th>cost</th><th></th></tr>"
            f"{listing}</table></details></div>")


def heat_strip(tokens: Any) -> str:
    """A thin strip over a reply, a cell per token shaded by its logprob
    (red: unlikely, clear: certain), the token and its logprob in the
    cell's tooltip; "" when the call kept no logprobs."""
    chances = token_chances(tokens)
    if not chances:
        return ""
    cells = [f'<span style="background: rgba(220,40,40,{0.85 * (1 - p):.2f})" '
             f'title="{html.escape(repr(text), quote=True)}: logprob {logprob:.3f} (p {p:.3f})"></span>'
             for text, logprob, p in chances]
    low = min(tokens.logprobs)
    return (f'<div class="rk-heat" data-tokens="{len(cells)}" title="token logprobs (lowest {low:.3f})">'
            f'{"".join(cells)}</div>')


def transcript_html(trace: Trace) -> str:
    """The transcript of the rollout page: each message with its anchor
    (`anchor`), a reply's reasoning folded, each tool call followed by its
    result, a reply whose call kept logprobs under a heat strip."""
    results = _tool_results(trace)
    tokens = {id(c.reply): c.tokens for c in trace.model_calls if c.reply is not None and c.tokens is not None}
    paired: set[int] = set()
    parts = []
    for i, message in enumerate(trace.messages):
        if i in paired:
            continue
        own = tokens.get(id(message))
        bubble = (heat_strip(own) + message_html(message, own, fold_reasoning=True))
        bubble = f'<div class="rk-anchor" id="{anchor(trace, i)}">{bubble}</div>'
        answers = [results[c.id] for c in (getattr(message, "tool_calls", None) or ()) if results.get(c.id, -1) > i]
        if answers:
            paired.update(answers)
            bubble += "".join(f'<div class="rk-anchor" id="{anchor(trace, j)}">{message_html(trace.messages[j])}</div>'
                              for j in sorted(answers))
            bubble = f'<div class="rk-pair">{bubble}</div>'
        parts.append(bubble)
    return f'<div class="rk-chat">{"".join(parts)}</div>'


TIMELINE_STYLE = """<style>
.rk-rollout {display: grid; grid-template-columns: minmax(280px, 38%) 1fr; gap: 14px; align-items: start;}
.rk-rollout > .rk-tl-col {position: sticky; top: 0; max-height: 100vh; overflow: auto;}
.rk-timeline {font-size: 12px;}
.rk-tl-lane {display: flex; align-items: center; margin: 2px 0;}
.rk-tl-name {width: 80px; flex: none; opacity: .7;}
.rk-tl-track {position: relative; flex: 1; height: 14px; background: rgba(0,0,0,.04);}
.rk-tl-bar {position: absolute; top: 1px; height: 12px; min-width: 3px; border-radius: 2px; display: block; opacity: .85;}
.rk-tl-bar[href] {cursor: pointer;} .rk-tl-bar:hover {opacity: 1; outline: 1px solid #222;}
.rk-tl-phase {background: #4e79a7;} .rk-tl-segment {background: #76b7b2;} .rk-tl-model {background: #f28e2b;}
.rk-tl-tool {background: #59a14f;} .rk-tl-user {background: #e15759;} .rk-tl-fork {background: #b07aa1;}
.rk-tl-axis .rk-tl-track {background: none; height: 16px; border-top: 1px solid #999;}
.rk-tl-tick {position: absolute; top: 1px; font-size: 10px; opacity: .7; transform: translateX(-50%); white-space: nowrap;}
.rk-tl-tick:first-child {transform: none;} .rk-tl-tick:last-child {transform: translateX(-100%);}
.rk-pair {border-left: 3px solid #59a14f; padding-left: 6px; margin: 6px 0;}
.rk-heat {display: flex; height: 6px; max-width: 92%; margin: 4px 0 0 0; background: #f4f4f4;}
.rk-heat span {flex: 1 1 0; min-width: 1px;}
.rk-anchor:target > .rk-msg {outline: 2px solid #f28e2b;}
</style>"""


def rollout_html(trace: Trace) -> str:
    """One rollout's page body: its timeline beside its trace (summary,
    transcript as `transcript_html` draws it, signals, phases)."""
    return (f'{STYLE}{TIMELINE_STYLE}<div class="rk-rollout"><div class="rk-tl-col">{timeline_html(trace)}</div>'
            f'<div class="rk-tr-col">{trace_html(trace, transcript=transcript_html(trace))}</div></div>')
