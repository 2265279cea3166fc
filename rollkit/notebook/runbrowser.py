"""The run browser: a run of any size, a page at a time.

`RunBrowser(run)` (what `rk.notebook.TraceBrowser` gives for a lazy run, a
search's hits, a run folder or a trace file path) shows one page of rollouts from the run's
columnar tables (rollkit.tables.lazyrun), never the whole run in memory: a
filter over any column (a SQL condition, e.g. `reward < 1 and turns > 3`,
run on a locked connection that reads the run's tables only:
rollkit.tables.filters),
a text search over every message, a sort column and direction, and pages.
Picking a row parses that one trace from its byte offset and shows it
(`display.trace_html`); for a search, the matching messages come first with
each match highlighted, the text escaped before it becomes HTML.

`RunGrid(run, link=...)` is the same engine (the same filter, search, sort
and paging queries: one `RunBrowser._query`) showing its page as an HTML
table whose every rollout is a link to its own address (what `link(id,
searched)` gives: the page of `rollkit view`, rollkit.notebook.viewpage, puts the run
and the rollout in its URL). The status line says what the user typed to
search, never the regular expression built from it.

It reads runs only.
"""

from __future__ import annotations

import html
from typing import Any

import ipywidgets as widgets

from ..core.trace import Trace
from ..tables.filters import check_expression, run_filtered
from ..tables.lazyrun import Hits, LazyRun, highlight, open_run
from .display import trace_html
from .outputs import show
from ..core.dependencies import pa

__all__ = ["RunBrowser", "RunGrid", "matches_html"]

_WHO = "the run browser's filter"
_SHOWN = ("task_key", "ok", "reward", "turns", "total_tokens", "stop", "id")
_HEADER = f"{'task':<16} {'ok':<4} {'reward':>6} {'turns':>5} {'tokens':>7} {'stop':<18} trace"


def _label(row: dict[str, Any]) -> str:
    value = row["reward"]
    reward = "   –  " if value is None or value != value else f"{value:6.3f}"
    ok = {True: "ok  ", False: "FAIL"}.get(row["ok"], "open")
    stop = str(row["stop"] or "")[:18]
    return (f"{str(row['task_key'])[:16]:<16} {ok} {reward} {row['turns']:>5} "
            f"{row['total_tokens']:>7} {stop:<18} {row['id']}")


class RunBrowser(widgets.VBox):
    """Pages through a lazy run's rollouts; `select(row)` shows one (its row
    in `run.rollouts()`), `search(...)`, `where(...)` and `sort(...)` do
    from code what the boxes do."""

    def __init__(self, run: Any, *, page_size: int = 50, plots: bool = False, ids: list[str] | None = None,
                 highlight: Any = None) -> None:
        typed = None if highlight is None else getattr(highlight, "pattern", str(highlight))
        if isinstance(run, Hits):  # a search's matches, highlighted
            typed = typed if highlight is not None else run.typed
            run, ids, highlight = run.run, run.ids if ids is None else ids, highlight or run.pattern
        if not isinstance(run, LazyRun):
            run = open_run(run)
        if not isinstance(page_size, int) or page_size < 1:
            raise ValueError(f"page_size must be a whole number >= 1, got {page_size!r}")
        self.run = run
        self.page_size = page_size
        self._plots = plots
        self._pattern = highlight
        self._typed = typed
        self._phrase: str | None = None  # the phrase searched for (not a regular expression)
        self._page = 0
        self._where = ""
        self._order = ("_row", False)
        self._ids_table = None
        if ids is not None:
            self._restrict(ids)
        self.filter = widgets.Text(placeholder="filter (SQL over any column): reward < 1 and task_key like 'arith-1%'",
                                   continuous_update=False, layout=widgets.Layout(width="60%"))
        self.filter.observe(lambda change: self.where(change["new"]), names="value")
        self.filter.add_class("rk-filter")
        self.search_box = widgets.Text(placeholder="search the messages' text…", continuous_update=False,
                                       layout=widgets.Layout(width="38%"))
        self.search_box.observe(lambda change: self.search(change["new"]), names="value")
        self.search_box.add_class("rk-search")
        columns = [c for c in run.arrow_schema("rollouts") if not c.startswith("_")]
        self.sort_by = widgets.Dropdown(options=["(run order)", *columns], value="(run order)", description="sort")
        self.descending = widgets.ToggleButton(value=False, description="desc")
        self.sort_by.add_class("rk-sort")
        self.descending.add_class("rk-sort-desc")
        self.sort_by.observe(self._on_sort, names="value")
        self.descending.observe(self._on_sort, names="value")
        self.prev = widgets.Button(description="◀ prev")
        self.next = widgets.Button(description="next ▶")
        self.prev.on_click(lambda _: self.page(self._page - 1))
        self.next.on_click(lambda _: self.page(self._page + 1))
        self.prev.add_class("rk-prev")
        self.next.add_class("rk-next")
        self.status = widgets.HTML()
        self.status.add_class("rk-browse-status")
        self.table = widgets.Select(rows=min(15, page_size), layout=widgets.Layout(width="100%"))
        self.table.add_class("rk-trace-table")
        self.table.observe(self._on_pick, names="value")
        self.table.layout.font_family = "monospace"
        self.matches = widgets.HTML()
        self.detail = widgets.HTML()
        self.detail.add_class("rk-trace-detail")
        self.figures = widgets.Output()
        header = widgets.HTML(f"<pre style='margin:0;font-size:12px'>{html.escape(_HEADER)}</pre>")
        super().__init__([
            widgets.HBox([self.filter, self.search_box]),
            widgets.HBox([self.sort_by, self.descending, self.prev, self.next]),
            self.status, header, self.table, self.matches, self.detail, self.figures,
        ])
        self._show()

    # ---- what is listed ---------------------------------------------------------
    def _restrict(self, ids: list[str] | None) -> None:
        if ids is None:
            self._ids_table = None
            return
        self._ids_table = pa.table({"id": pa.array(list(ids), pa.string())})

    def _condition(self) -> str:
        parts = []
        if self._ids_table is not None:
            parts.append("id in (select id from _rk_hits)")
        if self._where:
            parts.append(f"({check_expression(self._where, _WHO)})")
        return " and ".join(parts) or "true"

    def _query(self) -> tuple[int, list[dict[str, Any]]]:
        column, descending = self._order
        order = "_ordinal" if column == "_row" else '"' + column.replace('"', '""') + '"'
        direction = "desc" if descending else "asc"
        where = self._condition()
        # A locked connection over the tables as they are now (a table not
        # built yet is built; a file that grew is read anew): the filter a
        # user typed reads the run's tables and nothing else.
        con = self.run.filter_connection("rollouts " + where)
        if self._ids_table is not None:
            con.register("_rk_hits", self._ids_table)
        ask = {"who": _WHO, "columns": self.run.filter_columns()}
        total = run_filtered(con, f"select count(*) as n from rollouts where {where}", self._where, **ask)
        # The row number in the run: files one after the other (_set, then _ordinal).
        rows = ("(select *, _ordinal as _row from rollouts)" if len(self.run.paths) == 1 else
                "(select *, row_number() over (order by _set, _ordinal) - 1 as _row from rollouts)")
        page = run_filtered(con, f"select {', '.join(_SHOWN)}, _row from {rows} where {where} order by {order} "
                                 f"{direction} nulls last, _row limit {self.page_size} "
                                 f"offset {self._page * self.page_size}", self._where, **ask)
        # Rows as dicts straight from Arrow: a page needs no DataFrame (pandas alone took a second to import).
        return int(total.column("n")[0].as_py()), page.to_pylist()

    def _show(self) -> None:
        try:
            total, rows = self._query()
        except Exception as exc:  # a filter that is refused or fails (a UsageError naming why): say so, keep the page
            self.status.value = f"<span style='color:#b00'>filter not understood: {html.escape(str(exc))}</span>"
            return
        pages = max(1, -(-total // self.page_size))
        if self._page >= pages:
            self._page = pages - 1
            total, rows = self._query()
        self.total = total
        # What the user typed, not the escaped regular expression run.search built from a phrase.
        self.status.value = (f"<b>{total:,}</b> of {len(self.run):,} rollouts · page {self._page + 1} of {pages:,}"
                             + (f" · matching <code class='rk-searched'>{html.escape(self._typed)}</code>"
                                if self._typed is not None else ""))
        self._render(rows)

    def _render(self, rows: list[dict[str, Any]]) -> None:
        """Show one page's rows (a RunGrid shows them otherwise)."""
        self.table.options = [(_label(row), int(row["_row"])) for row in rows]

    def where(self, condition: str) -> None:
        """List only the rollouts where the SQL `condition` holds ("" for all)."""
        self._where = condition.strip()
        self._page = 0
        self._show()

    def search(self, phrase: str | None = None, *, re: str | None = None) -> None:
        """List only the rollouts whose messages match (run.search); "" lists all again."""
        if not phrase and not re:
            self._pattern = self._typed = self._phrase = None
            self._restrict(None)
        else:
            hits = self.run.search(phrase or None, re=re, locked=True)
            self._pattern, self._typed, self._phrase = hits.pattern, phrase or re, phrase or None
            self._restrict(hits.ids)
        self._page = 0
        self._show()

    def sort(self, column: str | None, descending: bool = False) -> None:
        """Sort by a column of the rollouts table (None: run order)."""
        self._order = ("_row" if column in (None, "(run order)") else column, descending)
        self._page = 0
        self._show()

    def _on_sort(self, change: dict[str, Any]) -> None:
        self.sort(self.sort_by.value, self.descending.value)

    def page(self, number: int) -> None:
        """Show page `number` (from 0), clamped to the pages there are."""
        self._page = max(0, number)
        self._show()

    # ---- one trace --------------------------------------------------------------
    def select(self, row: int) -> Trace:
        """Show the rollout at `row` of the run (its row in run.rollouts())."""
        trace = self.run[row]
        if row not in [value for _, value in self.table.options]:
            self.table.options = [*self.table.options, (f"(picked) {trace.task.key} {trace.id}", row)]
        self.table.value = row
        return trace

    @property
    def selected(self) -> Trace | None:
        return None if self.table.value is None else self.run[self.table.value]

    def _on_pick(self, change: dict[str, Any]) -> None:
        row = change["new"]
        show(self.figures)  # first: a pick whose trace or plots fail shows no other trace's plots
        if row is None:
            self.detail.value = self.matches.value = ""
            return
        trace = self.run[row]
        self.matches.value = matches_html(trace, self._pattern)
        self.detail.value = trace_html(trace)
        if self._plots:
            from .plots import budget_burn, phase_timeline

            show(self.figures, budget_burn(trace), phase_timeline(trace))



def matches_html(trace: Trace, pattern: Any) -> str:
    """The messages of `trace` that match `pattern` (a compiled regular
    expression; None: no search), each match in <mark>, all escaped."""
    if pattern is None:
        return ""
    items = []
    for index, message in enumerate(trace.messages):
        text = message.content if isinstance(message.content, str) else ""
        calls = getattr(message, "tool_calls", None) or []
        text = " ".join(filter(None, [text, ", ".join(f"{c.name}({c.arguments})" for c in calls)]))
        if pattern.search(text):
            items.append(f"<li><b>{index} {html.escape(message.role)}</b>: {highlight(text, pattern)}</li>")
    return f"<div class='rk-matches'><b>matches</b><ul>{''.join(items)}</ul></div>" if items else ""


_GRID_COLUMNS = (("task", "task_key", False), ("ok", "ok", False), ("reward", "reward", True), ("turns", "turns", True),
                 ("tokens", "total_tokens", True), ("stop", "stop", False), ("rollout", "id", False))


def _grid_cell(row: dict[str, Any], column: str) -> str:
    value = row[column]
    if column == "ok":
        return {True: "ok", False: "FAIL"}.get(value, "open")
    if column == "reward":
        return "–" if value is None or value != value else f"{value:.3f}"
    return "" if value is None or value != value else str(value)


class RunGrid(RunBrowser):
    """The run browser's engine showing a page as an HTML table; each
    rollout's id links to `link(rollout_id, searched)` (searched: the
    phrase the user searched for, None when none; see the module docstring)."""

    def __init__(self, run: Any, *, link: Any, page_size: int = 25, **kwargs: Any) -> None:
        self._link = link
        self.grid = widgets.HTML()
        self.grid.add_class("rk-grid")
        super().__init__(run, page_size=page_size, **kwargs)
        self.children = [*self.children[:3], self.grid]
        self.add_class("rk-run-grid")

    def _render(self, rows: list[dict[str, Any]]) -> None:
        head = "".join(f'<th class="{"rk-num" if numeric else ""}">{title}</th>' for title, _, numeric in _GRID_COLUMNS)
        body = []
        for row in rows:
            cells = []
            for _, column, numeric in _GRID_COLUMNS:
                text = html.escape(_grid_cell(row, column))
                if column == "id":
                    href = self._link(row["id"], self._phrase)
                    text = f'<a class="rk-rollout-link" href="{html.escape(href, quote=True)}">{text}</a>'
                cells.append(f'<td class="{"rk-num" if numeric else ""}">{text}</td>')
            body.append(f'<tr data-row="{int(row["_row"])}">{"".join(cells)}</tr>')
        self.grid.value = (f'<table class="rk-table rk-grid-table"><thead><tr>{head}</tr></thead>'
                           f'<tbody>{"".join(body)}</tbody></table>')
