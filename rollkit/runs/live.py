"""Watching a run: the live file a run writes, and the state a monitor shows.

A run with a folder (`rk.evaluate(..., out=DIR)`, `rollkit eval --out DIR`)
writes `DIR/live.jsonl` beside its traces, so another process can see what
is in flight. `LiveWriter` notes each event and writes, at most every
`FLUSH_EVERY` seconds and at the latest `FLUSH_EVERY` after an event, one
small line per change since the last write: a rollout's start, its latest
phase, its latest turn counts (a phase or turn line's "t" is when it was
written). A run in this process has it follow each rollout instead of
telling it each phase and turn: a flush reads the phase and turn counts
of the rollouts in flight, and repeats while any is followed. A rollout that starts and ends between two writes has no line at
all; one whose "start" line is in the file gets its "end" line at once,
flushed right after its trace line:

    {"e":"run","run_id":..,"total":..,"limits":{..},"agent_timeout":..,"pid":..,"host":..,"t":..}
    {"e":"start","r":"<rollout id>","t":..}
    {"e":"phase","r":..,"p":"agent","t":..}
    {"e":"turn","r":..,"n":<turns>,"k":<total tokens>,"a":<agent seconds>,"t":..}
    {"e":"end","r":..,"t":..}
    {"e":"final","status":"done" | "interrupted" | "failed","t":..}

The file starts over with each execution (a resume writes a new "run"
line); the last line says the run is over. A finished rollout's numbers are
read from its line in traces.jsonl, never from here.

`RunState` is what a monitor shows: done / in flight / failed counts, rate
and ETA, one lane per rollout in flight, the running mean of each signal
with a 95% interval, stop reasons and error types, the slowest and failed
rollouts (each with a way to load its trace). It is fed either in this
process (the run calls it as `LiveWriter` is called: the `RunSink` methods
`begin`, `started`, `phase`, `turn`, `finished`, `end`) or by `FolderFollower`, which follows a
run folder written by another process: traces.jsonl and live.jsonl are read
from where the last poll stopped, a half-written last line waits for the
next poll, and a folder that is not a run, or is deleted while followed,
becomes a message in `RunState.messages` while what was read stays shown.

This module draws nothing (rollkit.notebook.monitor does) and runs nothing.
"""

from __future__ import annotations

import asyncio
import heapq
import json
import math
import os
import re
import socket
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..core.events import RunSink
from ..core.outcome import Outcome
from ..core.store import trace_of_line
from ..core.trace import Trace
from ..analysis.compare import trace_signals
from ..tables.rows import signal_values
from ..analysis.stats import RunCost, t_critical

__all__ = ["LIVE", "RunSink", "LiveWriter", "RunState", "Lane", "Finished", "FolderFollower", "FLUSH_EVERY"]

LIVE = "live.jsonl"
FLUSH_EVERY = 0.2  # seconds: a follower is never further behind than this (plus its poll)
_KEEP = 5  # slowest and failed rollouts kept for clicking into


def _clock() -> float:
    return time.time()


# A string as JSON, as json.dumps writes it (ASCII), without its per-call set-up.
_quoted = json.encoder.encode_basestring_ascii  # type: ignore[attr-defined]


class _Noted:
    """What the live file knows of one rollout in flight: its state as the
    events left it, and what of it is in the file already."""

    __slots__ = ("quoted", "start", "phase", "turn", "shown", "shown_phase", "shown_turn", "state")

    def __init__(self, quoted: str, start: float) -> None:
        self.quoted = quoted  # its id as JSON, quoted once
        self.start = start
        # Where a followed rollout's phase and turn counts are read at each flush (LiveWriter.follow)
        self.state: Callable[[], tuple[str | None, int, int | None, float]] | None = None
        self.phase: str | None = None
        self.turn: tuple[int, int | None, float] | None = None  # (turns, tokens, agent seconds)
        self.shown = False  # its "start" line is in the file
        self.shown_phase: str | None = None
        self.shown_turn: tuple[int, int | None, float] | None = None


class LiveWriter(RunSink):
    """Writes live.jsonl for one execution of a run (see the module docstring).
    It hears of every rollout in the run's own process: an event only notes
    the rollout's state (a followed rollout's is read by the flush); a
    flush writes what changed since the last one, in one write. A rollout that starts and ends between two
    flushes leaves no line (its trace line is the truth, and a follower
    would have shown it in flight for no time); one whose start is in the
    file gets its "end" line at once, flushed with its trace line."""

    def __init__(self, path: Path, clock: Callable[[], float] = _clock) -> None:
        self.path = path
        self._file = open(path, "w", encoding="utf-8")
        self._clock = clock
        self._lanes: dict[str, _Noted] = {}  # the rollouts in flight, in the order they started
        self._timer: asyncio.TimerHandle | None = None

    def _soon(self) -> None:
        """A flush within FLUSH_EVERY: one timer at a time, never cancelled
        but at the end (rollouts that then wait on a model or a tool write
        nothing more: what changed reaches the file anyway)."""
        try:
            self._timer = asyncio.get_running_loop().call_later(FLUSH_EVERY, self._timed_flush)
        except RuntimeError:  # no loop runs (a caller outside a run): at once
            self.flush()

    def _timed_flush(self) -> None:
        self._timer = None
        self.flush()
        if not self._file.closed and any(lane.state is not None for lane in self._lanes.values()):
            self._soon()  # a followed rollout tells of no change: it is read again at the next flush

    def flush(self) -> None:
        """Write what changed in the rollouts in flight since the last flush
        (their start, their latest phase and turn counts), in one write."""
        now = self._clock()
        lines = []
        for lane in self._lanes.values():
            if lane.state is not None:
                self._read(lane)
            if not lane.shown:
                lane.shown = True
                lines.append(f'{{"e":"start","r":{lane.quoted},"t":{lane.start:.3f}}}\n')
            if lane.phase != lane.shown_phase:
                lane.shown_phase = lane.phase
                lines.append(f'{{"e":"phase","r":{lane.quoted},"p":"{lane.phase}","t":{now:.3f}}}\n')
            if lane.turn is not lane.shown_turn:
                lane.shown_turn = turn = lane.turn
                known = "null" if turn[1] is None else turn[1]  # a turn whose usage was not reported: the total is unknown
                lines.append(f'{{"e":"turn","r":{lane.quoted},"n":{turn[0]},"k":{known},"a":{turn[2]:.3f},"t":{now:.3f}}}\n')
        if lines:
            self._put("".join(lines))

    @staticmethod
    def _read(lane: _Noted) -> None:
        """A followed rollout's phase and turn counts as they are now (a turn
        line's agent seconds are those when it is written)."""
        phase, turns, tokens, agent_time = lane.state()  # type: ignore[misc]
        lane.phase = phase
        if turns and (lane.turn is None or lane.turn[:2] != (turns, tokens)):
            lane.turn = (turns, tokens, agent_time)

    def _put(self, text: str) -> None:
        if not self._file.closed:
            self._file.write(text)
            self._file.flush()

    def begin(self, info: dict[str, Any]) -> None:
        self._put(json.dumps({"e": "run", **info, "t": self._clock()}, default=str) + "\n")

    def started(self, rollout_id: str) -> None:
        self._lanes[rollout_id] = _Noted(_quoted(rollout_id), self._clock())
        if self._timer is None:
            self._soon()

    def follow(self, rollout_id: str, state: Callable[[], tuple[str | None, int, int | None, float]]) -> None:
        """Read a started rollout's (phase, turns, total tokens, agent
        seconds) from `state` at each flush instead of hearing its `phase`
        and `turn` events (the run in this process does so: an event costs
        each rollout, a flush only what is in flight)."""
        lane = self._lanes.get(rollout_id)
        if lane is not None:
            lane.state = state
            if self._timer is None:
                self._soon()

    def phase(self, rollout_id: str, phase: str) -> None:
        self._lanes[rollout_id].phase = phase
        if self._timer is None:
            self._soon()

    def turn(self, rollout_id: str, turns: int, tokens: int | None, agent_time: float) -> None:
        self._lanes[rollout_id].turn = (turns, tokens, agent_time)
        if self._timer is None:
            self._soon()

    def finished(self, trace: Trace) -> None:
        lane = self._lanes.pop(trace.info.get("rollout_id", ""), None)
        if lane is not None and lane.shown:
            # flushed with the trace line that was just written: the two agree on disk
            self._put(f'{{"e":"end","r":{lane.quoted},"t":{self._clock():.3f}}}\n')

    def end(self, status: str) -> None:
        if not self._file.closed:
            self.flush()
            self._put(json.dumps({"e": "final", "status": status, "t": self._clock()}) + "\n")
            self._file.close()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


# ---- what a monitor shows ----------------------------------------------------------


@dataclass(slots=True)
class Lane:
    """One rollout in flight."""

    rollout_id: str
    started: float
    phase: str = "boot"
    turns: int = 0
    tokens: int | None = 0
    agent_time: float = 0.0


@dataclass(slots=True)
class Finished:
    """What the monitor keeps of a finished rollout; `trace` loads it (from
    memory, or its line in traces.jsonl)."""

    rollout_id: str
    trace_id: str
    outcome: str  # Outcome.label: "ok", "stopped: <condition>", "failed: <error type>", "aborted", "incomplete"
    error: str | None
    signals: dict[str, float | None]
    duration: float
    end: float
    ref: Any = None  # a Trace, or (path, offset, length) of its line
    cost: float | None = None  # Trace.cost_usd: dollars, None when a price is unknown

    def trace(self) -> Trace:
        if isinstance(self.ref, Trace):
            return self.ref
        path, offset, length = self.ref
        try:
            with open(path, "rb") as f:
                f.seek(offset)
                return trace_of_line(f.read(length), where=f"{path} (the trace of {self.rollout_id})")
        except OSError as exc:
            raise FileNotFoundError(f"cannot read the trace of {self.rollout_id} from {path}: {exc.strerror or exc}") from None

    @property
    def failed(self) -> bool:
        return self.error is not None


def finished_from_trace(trace: Trace) -> Finished:
    outcome = trace.outcome
    duration, end = _span_of({name: {"start": p.start, "end": p.end} for name, p in trace.phases.items()})
    return Finished(str(trace.info.get("rollout_id", trace.id)), trace.id, outcome.label,
                    outcome.error_type, trace_signals(trace), duration, end, trace, trace.cost_usd)


_REWARDS = b',"rewards":{'
_SEGMENTS = b',"segments":['
# What a monitor reads of a finished trace (its outcome, signals, times).
_NEEDED = frozenset({"rewards", "reward_weights", "metrics", "info", "errors", "stop_condition", "completed",
                     "aborted", "phases"})


def _parse_line(line: bytes) -> dict[str, Any]:
    """The fields a monitor needs from one trace line. Fast path for the
    lines rollkit writes: the id (the first field, a hex string), then the
    fields from "rewards" up to "segments" (the messages and model calls
    before them and the segments and user turns after are most of the line
    and are never decoded). The fast path is taken only when that slice is
    one JSON object holding every field needed; a line in any other order
    (another writer, a newer rollkit), or a task whose data holds a
    "rewards" key, is read whole instead: the answer never depends on the
    order of the fields."""
    if line.startswith(b'{"id":"'):
        close = line.find(b'"', 7)
        cut = line.find(_REWARDS, close)
        stop = line.find(_SEGMENTS, cut)  # segments and user turns follow the phases: not needed
        if close > 0 and cut > 0:
            try:
                tail = json.loads(b"{" + line[cut + 1:stop] + b"}" if stop > 0 else b"{" + line[cut + 1:])
            except ValueError:
                tail = None
            if isinstance(tail, dict) and _NEEDED.issubset(tail):
                tail["id"] = line[7:close].decode()
                tail["_cost"] = _cost_before(line, cut, tail.get("info") or {})
                return tail
    return _parse_whole(line)


def _parse_whole(line: bytes | str) -> dict[str, Any]:
    whole = json.loads(line)  # a ValueError here is a line that is not JSON
    if not isinstance(whole, dict) or "id" not in whole:
        raise ValueError("not a trace object")
    return whole


_CALLS = b'"model_calls":['
_CUM_COST = b'"cum_cost_usd":'
_NUMBER = re.compile(rb"-?[0-9][0-9.eE+-]*")


def _cost_before(line: bytes, cut: int, info: dict[str, Any]) -> Any:
    """Trace.cost_usd of a rollkit trace line whose model calls end before
    `cut`, read without decoding them: the source's total, else the last
    call's running total (a key in JSON text is never inside a string, whose
    quotes are escaped). `...` when the line is not laid out as rollkit
    writes it (the whole line is read instead)."""
    if info.get("cost_usd") is not None:
        return float(info["cost_usd"])
    at = line.rfind(_CALLS, 0, cut)
    if at < 0:
        return ...
    if line.startswith(b"]", at + len(_CALLS)):
        return 0.0
    last = line.rfind(b'{"index":', at, cut)
    found = line.find(_CUM_COST, last, cut) if last > 0 else -1
    if found < 0:
        return None  # the last call has no running cost: unknown
    number = _NUMBER.match(line, found + len(_CUM_COST))
    return float(number.group()) if number else ...


def _cost_of(d: dict[str, Any]) -> float | None:
    """Trace.cost_usd of a trace's JSON (the same rule, without building it)."""
    imported = (d.get("info") or {}).get("cost_usd")
    if imported is not None:
        return float(imported)
    calls = d.get("model_calls") or []
    return calls[-1].get("cum_cost_usd") if calls else 0.0


def _span_of(phases: dict[str, Any]) -> tuple[float, float]:
    starts, ends = [], []
    for span in phases.values():
        starts.append(span["start"])
        if span.get("end") is not None:
            ends.append(span["end"])
    if not starts:
        return 0.0, 0.0
    end = max(ends) if ends else max(starts)
    return max(0.0, end - min(starts)), end


def finished_from_line(line: bytes | str, ref: Any) -> Finished:
    d = _parse_line(line.encode() if isinstance(line, str) else line)
    outcome = Outcome.of_record(d)
    info = d.get("info") or {}
    duration, end = _span_of(d.get("phases") or {})
    cost = d.get("_cost", ...)
    if cost is ...:  # not read on the fast path
        cost = _cost_of(d) if "model_calls" in d else _cost_of(_parse_whole(line))
    return Finished(str(info.get("rollout_id", d["id"])), d["id"], outcome.label, outcome.error_type,
                    signal_values(d), duration, end, ref, cost)


@dataclass
class RunState(RunSink):
    """A run as a monitor sees it. Each change calls `on_change(final)`
    (final: the run just ended), at most once per call into the state."""

    total: int | None = None
    done: int = 0
    failed: int = 0
    run_id: str | None = None
    limits: dict[str, Any] = field(default_factory=dict)
    agent_timeout: float | None = None
    in_flight: dict[str, Lane] = field(default_factory=dict)
    sums: dict[str, list[float]] = field(default_factory=dict)  # name -> [n, sum, sum of squares]
    outcomes: Counter = field(default_factory=Counter)
    cost: float = 0.0  # dollars of the finished rollouts with a price
    unpriced: int = 0  # finished rollouts whose price is unknown
    errors: Counter = field(default_factory=Counter)
    slowest: list[tuple[float, int, Finished]] = field(default_factory=list)  # a min-heap of the _KEEP slowest
    failures: deque = field(default_factory=lambda: deque(maxlen=_KEEP))
    first_start: float | None = None  # the earliest start of a finished rollout (its end less its duration)
    last_end: float | None = None  # the latest end of a finished rollout
    final: str | None = None
    process: dict[str, Any] = field(default_factory=dict)
    messages: list[str] = field(default_factory=list)
    version: int = 0
    on_change: Callable[[bool], None] | None = None

    def _changed(self, final: bool = False) -> None:
        self.version += 1
        if self.on_change is not None:
            self.on_change(final)

    # ---- fed by the run (or by FolderFollower) -------------------------------------
    def begin(self, info: dict[str, Any]) -> None:
        self.run_id = info.get("run_id")
        self.total = info.get("total")
        self.limits = info.get("limits") or {}
        self.agent_timeout = info.get("agent_timeout")
        self.process = {"pid": info.get("pid"), "host": info.get("host")}
        self.final = None
        self.in_flight.clear()
        self._changed()

    def started(self, rollout_id: str, now: float | None = None) -> None:
        self.in_flight[rollout_id] = Lane(rollout_id, time.time() if now is None else now)
        self._changed()

    def phase(self, rollout_id: str, phase: str) -> None:
        lane = self.in_flight.get(rollout_id)
        if lane is not None:
            lane.phase = phase
            self._changed()

    def turn(self, rollout_id: str, turns: int, tokens: int | None, agent_time: float) -> None:
        lane = self.in_flight.get(rollout_id)
        if lane is not None:
            lane.turns, lane.tokens, lane.agent_time = turns, tokens, agent_time
            self._changed()

    def finished(self, trace: Trace) -> None:
        self.add(finished_from_trace(trace))

    def add(self, record: Finished) -> None:
        """A finished rollout, from a trace in memory or a line of traces.jsonl."""
        self.in_flight.pop(record.rollout_id, None)
        self.done += 1
        self.outcomes[record.outcome] += 1
        if record.cost is None:
            self.unpriced += 1
        else:
            self.cost += record.cost
        if record.error is not None:
            self.failed += 1
            self.errors[record.error] += 1
            self.failures.append(record)
        for name, value in record.signals.items():
            acc = self.sums.get(name)
            if acc is None:
                acc = self.sums[name] = [0, 0.0, 0.0]
            if value is not None:
                acc[0] += 1
                acc[1] += value
                acc[2] += value * value
        entry = (record.duration, self.done, record)
        if len(self.slowest) < _KEEP:
            heapq.heappush(self.slowest, entry)
        elif entry[0] > self.slowest[0][0]:
            heapq.heapreplace(self.slowest, entry)
        start = record.end - record.duration
        self.first_start = start if self.first_start is None else min(self.first_start, start)
        self.last_end = record.end if self.last_end is None else max(self.last_end, record.end)
        self._changed()

    def end(self, status: str) -> None:
        self.final = status
        self.in_flight.clear()
        self._changed(final=True)

    # ---- read by the monitor -------------------------------------------------------
    def signal_means(self) -> list[tuple[str, float | None, float | None, int, int]]:
        """(name, mean, half width of the 95% t interval, n scored, n total) per signal."""
        out = []
        for name in sorted(self.sums, key=lambda n: (n != "reward", not n.startswith("reward."), n)):
            n, total, squares = self.sums[name]
            n = int(n)
            mean = total / n if n else None
            half = None
            if n >= 2:
                variance = max(0.0, (squares - n * mean * mean) / (n - 1))
                half = t_critical(n - 1) * math.sqrt(variance / n)
            out.append((name, mean, half, n, self.done))
        return out

    def run_cost(self) -> RunCost:
        """The cost of the rollouts finished so far and the reward per dollar
        (rollkit.analysis.stats.run_cost's rules: NA when one has no price)."""
        if self.unpriced or not self.done:
            return RunCost(None, None, self.done, self.unpriced, None)
        n, total = self.sums.get("reward", (0, 0.0, 0.0))[:2]
        mean = self.cost / self.done
        return RunCost(self.cost, mean, self.done, 0, total / n / mean if n and mean > 0 else None)

    def rate(self) -> float | None:
        """Rollouts finished per second: those finished over the time from the
        first start to the latest end. (The gaps between the latest finishes
        read 20 times too fast: many rollouts in flight end in bursts, and a
        burst's finishes are milliseconds apart.)"""
        if self.done < 2 or self.first_start is None or self.last_end is None:
            return None
        span = self.last_end - self.first_start
        return self.done / span if span > 0 else None

    def eta(self) -> float | None:
        rate = self.rate()
        if self.final is not None or rate is None or self.total is None:
            return None
        return max(0, self.total - self.done) / rate

    def picks(self) -> list[tuple[str, Finished]]:
        """The slowest (longest first) and the failed rollouts, labelled."""
        out = [(f"slow {r.duration:7.2f} s  {r.rollout_id}  {r.outcome}", r)
               for _, _, r in sorted(self.slowest, key=lambda e: (-e[0], e[1]))]
        out += [(f"failed  {r.rollout_id}  {r.error}", r) for r in reversed(self.failures)]
        return out

    def say(self, message: str | None) -> None:
        """Show `message` as the state's one problem (None clears it)."""
        messages = [message] if message else []
        if messages != self.messages:
            self.messages = messages
            self._changed()


def run_info(run_id: str, total: int, limits: dict[str, Any], agent_timeout: float | None) -> dict[str, Any]:
    """The "run" line of a live file: who writes it, so a follower on the same
    machine can tell a run that died from one still going."""
    return {"run_id": run_id, "total": total, "limits": limits, "agent_timeout": agent_timeout,
            "pid": os.getpid(), "host": socket.gethostname()}


# ---- following a folder --------------------------------------------------------------


class _Tail:
    """The complete lines appended to one file since the last read; a
    half-written last line waits for the next read."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.line = 0
        self.identity: tuple[int, int] | None = None

    def read(self) -> tuple[list[tuple[int, bytes]], bool]:
        """(offset, line bytes) of each new complete line, and whether the
        file was replaced or cut shorter than what was read (start over)."""
        try:
            with open(self.path, "rb") as f:
                stat = os.fstat(f.fileno())
                identity = (stat.st_dev, stat.st_ino)
                reset = (self.identity is not None and identity != self.identity) or stat.st_size < self.offset
                if reset:
                    self.offset = self.line = 0
                self.identity = identity
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return [], False
        cut = data.rfind(b"\n") + 1
        lines = []
        start = 0
        while start < cut:
            stop = data.index(b"\n", start)
            lines.append((self.offset + start, data[start:stop]))
            start = stop + 1
        self.offset += cut
        self.line += len(lines)
        return lines, reset


class FolderFollower:
    """Follows the run folder at `path` into `state` (a RunState), one
    `poll()` at a time: the caller decides how often (see
    rollkit.notebook.monitor). Nothing is ever raised at the caller for a
    bad folder: it becomes `state.messages`, and what was read stays."""

    def __init__(self, path: str | os.PathLike[str], state: RunState | None = None) -> None:
        self.path = Path(path)
        self.state = state if state is not None else RunState()
        self._traces = _Tail(self.path / "traces.jsonl")
        self._live = _Tail(self.path / LIVE)
        self._seen_folder = False
        self._manifest = False
        self.bad_lines = 0

    def poll(self) -> bool:
        """Read what landed since the last poll; True when anything changed."""
        before = self.state.version
        problem = self._check_folder()
        if problem is None:
            self._read_manifest()
            self._read_traces()
            self._read_live()
            problem = self._check_process()
            if problem is None and self.bad_lines:
                problem = f"{self.bad_lines} lines of {self.path} are not what a run writes: skipped"
        self.state.say(problem)
        return self.state.version != before

    def _check_folder(self) -> str | None:
        path = self.path
        if not path.exists():
            if self._seen_folder:
                return (f"the run folder {path} was deleted (or moved) while followed; "
                        f"showing the {self.state.done} rollouts read before")
            return f"no run folder at {path} (yet): waiting for it; start the run with --out {path}"
        if not path.is_dir():
            return f"{path} is a file, not a run folder: pass the --out folder of rollkit eval"
        if not any((path / name).exists() for name in ("manifest.json", "traces.jsonl", LIVE)):
            return (f"{path} is not a run folder: it holds none of manifest.json, traces.jsonl, {LIVE}; "
                    "pass the --out folder of rollkit eval (waiting in case a run starts there)")
        self._seen_folder = True
        return None

    def _read_manifest(self) -> None:
        if self._manifest:
            return
        try:
            manifest = json.loads((self.path / "manifest.json").read_text(encoding="utf-8"))
            total = manifest["tasks"]["count"] * manifest["repeats"]
        except (OSError, ValueError, KeyError, TypeError):
            return  # not there yet, or being replaced: the next poll tries again
        self._manifest = True
        if self.state.total is None:
            self.state.total = total
            self.state.run_id = manifest.get("run_id")
            self.state._changed()

    def _read_traces(self) -> None:
        lines, reset = self._traces.read()
        if reset:
            self._restart()
            lines, _ = self._traces.read()
        path = self._traces.path
        for offset, raw in lines:
            if not raw.strip():
                continue
            try:
                record = finished_from_line(raw, (path, offset, len(raw)))
            except (ValueError, KeyError, TypeError, AttributeError):
                self.bad_lines += 1
                continue
            self.state.add(record)

    def _restart(self) -> None:
        """traces.jsonl was replaced or cut: count it again from the start."""
        on_change = self.state.on_change
        fresh = RunState(total=self.state.total, run_id=self.state.run_id, on_change=on_change)
        self.state.__dict__.update(fresh.__dict__)
        self._live = _Tail(self.path / LIVE)

    def _read_live(self) -> None:
        lines, _ = self._live.read()
        state = self.state
        for _, raw in lines:
            try:
                line = json.loads(raw)
                kind = line["e"]
                if kind == "start":
                    if line["r"] not in state.in_flight:
                        state.started(line["r"], line.get("t"))
                elif kind == "phase":
                    state.phase(line["r"], line["p"])
                elif kind == "turn":
                    state.turn(line["r"], line["n"], line["k"], line["a"])
                elif kind == "end":
                    if state.in_flight.pop(line["r"], None) is not None:
                        state._changed()
                elif kind == "run":
                    done, total = state.done, state.total
                    state.begin(line)
                    state.done, state.total = done, line.get("total", total)
                elif kind == "final":
                    state.end(line.get("status", "done"))
            except (ValueError, KeyError, TypeError):
                self.bad_lines += 1

    def _check_process(self) -> str | None:
        """A run on this machine whose process is gone without a final line."""
        state = self.state
        pid, host = state.process.get("pid"), state.process.get("host")
        if state.final is not None or not pid or host != socket.gethostname():
            return None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return (f"the run's process (pid {pid}) ended without finishing: the rollouts shown in flight were cut off; "
                    f"continue with rollkit eval ... --out {self.path} --resume")
        except PermissionError:
            pass  # someone else's process, alive
        return None
