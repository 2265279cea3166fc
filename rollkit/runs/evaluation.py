"""Run many: a task set times `repeats`, many rollouts in flight, one result.

This module owns batch evaluation: `evaluate` (runs to the end) and
`evaluate_async` (the same, to await in async code) bound the rollouts in flight,
tag every trace with its example id and rollout id, keep a `tqdm.auto`
progress bar, append each finished trace to the run folder's trace file the
moment it finishes (its tables written as it goes, through
rollkit.tables.livetables), resume a folder, run group scorers once all the repeats
of a task are done, and hand back an `EvalResult` that builds the DataFrames
(through `rollkit.analysis.frames`); `load_run` reads a run folder back as one.

Each trace's `info` gets `example_id` (the task key), `repeat`, `rollout_id`
(`<task key>#<repeat>`) and `run_id`. Group signals (pass@k, best-of-n, ...)
are not on the traces; they are `EvalResult.groups` /
`EvalResult.group_signals()`.

This module does not drive a rollout's lifecycle (the rollout does), build
DataFrames (rollkit.analysis.frames does), know Ray (rollkit.runs.ray_backend does), define
the run folder format (rollkit.tables.runfolder does) or judge a group
(rollkit.analysis.groups does).
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.agent import Agent
from ..core.cancellation import finish
from ..core.errors import UsageError
from ..core.prices import require_price, run_rates
from . import interrupts
from ..analysis import frames
from ..analysis.compare import trace_signals
from ..analysis.stats import mean_interval, run_cost
from ..analysis.groups import GroupScorer, GroupSignal, best_of_n, named_scorers, pass_at_k, run_group
from .runner import run_rollout
from ..core.events import RunSink
from .live import LIVE, LiveWriter, run_info
from ..tables.livetables import TraceLog
from ..tables.runfolder import GROUPS, TRACES, USER_TRACES, RunFolder, RunFolderError, latest, new_manifest, prepare_folder, read_folder
from ..core.store import append_trace
from ..core.task import Task
from ..core.trace import PHASES, Trace
from ..core.users import User
from ..core.dependencies import pandas, tqdm_auto
from ..core.gcpause import older_heap_left_alone

if TYPE_CHECKING:  # pragma: no cover
    import pandas

__all__ = [
    "evaluate",
    "evaluate_async",
    "EvalResult",
    "load_run",
    "GroupSignal",
    "pass_at_k",
    "best_of_n",
    "RunFolderError",
    "EvaluateArgumentError",
]

log = logging.getLogger("rollkit")


class EvaluateArgumentError(UsageError):
    """An argument of `rk.evaluate` that cannot be used as given; the message
    names it and says what to pass. Each one raised is also a `ValueError`
    (a bad value) or a `TypeError` (a wrong type), so code catching the
    built-in types keeps working, while the CLI can catch this class alone
    and leave a real bug's TypeError its traceback."""


class _BadValue(EvaluateArgumentError, ValueError):
    pass


class _BadType(EvaluateArgumentError, TypeError):
    pass


# ---- the result ---------------------------------------------------------------


class EvalResult:
    """The traces of a run (finishing order), its group signals, and where
    it was written. The DataFrame methods call `rollkit.analysis.frames`."""

    def __init__(
        self,
        traces: list[Trace],
        groups: list[GroupSignal] | None = None,
        *,
        out: Path | None = None,
        manifest: dict[str, Any] | None = None,
        user_traces: list[Trace] | None = None,
        run: Any = None,
    ) -> None:
        self._traces = traces
        # An AgentUser's own traces, each linked to its rollout's by
        # info["assistant_trace_id"] (and the rollout's to it by info["user_trace_id"]).
        self._user_traces = user_traces
        # A run read back from its folder (load_run): a LazyRun
        # (rollkit.tables.lazyrun) whose tables give the frames; the traces
        # themselves are parsed only when asked for.
        self.run = run
        self.groups = groups or []
        self.out = out
        self.manifest = manifest or {}

    @property
    def traces(self) -> list[Trace]:
        if self._traces is None:
            self._traces = read_folder(self.out).traces  # type: ignore[arg-type]
        return self._traces

    @traces.setter
    def traces(self, traces: list[Trace]) -> None:
        self._traces = traces

    @property
    def user_traces(self) -> list[Trace]:
        if self._user_traces is None:
            self._user_traces = read_folder(self.out).user_traces if self.out else []  # type: ignore[arg-type]
        return self._user_traces

    @user_traces.setter
    def user_traces(self, traces: list[Trace]) -> None:
        self._user_traces = traces

    def __len__(self) -> int:
        if self._traces is None and self.run is not None:
            return len(self.run)
        return len(self.traces)

    def __iter__(self) -> Iterator[Trace]:
        return iter(self.traces)

    def __repr__(self) -> str:
        where = f" out={str(self.out)!r}" if self.out else ""
        return f"EvalResult({len(self.traces)} traces, {len(self.groups)} group signals{where})"

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> EvalResult:
        return load_run(path)

    # DataFrames: one row per rollout / turn / phase / signal (rollkit.analysis.frames),
    # each with example_id, repeat and rollout_id beside the trace id, so
    # analysis can group by task or by rollout.
    def rollouts(self) -> pandas.DataFrame:
        return self._frame("rollouts")

    def turns(self) -> pandas.DataFrame:
        return self._frame("turns")

    def phases(self) -> pandas.DataFrame:
        return self._frame("phases")

    def signals(self) -> pandas.DataFrame:
        return self._frame("signals")

    def _frame(self, kind: str) -> pandas.DataFrame:
        # The builders read the ids from trace.info: nothing to add here.
        if self._traces is None and self.run is not None:
            return getattr(self.run, kind)()
        return getattr(frames, kind)(self.traces)

    def group_signals(self) -> pandas.DataFrame:
        """One row per (task, group signal): example_id, signal, value, n, error."""
        columns = ["example_id", "signal", "value", "n", "error"]
        return pandas.DataFrame([asdict(g) for g in self.groups], columns=columns)

    def summary(self) -> str:
        return _summarize(self.traces, self.groups)


def _summarize(traces: list[Trace], groups: list[GroupSignal] | None = None) -> str:
    """A plain-text summary table: outcomes (stop condition or error type),
    each signal's mean with its 95% interval and n scored / n total, the
    run's cost and reward per dollar (rollkit.analysis.stats.run_cost), phase
    time totals, and the mean of each group signal."""
    lines = []
    examples = {t.info.get("example_id", t.task.key) for t in traces}
    lines.append(f"rollouts: {len(traces)} over {len(examples)} tasks")
    counts: dict[str, int] = {}
    for trace in traces:
        key = trace.outcome.label
        counts[key] = counts.get(key, 0) + 1
    width = max([len(k) for k in counts] + [7])
    lines.append("")
    lines.append(f"{'outcome':<{width}}  {'count':>6}")
    for key in sorted(counts, key=lambda k: (k != "ok", k.startswith("failed"), k)):
        lines.append(f"{key:<{width}}  {counts[key]:>6}")
    lines.append("")
    lines.extend(_signal_lines(traces))
    lines.append("")
    lines.append(run_cost([t.cost_usd for t in traces], [t.scored_reward for t in traces]).text())
    lines.append("")
    lines.append(f"{'phase':<9}  {'total s':>9}  {'mean s':>9}")
    for phase in PHASES:
        durations = [span.duration for t in traces if (span := t.phases.get(phase)) and span.duration is not None]
        if durations:
            total = sum(durations)
            lines.append(f"{phase:<9}  {total:>9.3f}  {total / len(durations):>9.4f}")
    if groups:
        by_signal: dict[str, list[float | None]] = {}
        for group in groups:
            by_signal.setdefault(group.signal, []).append(group.value)
        lines.append("")
        lines.append(f"{'group signal':<14}  {'mean':>7}  {'tasks':>6}  {'missing':>7}")
        for name, values in by_signal.items():
            present = [v for v in values if v is not None]
            shown = f"{sum(present) / len(present):.3f}" if present else "-"
            lines.append(f"{name:<14}  {shown:>7}  {len(values):>6}  {len(values) - len(present):>7}")
    return "\n".join(lines)


def _signal_lines(traces: list[Trace]) -> list[str]:
    """Each signal's mean with its 95% t interval and n scored / n total
    (rollouts): a missing value is counted, never read as 0."""
    values: dict[str, list[float]] = {}
    for trace in traces:
        for name, value in trace_signals(trace).items():
            bucket = values.setdefault(name, [])
            if value is not None:
                bucket.append(value)
    names = sorted(values, key=lambda n: (n != "reward", not n.startswith("reward."), n))
    width = max([len(n) for n in names] + [6])
    lines = [f"{'signal':<{width}}  {'mean':>7}  {'95% interval':>18}  {'scored / total':>14}"]
    for name in names:
        mean, low, high = mean_interval(values[name])
        shown = "-" if mean is None else f"{mean:.3f}"
        interval = "-" if low is None or high is None else f"[{low:.3f}, {high:.3f}]"
        lines.append(f"{name:<{width}}  {shown:>7}  {interval:>18}  {f'{len(values[name])} / {len(traces)}':>14}")
    return lines


def load_run(path: str | os.PathLike[str]) -> EvalResult:
    """Read a run folder back: the same traces (in the same order) and group
    signals as the in-memory result of the run that wrote it. A torn last
    line is skipped with a warning; a bad line in the middle raises
    `TraceFileError` naming it."""
    folder = read_folder(path, traces=False)
    if not (folder.path / TRACES).exists():
        return EvalResult([], folder.groups, out=folder.path, manifest=folder.manifest, user_traces=[])
    from ..tables.lazyrun import open_run

    # The frames come from the columnar tables; the traces are parsed on first use.
    return EvalResult(None, folder.groups, out=folder.path, manifest=folder.manifest,  # type: ignore[arg-type]
                      run=open_run(folder.path))


# ---- the plan and the run ---------------------------------------------------------


def _whole(name: str, value: Any, meaning: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _BadValue(f"{name} must be a whole number >= 1 ({meaning}); got {value!r}")
    return value


def as_task_list(tasks: Any) -> list[Task]:
    if isinstance(tasks, Task):
        tasks = [tasks]
    if not isinstance(tasks, Iterable) or isinstance(tasks, (str, bytes)):
        raise _BadType(f"tasks must be a list (or iterable) of rk.Task, got {type(tasks).__name__}")
    listed = list(tasks)
    if not listed:
        raise _BadValue("the task set is empty: pass at least one rk.Task (e.g. rollkit.examples.arithmetic_tasks())")
    seen: dict[str, int] = {}
    for index, task in enumerate(listed):
        if not isinstance(task, Task):
            raise _BadType(f"tasks[{index}] is a {type(task).__name__}, not a rk.Task")
        if task.key in seen:
            raise _BadValue(
                f"tasks[{seen[task.key]}] and tasks[{index}] have the same key {task.key!r}; give each task a "
                "distinct id (TaskData id=...): the key names its rollouts in the trace file and on resume"
            )
        seen[task.key] = index
    return listed


@dataclass
class _Plan:
    """Everything checked before the first rollout starts."""

    agent: Agent
    tasks: list[Task]
    repeats: int
    concurrency: int
    backend: Any
    progress: bool
    scorers: dict[str, GroupScorer]
    manifest: dict[str, Any]
    out: Path | None
    resume: bool
    user: Any = None  # a rk.User, or a function of the task making one (runner.user_for)
    # Where a task's rollouts start when not from its prompt: task key -> a
    # fork's prefix (rollkit.runs.turnvalues runs continuations this way).
    starts: dict[str, Any] = field(default_factory=dict)
    folder: RunFolder | None = None  # set by execute_plan, the only place that touches the folder
    # What watches the run in this process (a monitor's rollkit.runs.live.RunState),
    # a RunSink called as the live file's LiveWriter is.
    watchers: list[RunSink] = field(default_factory=list)
    # Sends each finished rollout as OpenTelemetry spans (`otel=`; rollkit.interop.exports.otel).
    otel: RunSink | None = None

    @property
    def run_id(self) -> str:
        return self.manifest["run_id"]


def plan_run(
    agent: Agent,
    tasks: Any,
    *,
    repeats: int | None,
    concurrency: int,
    out: str | os.PathLike[str] | None,
    resume: bool,
    backend: Any,
    progress: bool,
    group_scorers: Any,
    user: Any = None,
    otel: Any = None,
) -> _Plan:
    if not isinstance(agent, Agent):
        raise _BadType(f"agent must be a rk.Agent (e.g. rollkit.examples.demo_agent()), got {type(agent).__name__}")
    task_list = as_task_list(tasks)
    if repeats is None:  # the source's own count (rollkit.interop.tasks.TaskList: an inspect task's epochs)
        repeats = getattr(tasks, "repeats", 1)
    _whole("repeats", repeats, "how many times each task runs")
    _whole("concurrency", concurrency, "how many rollouts run at once")
    try:
        scorers = named_scorers(group_scorers)
    except TypeError as exc:
        raise _BadType(f"group_scorers: {exc}") from None
    except ValueError as exc:
        raise _BadValue(f"group_scorers: {exc}") from None
    if isinstance(user, type):
        raise _BadType(f"user={user.__name__} is a class; pass a rk.User instance, or a function of the task that makes one")
    if user is not None and not (isinstance(user, User) or callable(user)):
        raise _BadType(
            f"user must be a rk.User (e.g. rk.ScriptedUser([...])) or a function of the task that makes one, "
            f"got {type(user).__name__}"
        )
    limits = agent.limits
    if limits.max_cost_usd is not None:
        try:  # once, before any rollout: not one failed trace per rollout
            require_price(agent.model, hard=limits.cost_cap == "hard")
        except UsageError as exc:
            raise _BadValue(f"rk.evaluate: {exc}") from None
    backend = _backend(backend)
    if resume and out is None:
        raise _BadValue("resume=True needs out=DIR: the run folder to continue")
    if hasattr(backend, "check"):
        backend.check()  # e.g. Ray installed and its address answering, before any file is written
    # Nothing on disk yet: the run folder is prepared by execute_plan (see there).
    manifest = new_manifest(agent, task_list, repeats, list(scorers))
    if user is not None:
        # A name, never a repr with a memory address: the manifest says what ran.
        manifest["user"] = getattr(user, "name", None) if isinstance(user, User) else getattr(user, "__qualname__", type(user).__name__)
    folder_path = Path(out) if out is not None else None
    plan = _Plan(agent, task_list, repeats, concurrency, backend, progress, scorers, manifest, folder_path, resume, user)
    if otel is not None:
        from ..interop.exports.otelprocess import live_sink

        plan.otel = live_sink(otel)
    return plan


def _backend(backend: Any) -> Any:
    if backend == "local":
        return _LocalBackend()
    if backend == "ray":
        from .ray_backend import RayBackend

        return RayBackend()
    if hasattr(backend, "start") and hasattr(backend, "run") and hasattr(backend, "stop"):
        return backend  # e.g. rollkit.runs.ray_backend.RayBackend(address=...)
    raise _BadValue(f"backend must be 'local', 'ray' or a rollkit.runs.ray_backend.RayBackend(...), got {backend!r}")


def trace_line(trace: Trace) -> bytes:
    """A finished trace's line in the run's traces.jsonl (rollkit.tables.livetables.TraceLog.append's)."""
    return trace.json_line()


def _rollout_info(task: Task, repeat: int, run_id: str) -> dict[str, Any]:
    """The ids a trace of this (task, repeat) carries in `trace.info`."""
    return {"example_id": task.key, "repeat": repeat, "rollout_id": f"{task.key}#{repeat}", "run_id": run_id}


def _progress_of(rollout: Any) -> tuple[str | None, int, int | None, float]:
    """A rollout's phase and turn counts now, as the live file shows them."""
    trace = rollout.trace
    return rollout.phase, trace.num_turns, trace.num_total_tokens, rollout.agent_time


class _LocalBackend:
    """Rollouts run as tasks on this event loop."""

    name = "local"
    watch: Any = None  # set by _Run when something watches the run: the rollouts' events reach it

    starts: dict[str, Any] = {}  # set by execute_plan from the plan: task key -> fork prefix

    async def start(self, agent: Agent, concurrency: int, user: Any = None) -> None:
        self.agent = agent
        self.user = user

    async def run(self, task: Task, info: dict[str, Any]) -> Trace:
        return await run_rollout(self.agent, task, info, self.user, self.watch, self.starts.get(task.key))

    async def stop(self) -> None:
        pass


class _Progress:
    """The tqdm.auto bar (a widget in notebooks, text in a terminal), or
    nothing. Counts done, failed, stopped and the running mean reward."""

    def __init__(self, enabled: bool, total: int, initial: list[Trace]) -> None:
        kinds = [t.outcome.kind for t in initial]
        self.failed = kinds.count("failed")
        self.stopped = kinds.count("stopped")
        rewards = [t.scored_reward for t in initial if t.scored_reward is not None]
        self.reward_sum = sum(rewards)
        self.scored = len(rewards)
        self.bar = None
        if enabled:
            self.bar = tqdm_auto.tqdm(total=total, initial=len(initial), desc="rollouts", unit="rollout", dynamic_ncols=True)
            self._postfix()

    def _postfix(self) -> None:
        mean = f"{self.reward_sum / self.scored:.3f}" if self.scored else "-"
        self.bar.set_postfix_str(f"failed={self.failed} stopped={self.stopped} reward={mean}", refresh=False)

    def add(self, trace: Trace) -> None:
        kind = trace.outcome.kind
        if kind == "failed":
            self.failed += 1
        elif kind == "stopped":
            self.stopped += 1
        if trace.scored_reward is not None:
            self.scored += 1
            self.reward_sum += trace.reward
        if self.bar is not None:
            self._postfix()
            self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


class _Run:
    """One execution of a plan: what finished (before and now), the files
    it appends to, the bar, and the workers that pull the remaining
    (task, repeat) pairs."""

    def __init__(self, plan: _Plan) -> None:
        self.plan = plan
        folder = plan.folder
        self.traces: list[Trace] = list(folder.traces) if folder else []
        self.user_traces: list[Trace] = list(folder.user_traces) if folder else []
        self.groups: list[GroupSignal] = list(folder.groups) if folder else []
        self.by_example: dict[str, list[Trace]] = {}
        seen: set[str] = set()
        for trace in self.traces:
            rollout_id = trace.info.get("rollout_id")
            if rollout_id in seen:
                warnings.warn(f"the run folder holds rollout {rollout_id} twice; both are kept as written", stacklevel=4)
            seen.add(rollout_id)
            self.by_example.setdefault(trace.info.get("example_id", trace.task.key), []).append(trace)
        # What is judged is a (task, scorer) pair, not a task: a scorer added
        # on resume still runs for tasks completed before, and a crash between
        # two scorers' lines leaves only the missing scorer to run. A group
        # judged on fewer repeats than now asked (resume with more repeats) is
        # judged again; the newer record wins (see rollkit.tables.runfolder.latest).
        self.judged = {(g.example_id, g.scorer_name) for g in self.groups if g.n == plan.repeats}
        self.todo = [(t, r) for t in plan.tasks for r in range(plan.repeats) if f"{t.key}#{r}" not in seen]
        planned = {t.key for t in plan.tasks}
        self.finished_before = [
            t for t in self.traces if t.info.get("example_id") in planned and t.info.get("repeat", 0) < plan.repeats
        ]
        self.progress = _Progress(False, 0, [])  # the bar appears once the backend is up
        self.sinks: list[RunSink] = []  # the live file's writer and the watchers: see _watch_run
        self.live: LiveWriter | None = None
        self.hearing: list[RunSink] = []  # the sinks that hear each phase and turn (all but the live file's)
        self.trace_file: Any = None
        # The traces that ended in this turn of the loop, their lines not yet written (finished_together).
        self.batch: list[Trace] | None = None
        self.group_file: Any = None
        self.user_file: Any = None

    async def judge(self, example_id: str) -> None:
        """Group scoring, once every repeat of the task finished. Traces
        only: the runtimes are gone by now (L21)."""
        plan = self.plan
        todo = {name: scorer for name, scorer in plan.scorers.items() if (example_id, name) not in self.judged}
        if not todo:
            return
        mine = [t for t in self.by_example.get(example_id, []) if t.info.get("repeat", 0) < plan.repeats]
        if len({t.info.get("repeat") for t in mine}) < plan.repeats:
            return
        self.judged.update((example_id, name) for name in todo)
        signals = await run_group(example_id, mine, todo)
        self.groups.extend(signals)
        if self.group_file is not None and signals:
            # One write for the task's lines, flushed: a crash rarely splits
            # them, and a scorer whose line is missing runs again on resume.
            self.group_file.write("".join(json.dumps(asdict(signal)) + "\n" for signal in signals))
            self.group_file.flush()

    def finished(self, traces: list[Trace]) -> None:
        # The lines are serialized one after another before any is written
        # (see `finished_together`). A trace whose line cannot be made is
        # not kept, as when it ended alone, and its error is raised once the
        # others, other workers' rollouts among them, are written and kept.
        kept: list[Trace] = []
        lines: list[bytes | None] = []
        failed: BaseException | None = None
        for trace in traces:
            try:
                line = trace_line(trace) if self.trace_file is not None else None
            except Exception as exc:  # noqa: BLE001  raised below, once the batch's other lines are written
                failed = failed or exc
                continue
            kept.append(trace)
            lines.append(line)
        self._written(kept, lines)
        if failed is not None:
            raise failed

    def _written(self, traces: list[Trace], lines: list[bytes | None]) -> None:
        """Each trace kept, its line (None: no folder) written first."""
        # On disk first, flushed: a crash now loses only what is in flight.
        # A user's own traces go first: one whose rollout's line is missing
        # is an orphan that reading the folder drops (its rollout reruns).
        for trace, line in zip(traces, lines):
            if trace.user_traces and self.plan.folder is not None:
                if self.user_file is None:
                    self.user_file = open(self.plan.folder.path / USER_TRACES, "a", encoding="utf-8")
                for user_trace in trace.user_traces:
                    append_trace(user_trace, self.user_file)
            self.user_traces.extend(trace.user_traces)
            if line is not None:
                self.trace_file.write(line)
            self.traces.append(trace)
            self.by_example.setdefault(trace.info["example_id"], []).append(trace)
            self.progress.add(trace)
            for sink in self.sinks:
                sink.finished(trace)
            if self.plan.otel is not None:  # given the line just written: its spans are made from it
                self.plan.otel.finished(trace, line)  # type: ignore[call-arg]

    async def finished_together(self, trace: Trace) -> None:
        """`finished` for the rollouts that end in the same turn of the
        event loop, together, in a run with a folder: the first to end
        waits that turn out, then serializes the lines of all of them one
        after another, writes them, and judges their tasks' groups (a group
        is judged only with its lines on disk: `by_example` holds a trace
        once its line is written). A trace's line costs much less CPU
        serialized right after another than after a rollout's own work,
        which has pushed pydantic-core's code and the schemas out of the
        CPU's caches. The others go on at once, and the first writes the
        lines even when it is cancelled while it waits."""
        if self.trace_file is None or self.plan.concurrency == 1:  # no line, or none can join: no turn to wait
            return self.finished([trace])
        if self.batch is not None:
            self.batch.append(trace)
            return
        self.batch = batch = [trace]
        try:
            await asyncio.sleep(0)  # the rollouts that end in this turn of the loop join
        finally:
            self.batch = None
            self.finished(batch)
        for example_id in {t.info["example_id"]: None for t in batch}:
            await self.judge(example_id)

    def _watch_run(self) -> None:
        """The live file (with a run folder) and the watchers in this process
        hear of each rollout's start, phases, turns and end."""
        plan = self.plan
        if plan.folder is not None:
            self.live = LiveWriter(plan.folder.path / LIVE)
            self.sinks.append(self.live)
        for watcher in plan.watchers:
            for trace in self.finished_before:
                watcher.finished(trace)
        self.sinks.extend(plan.watchers)
        # OTel's sink hears begin, finished (with the trace's line) and end
        # only: not in self.sinks, which every phase and turn is told to. Not
        # given the replay above: what an earlier run finished was sent then.
        self.hearing = [sink for sink in self.sinks if sink is not self.live]
        if not self.sinks and plan.otel is None:
            return
        info = run_info(plan.run_id, len(self.todo) + len(self.finished_before), plan.agent.limits.model_dump(),
                        plan.agent.timeouts.agent)
        for sink in self.sinks if plan.otel is None else [*self.sinks, plan.otel]:
            sink.begin(info)
        if isinstance(plan.backend, _LocalBackend):
            plan.backend.watch = self._watch_rollout

    def _watch_rollout(self, rollout: Any) -> None:
        rollout_id = rollout.trace.info["rollout_id"]
        if self.live is not None:
            # The live file reads the rollout's state when it writes (a few
            # times a second), not at each event: no event is made for it.
            self.live.follow(rollout_id, functools.partial(_progress_of, rollout))
        sinks = self.hearing
        if not sinks:
            return

        def on_event(event: Any) -> None:
            kind = event.kind
            if kind == "phase_start":
                for sink in sinks:
                    sink.phase(rollout_id, event.data["phase"])
            elif kind == "turn":
                trace = rollout.trace
                for sink in sinks:
                    sink.turn(rollout_id, trace.num_turns, trace.num_total_tokens, rollout.agent_time)

        rollout.subscribe(on_event, ("phase_start", "turn"))

    async def worker(self, pending: Iterator[tuple[Task, int]]) -> None:
        # Workers pull from one shared iterator, so at most `concurrency`
        # rollouts are in flight and no task waits behind a slow sibling.
        plan = self.plan
        for task, repeat in pending:
            info = _rollout_info(task, repeat, plan.run_id)
            for sink in self.sinks:
                sink.started(info["rollout_id"])
            trace = await plan.backend.run(task, info)
            await self.finished_together(trace)
            await self.judge(task.key)

    async def run_workers(self) -> None:
        pending = iter(self.todo)
        workers = [asyncio.ensure_future(self.worker(pending)) for _ in range(min(self.plan.concurrency, len(self.todo)))]
        try:
            await asyncio.gather(*workers)
        except BaseException:
            # Cancelled or interrupted: no new work, and the rollouts in flight
            # abort (each worker's rollout aborts on cancellation). Finished
            # traces are already on disk. A worker is cancelled once only: the
            # gather already cancelled them all if it was cancelled itself,
            # and a second cancellation would cut a rollout's abort short.
            for worker in workers:
                if not worker.done() and not worker.cancelling():
                    worker.cancel()
            await finish(asyncio.gather(*workers, return_exceptions=True))
            raise

    async def execute(self) -> EvalResult:
        plan, folder = self.plan, self.plan.folder
        if folder is not None:
            # Its tables are written as it goes; a resume builds first what they miss (bar as the run's).
            self.trace_file = TraceLog(folder.path / TRACES, progress=None if plan.progress else False)
            if plan.scorers:
                self.group_file = open(folder.path / GROUPS, "a", encoding="utf-8")
        started = False
        status = "failed"
        try:
            await plan.backend.start(plan.agent, plan.concurrency, plan.user)
            started = True
            self.progress = _Progress(plan.progress, len(self.todo) + len(self.finished_before), self.finished_before)
            self._watch_run()
            for task in plan.tasks:  # groups an earlier run completed but died before judging
                await self.judge(task.key)
            await self.run_workers()
            status = "done"
        except (asyncio.CancelledError, KeyboardInterrupt):
            status = "interrupted"
            where = f" in {folder.path}; continue with resume=True" if folder else ""
            log.warning("evaluation interrupted: %d rollouts finished and kept%s", len(self.traces), where)
            raise
        finally:
            self.progress.close()
            try:
                for sink in self.sinks if plan.otel is None else [*self.sinks, plan.otel]:
                    sink.end(status)
            finally:  # a sink that fails at the end still leaves the workers stopped and the files closed
                if started:
                    await asyncio.shield(plan.backend.stop())
                if self.trace_file is not None:
                    # its last part builds on while the run returns (an open of the run waits for it)
                    self.trace_file.close(wait=False)
                for file in (self.group_file, self.user_file):
                    if file is not None:
                        file.close()
        return EvalResult(self.traces, latest(self.groups), out=folder.path if folder else None, manifest=plan.manifest,
                          user_traces=self.user_traces)


async def execute_plan(plan: _Plan) -> EvalResult:
    # The run folder is touched here, when the evaluation really starts, and
    # not while planning: an `rk.evaluate_async(...)` awaitable that is never
    # awaited must not leave a manifest behind, or the next run on the same
    # out= would be refused as "already holds a run".
    if plan.starts:
        if not isinstance(plan.backend, _LocalBackend):
            raise _BadValue("continuations from a fork run on the local backend only (their prefixes stay in this process)")
        plan.backend.starts = plan.starts
    if plan.out is not None:
        plan.folder = prepare_folder(plan.out, plan.manifest, plan.resume)
        plan.manifest = plan.folder.manifest
    # Each model's price looked up once for the run, not at each rollout's
    # open; the heap the run starts with left out of its full collections.
    with run_rates(), older_heap_left_alone():
        return await _Run(plan).execute()


def evaluate_async(
    agent: Agent,
    tasks: Iterable[Task] | Task,
    *,
    repeats: int | None = None,
    concurrency: int = 32,
    out: str | os.PathLike[str] | None = None,
    resume: bool = False,
    backend: Any = "local",
    progress: bool = True,
    group_scorers: Any = None,
    user: Any = None,
    otel: Any = None,
) -> _Pending:
    """The async form of `evaluate` (same arguments): `result = await
    rk.evaluate_async(...)` in async code and notebook cells. The
    evaluation starts when awaited (a coroutine: `asyncio.run`,
    `create_task` and `gather` take it too); until then a
    `rk.notebook.RunMonitor(it)` can watch it. Arguments are checked at once."""
    plan = plan_run(
        agent, tasks, repeats=repeats, concurrency=concurrency, out=out, resume=resume,
        backend=backend, progress=progress, group_scorers=group_scorers, user=user, otel=otel,
    )
    return _Pending(execute_plan(plan), plan)


def evaluate(
    agent: Agent, tasks: Iterable[Task] | Task, *, repeats: int | None = None, concurrency: int = 32,
    out: str | os.PathLike[str] | None = None, resume: bool = False, backend: Any = "local",
    progress: bool = True, group_scorers: Any = None, user: Any = None, otel: Any = None,
) -> Any:
    """Run every task `repeats` times, at most `concurrency` rollouts at once.
    `repeats` defaults to the task list's own (`rk.tasks_from` of an inspect
    task gives its `epochs`), else 1.

    - `out=DIR` writes a run folder: each trace is appended to DIR/traces.jsonl
      the moment it finishes; `resume=True` continues the run in DIR,
      skipping every (task, repeat) already there.
    - `backend="ray"` (or `rollkit.runs.ray_backend.RayBackend(address=...)`) runs
      the rollouts on a Ray cluster; everything else behaves the same.
    - `group_scorers`: functions of one task's traces (a list, or a dict of
      name -> function), run once all its repeats are done, e.g.
      `[pass_at_k(1), best_of_n()]`; results in `EvalResult.groups`.
    - `user`: who speaks between segments (rollkit.core.users), a `rk.User`
      for every rollout or a function of the task that makes one; each
      rollout is then a conversation that runs until the user is done (or
      a stop, a limit, `RolloutLimits(max_user_turns=...)`). An AgentUser's
      own traces are `EvalResult.user_traces` and DIR/user_traces.jsonl.
    - `progress=False` turns the tqdm bar off.
    - `rk.evaluate(..., monitor=True)` (the notebook layer's form,
      rollkit.notebook.running) displays a `rk.notebook.RunMonitor` over the
      run instead of the bar. With `out=DIR` the run also writes
      DIR/live.jsonl, which `rollkit view DIR` follows from elsewhere.
    - `otel="http://HOST:PORT/v1/traces"` sends each rollout, as it
      finishes, as one OpenTelemetry trace of GenAI spans to that OTLP/HTTP
      collector (Phoenix, Langfuse, a Collector...); an
      `rollkit.interop.exports.otel.OtelExporter` gives more options (headers,
      content). A collector that does not take them is a warning at the end.

    It runs to the end and returns an `EvalResult`. In async code and
    notebook cells (where an event loop runs) write `result = await
    rk.evaluate_async(...)`, the async form: one spelling per idea, the sync
    name blocks, the `_async` one is awaited. Called where an event loop
    runs, `rk.evaluate` raises a UsageError naming `rk.evaluate_async`.
    Arguments are checked at once either way
    (`EvaluateArgumentError`, also a ValueError or TypeError); the run
    folder is written only once the evaluation runs. Ctrl-C stops new work,
    aborts the rollouts in flight and keeps every finished trace in the run
    folder. From sync code, SIGINT and SIGTERM are handled through the event
    loop even when the process inherited SIGINT as ignored (a `&` job of a
    script): the first aborts the run and raises KeyboardInterrupt
    (SystemExit(143) for SIGTERM) once the cleanup is done, a second kills
    the programs still running at once, a third stops waiting
    (rollkit.runs.interrupts).
    """
    pending = evaluate_async(
        agent, tasks, repeats=repeats, concurrency=concurrency, out=out, resume=resume, backend=backend,
        progress=progress, group_scorers=group_scorers, user=user, otel=otel,
    )
    return run_to_end(pending)


def run_to_end(pending: _Pending) -> EvalResult:
    """Run an `evaluate_async` awaitable to its end from sync code, as
    `evaluate` does (a watcher attached first sees all of it)."""
    return interrupts.run_sync(pending._coroutine, what="evaluation", called="rk.evaluate(...)",
                               instead="result = await rk.evaluate_async(...)")


class _Pending(interrupts.Awaiting[EvalResult]):
    """What `evaluate_async` returns: await it. Its repr says so, for the notebook
    user who forgot the `await`."""

    def __init__(self, coroutine: Any, plan: _Plan | None = None) -> None:
        super().__init__(coroutine)
        self.plan_run = plan

    def attach(self, watcher: RunSink) -> None:
        """Have `watcher` (a rollkit.core.events.RunSink, e.g. a RunState) hear of this run as it
        goes, like its live file; before it is awaited only."""
        if self.plan_run is None:
            raise RuntimeError("this evaluation cannot be watched")
        self.plan_run.watchers.append(watcher)

    _HINT = "await it: result = await rk.evaluate_async(...)"

    def __repr__(self) -> str:
        return f"<rollkit evaluation, not started: {self._HINT}>"

    def __getattr__(self, name: str) -> Any:
        # e.g. `rk.evaluate(...).summary()` in a notebook: say what to do
        # instead of a bare "'_Pending' object has no attribute".
        if name.startswith("__"):
            raise AttributeError(name)  # protocol probes (copy, pickle, ...) get the plain answer
        raise AttributeError(f"no attribute {name!r}: this evaluation has not run yet; {self._HINT}")

