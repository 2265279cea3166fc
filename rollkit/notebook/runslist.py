"""The runs list of `rollkit view FOLDER` when FOLDER holds runs: `RunsList`.

`RunsList(folder, link=...)` shows one row per run in the folder
(rollkit.tables.runfolder.runs_in: run folders, A/B test folders, trace files
of any format rk.load reads): its name, when it started, its model, tasks,
rollouts, mean reward with its 95% interval, cost and reward per dollar, and
status, newest first. It reads the folder again every `poll_every` seconds
on the kernel's event loop (`refresh()` does one step by hand): a run that
starts appears, a running one counts up and says when it finished. Each
name links to its run's page and two pickers make the link that compares two
runs: the addresses are `link(names)`'s (the page of `rollkit view`,
rollkit.notebook.viewpage, puts the runs in its URL).

A run folder still running when first seen is followed as the run
monitor follows it (rollkit.runs.live.FolderFollower: only the lines new
since the last read); one already finished (its live.jsonl ends on its
final line) is summed up from its tables with SQL (rollkit.tables.lazyrun:
the follower reads every line in Python, far too slow for a big run),
again only when its traces.jsonl changed. A trace file is read
again only when it changed. Everything a run wrote
(names, models, messages) is escaped before it becomes HTML. It reads runs
only.
"""

from __future__ import annotations

import asyncio
import html
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import ipywidgets as widgets

from ..runs.live import FolderFollower, RunState
from ..tables.runfolder import MANIFEST, TRACES, runs_in
from ..analysis.stats import run_cost, t_critical
from .sync_loop import kernel_loop
from .display import STYLE

__all__ = ["RunsList", "RunRow"]


@dataclass
class RunRow:
    """One run as the list shows it."""

    name: str
    started: float  # seconds since the epoch: the manifest's start, else the file's time
    model: str
    tasks: int | None
    done: int
    total: int | None
    reward: float | None
    half: float | None  # half width of the reward's 95% interval
    cost: float | None
    per_dollar: float | None
    status: str


def _status(state: RunState) -> str:
    if state.final is None:
        status = "waiting" if state.done == 0 and not state.in_flight else "running"
    else:
        status = "finished" if state.final == "done" else str(state.final)
    return " · ".join([status, *state.messages])


def _row_of_state(name: str, state: RunState, started: float, model: str, tasks: int | None) -> RunRow:
    reward = next(((mean, half) for signal, mean, half, _, _ in state.signal_means() if signal == "reward"), (None, None))
    cost = state.run_cost()
    return RunRow(name, started, model, tasks, state.done, state.total, reward[0], reward[1], cost.total,
                  cost.reward_per_dollar, _status(state))


def _final_status(folder: Path) -> str | None:
    """The status a finished run folder ended on ("done", ...), from the last
    line of its live.jsonl ("done" for a run written before live.jsonl);
    None while it runs."""
    live = folder / "live.jsonl"
    if not live.exists():
        return "done" if (folder / TRACES).exists() else None
    with open(live, "rb") as f:
        f.seek(max(0, live.stat().st_size - 4096))
        lines = f.read().splitlines()
    try:
        last = json.loads(lines[-1]) if lines else {}
    except ValueError:
        return None  # a line being written
    return str(last.get("status", "done")) if isinstance(last, dict) and last.get("e") == "final" else None


def _summed(folder: Path, status: str) -> RunState:
    """A finished run's numbers from its rollouts table, as a RunState
    (the list's one shape of a run's numbers)."""
    from ..tables.lazyrun import open_run

    run = open_run(folder)
    n, mean, variance = run.sql("select count(reward) as n, avg(reward) as mean, var_samp(reward) as v from rollouts "
                                "where reward is not null and not isnan(reward)").iloc[0]
    table = run.arrow("rollouts")
    state = _Summed(done=len(run), total=len(run), final=status)
    state.cost_of = run_cost(table.column("cost_usd").to_pylist(), table.column("reward").to_pylist())
    half = None if n < 2 else t_critical(int(n) - 1) * (max(0.0, float(variance)) / n) ** 0.5
    state.reward = (None if n == 0 else float(mean), half, int(n))
    return state


@dataclass
class _Summed(RunState):
    """A RunState whose reward and cost were summed up in SQL (`_summed`)."""

    reward: tuple[float | None, float | None, int] = (None, None, 0)
    cost_of: Any = None

    def signal_means(self) -> list[tuple[str, float | None, float | None, int, int]]:
        return [("reward", self.reward[0], self.reward[1], self.reward[2], self.done)]

    def run_cost(self) -> Any:
        return self.cost_of


class _Folder:
    """A run folder (or an A/B test's): followed while it runs, summed up from its tables once finished."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.state = RunState()
        self.follower: FolderFollower | None = None
        self.manifest: dict[str, Any] = {}
        self.seen: tuple[float, int] | None = None  # traces.jsonl when last summed up

    def _read(self) -> None:
        if self.follower is None:
            status = _final_status(self.path)
            if status is not None and (self.path / TRACES).exists():
                stat = (self.path / TRACES).stat()
                if self.seen == (stat.st_mtime, stat.st_size):
                    return
                try:
                    self.state, self.seen = _summed(self.path, status), (stat.st_mtime, stat.st_size)
                    return
                except (ValueError, OSError):  # no tables to be had (no whole line yet): the follower says why
                    self.state = RunState()
            self.follower = FolderFollower(self.path, self.state)  # running: followed from now on
        self.follower.poll()

    def row(self) -> RunRow:
        self._read()
        if not self.manifest:
            try:
                self.manifest = json.loads((self.path / MANIFEST).read_text(encoding="utf-8"))
            except (OSError, ValueError):
                pass
        try:
            started = datetime.fromisoformat(self.manifest["started"]).timestamp()
        except (KeyError, TypeError, ValueError):
            started = self.path.stat().st_mtime
        agent = self.manifest.get("agent") if isinstance(self.manifest.get("agent"), dict) else {}
        tasks = (self.manifest.get("tasks") or {}).get("count") if isinstance(self.manifest.get("tasks"), dict) else None
        if (self.path / "ab.jsonl").exists() and not (self.path / "traces.jsonl").exists():
            return RunRow(self.path.name, started, "", None, 0, None, None, None, None, None, "A/B test")
        return _row_of_state(self.path.name, self.state, started, str(agent.get("model") or ""), tasks)


class _File:
    """A trace file, read again when its size or time changes."""

    def __init__(self, path: Path, name: str) -> None:
        self.path = path
        self.name = name
        self.seen: tuple[float, int] | None = None
        self.last: RunRow | None = None

    def row(self) -> RunRow:
        stat = self.path.stat()
        if self.last is not None and self.seen == (stat.st_mtime, stat.st_size):
            return self.last
        import warnings

        from ..core.store import load

        self.seen = (stat.st_mtime, stat.st_size)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # a torn last line: the list shows what is whole
                traces = load(self.path)
        except (ModuleNotFoundError, ValueError) as exc:  # ValueError: TraceFileError among them
            self.last = RunRow(self.name, stat.st_mtime, "", None, 0, None, None, None, None, None,
                               f"not readable: {exc}")
            return self.last
        state = RunState()
        state.begin({"total": len(traces)})
        for trace in traces:
            state.finished(trace)
        state.end("done")
        models = sorted({str(t.agent.get("model") or "") for t in traces} - {""})
        tasks = len({t.info.get("example_id", t.task.key) for t in traces})
        self.last = _row_of_state(self.name, state, stat.st_mtime, ", ".join(models[:2]), tasks)
        return self.last


def _when(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _cells(row: RunRow, href: str) -> list[str]:
    reward = "–" if row.reward is None else f"{row.reward:.3f}" + ("" if row.half is None else f" ± {row.half:.3f}")
    cost = "–" if row.cost is None else f"${row.cost:,.4f}"
    per = "–" if row.per_dollar is None else f"{row.per_dollar:.4g}"
    rollouts = f"{row.done:,}" + ("" if row.total is None else f" / {row.total:,}")
    link = f'<a class="rk-run-link" href="{html.escape(href, quote=True)}">{html.escape(row.name)}</a>'
    plain = [_when(row.started), row.model, "–" if row.tasks is None else f"{row.tasks:,}", rollouts, reward, cost, per,
             row.status]
    return [link, *(html.escape(text) for text in plain)]


_HEAD = ("run", "started", "model", "tasks", "rollouts", "mean reward ± 95%", "cost", "reward per $", "status")


class RunsList(widgets.VBox):
    """See the module docstring. `rows` holds what the table shows, newest first."""

    def __init__(self, folder: str | os.PathLike[str], *, link: Callable[[Sequence[str]], str],
                 poll_every: float = 1.0, follow: bool = True) -> None:
        self.folder = Path(folder)
        self.link = link
        self.poll_every = poll_every
        self.rows: list[RunRow] = []
        self._sources: dict[str, _Folder | _File] = {}
        self._task: asyncio.Task[None] | None = None
        self.table = widgets.HTML()
        self.table.add_class("rk-runs")
        self.pick_a = widgets.Dropdown(description="compare A", layout=widgets.Layout(width="auto"))
        self.pick_b = widgets.Dropdown(description="with B", layout=widgets.Layout(width="auto"))
        self.pick_a.add_class("rk-runs-pick-a")
        self.pick_b.add_class("rk-runs-pick-b")
        self.compare_link = widgets.HTML()
        self.compare_link.add_class("rk-runs-compare")
        for pick in (self.pick_a, self.pick_b):
            pick.observe(lambda _: self._draw_compare_link(), names="value")
        super().__init__([widgets.HTML(STYLE + f"<h3>runs in {html.escape(str(self.folder))}</h3>"), self.table,
                          widgets.HBox([self.pick_a, self.pick_b, self.compare_link])])
        self.add_class("rk-runs-list")
        self.refresh()
        if follow:
            self.start()

    def refresh(self) -> bool:
        """Read the folder again (new runs, runs that moved on); True when the list changed."""
        found = runs_in(self.folder)
        for name in list(self._sources):
            if name not in found:
                del self._sources[name]
        for name, path in found.items():
            if name not in self._sources:
                self._sources[name] = _Folder(path) if path.is_dir() else _File(path, name)
        rows = []
        for source in self._sources.values():
            try:
                rows.append(source.row())
            except FileNotFoundError:
                continue  # removed between the listing and the read: gone from the next listing
        rows.sort(key=lambda r: (-r.started, r.name))
        changed = rows != self.rows
        self.rows = rows
        if changed:
            self._draw()
        return changed

    def _draw(self) -> None:
        head = "".join(f"<th>{html.escape(t)}</th>" for t in _HEAD)
        body = "".join(f'<tr data-run="{html.escape(row.name, quote=True)}">'
                       + "".join(f"<td>{cell}</td>" for cell in _cells(row, self.link([row.name]))) + "</tr>"
                       for row in self.rows)
        empty = "" if self.rows else f'<tr><td colspan="{len(_HEAD)}"><i>no run here yet</i></td></tr>'
        self.table.value = f'<table class="rk-table rk-runs-table"><thead><tr>{head}</tr></thead><tbody>{body}{empty}</tbody></table>'
        names = [row.name for row in self.rows]
        if list(self.pick_a.options) != names:
            chosen = (self.pick_a.value, self.pick_b.value)
            self.pick_a.options, self.pick_b.options = names, names
            self.pick_a.value = chosen[0] if chosen[0] in names else (names[1] if len(names) > 1 else None)
            self.pick_b.value = chosen[1] if chosen[1] in names else (names[0] if names else None)
        self._draw_compare_link()

    def _draw_compare_link(self) -> None:
        a, b = self.pick_a.value, self.pick_b.value
        if a is None or b is None or a == b:
            self.compare_link.value = "<i>pick two runs to compare</i>"
            return
        href = html.escape(self.link([a, b]), quote=True)
        self.compare_link.value = f'<a class="rk-compare-link" href="{href}">compare {html.escape(a)} and {html.escape(b)}</a>'

    # ---- following ------------------------------------------------------------------
    def start(self) -> None:
        """Read the folder every `poll_every` seconds on the running event loop until `stop()`."""
        if self._task is not None:
            return
        loop = kernel_loop()
        if loop is None:
            return  # no loop: refresh() by hand
        self._task = loop.create_task(self._follow())

    async def _follow(self) -> None:
        while True:
            await asyncio.sleep(self.poll_every)
            self.refresh()

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    def close(self) -> None:
        self.stop()
        super().close()
