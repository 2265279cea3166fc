"""Filters a user types: one SQL expression over a run's columns, run where it can read the run's tables and nothing else.

What it owns: `locked_connection`, a DuckDB connection with views over a
run's Parquet tables and nothing more (external access disabled, only the
run's table files readable, no extension installed or loaded, its
configuration locked, a memory limit); `check_expression`, which refuses
what is not one expression over the run's tables (a second statement, a
table function such as read_text or glob, a table that is not the run's),
naming what is at fault; `run_filtered`, which runs a query holding the
filter there with a time limit, turning every DuckDB error into a
`UsageError` that names the expression and the column or function at
fault; and `FLAGS`, the columns an export's rows show (`has_error`,
`is_truncated`) as SQL over the rollouts table, so a filter may name them.

Who uses it: `where=` of rk.export (rollkit.interop.exports), the run
browser's filter and search boxes (rollkit.notebook.runbrowser), and any
viewer that lets someone type a filter. `run.sql()` and `rollkit sql` are
not filters: they stay the owner's full DuckDB.

It must not know how a run's tables are built (rollkit.tables.lazyrun hands
it the views' SQL and the files they read) or draw anything.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..core.dependencies import duckdb
from ..core.errors import UsageError

__all__ = ["FLAGS", "TABLES", "check_expression", "locked_connection", "run_filtered",
           "MEMORY_LIMIT", "TIME_LIMIT"]

TABLES = ("rollouts", "turns", "calls", "phases", "signals", "messages")
MEMORY_LIMIT = "1GB"
TIME_LIMIT = 30.0  # seconds a filtered query may run
# The flags of an export's row (rollkit.interop.exports.sft.training_row), over
# the rollouts table: the same rules, so `where="is_truncated"` selects the
# rows the export marks so. A stop that names a limit is truncated, as is
# an aborted run or one whose last turn stopped for length.
FLAGS = {
    "has_error": "error_type is not null",
    "is_truncated": ("coalesce(aborted, false) or coalesce(stop_condition like 'max\\_%' escape '\\' "
                     "or stop_condition like '%limit%' or stop_condition like '%truncat%', false) "
                     "or coalesce(_last_finish = 'length', false)"),
}
_LAST_FINISH = ("left join (select id as _f_id, _set as _f_set, arg_max_null(finish_reason, turn) as _last_finish "
                "from turns_base group by all) on _f_id = id and _f_set = _set")
_PARSER: list[Any] = []
_PARSER_LOCK = threading.Lock()
_MISSING_COLUMN = re.compile(r'Referenced column "([^"]+)" not found')
_MISSING_FUNCTION = re.compile(r"(?:Scalar|Table|Aggregate)? ?Function with name (\w+) does not exist", re.I)


def locked_connection(views: Mapping[str, str], files: Iterable[str], *, memory_limit: str = MEMORY_LIMIT) -> Any:
    """A DuckDB connection holding `views` (table -> the SELECT over its
    Parquet files) that may read `files` and nothing else of the machine.
    The rollouts view gains `FLAGS` (and the turns view is named
    `turns_base` underneath, for the last finish reason)."""
    con = duckdb.connect()
    allowed = [str(f) for f in files]
    con.execute("set enable_progress_bar = false")
    if allowed:
        con.execute("set allowed_paths = ?", [allowed])
    for setting in ("autoinstall_known_extensions = false", "autoload_known_extensions = false",
                    "allow_community_extensions = false", f"memory_limit = '{memory_limit}'",
                    "enable_external_access = false"):
        con.execute(f"set {setting}")
    for table, select in views.items():
        if table == "turns":
            con.execute(f"create view turns_base as {select}")
            con.execute("create view turns as select * from turns_base")
        elif table != "rollouts":
            con.execute(f"create view {table} as {select}")
    if "rollouts" in views:
        flags = ", ".join(f"({sql}) as {name}" for name, sql in FLAGS.items())
        source = (f"(select * exclude (_f_id, _f_set) from ({views['rollouts']}) {_LAST_FINISH})" if "turns" in views
                  else f"(select *, null::varchar as _last_finish from ({views['rollouts']}))")
        con.execute(f"create view rollouts as select * exclude (_last_finish), {flags} from {source}")
    con.execute("set lock_configuration = true")
    return con


def _walk(node: Any) -> Iterable[dict[str, Any]]:
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from _walk(value)


def _bare_select(node: dict[str, Any]) -> bool:
    """Whether `node` is `select (<one expression>)` and nothing more (no
    FROM, WHERE or other clause the text's own brackets opened)."""
    return (node.get("type") == "SELECT_NODE" and len(node.get("select_list") or ()) == 1
            and (node.get("from_table") or {}).get("type") == "EMPTY"
            and not any(node.get(k) for k in ("where_clause", "having", "sample", "qualify", "modifiers",
                                               "group_expressions", "group_sets"))
            and not (node.get("cte_map") or {}).get("map"))


def check_expression(expression: str, who: str, tables: Sequence[str] = TABLES) -> str:
    """`expression`, stripped, once it is one SQL expression whose
    subqueries read only `tables`; else a UsageError naming what is at fault."""
    if not isinstance(expression, str) or not expression.strip():
        raise UsageError(f"{who}: a filter is an SQL expression over the run's columns as text, e.g. "
                         f"\"reward < 1 and turns > 3\"; got {expression!r}")
    text = expression.strip()
    with _PARSER_LOCK:
        if not _PARSER:
            _PARSER.append(duckdb.connect())  # parses only: it reads no table (kept: a connection is slow to open)
        found = _PARSER[0].execute("select json_serialize_sql(?)", [f"select ({text})"]).fetchone()[0]
    parsed = json.loads(found)
    statements = parsed.get("statements") or []
    if parsed.get("error") or len(statements) != 1 or not _bare_select(statements[0]["node"]):
        why = parsed.get("error_message") or "it is not one expression"
        raise UsageError(f"{who}: filter {text!r} is not one SQL expression ({why}); write a condition over the "
                         "run's columns, e.g. \"reward < 1 and has_error\" (no ';', no second statement, no comment)")
    for node in _walk(statements[0]["node"]["select_list"]):
        if node.get("type") == "TABLE_FUNCTION":
            name = (node.get("function") or {}).get("function_name", "?")
            raise UsageError(f"{who}: filter {text!r} calls table function {name}(), which a filter may not: "
                             f"a filter reads the run's tables only ({', '.join(tables)})")
        if node.get("type") == "BASE_TABLE" and node.get("table_name", "").lower() not in tables:
            raise UsageError(f"{who}: filter {text!r} reads table {node.get('table_name')!r}, which is not one of "
                             f"the run's tables ({', '.join(tables)})")
    return text


def _fault(exc: Exception, expression: str, who: str, columns: Sequence[str], seconds: float) -> UsageError:
    message = str(exc).split("\n", 1)[0]
    if isinstance(exc, duckdb.InterruptException):
        return UsageError(f"{who}: filter {expression!r} ran longer than its time limit ({seconds:g} s); "
                          "narrow it (a filter over columns is fast; a subquery over messages is not)")
    if isinstance(exc, duckdb.OutOfMemoryException):
        return UsageError(f"{who}: filter {expression!r} needs more than its memory limit: {message}")
    column = _MISSING_COLUMN.search(message)
    if column:
        return UsageError(f"{who}: filter {expression!r} names column {column.group(1)!r}, which the run does not "
                          f"have; its columns are {', '.join(columns)}")
    function = _MISSING_FUNCTION.search(message)
    if function:
        return UsageError(f"{who}: filter {expression!r} calls {function.group(1)}(), which DuckDB does not have "
                          "(or a filter may not use)")
    if isinstance(exc, duckdb.PermissionException):
        return UsageError(f"{who}: filter {expression!r} tries to reach outside the run's tables, which a filter "
                          f"may not ({message})")
    return UsageError(f"{who}: filter {expression!r} failed: {message}")


def run_filtered(con: Any, query: str, expression: str, *, who: str, columns: Sequence[str] = (),
                 params: Sequence[Any] | None = None, seconds: float = TIME_LIMIT) -> Any:
    """Run `query` (which holds the checked `expression`) on the locked
    connection `con` within `seconds`; its rows as an Arrow table."""
    timer = threading.Timer(seconds, con.interrupt)
    timer.start()
    try:
        relation = con.sql(query, params=list(params) if params else None)
        return (getattr(relation, "to_arrow_table", None) or relation.arrow)()  # DuckDB 2 / 1
    except duckdb.Error as exc:
        raise _fault(exc, expression, who, columns, seconds) from None
    finally:
        timer.cancel()
