"""Filters a user types (rollkit.tables.filters): `where=` of rk.export, the
run browser's filter and search boxes. Each forbidden kind is tried on a real
run folder and refused with a UsageError naming the expression and what is
at fault; nothing outside the run is read or written; `has_error` and
`is_truncated` select what an export's rows say; run.sql stays the owner's."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest

import rollkit as rk
from rollkit.core.agent import RolloutLimits
from rollkit.examples.arithmetic import arithmetic_tasks, demo_agent
from rollkit.tables.filters import check_expression

SECRET_TEXT = "rollkit-filter-secret-7d1f"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A run of four rollouts and one cut by its turn limit, and a file of the
    machine's (outside the run) no filter may read."""
    base = tmp_path_factory.mktemp("filters")
    folder = base / "run"
    rk.evaluate(demo_agent(), arithmetic_tasks(4), progress=False, out=folder)
    cut = asyncio.run(demo_agent(limits=RolloutLimits(max_turns=1)).run(arithmetic_tasks(1)[0]))
    with open(folder / "traces.jsonl", "a") as out:
        out.write(cut.model_dump_json() + "\n")
    (base / "secret.txt").write_text(SECRET_TEXT)
    (base / "secret.csv").write_text(f"a\n{SECRET_TEXT}\n")
    return rk.open_run(folder), base


FORBIDDEN = [
    # (the filter, what the UsageError must say)
    ("(select count(*) from read_text('{base}/secret.txt')) > 0", "calls table function read_text()"),
    ("exists (select 1 from read_csv('{base}/secret.csv'))", "calls table function read_csv()"),
    ("exists (select 1 from glob('{base}/*'))", "calls table function glob()"),
    ("(select count(*) from read_parquet('{base}/x.parquet')) > 0", "calls table function read_parquet()"),
    ("id in (select value from duckdb_settings())", "calls table function duckdb_settings()"),
    ("(select count(*) from range(10)) > 0", "calls table function range()"),
    ("reward = 1; copy rollouts to '{base}/out.csv'", "is not one SQL expression"),
    ("reward = 1; attach '{base}/x.db'", "is not one SQL expression"),
    ("reward = 1; install httpfs", "is not one SQL expression"),
    ("reward = 1; load httpfs", "is not one SQL expression"),
    ("reward = 1; set enable_external_access = true", "is not one SQL expression"),
    ("1) from rollouts where (1", "is not one SQL expression"),
    ("1) from rollouts, read_text('{base}/secret.txt') where (1", "is not one SQL expression"),
    ("reward = 1 -- and more", "is not one SQL expression"),
    ("exists (select 1 from secret_table)", "reads table 'secret_table', which is not one of the run's tables"),
    ("no_such_column > 1", "names column 'no_such_column', which the run does not have; its columns are id,"),
    ("getenv('HOME') = ''", "calls getenv(), which DuckDB does not have"),
    ("cast(task_key as integer) > 0", "Conversion Error: Could not convert string"),
    ("", "a filter is an SQL expression over the run's columns as text"),
]


@pytest.mark.parametrize("expression, says", FORBIDDEN, ids=[f[1][:40] + " " + f[0][:30] for f in FORBIDDEN])
def test_each_forbidden_kind_is_a_usage_error_naming_it(run, expression, says, tmp_path):
    lazy, base = run
    expression = expression.format(base=base)
    with pytest.raises(rk.UsageError) as caught:
        rk.export(lazy, tmp_path / "rows.parquet", format="sft", where=expression)
    message = str(caught.value)
    assert message.startswith(f"rk.export: filter {expression.strip()!r}" if expression else "rk.export: a filter")
    assert says in message
    assert not (base / "out.csv").exists() and not (base / "x.db").exists()
    assert list(tmp_path.iterdir()) == []


def test_the_locked_connection_itself_refuses_files_settings_and_extensions(run):
    """Behind the parse check: what DuckDB itself refuses on the filter's
    connection (a check that missed a spelling would still read nothing)."""
    lazy, base = run
    con = lazy.filter_connection("rollouts")  # the run keeps it (callers do not close it)
    for statement, refused in [
        (f"select * from read_text('{base}/secret.txt')", "disabled by configuration"),
        (f"copy (select 1) to '{base}/out.csv'", "disabled by configuration"),
        (f"attach '{base}/x.db'", "disabled by configuration"),
        ("install httpfs", "disabled by configuration"),
        ("load httpfs", "disabled"),
        ("set enable_external_access = true", "the configuration has been locked"),
        ("set memory_limit = '100GB'", "the configuration has been locked"),
        ("reset lock_configuration", "locked"),
    ]:
        with pytest.raises(Exception, match=refused):
            con.execute(statement)
    assert con.execute("select count(*) from rollouts").fetchone()[0] == 5  # the run's own tables: readable
    assert sorted(p.name for p in base.iterdir()) == ["run", "secret.csv", "secret.txt"]


def test_has_error_and_is_truncated_select_what_the_export_rows_say(run, tmp_path):
    lazy, _ = run
    rows = [json.loads(line) for line in rk.export(lazy, tmp_path / "all.jsonl", format="sft").read_text().splitlines()]
    truncated = {r["id"] for r in rows if r["is_truncated"]}
    assert len(truncated) == 1 and len(rows) == 5  # the rollout cut by max_turns
    for flag in ("is_truncated", "not is_truncated", "has_error", "not has_error"):
        chosen = rk.export(lazy, tmp_path / f"{flag}.jsonl", format="sft", where=flag).read_text().splitlines()
        column, negated = flag.split()[-1], flag.startswith("not")
        assert {json.loads(line)["id"] for line in chosen} == {r["id"] for r in rows if r[column] != negated}


def test_a_filter_past_its_time_or_memory_limit_is_stopped_and_named(run):
    lazy, _ = run
    # 23 messages: 23**9 (1.8e12) rows to count, hours of work; interrupted at 0.2 s.
    endless = "(select count(*) from " + ", ".join(f"messages m{i}" for i in range(9)) + ") > 0"
    with pytest.raises(rk.UsageError, match=r"ran longer than its time limit \(0.2 s\)"):
        lazy.where(endless, "id", who="rk.export", seconds=0.2)
    hungry = "(select length(string_agg(repeat(content, 20000), '')) from messages, range(1)) > 0"
    with pytest.raises(rk.UsageError, match="needs more than its memory limit|calls table function range"):
        lazy.where(hungry, "id", who="rk.export", memory_limit="16MB", seconds=600)
    hungry = "(select length(string_agg(repeat(m.content || a.content, 2000), '')) from messages m, messages a) > 0"
    with pytest.raises(rk.UsageError, match="needs more than its memory limit"):  # not the time limit, under load
        lazy.where(hungry, "id", who="rk.export", memory_limit="16MB", seconds=600)


def test_the_run_browser_filter_and_search_run_locked(run):
    pytest.importorskip("ipywidgets")
    from rollkit.notebook.runbrowser import RunBrowser

    lazy, base = run
    browser = RunBrowser(lazy)
    browser.where(f"(select count(*) from read_text('{base}/secret.txt')) > 0")
    assert "calls table function read_text()" in browser.status.value
    assert SECRET_TEXT not in browser.status.value
    browser.where("is_truncated")
    assert browser.total == 1
    browser.where("")
    browser.search("4")
    assert browser.total >= 1


def test_run_sql_stays_the_owners_full_duckdb(run):
    lazy, base = run
    frame = lazy.sql(f"select content from read_text('{base}/secret.txt')")
    assert frame["content"].tolist() == [SECRET_TEXT]
    assert "owner's full DuckDB" in type(lazy).sql.__doc__


def test_a_checked_expression_is_returned_stripped():
    assert check_expression("  reward = 1 ", "test") == "reward = 1"


FIXTURES = Path(__file__).parent / "fixtures"
# Every format rollkit imports, by the writer that sets a stop or a limit:
# inspect (message limits), verifiers (is_truncated), tau2 (max_steps),
# swe-agent and mini-swe-agent (exit statuses), harbor (ATIF).
_SOURCES = sorted({next(iter(sorted(folder.rglob(pattern))))
                   for folder, pattern in ((FIXTURES / "inspect" / "real", "*.eval"), (FIXTURES / "inspect", "*.json"),
                                           (FIXTURES / "verifiers", "*.jsonl"), (FIXTURES / "tau2", "*.json"),
                                           (FIXTURES / "swe-agent", "*.traj"), (FIXTURES / "mini-swe-agent", "*.json"),
                                           (FIXTURES / "harbor", "*.json"))
                   if any(folder.rglob(pattern))} | set((FIXTURES / "verifiers").rglob("results.jsonl")))


@pytest.mark.parametrize("source", _SOURCES, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_the_flags_in_where_agree_with_the_export_rows_over_every_format(source, tmp_path):
    """The flags are written twice (the export's Python, the filter's SQL):
    over a file of every format, `where=` selects exactly the rows that say so."""
    copy = tmp_path / source.name
    shutil.copyfile(source, copy)
    rows = [json.loads(line) for line in
            rk.export(copy, tmp_path / "all.jsonl", format="sft").read_text().splitlines()]
    for flag in ("has_error", "is_truncated"):
        chosen = rk.export(copy, tmp_path / f"{flag}.jsonl", format="sft", where=flag).read_text().splitlines()
        assert sorted(json.loads(line)["id"] for line in chosen) == sorted(r["id"] for r in rows if r[flag]), flag
