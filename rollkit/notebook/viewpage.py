"""The page `rollkit view DIR...` serves: `view(paths)`.

One section per run given: its heading, what follows it (a run folder's
`RunMonitor`, an A/B test folder's `ABMonitor`, a finished trace file's
summary tables and a `TraceBrowser`) and, for a run folder or trace file,
two charts drawn from its columnar tables (rollkit.tables.lazyrun): how its
rewards are spread (`plots.reward_distribution`) and where its time went,
phase by phase (`plots.phase_timing`); a folder still being written gets
them again when its run finishes.

For two runs, their comparison (`rk.compare`, drawn at once when both are
finished, again on the button): a forest plot of B - A per signal with its
interval and B's wins / ties / losses beside it (`plots.forest`), the same
numbers as an HTML table, and the flips, the tasks B won and lost on the
headline signal; a flip's button opens the two transcripts side by side.

A rollout's own page shows its timeline beside its transcript
(rollkit.notebook.timeline). Each run also gets its rollouts' grid (`RunGrid`, the run browser's
engine: paged, sorted, filtered and searched on the server, from the run's
tables), every rollout in it a link to its own address.

The page reads its address (Voila hands the kernel the URL's query as
QUERY_STRING; `Address`): `run=NAME` (once or twice) shows those runs,
`run=NAME&rollout=ID` that one rollout; the token the page was opened
with stays in every link, so an address can be sent as it is. A single
path that holds runs (rollkit.tables.runfolder.runs_in) shows the list of
its runs (`RunsList`) until one or two are picked. A name in the URL is
looked up among the runs given, never read as a path.

Charts are plotly figures drawn by the page's plotly renderer (one copy of
plotly.js, served by the viewer): a `FigureWidget` carries its own copy
of plotly.js to the browser, and a page of several took longer to start
than anywidget waits ("[anywidget] Failed to initialize model").

Everything a model or task wrote is escaped before it becomes HTML (plots
escape their own labels). It reads runs only: the comparison's numbers are
rollkit.analysis.compare's, the transcripts `display.trace_html`'s.
"""

from __future__ import annotations

import html
import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import ipywidgets as widgets

from ..core.trace import Trace
from .browser import TraceBrowser
from .display import STYLE, error_html, trace_html
from .monitor import RunMonitor
from ..core.dependencies import pa, pc

__all__ = ["view", "RunCharts", "CompareView", "Address", "MAX_FLIPS", "named_paths", "summary_html",
           "comparison_html", "costs_html", "flips",
           "number_text"]

MAX_FLIPS = 50  # flips listed per side (won, lost); the rest are counted

PAGE_STYLE = """<style>
.rk-view h3 {margin: 18px 0 6px 0;}
.rk-view .rk-table td.rk-num, .rk-view .rk-table th.rk-num {text-align: right; font-variant-numeric: tabular-nums;}
.rk-view .rk-table th {font-weight: 600; border-bottom: 1px solid rgba(0,0,0,.3);}
.rk-view .rk-table caption {text-align: left; caption-side: top; padding-bottom: 4px; opacity: .8;}
.rk-flips .rk-flip-cell {padding: 2px 6px; border-bottom: 1px solid rgba(0,0,0,.08); font-variant-numeric: tabular-nums;}
.rk-flips .rk-flip-head {font-weight: 600; border-bottom: 1px solid rgba(0,0,0,.3);}
.rk-side {overflow-x: auto;}
.rk-view a, .rk-runs-list a {color: #0645ad; text-decoration: underline;}
</style>"""


def number_text(value: float | None, digits: int = 3) -> str:
    """A number as the page's tables show it; a dash for none."""
    return "–" if value is None else f"{value:.{digits}f}"


def _cell(value: Any, numeric: bool = False) -> str:
    return f'<td class="rk-num">{html.escape(str(value))}</td>' if numeric else f"<td>{html.escape(str(value))}</td>"


def _table(head: list[tuple[str, bool]], rows: Iterable[list[Any]], *, caption: str = "", cls: str = "") -> str:
    """An HTML table, every cell escaped; `head` is (title, numeric) per column."""
    th = "".join(f'<th class="rk-num">{html.escape(t)}</th>' if n else f"<th>{html.escape(t)}</th>" for t, n in head)
    body = "".join("<tr>" + "".join(_cell(v, n) for v, (_, n) in zip(row, head)) + "</tr>" for row in rows)
    cap = f"<caption>{html.escape(caption)}</caption>" if caption else ""
    return f'<table class="rk-table {cls}">{cap}<thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>'


def chart(figure: Any, cls: str) -> widgets.Output:
    """`figure` (plotly) as the page's plotly renderer draws it, in an
    Output of class `cls` (see the module docstring: no FigureWidget)."""
    out = widgets.Output()
    out.add_class(cls)
    out.outputs = ({"output_type": "display_data", "metadata": {},
                    "data": {"application/vnd.plotly.v1+json": json.loads(figure.to_json()),
                             "text/plain": f"<plotly figure: {cls}>"}},)
    return out


# ---- one run ---------------------------------------------------------------------------


class RunCharts(widgets.VBox):
    """A run's reward distribution and phase timing, from its tables. `draw()`
    reads the run again (a folder still being written has more by now)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.figures: list[Any] = []
        self.note = widgets.HTML()
        super().__init__([self.note])
        self.add_class("rk-run-charts")
        self.draw()

    def draw(self) -> None:
        from ..tables.lazyrun import open_run
        from .plots import phase_timing, reward_distribution

        try:
            run = open_run(self.path)
            frame = run.rollouts() if len(run) else None
        except FileNotFoundError:
            frame = None  # a folder whose run has not written a trace yet
        except ValueError as exc:  # a torn or unreadable source: said, not raised
            self.note.value = error_html(str(exc))
            self.figures, self.children = [], [self.note]
            return
        if frame is None or not len(frame):
            self.note.value = "<i>no finished rollout yet: the charts come when the run ends</i>"
            self.figures, self.children = [], [self.note]
            return
        self.note.value = ""
        # Two abreast on a page 1280 px wide, one under the other on a narrower one.
        self.figures = [reward_distribution(frame), phase_timing(frame)]
        for fig in self.figures:
            fig.update_layout(width=600)
        charts = [chart(self.figures[0], "rk-chart-rewards"), chart(self.figures[1], "rk-chart-phases")]
        self.children = [widgets.HBox(charts, layout=widgets.Layout(width="100%", flex_flow="row wrap"))]


def summary_html(traces: Iterable[Trace]) -> str:
    """Finished traces' numbers as HTML tables: their counts, each
    signal's mean with its interval, their cost and reward per dollar, and
    their outcomes (the monitor's tables). Reads `traces` once."""
    from ..runs.live import RunState

    state = RunState()
    state.begin({"total": None})
    tasks = set()
    for trace in traces:
        state.finished(trace)
        tasks.add(trace.info.get("example_id", trace.task.key))
    state.end("done")
    return (f"<p><b>rollouts: {state.done} over {len(tasks)} tasks</b></p>"
            f'<p class="rk-cost">{html.escape(state.run_cost().text())}</p>'
            f"{RunMonitor._signals_html(state)}{RunMonitor._outcomes_html(state)}")


def _trace_file_view(path: Path, copy: Path | None = None) -> tuple[widgets.Widget, bool]:
    """A finished trace file (rollkit's or another tool's): its summary
    tables and a TraceBrowser over its traces, read from `copy` (rollkit's
    JSON lines) when the file was read already, and whether it could be
    read; one that cannot be read says why."""
    from ..core.store import load

    try:
        traces = load(copy or path)
    except (FileNotFoundError, ModuleNotFoundError, ValueError) as exc:  # ValueError: TraceFileError among them
        return widgets.HTML(error_html(str(exc))), False
    summary = widgets.HTML(summary_html(traces))
    summary.add_class("rk-file-summary")
    return widgets.VBox([summary, TraceBrowser(traces)]), True


def _folder_view(folder: Path, poll_every: float) -> widgets.Widget:
    """A run folder's monitor, or an A/B test's interval when the folder is one
    (rk.ab_test(..., out=DIR) writes DIR/ab.jsonl)."""
    from ..runs.ab import AB_LOG

    if (folder / AB_LOG).exists():
        from .decide import ABMonitor

        return ABMonitor.follow(folder, poll_every=poll_every)
    return RunMonitor(folder, poll_every=poll_every)


# ---- two runs ---------------------------------------------------------------------------


def comparison_html(c: Any) -> str:
    """rk.compare's result `c` as the page's table of signals, with what it paired and left out."""
    unit = c._unit
    head = [("signal", False), ("mean A", True), ("n A", True), ("mean B", True), ("n B", True), ("B - A", True),
            ("95% interval", True), ("p", True), ("W / T / L", True), ("missing A / B / both", True)]
    rows = [[s.signal, number_text(s.mean_a), f"{s.scored_a}/{s.total_a}", number_text(s.mean_b),
             f"{s.scored_b}/{s.total_b}",
             number_text(s.diff), "–" if s.low is None else f"[{s.low:.3f}, {s.high:.3f}]", number_text(s.p_value),
             f"{s.wins} / {s.ties} / {s.losses}", f"{s.missing_a} / {s.missing_b} / {s.missing_both}"]
            for s in c.signals]
    paired = " (by task: repeats averaged)" if c.by == "task" else " (by task and repeat)"
    caption = (f"A = {c.label_a}, B = {c.label_b}: {c.common} {unit}s paired{paired}; B - A with a bootstrap 95% "
               f"interval ({c.resamples} resamples); p: {c.test}")
    notes = [f"n = {unit}s with a value / {unit}s in the run; W / T / L = B better / equal / worse, per {unit}"]
    for which, keys in (("A", c.only_a), ("B", c.only_b)):
        if keys:
            notes.append(f"only in {which}: {len(keys)} {unit}s, not paired: " + ", ".join(keys[:5])
                         + (f", ... ({len(keys)} in all)" if len(keys) > 5 else ""))
    notes += [f"note: {n}" for n in c.notes]
    return (_table(head, rows, caption=caption, cls="rk-compare-signals")
            + "".join(f"<p>{html.escape(n)}</p>" for n in notes))


def costs_html(c: Any) -> str:
    """Each run's cost and reward per dollar (rk.compare's cost_a, cost_b):
    dashes and why where a rollout's price is unknown."""
    head = [("run", False), ("cost", True), ("per rollout", True), ("rollouts", True), ("reward per dollar", True)]
    rows, unknown = [], []
    for which, label, cost in (("A", c.label_a, c.cost_a), ("B", c.label_b, c.cost_b)):
        if cost is None:
            continue
        rows.append([f"{which}: {label}", "–" if cost.total is None else f"${cost.total:,.4f}",
                     "–" if cost.mean is None else f"${cost.mean:,.6f}", cost.rollouts,
                     "–" if cost.reward_per_dollar is None else f"{cost.reward_per_dollar:.4g}"])
        if cost.total is None:
            unknown.append(f"{which}: {cost.unpriced} of {cost.rollouts} rollouts have no price (give one with rk.prices)")
    return (_table(head, rows, caption="cost (over every rollout of each run)", cls="rk-compare-costs")
            + "".join(f"<p>{html.escape(n)}</p>" for n in unknown))


def _row_of(run: Any, row: dict[str, Any]) -> int | None:
    """The first row of `run` (a lazy run) of the comparison row's task (and
    repeat, when paired by repeat); None when it has none."""
    table = run.arrow("rollouts")
    if row["repeat"] is None:  # by task (the page's pairing): the task's first rollout, found in Arrow
        keys = pc.coalesce(table.column("example_id").cast(pa.large_string()), table.column("task_key"))
        found = pc.index(keys, row["example_id"]).as_py()
        return None if found < 0 else found
    examples = table.column("example_id").to_pylist()
    tasks = table.column("task_key").to_pylist()
    repeats = table.column("repeat").to_pylist() if "repeat" in table.column_names else [None] * len(tasks)
    seen: dict[str, int] = {}
    for i, (example, task, repeat) in enumerate(zip(examples, tasks, repeats)):
        key = str(task if example is None else example)
        if repeat is None:  # no batch ids: the task's n-th rollout, as rk.compare pairs them
            repeat = seen.get(key, 0)
            seen[key] = repeat + 1
        if key == row["example_id"] and repeat == row["repeat"]:
            return i
    return None


def flips(c: Any) -> tuple[str, list[dict[str, Any]], list[dict[str, Any]]]:
    """rk.compare's result `c`: its headline signal (the first compared) and
    the pairs B won and lost on it, the largest differences first."""
    compared = [s.signal for s in c.signals if s.diff is not None]
    if not compared:
        return "", [], []
    signal = compared[0]
    rows = [r for r in c.rows if r["signal"] == signal]
    won = sorted((r for r in rows if r["outcome"] == "win"), key=lambda r: (-r["diff"], r["key"]))
    lost = sorted((r for r in rows if r["outcome"] == "loss"), key=lambda r: (r["diff"], r["key"]))
    return signal, won, lost


class CompareView(widgets.VBox):
    """Two runs compared: the button (re)computes; `result` holds the forest
    plot, the table and the flips; `open_pair(key)` shows a flip's two transcripts
    side by side (what its button does) and returns them."""

    def __init__(self, a: Path, b: Path, *, ready: Callable[[], bool] = lambda: True,
                 labels: tuple[str, str] | None = None) -> None:
        self.paths = (a, b)
        self.labels = labels or (str(a), str(b))
        self.comparison: Any = None
        self.runs: tuple[Any, Any] | None = None
        self.button = widgets.Button(description="compare the two runs", layout=widgets.Layout(width="auto"))
        self.button.add_class("rk-compare-button")
        self.button.on_click(lambda _: self.compare())
        self.result = widgets.HTML()
        self.result.add_class("rk-compare-table")
        self.costs = widgets.HTML()
        self.costs.add_class("rk-compare-cost")
        self.figure: Any = None
        self.chart = widgets.Box()
        self.chart.add_class("rk-compare-chart")
        self.flips = widgets.VBox()
        self.flips.add_class("rk-flips")
        self.side = widgets.HBox(layout=widgets.Layout(width="100%"))
        self.side.add_class("rk-side-by-side")
        super().__init__([widgets.HTML("<h3>comparison: B - A</h3>"), self.button, self.chart, self.result,
                          self.costs, self.flips, self.side])
        self.add_class("rk-compare")
        if ready():
            self.compare()

    def compare(self) -> Any:
        """Compare the two runs now (read again: a live run has more by now)."""
        from ..analysis.compare import CompareError, compare
        from ..tables.lazyrun import open_run
        from .plots import forest

        a, b = self.paths
        self.side.children = []
        try:
            self.runs = (open_run(a), open_run(b))
            self.comparison = compare(*self.runs, labels=self.labels)
        except (CompareError, FileNotFoundError, ValueError) as exc:  # e.g. no task in common, a run still empty
            self.comparison = None
            self.result.value, self.costs.value = error_html(str(exc)), ""
            self.chart.children, self.flips.children = [], []
            return None
        self.figure = forest(self.comparison).update_layout(width=900)
        self.chart.children = [chart(self.figure, "rk-chart-forest")]
        self.result.value = comparison_html(self.comparison)
        self.costs.value = costs_html(self.comparison)
        self.flips.children = self._flip_widgets()
        return self.comparison

    def flipped(self) -> tuple[str, list[dict[str, Any]], list[dict[str, Any]]]:
        """The headline signal (the first compared) and its pairs B won and
        lost, the largest differences first (`flips`)."""
        return flips(self.comparison)

    def _flip_widgets(self) -> list[widgets.Widget]:
        signal, won, lost = self.flipped()
        unit = self.comparison._unit
        parts: list[widgets.Widget] = []
        for title, rows, kind in ((f"{unit}s B won on {signal}", won, "won"), (f"{unit}s B lost on {signal}", lost, "lost")):
            heading = widgets.HTML(f"<b>{html.escape(title)}: {len(rows)}</b>")
            if not rows:
                parts.append(heading)
                continue
            cells: list[widgets.Widget] = []
            for text in (unit, "A", "B", "B - A", ""):
                cell = widgets.HTML(html.escape(text))
                cell.add_class("rk-flip-cell")
                cell.add_class("rk-flip-head")
                cells.append(cell)
            for row in rows[:MAX_FLIPS]:
                for text in (row["key"], number_text(row["a"]), number_text(row["b"]), f"{row['diff']:+.3f}"):
                    cell = widgets.HTML(html.escape(str(text)))
                    cell.add_class("rk-flip-cell")
                    cells.append(cell)
                button = widgets.Button(description="open A | B", layout=widgets.Layout(width="auto"))
                button.add_class("rk-flip-open")
                button.on_click(lambda _, key=row["key"]: self.open_pair(key))
                cells.append(button)
            grid = widgets.GridBox(cells, layout=widgets.Layout(
                grid_template_columns="minmax(160px, 280px) 80px 80px 80px 120px", width="680px"))
            grid.add_class(f"rk-flips-{kind}")
            more = len(rows) - MAX_FLIPS
            parts += [heading, grid] + ([widgets.HTML(f"<p>and {more} more</p>")] if more > 0 else [])
        return parts

    def open_pair(self, key: str) -> tuple[Trace | None, Trace | None]:
        """Show the transcripts of `key` (a task, or task#repeat) in A and in B
        side by side; a run without that task says so in its half."""
        if self.comparison is None or self.runs is None:
            raise RuntimeError("compare the two runs first (compare())")
        rows = [r for r in self.comparison.rows if r["key"] == key]
        if not rows:
            raise KeyError(f"no {self.comparison._unit} {key!r} in this comparison")
        found: list[Trace | None] = []
        halves = []
        for which, run, label in (("A", self.runs[0], self.comparison.label_a), ("B", self.runs[1], self.comparison.label_b)):
            index = _row_of(run, rows[0])
            trace = None if index is None else run[index]
            found.append(trace)
            title = f"<h4>{which}: {html.escape(label)} · {html.escape(key)}</h4>"
            body = trace_html(trace) if trace is not None else error_html(f"run {which} has no rollout of {key}")
            half = widgets.HTML(title + body, layout=widgets.Layout(width="50%"))
            half.add_class("rk-side")
            half.add_class(f"rk-side-{which.lower()}")
            halves.append(half)
        self.side.children = halves
        return found[0], found[1]


# ---- the page ---------------------------------------------------------------------------


class Address:
    """The page's address: the runs (`runs`, names), the rollout (`rollout`,
    an id) and the phrase searched for (`searched`) its URL names, and the
    token it was opened with, which `url(...)` keeps in every link it makes."""

    def __init__(self, query: str = "") -> None:
        from urllib.parse import parse_qs

        params = parse_qs(query)
        self.token = params.get("token", [None])[0]
        self.runs: list[str] = params.get("run", [])
        self.rollout: str | None = params.get("rollout", [None])[0]
        self.searched: str | None = params.get("q", [None])[0]

    def url(self, runs: Sequence[str] = (), rollout: str | None = None, searched: str | None = None) -> str:
        """A link to the runs named (none: the runs list) or to one rollout
        of the first, its messages matching `searched` (a phrase) shown first."""
        from urllib.parse import urlencode

        pairs = ([("token", self.token)] if self.token else []) + [("run", name) for name in runs]
        pairs += [("rollout", rollout)] if rollout is not None else []
        return "?" + urlencode(pairs + ([("q", searched)] if searched else []))


def named_paths(paths: list[Path]) -> dict[str, Path]:
    """Each path given by a name for the URL: its own, numbered when two share one."""
    named: dict[str, Path] = {}
    for path in paths:
        name, n = path.name or str(path), 2
        while name in named:
            name, n = f"{path.name} ({n})", n + 1
        named[name] = path
    return named


def _grid(source: Path, link: Callable[..., str]) -> widgets.Widget:
    """A run's rollouts grid; a run with no finished rollout yet says so."""
    from ..tables.lazyrun import open_run
    from .runbrowser import RunGrid

    try:
        run = open_run(source)
    except FileNotFoundError:
        return widgets.HTML("<i>no finished rollout yet: the rollouts' grid comes when the run ends</i>")
    except ValueError as exc:
        return widgets.HTML(error_html(str(exc)))
    return RunGrid(run, link=link)


def _rollout_page(name: str, source: Path, rollout: str, address: Address) -> list[widgets.Widget]:
    """One rollout's page: its timeline beside its transcript
    (rollkit.notebook.timeline), and a link back to its run."""
    import re

    from ..tables.lazyrun import open_run
    from .runbrowser import matches_html
    from .timeline import rollout_html

    back = f'<p><a class="rk-back" href="{html.escape(address.url([name]), quote=True)}">all of run {html.escape(name)}</a></p>'
    try:
        trace = open_run(source).trace(rollout)
    except (KeyError, FileNotFoundError, ValueError) as exc:
        body = error_html(f"run {name} has no rollout {rollout!r} ({exc})" if isinstance(exc, KeyError) else str(exc))
    else:
        searched = address.searched and re.compile(re.escape(address.searched), re.IGNORECASE)
        body = matches_html(trace, searched or None) + rollout_html(trace)
    part = widgets.HTML(f"<h3>rollout {html.escape(rollout)} of run {html.escape(name)}</h3>{back}{body}")
    part.add_class("rk-rollout-page")
    return [part]


def _run_section(name: str, folder: Path, source: Path, address: Address, poll_every: float) -> tuple[list[widgets.Widget], bool]:
    """A run's heading, monitor (or summary and browser), charts and grid; and whether it is finished."""
    heading = widgets.HTML(f"<h3>{html.escape(str(folder))}</h3>")
    link = lambda rollout, searched=None: address.url([name], rollout, searched)  # noqa: E731
    if folder.is_file():
        part, readable = _trace_file_view(folder, source if source != folder else None)
        extra = [RunCharts(source), _grid(source, link)] if readable else []
        return [heading, part, *extra], readable
    part = _folder_view(folder, poll_every)
    if not isinstance(part, RunMonitor):  # an A/B test
        return [heading, part], False
    charts, grid = RunCharts(folder), widgets.VBox([_grid(folder, link)])
    part.on_final.append(charts.draw)
    part.on_final.append(lambda: setattr(grid, "children", [_grid(folder, link)]))
    return [heading, part, charts, grid], part.state.final is not None


def view(paths: Iterable[str | os.PathLike[str]], *, poll_every: float = 0.5,
         read: Mapping[str, str] | None = None, query: str | None = None) -> widgets.VBox:
    """The page of `rollkit view DIR...` (see the module docstring): per
    path, its heading, its monitor (or summary and browser), its charts and
    its grid; for two, their comparison; for one folder of runs, the list
    of its runs. `query` is the page's URL query (default: QUERY_STRING, as
    Voila sets it). `read` maps a trace file already read to a rollkit JSON
    lines file of its traces, used instead of it (the `rollkit view`
    command reads each file once, to refuse a bad one before its server
    starts, and hands the traces over so)."""
    from ..tables.runfolder import runs_in
    from .runslist import RunsList

    address = Address(os.environ.get("QUERY_STRING", "") if query is None else query)
    given = [Path(p) for p in paths]
    read = read or {}
    listed = runs_in(given[0]) if len(given) == 1 else {}
    named = listed or named_paths(given)
    parts: list[widgets.Widget] = [widgets.HTML(STYLE + PAGE_STYLE)]
    if listed and not address.runs:
        parts.append(RunsList(given[0], link=address.url, poll_every=max(poll_every, 1.0)))
        return _page(parts)
    if listed:
        parts.append(widgets.HTML(f'<p><a class="rk-back" href="{html.escape(address.url(), quote=True)}">all runs</a></p>'))
    chosen = address.runs[:2] or list(named)
    unknown = [name for name in chosen if name not in named]
    if unknown:
        known = ", ".join(named) or "none"
        parts.append(widgets.HTML(error_html(f"no run named {unknown[0]!r} here; the runs: {known}")))
        return _page(parts)
    sources = {name: Path(read.get(str(named[name]), named[name])) for name in chosen}
    if address.rollout is not None:
        return _page(parts + _rollout_page(chosen[0], sources[chosen[0]], address.rollout, address))
    finished = []
    for name in chosen:
        section, done = _run_section(name, named[name], sources[name], address, poll_every)
        parts += section
        finished.append(done)
    if len(chosen) == 2:
        a, b = chosen
        parts.append(CompareView(sources[a], sources[b], ready=lambda: all(finished),
                                 labels=(str(named[a]), str(named[b]))))
    return _page(parts)


def _page(parts: list[widgets.Widget]) -> widgets.VBox:
    page = widgets.VBox(parts)
    page.add_class("rk-view")
    return page
