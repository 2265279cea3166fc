"""A static copy of runs as the viewer shows them: `export(paths, out)`.

`rollkit view RUN... --export DIR` writes DIR: `index.html`, the list of
the runs exported; for two runs, `runs/compare.html`, their comparison
over the whole runs (the served page's forest plot and tables);
`runs/K.html` per run, its summary tables, its two charts
(how its rewards are spread, where its time went: rollkit.notebook.plots)
and its grid of rollouts (paged, sorted and filtered in the browser), each
rollout a link to `runs/K/N.html`, its page with its timeline beside its
transcript (rollkit.notebook.timeline). It opens from `file://` with no
server and asks nothing of the network: a browser does not let a page
`fetch()` files next to it there, so the data comes as script files
(`data/*.js`, each setting one global), the page's script and plotly.js
are copied into `assets/`, and the rollout pages are plain HTML.

How much goes in: a run's rollouts, those matching `where` (a filter over
its columns, as the viewer's grid takes: rollkit.tables.filters) and at
most `limit` of them per run. A run with more than `MAX_WHOLE` rollouts,
or whose traces take more than `MAX_TRACE_BYTES`, is refused unless a
filter or a limit is given (`ExportTooLarge`, naming both);
`SIZE_PER_1000` says what rollouts take on disk.

Everything a model, a user, a tool or a task wrote is escaped before it
becomes HTML, and the grid's script writes text only (`textContent`). The
export holds what the runs recorded and nothing of the machine that made it:
no token (the served viewer's is its server's alone), no path above a run.
It reads runs only and writes only inside `out`, which must be new or empty.
"""

from __future__ import annotations

import html
import json
import os
import shutil
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.errors import UsageError

__all__ = ["export", "ExportTooLarge", "Exported", "MAX_WHOLE", "MAX_TRACE_BYTES", "SIZE_PER_1000"]

MAX_WHOLE = 2_000  # rollouts of one run an export takes without --where or --limit
MAX_TRACE_BYTES = 100_000_000  # nor a run whose traces take more (its export: about 4 times that)
# What the refusal tells the user; benchmarks/export_size.py measures it.
SIZE_PER_1000 = "about 14 MB per 1,000 short rollouts, about 4 times the size of their traces"

_GRID_COLUMNS = ("task_key", "ok", "reward", "turns", "total_tokens", "cost_usd", "stop", "id")


class ExportTooLarge(UsageError):
    """A run holds more rollouts (or more bytes of traces) than an export takes whole."""


@dataclass
class Exported:
    """What `export` wrote: `out`, and per run its name and the rollouts taken of how many."""

    out: Path
    runs: list[tuple[str, int, int]] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (run, why): nothing to export yet
    files: int = 0
    bytes: int = 0


def _write(path: Path, text: str, done: Exported) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    done.files += 1
    done.bytes += path.stat().st_size


def _script_data(name: str, value: Any) -> str:
    """A script file setting `window[name]` to `value` (JSON, with every `<`
    written as \\u003c, so no text in it can end a script element)."""
    return f"window.{name} = {json.dumps(value, ensure_ascii=True, allow_nan=False).replace('<', chr(92) + 'u003c')};\n"


def _chosen(name: str, run: Any, where: str | None, limit: int | None) -> list[int]:
    """The rows of `run` to export (see the module docstring)."""
    size = sum(path.stat().st_size for path in run.paths)
    if where is None and limit is None and (len(run) > MAX_WHOLE or size > MAX_TRACE_BYTES):
        raise ExportTooLarge(
            f"run {name} holds {len(run):,} rollouts ({size / 1e6:,.1f} MB of traces), more than an export takes "
            f"whole ({MAX_WHOLE:,} rollouts, {MAX_TRACE_BYTES / 1e6:,.0f} MB; it takes {SIZE_PER_1000}): "
            "pick some with --where (a filter over its columns, e.g. --where 'reward < 1') "
            "or take the first N of each run with --limit N")
    if where is None:
        return list(range(len(run) if limit is None else min(limit, len(run))))
    from ..tables.filters import check_expression, run_filtered

    text = check_expression(where, "--where")
    # The row number in the run: files one after the other (as the viewer's grid numbers them).
    rows = ("(select *, _ordinal as _row from rollouts)" if len(run.paths) == 1 else
            "(select *, row_number() over (order by _set, _ordinal) - 1 as _row from rollouts)")
    query = f"select _row from {rows} where ({text}) order by _row" + ("" if limit is None else f" limit {int(limit)}")
    con = run.filter_connection("rollouts " + text)
    table = run_filtered(con, query, text, who="--where", columns=run.filter_columns())
    return [int(n) for n in table.column("_row").to_pylist()]


def _number(value: Any) -> Any:
    """A grid cell as JSON takes it: NaN and NA become None."""
    if value is None:
        return None
    try:
        if value != value:
            return None
    except (TypeError, ValueError):
        return None
    return value.item() if hasattr(value, "item") else value


def _grid_rows(frame: Any) -> list[list[Any]]:
    columns = [c for c in _GRID_COLUMNS if c in frame.columns]
    return [[_number(v) for v in row] for row in frame[columns].itertuples(index=False, name=None)], columns


def _charts(frame: Any) -> list[Any]:
    from .plots import phase_timing, reward_distribution

    figures = [reward_distribution(frame), phase_timing(frame)]
    return [json.loads(f.update_layout(width=600).to_json()) for f in figures]


_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; font-src 'self' data:">
<title>{title}</title>{style}</head>
<body class="rk-view rk-export">{body}</body></html>
"""

_EXPORT_STYLE = """<style>
body.rk-export {font-family: sans-serif; font-size: 13px; margin: 16px 24px;}
.rk-export a {color: #0645ad;}
.rk-grid-controls {margin: 6px 0;} .rk-grid-controls input {width: 260px;}
.rk-grid-table th {cursor: pointer; user-select: none;}
.rk-num {text-align: right; font-variant-numeric: tabular-nums;}
.rk-charts {display: flex; flex-wrap: wrap; gap: 8px;}
</style>"""


def _page(title: str, body: str, *, depth: int, scripts: Iterable[str] = ()) -> str:
    """An exported HTML page `depth` folders below the export's top, loading `scripts` (paths from the top)."""
    from .display import STYLE

    up = "../" * depth
    tags = "".join(f'<script src="{html.escape(up + s, quote=True)}"></script>' for s in scripts)
    return _PAGE.format(title=html.escape(title), style=STYLE + _EXPORT_STYLE, body=body + tags)


def _rollout_pages(k: int, name: str, run: Any, rows: list[int], out: Path, done: Exported) -> Iterator[Any]:
    """Each rollout's own page: its timeline beside its transcript; yields each trace once written."""
    from .timeline import rollout_html

    for n in rows:
        trace = run[n]
        body = (f'<p><a class="rk-back" href="../{k}.html">all of run {html.escape(name)}</a> · '
                f'<a href="../../index.html">all runs</a></p><h3>rollout {html.escape(trace.id)} of run '
                f"{html.escape(name)}</h3>{rollout_html(trace)}")
        _write(out / "runs" / str(k) / f"{n}.html", _page(f"rollout {trace.id}", body, depth=2), done)
        yield trace


def _summary(frame: Any) -> dict[str, Any]:
    """The runs list's numbers of the rollouts exported."""
    rewards = frame["reward"].dropna() if "reward" in frame.columns else []
    costs = frame["cost_usd"] if "cost_usd" in frame.columns else None
    cost = None if costs is None or costs.isna().any() or not len(costs) else float(costs.sum())
    models = sorted({str(m) for m in frame.get("model", [])} - {"", "None", "nan"})[:2]
    return {"reward": None if not len(rewards) else float(rewards.mean()), "cost": cost, "model": ", ".join(models)}


def _run_page(k: int, name: str, run: Any, rows: list[int], where: str | None, limit: int | None, out: Path,
              done: Exported) -> dict[str, Any]:
    """Run `k`'s page (its rows `rows`), its data script and its rollouts' pages; its row of the runs list."""
    from .viewpage import summary_html

    frame = run.rollouts().iloc[rows].reset_index(drop=True) if rows else run.rollouts().iloc[[]]
    grid, columns = _grid_rows(frame)
    _write(out / "data" / f"run-{k}.js", _script_data(f"RK_RUN_{k}", {
        "columns": columns, "rows": grid, "pages": [f"{n}.html" for n in rows],
        "charts": _charts(frame) if rows else []}), done)
    summary = summary_html(_rollout_pages(k, name, run, rows, out, done))
    taken = f"{len(rows):,} of {len(run):,} rollouts" + (f" where {where}" if where else "")
    taken += f", at most {limit:,}" if limit is not None else ""
    body = (f'<p><a class="rk-back" href="../index.html">all runs</a></p><h3>run {html.escape(name)}</h3>'
            f'<p class="rk-taken">{html.escape(taken)}</p><div class="rk-file-summary">{summary}</div>'
            '<div class="rk-charts" id="rk-charts"></div>'
            f'<div class="rk-run-grid" data-rk-run="RK_RUN_{k}" data-rk-base="{k}/"></div>')
    _write(out / "runs" / f"{k}.html", _page(f"run {name}", body, depth=1, scripts=(
        "assets/plotly.min.js", f"data/run-{k}.js", "assets/viewer.js")), done)
    done.runs.append((name, len(rows), len(run)))
    return {"name": name, "href": f"runs/{k}.html", "taken": len(rows), "total": len(run), **_summary(frame)}


def _run_row(r: dict[str, Any]) -> str:
    reward = "–" if r["reward"] is None else f"{r['reward']:.3f}"
    cost = "–" if r["cost"] is None else f"${r['cost']:,.4f}"
    return (f'<tr data-run="{html.escape(r["name"], quote=True)}"><td><a class="rk-run-link" '
            f'href="{html.escape(r["href"], quote=True)}">{html.escape(r["name"])}</a></td>'
            f'<td>{html.escape(r["model"])}</td><td class="rk-num">{r["taken"]:,} / {r["total"]:,}</td>'
            f'<td class="rk-num">{reward}</td><td class="rk-num">{cost}</td></tr>')


def _index(listed: list[dict[str, Any]], compared: str, out: Path, done: Exported) -> None:
    head = "".join(f"<th>{t}</th>" for t in ("run", "model", "rollouts", "mean reward", "cost"))
    page = (f'<h3>runs</h3><table class="rk-table rk-runs-table"><thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(_run_row(r) for r in listed)}</tbody></table>{compared}"
            "<p><i>exported by rollkit view --export</i></p>")
    _write(out / "index.html", _page("runs", page, depth=0), done)


def _flips_html(c: Any) -> str:
    """The tasks B won and lost on the headline signal, as the served page lists them (without its buttons)."""
    from .viewpage import MAX_FLIPS, flips, number_text

    signal, won, lost = flips(c)
    parts = []
    for title, rows, kind in (("won", won, "won"), ("lost", lost, "lost")):
        body = "".join(f"<tr><td>{html.escape(str(r['key']))}</td><td class=\"rk-num\">{number_text(r['a'])}</td>"
                       f"<td class=\"rk-num\">{number_text(r['b'])}</td><td class=\"rk-num\">{r['diff']:+.3f}</td></tr>"
                       for r in rows[:MAX_FLIPS])
        more = f"<p>and {len(rows) - MAX_FLIPS} more</p>" if len(rows) > MAX_FLIPS else ""
        parts.append(f"<p><b>{html.escape(f'{c._unit}s B {title} on {signal}')}: {len(rows)}</b></p>"
                     f'<table class="rk-table rk-flips-{kind}"><tr><th>{html.escape(c._unit)}</th><th>A</th>'
                     f"<th>B</th><th>B - A</th></tr>{body}</table>{more}")
    return "".join(parts)


def _comparison(runs: dict[str, Any], out: Path, done: Exported) -> str:
    """Two runs exported: their comparison's page, as the served page shows it (over the whole runs);
    the link to it for the runs list, "" when there are not two."""
    if len(runs) != 2:
        return ""
    from ..analysis.compare import CompareError, compare
    from .display import error_html
    from .plots import forest
    from .viewpage import comparison_html, costs_html

    (name_a, a), (name_b, b) = runs.items()
    charts = []
    try:
        c = compare(a, b, labels=(name_a, name_b))
    except (CompareError, ValueError) as exc:  # e.g. no task in common
        tables = error_html(str(exc))
    else:
        tables = comparison_html(c) + costs_html(c) + _flips_html(c)
        charts = [json.loads(forest(c).update_layout(width=900).to_json())]
    _write(out / "data" / "compare.js", _script_data("RK_COMPARE", {"charts": charts}), done)
    body = (f'<p><a class="rk-back" href="../index.html">all runs</a></p><h3>comparison: B - A '
            f"(A = {html.escape(name_a)}, B = {html.escape(name_b)}, over the whole runs)</h3>"
            f'<div class="rk-charts" id="rk-charts"></div><div class="rk-compare-table">{tables}</div>'
            '<div data-rk-run="RK_COMPARE"></div>')
    _write(out / "runs" / "compare.html", _page(f"{name_a} and {name_b}", body, depth=1, scripts=(
        "assets/plotly.min.js", "data/compare.js", "assets/viewer.js")), done)
    return (f'<p><a class="rk-compare-link" href="runs/compare.html">compare {html.escape(name_a)} and '
            f"{html.escape(name_b)}</a></p>")


def _runs(paths: list[Path]) -> dict[str, Path]:
    """The runs to export by name: a folder holding runs gives its runs (rollkit view's list)."""
    from ..tables.runfolder import runs_in
    from .viewpage import named_paths

    listed = runs_in(paths[0]) if len(paths) == 1 else {}
    return listed or named_paths(paths)


def _opened(runs: dict[str, Path]) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """Each run's lazy run; a run with no finished rollout yet, or not readable, is left out, saying why."""
    from ..tables.lazyrun import open_run

    opened, skipped = {}, []
    for name, path in runs.items():
        try:
            opened[name] = open_run(path)
        except FileNotFoundError:  # a run folder whose run has not written a trace yet, an A/B test's folder
            skipped.append((name, "no finished rollout yet"))
        except ValueError as exc:  # a damaged or unreadable trace file: the served page says so too
            skipped.append((name, f"not readable: {exc}"))
    if not opened:
        raise UsageError("no run to export: " + "; ".join(f"{name}: {why}" for name, why in skipped))
    return opened, skipped


def export(paths: Iterable[str | os.PathLike[str]], out: str | os.PathLike[str], *, where: str | None = None,
           limit: int | None = None, read: dict[str, str] | None = None) -> Exported:
    """Write the static export of the runs at `paths` to the folder `out`
    (see the module docstring); what it wrote. Refused before anything is
    written: a run too large to take whole, an `out` that holds files.
    `read` maps a trace file (its resolved path) already read to rollkit's
    JSON lines of its traces, read instead (as `rollkit view` hands them on)."""
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UsageError(f"{out} exists and is not an empty folder: export into a new or empty folder")
    if limit is not None and limit < 1:
        raise UsageError(f"--limit {limit}: give at least 1 rollout per run")
    read = read or {}
    runs = {name: Path(read.get(str(path.resolve()), path)) for name, path in _runs([Path(p) for p in paths]).items()}
    if not runs:
        raise UsageError(f"no run to export in {', '.join(str(p) for p in paths)}")
    opened, skipped = _opened(runs)
    # Every run's rollouts chosen before a file is written: a run too large, a bad filter, refused first.
    chosen = {name: _chosen(name, run, where, limit) for name, run in opened.items()}
    out.mkdir(parents=True, exist_ok=True)
    done = Exported(out, skipped=skipped)
    assets = out / "assets"
    assets.mkdir()
    import plotly

    shutil.copyfile(Path(plotly.__file__).parent / "package_data" / "plotly.min.js", assets / "plotly.min.js")
    _write(assets / "viewer.js", (Path(__file__).parent / "export_viewer.js").read_text(encoding="utf-8"), done)
    listed = [_run_page(k, name, run, chosen[name], where, limit, out, done)
              for k, (name, run) in enumerate(opened.items())]
    _index(listed, _comparison(opened, out, done), out, done)
    done.files += 1
    done.bytes += (assets / "plotly.min.js").stat().st_size
    return done
