"""The native build of the columnar tables: DuckDB parses a part's JSON lines.

rollkit.tables.columns cuts a trace file into parts and, for each, hands the
part's lines here. DuckDB's newline-delimited JSON reader (`read_json` of
the lines' bytes, _read; of the trace file itself, once for all the parts,
where the build's Engine has it, a first open's or a first ask's of a table
without text: Engine.whole_rows) reads the fields the tables need, with the types below
(`_TRACE_FIELDS`), and one SQL query per table turns them into the rows the
Python build (rows.trace_rows) makes: the same columns, values and Arrow
types, row for row (tests/test_columns.py builds both ways and compares).
The Python build stays the reference, and the fallback: a part whose lines
DuckDB cannot parse, or whose free-typed values (batch ids, limits, `ok`)
mix types the way only Python's inference reads, is built in Python, which
also names a line that is not a trace.
The rollouts alone (a first open) are parsed from the fields they read
(`_ROLLOUT_FIELDS`): building DuckDB's nested rows costs several times
parsing the JSON, and a message's text is most of a line. A later ask
builds the one table asked for from the fields it reads: the turns, phases
or signals (`_ALONE_FIELDS`), the messages (a first search:
`_MESSAGE_FIELDS`), the calls (`_CALL_FIELDS`: of the messages only what a
reply is read from, and not even that in a part where no call's reply is a
message); the fields without text (`_LIGHT_FIELDS`) for the light tables
asked for together, all for any other set.

One reading of a line, rk.load's (rollkit.core.store.record_of_line): JSON
as RFC 8259 has it, read as Python reads it: of a key written twice in one
object the last counts; a number past a double's range is infinity; NaN,
Infinity (and a comma before a closing bracket) are not JSON, and refused.
DuckDB's parser reads otherwise, so a part holding any of these goes to the
Python build (NativeUnfit, or DuckDB's error): its reader refuses a key
twice in an object the tables read (json_transform would keep the first)
and a value it cannot cast (a reward written as an object); NaN and
Infinity are looked for in the lines' text (_check_strict), and a line
whose fields the tables read hold a real that is not finite (nan, -INF:
DuckDB's parser takes every spelling) or a null where a call's number
belongs (cum_agent_time: DuckDB's reader tells a null from a missing key
in no column type) is read again by Python's json (_doubt, in the pass
that types the integers) and, when rk.load reads it otherwise, left to the
Python build. Infinity less
infinity (a time of 1e400) is NaN, missing in both builds' tables
(_nan_as_null, as the Python build's from_pandas makes it). Not looked for
(each a pass over the bytes that costs more than the first open may;
benchmarks/bigrun.py measures the open): nan or inf in other spellings
in a field the tables do not read (or read as JSON text), a trailing
comma, and nesting deeper than rk.load's parser goes (200 arrays or
objects); the native build reads such a line, the Python build and
rk.load refuse it. Neither
build checks a line against the trace schema as rk.load does (pydantic
costs many builds), save a message's role, which both check where they
read the messages (_BAD_ROLE, in the pass that finds a broken line), and
a call's integer fields: DuckDB's reader and int() make 2.5 2, so the
native build reads them as reals and checks them before typing them
(_doubt), the Python build checks them (rows), and both refuse 2.5 as
rk.load does. A value the tables read as text or do not read (a number
where text belongs) is read where rk.load refuses the line; what is not
caught, tests/test_hostile_lines.py holds as expected failures. A build
refusing a line names the first line rk.load refuses before it, if any
(rollkit.tables.columns): a first open reads the rollouts' fields alone.

Adding a column: the trace field to `_TRACE_FIELDS` (when it is new), and
the column's SQL to its table's `_EXPRESSIONS` (the test checks each
table's columns are rows.TABLE_COLUMNS', in order).

This module reads bytes it is given and returns Arrow tables; it writes nothing.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any, NamedTuple
from ..core.dependencies import duckdb, np, pa, pc
from ..core.messages import ROLES
from ..core.trace import UNTIMED

__all__ = ["native_tables", "NativeUnfit", "Engine", "WholeSource", "LIGHT_TABLES"]


class NativeUnfit(Exception):
    """The part holds something only the Python build reads as it should."""


_SPAN = {"start": "DOUBLE", "end": "DOUBLE"}
_PHASE_NAMES = ("boot", "setup", "agent", "finalize", "scoring")
# The fields of a trace line the tables read, with the types DuckDB gives
# them. JSON: a value whose type varies (the Python build infers the
# column's type from the values): read as JSON, its type decided per part.
_TRACE_FIELDS: dict[str, Any] = {
    "id": "VARCHAR",
    "task": {"type": "VARCHAR", "key": "VARCHAR"},
    "agent": {"name": "JSON", "model": "JSON"},
    "info": {"example_id": "JSON", "repeat": "JSON", "rollout_id": "JSON", "cost_usd": "DOUBLE",
             "cost_estimated": "BOOLEAN", "source": {k: "JSON" for k in ("framework", "version", "task", "dataset",
                                                                          "sample_id")}},
    "limits": {"max_turns": "JSON", "max_input_tokens": "JSON", "max_output_tokens": "JSON",
               "max_total_tokens": "JSON", "max_cost_usd": "JSON"},
    "timeouts": {"agent": "JSON"},
    "messages": [{"role": "VARCHAR", "content": "VARCHAR", "reasoning": "VARCHAR", "name": "VARCHAR",
                  "tool_call_id": "VARCHAR", "tool_calls": [{"name": "VARCHAR", "arguments": "VARCHAR"}]}],
    "model_calls": [{
        "index": "BIGINT", "segment": "BIGINT", "start": "DOUBLE", "end": "DOUBLE",
        "usage": {"input_tokens": "BIGINT", "output_tokens": "BIGINT", "cache_read_tokens": "BIGINT",
                  "cache_write_tokens": "BIGINT"},
        "new_input_tokens": "BIGINT", "finish_reason": "VARCHAR", "committed": "BOOLEAN", "dialect": "VARCHAR",
        "error": {"type": "VARCHAR", "message": "VARCHAR"},
        "cum_turns": "BIGINT", "cum_input_tokens": "BIGINT", "cum_output_tokens": "BIGINT",
        "cum_total_tokens": "BIGINT", "cum_agent_time": "DOUBLE",
        "reply": {"content": "VARCHAR", "reasoning": "VARCHAR", "tool_calls": [{"name": "VARCHAR"}]},
        "request_messages": "BIGINT", "request": "JSON", "timing_issue": "VARCHAR",
        "tokens": {"ids": "BIGINT[]", "logprobs": "DOUBLE[]"},
        "cost_usd": "DOUBLE", "cum_cost_usd": "DOUBLE",
    }],
    "rewards": "MAP(VARCHAR, DOUBLE)", "reward_weights": "MAP(VARCHAR, DOUBLE)", "metrics": "MAP(VARCHAR, DOUBLE)",
    "signal_errors": "MAP(VARCHAR, VARCHAR)",
    "errors": [{"type": "VARCHAR", "phase": "VARCHAR", "message": "VARCHAR"}],
    "stop_condition": "VARCHAR", "ok": "JSON", "completed": "BOOLEAN", "aborted": "BOOLEAN",
    "phases": {name: _SPAN for name in _PHASE_NAMES},
    "segments": [{"start": "DOUBLE", "end": "DOUBLE", "charged": "DOUBLE"}],
}

_D = "::DOUBLE"
_ZERO = "0.0::DOUBLE"


# A call's latency; NaN (NA) for an imported call its source did not time (core.trace.UNTIMED).
_LATENCY = f"case when c.timing_issue = '{UNTIMED}' then null::DOUBLE else c.\"end\" - c.start end"
_UNTIMED_CALL = f"coalesce(list_bool_or(list_transform(t.model_calls, lambda c: c.timing_issue = '{UNTIMED}')), false)"


def _sum(values: str) -> str:
    """A sum in list order from 0, as core.sums.sum_in_order adds (the same float, bit for bit)."""
    return f"coalesce(list_reduce({values}, lambda a, x: a + x, {_ZERO}), {_ZERO})"


# The JSON-typed values and which tables' rows they go into ({} marks the
# rows of a table: a condition on a trace `t`).
_FREE = {
    "example_id": "t.info.example_id", "repeat": "t.info.repeat", "rollout_id": "t.info.rollout_id",
    "agent": "t.agent.name", "model": "t.agent.model", "ok": "t.ok",
    **{name: f"t.limits.{name}" for name in ("max_turns", "max_input_tokens", "max_output_tokens",
                                              "max_total_tokens", "max_cost_usd")},
    "agent_budget": "t.timeouts.agent",
}
_IDS_FREE = ("example_id", "repeat", "rollout_id")
# Missing as NaN in the Python build (a number column even when all missing).
_NAN_FREE = ("max_turns", "max_input_tokens", "max_output_tokens", "max_total_tokens", "max_cost_usd", "agent_budget")
_SCORED = "(t.phases.scoring is not null)"
_COMMITTED = "list_filter(t.model_calls, lambda c: coalesce(c.committed, false))"
_ROWS_OF = {
    "rollouts": "true",
    "calls": "coalesce(len(t.model_calls), 0) > 0",
    "turns": f"coalesce(len({_COMMITTED}), 0) > 0",
    "phases": " or ".join(f"t.phases.{p} is not null" for p in _PHASE_NAMES),
    "signals": f"(not {_SCORED} or coalesce(cardinality(t.rewards), 0) + coalesce(cardinality(t.metrics), 0) > 0)",
}
_FREE_IN = {"rollouts": (*_IDS_FREE, "agent", "model", "ok"), "calls": _IDS_FREE,
            "turns": (*_IDS_FREE, *_NAN_FREE), "phases": (*_IDS_FREE, "ok"), "signals": _IDS_FREE}
# A JSON value's type as a bit: 1 text, 2 integer, 4 real, 8 boolean, 16 anything else (0: null).
_JSON_BITS = ("case when {x} is null then 0 else case json_type({x}) when 'NULL' then 0 when 'VARCHAR' then 1 "
              "when 'BIGINT' then 2 when 'UBIGINT' then 2 when 'DOUBLE' then 4 when 'BOOLEAN' then 8 else 16 end end")
# The same bit from the value's text where its first characters tell (DuckDB
# writes a JSON value minified, as yyjson reads it: a real has a '.' or an
# exponent, an integer of up to 18 digits fits 64 bits), json_type's where
# they do not (NaN or nan, -Infinity, a longer integer): json_type parses
# each value again, half a part's checks (tests/test_nativebuild.py holds
# them equal).
_NUMBER = "(ascii({x}) between 48 and 57 or (ascii({x}) = 45 and ascii(substr({x}, 2, 1)) between 48 and 57))"
_FAST_JSON_BITS = (
    "case when {x} is null then 0 else case ascii({x}) when 34 then 1 when 116 then 8 "
    "when 102 then 8 when 123 then 16 when 91 then 16 else case "
    f"when {_NUMBER} and (contains({{x}}, '.') or contains({{x}}, 'e') or contains({{x}}, 'E')) then 4 "
    f"when {_NUMBER} and length({{x}}) <= 18 then 2 when {{x}} = 'null' then 0 else {_JSON_BITS} end end end")


# A line the Python build reads as not a trace (a required field missing):
# it is the one to name the line. Looked for in the fields a build reads
# (_broken): a later ask's part had its rollouts built from the same bytes,
# which looked for all of them.
_CALL_NEEDS = ("index", "segment", "start", "end")


def _broken(fields: dict[str, Any]) -> str:
    """SQL: whether a line lacks a field a trace must have, of those in `fields`."""
    calls = fields.get("model_calls", [{}])[0]
    needed = " or ".join(f"c.{_quoted(k)} is null" for k in _CALL_NEEDS if k in calls)
    errors = fields.get("errors", [{}])[0]
    return " or ".join((
        "t is null", "t.id is null",
        *(f"t.task.{k} is null" for k in ("key", "type") if k in fields.get("task", {})),
        *([f"coalesce(list_bool_or(list_transform(t.model_calls, lambda c: c is null{' or ' * bool(needed)}"
           f"{needed})), false)"] if "model_calls" in fields else []),
        *(f"(t.phases.{p} is not null and t.phases.{p}.start is null)" for p in fields.get("phases", {})),
        *(["(coalesce(len(t.errors), 0) > 0 and (t.errors[1].type is null or t.errors[1].message is null))"]
          if {"type", "message"} <= set(errors) else []),
    ))


# A message whose role is no trace's (ROLES): checked where the messages are read, in the same pass.
_BAD_ROLE = ("coalesce(list_bool_or(list_transform(t.messages, lambda m: m is null or m.role is null or m.role "
             f"not in ({', '.join(repr(r) for r in ROLES)}))), false)")


def _free_types(con: Any, tables: tuple[str, ...]) -> dict[tuple[str, str], str | None]:
    """The Arrow type of each JSON-typed column in each of `tables`, as the
    Python build infers it from the values its rows hold (None: all missing)."""
    aggregates, keys = [], []
    kinds: dict[tuple[str, str], str | None] = {}
    for table, names in _FREE_IN.items():
        if table not in tables:  # its queries are not run: any type will do
            kinds.update({(table, name): None for name in names})
            continue
        for name in names:
            bits = _FAST_JSON_BITS.format(x=_FREE[name])
            aggregates.append(f"bit_or({bits}) filter (where {_ROWS_OF[table]})")
            keys.append((table, name))
    if not aggregates:
        return kinds
    row = con.execute(f"select {', '.join(aggregates)} from p").fetchall()[0]
    for key, bits in zip(keys, row):
        bits = bits or 0
        kind = {0: None, 1: "VARCHAR", 2: "BIGINT", 4: "DOUBLE", 6: "DOUBLE", 8: "BOOLEAN"}.get(bits)
        if kind is None and bits:
            raise NativeUnfit(f"{key[1]} mixes JSON types ({bits})")
        kinds[key] = kind
    return kinds


def _free(name: str, kind: str | None) -> str:
    x = _FREE[name]
    if kind is None:
        return "null::DOUBLE" if name in _NAN_FREE else "null::VARCHAR"
    return f"({x}->>'$')" if kind == "VARCHAR" else f"{x}::{kind}"


def _ids(kinds: dict[tuple[str, str], str | None], table: str) -> dict[str, str]:
    return {"id": "t.id", **{name: _free(name, kinds[(table, name)]) for name in _IDS_FREE}}


def _why(error: str) -> tuple[str, str]:
    """why_missing and error of a signal whose value is missing (MissingSignal.of_error)."""
    why = (f"case when {error} is null then 'returned None' when {error} = 'not in the source' then "
           f"'not in the source' when starts_with({error}, 'scoring timed out') then 'scoring timed out' "
           f"else 'scoring raised' end")
    text = f"case when {error} is not null and {error} <> 'not in the source' then {error} end"
    return why, text


# Trace.cost_usd: the source's total, else the last call's running total.
_TRACE_COST = ("coalesce(t.info.cost_usd, case when coalesce(len(t.model_calls), 0) = 0 then 0.0::DOUBLE "
               "else t.model_calls[-1].cum_cost_usd end)")
# A trace's first phase start (a phase's offset is from it).
_T0 = f"least({', '.join(f't.phases.{p}.start' for p in _PHASE_NAMES)})"


def _expressions(kinds: dict[tuple[str, str], str | None], signals: _Signals,
                 messages: bool = True) -> dict[str, dict[str, str]]:
    """Each table's columns as SQL over a trace `t` (rollouts), a call `c`
    (calls), a committed call `c` and its turn number `n` (turns), a span
    `s` (phases), a signal entry `e` (signals), a message `m` and its
    number `n` (messages); `_ordinal`, `_offset`, `_length` are the line's."""
    spans = [f"t.phases.{p}" for p in _PHASE_NAMES]
    rollouts = _rollout_columns(kinds, signals, spans, _TRACE_COST)
    totals = {"cum_turns": "coalesce(c.cum_turns, 0)", "cum_input_tokens": "coalesce(c.cum_input_tokens, 0)",
              "cum_output_tokens": "coalesce(c.cum_output_tokens, 0)",
              "cum_total_tokens": "coalesce(c.cum_total_tokens, 0)",
              "cum_agent_time": "coalesce(c.cum_agent_time, 0.0::DOUBLE)", "cum_cost_usd": "c.cum_cost_usd"}
    calls = _call_columns(kinds, totals, messages)
    turns = {
        **_ids(kinds, "turns"), "task_key": "t.task.key", "turn": "n", "call": "c.index", "segment": "c.segment",
        "start": "c.start", "end": "c.\"end\"", "latency": _LATENCY,
        "input_tokens": "c.usage.input_tokens", "output_tokens": "c.usage.output_tokens",
        "new_input_tokens": "coalesce(c.new_input_tokens, 0)", "finish_reason": "c.finish_reason",
        "dialect": "c.dialect", "cost_usd": "c.cost_usd", **totals,
        **{name: _free(name, kinds[("turns", name)]) for name in _NAN_FREE}, "_ordinal": "_ordinal",
    }
    phases = {  # _t0 and _cost: the trace's, once per trace (_queries)
        **_ids(kinds, "phases"), "task_key": "t.task.key", "phase": "s.phase", "start": "s.s", "end": "s.e",
        "duration": "s.e - s.s", "offset": "s.s - _t0", "ok": _free("ok", kinds[("phases", "ok")]),
        "cost_usd": "case when s.phase = 'agent' then _cost else 0.0::DOUBLE end", "_ordinal": "_ordinal",
    }
    why, text = _why("map_extract_value(t.signal_errors, e.key)")
    signals = {
        **_ids(kinds, "signals"), "task_key": "t.task.key", "task_type": "t.task.type", "kind": "e.kind",
        "name": "e.key", "value": "e.value",
        "weight": "case when e.kind = 'reward' then coalesce(map_extract_value(t.reward_weights, e.key), "
                  "1.0::DOUBLE) end",
        "missing": "e.value is null", "why_missing": f"case when e.value is null then {why} end",
        "error": f"case when e.value is null then {text} end", "_ordinal": "_ordinal", "_scored": "true",
    }
    messages = {
        "id": "t.id", "task_key": "t.task.key", "index": "n - 1", "role": "m.role",
        "content": "coalesce(m.content, '')",
        "tool_calls": ("case when m.role = 'assistant' then coalesce(array_to_string(list_transform(m.tool_calls, "
                       "lambda k: coalesce(k.name, 'None') || '(' || coalesce(k.arguments, '{}') || ')'), ', '), '') "
                       "else '' end"),
        "name": "case when m.role = 'tool' then coalesce(nullif(m.name, ''), m.tool_call_id) end",
        "_ordinal": "_ordinal",
    }
    return {"rollouts": rollouts, "calls": calls, "turns": turns, "phases": phases, "signals": signals,
            "messages": messages}


def _rollout_columns(kinds: dict[tuple[str, str], str | None], signals: _Signals, spans: list[str],
                     cost: str) -> dict[str, str]:
    """The rollouts table over a trace `t` (`cm`: its committed calls; the
    signals as `signals` reads them)."""
    error = "t.errors[1]"
    has_error = "coalesce(len(t.errors), 0) > 0"
    # cm: the trace's committed calls, computed once per row by the rollouts query.
    last = "cm[-1]"
    turned = "coalesce(len(cm), 0) > 0"
    unreported = {k: f"coalesce(list_bool_or(list_transform(cm, lambda c: c.usage.{k}_tokens is null)), false)"
                  for k in ("input", "output")}
    pairs = "list_filter(range(1, coalesce(len(t.segments), 0)), lambda i: t.segments[i].\"end\" is not null)"
    agent_time = _sum("list_transform(t.segments, lambda g: coalesce(g.charged, 0.0::DOUBLE))")
    timed = _sum("list_transform(t.model_calls, lambda c: c.\"end\" - c.start)")
    model_time = f"case when {_UNTIMED_CALL} then null::DOUBLE else {timed} end"
    rollouts = {
        **_ids(kinds, "rollouts"),
        "task_key": "t.task.key", "task_type": "t.task.type", **_source_columns(),
        "agent": _free("agent", kinds[("rollouts", "agent")]), "model": _free("model", kinds[("rollouts", "model")]),
        "outcome": (f"case when {has_error} then 'failed: ' || coalesce(nullif({error}.type, ''), 'Error') "
                    "when coalesce(t.aborted, false) then 'aborted' when not coalesce(t.completed, false) then "
                    "'incomplete' when coalesce(t.stop_condition, '') <> '' then 'stopped: ' || t.stop_condition "
                    "else 'ok' end"),
        "ok": _free("ok", kinds[("rollouts", "ok")]),
        "completed": "coalesce(t.completed, false)", "aborted": "coalesce(t.aborted, false)",
        "stop": f"case when {has_error} then {error}.type else t.stop_condition end",
        "stop_condition": "t.stop_condition", "error_type": f"{error}.type", "error_phase": f"{error}.phase",
        "error_message": f"{error}.message", "reward": signals.reward(),
        "turns": f"coalesce({last}.cum_turns, 0)", "model_calls": "coalesce(len(t.model_calls), 0)",
        "input_tokens": f"case when not {turned} then 0 when {unreported['input']} then null "
                        f"else coalesce({last}.cum_input_tokens, 0) end",
        "output_tokens": f"case when not {turned} then 0 when {unreported['output']} then null "
                         f"else coalesce({last}.cum_output_tokens, 0) end",
        "total_tokens": f"case when not {turned} then 0 when {unreported['input']} or {unreported['output']} "
                        f"then null else coalesce({last}.cum_total_tokens, 0) end",
        "cost_usd": cost,
        "cost_estimated": "coalesce(t.info.cost_estimated, false)",
        "segments": "coalesce(len(t.segments), 0)",
        "agent_time": agent_time, "model_time": model_time,
        "harness_time": f"case when {_UNTIMED_CALL} then null::DOUBLE else greatest({_ZERO}, {agent_time} - {model_time}) end",
        # (a trace of one segment waited for nothing: its lambdas are not run)
        "wait_time": f"case when coalesce(len(t.segments), 0) < 2 then {_ZERO} else "
                     + _sum(f"list_transform({pairs}, lambda i: greatest({_ZERO}, "
                            "t.segments[i + 1].start - t.segments[i].\"end\"))") + " end",
        **{f"phase.{p}": f"t.phases.{p}.\"end\" - t.phases.{p}.start" for p in _PHASE_NAMES},
        "start": f"least({', '.join(s + '.start' for s in spans)})",
        "end": f"greatest({', '.join(s + '.end' for s in spans)})",
        "_ordinal": "_ordinal", "_offset": "_offset", "_length": "_length", "_scored": _SCORED,
    }
    # A signal's value only where the run was scored (rows.signal_values).
    rollouts.update({name: f"case when {_SCORED} then {signals.value(name)} end" for name in signals.names})
    return rollouts


def _source_columns() -> dict[str, str]:
    """rows.SOURCE_COLUMNS (rows.source_values): where `info.source` names a
    framework, its text values, an integer of 64 bits in digits (json_type
    says UBIGINT for one not below 0), anything else null."""
    source = "t.info.source"

    def text(x: str) -> str:
        return (f"case json_type({x}) when 'VARCHAR' then {x}->>'$' when 'BIGINT' then {x}::BIGINT::VARCHAR "
                f"when 'UBIGINT' then try_cast({x} as BIGINT)::VARCHAR end")

    named = f"json_type({source}.framework) = 'VARCHAR'"
    values = {"source_framework": text(f"{source}.framework"), "source_version": text(f"{source}.version"),
              "source_task": f"coalesce({text(f'{source}.task')}, {text(f'{source}.dataset')})",
              "source_sample": text(f"{source}.sample_id")}
    return {name: f"case when {named} then {value} end" for name, value in values.items()}


_DOUBLES = "'\"MAP(VARCHAR, DOUBLE)\"'"


class _Signals:
    """How the rollouts query reads a part's rewards, weights and metrics:
    `names` (its `reward.<name>` and `metric.<name>` columns, sorted), the
    columns it adds beside a trace (`columns`), and the SQL of the reward
    and of a signal's value over them.

    The full build types the three as DuckDB MAPs (the signals table
    unnests them); a first open reads them as JSON text and types them per
    part (`of_part`), as structs of the part's names: a MAP costs a large
    share of a part's parse, a struct a small fraction of that. The reward is a sum in each line's key order (rows.signal_values
    adds them as the dict holds them); summed over the struct's fields
    instead, in name order, it is the same float, bit for bit, where no
    line has more than two rewards (x + y is y + x, and adding the absent
    ones' 0.0 changes nothing); a part with more, or whose names a struct
    cannot hold (one empty, or two equal but for case: DuckDB's struct
    fields ignore case), or more than _STRUCT_NAMES of them, has its JSON
    typed as MAPs, as the full build's."""

    def __init__(self, names: list[str], columns: str, fields: dict[str, list[str]] | None = None) -> None:
        self.names = names
        self.columns = columns
        self._fields = fields

    @classmethod
    def of_maps(cls, names: list[str], rewards: str = "t.rewards", weights: str = "t.reward_weights",
                metrics: str = "t.metrics") -> _Signals:
        return cls(names, f"{rewards} as rm, {weights} as wm, {metrics} as mm")

    @classmethod
    def of_part(cls, con: Any) -> _Signals:
        """The reader of a part whose three maps are JSON (`t`, in table p).
        Raises NativeUnfit where Python reads them otherwise: a key twice
        (a dict keeps the last; DuckDB's struct the first, its MAP none), a
        value that is not an object (Python fails on one), or a weight that
        may be null (a weight has none, a reward or metric may)."""
        # The part's distinct key lists (a handful: a run's traces share their signals' names).
        shapes = con.execute(
            "select distinct json_keys(t.rewards), json_keys(t.reward_weights), json_keys(t.metrics), "
            "coalesce(ascii(t.rewards) <> 123 or ascii(t.reward_weights) <> 123 or ascii(t.metrics) <> 123 "
            "or contains(t.reward_weights, 'null'), false) "
            "from p").fetchall()
        if any(odd or any(keys and len(set(keys)) < len(keys) for keys in lists) for *lists, odd in shapes):
            raise NativeUnfit("a part's rewards, weights or metrics are not each an object of distinct keys")
        rewards = list(dict.fromkeys(k for r, _, _, _ in shapes for k in r or ()))
        metrics = list(dict.fromkeys(k for _, _, m, _ in shapes for k in m or ()))
        most = max((len(r or ()) for r, _, _, _ in shapes), default=0)
        names = sorted([*(f"reward.{n}" for n in rewards), *(f"metric.{n}" for n in metrics)])
        if most > 2 or not all(_struct_fits(keys) for keys in (rewards, metrics)) \
                or max(len(rewards), len(metrics)) > _STRUCT_NAMES:
            return cls.of_maps(names, *(f"json_transform(t.{m}, {_DOUBLES})" for m in ("rewards", "reward_weights",
                                                                                       "metrics")))
        structs = [f"json_transform(t.{m}, {_literal(json.dumps(dict.fromkeys(keys, 'DOUBLE')))}) as {alias}"
                   for m, keys, alias in (("rewards", rewards, "rs"), ("reward_weights", rewards, "ws"),
                                          ("metrics", metrics, "ms")) if keys]
        return cls(names, ", ".join(structs) or "null as rs", {"reward": sorted(rewards), "metric": sorted(metrics)})

    def reward(self) -> str:
        """rows.signal_values' reward: the weighted sum of the rewards that have a value."""
        if self._fields is None:
            valued = "list_filter(map_entries(rm), lambda e: e.value is not null)"
            return (f"case when {_SCORED} and len({valued}) > 0 then "
                    + _sum(f"list_transform({valued}, lambda e: e.value * "
                           f"coalesce(map_extract_value(wm, e.key), 1.0::DOUBLE))") + " end")
        fields = [_quoted(n) for n in self._fields["reward"]]
        if not fields:
            return "null::DOUBLE"
        valued = " or ".join(f"rs.{f} is not null" for f in fields)
        terms = " + ".join(f"coalesce(rs.{f} * coalesce(ws.{f}, 1.0::DOUBLE), {_ZERO})" for f in fields)
        return f"case when {_SCORED} and ({valued}) then {_ZERO} + {terms} end"

    def value(self, name: str) -> str:
        kind, key = name.split(".", 1)
        if self._fields is None:
            return f"map_extract_value({'rm' if kind == 'reward' else 'mm'}, {_literal(key)})"
        return f"{'rs' if kind == 'reward' else 'ms'}.{_quoted(key)}"


# More names than this in a part take the MAPs: the struct's reward adds a
# term per name (with hundreds of names the struct path is the slower one;
# with a thousand or so, DuckDB refuses the expression's depth).
_STRUCT_NAMES = 64


def _struct_fits(keys: list[str]) -> bool:
    """Whether DuckDB's struct can hold these keys as its fields."""
    return all(keys) and len({k.lower() for k in keys}) == len(keys)


# A call whose reply may be the message after its request (rows._reply), and a part that has one.
_MAY_FOLLOW = "(coalesce(c.committed, false) and c.request_messages is not null and c.request is null)"
_FOLLOWS = f"coalesce(list_bool_or(list_transform(t.model_calls, lambda c: {_MAY_FOLLOW})), false)"


def _call_columns(kinds: dict[tuple[str, str], str | None], totals: dict[str, str],
                  messages: bool = True) -> dict[str, str]:
    """The calls table over a call `c` of a trace `t` (`messages`: whether
    `t` holds them; where it does not, no call's reply is one: _checked)."""
    # A call's reply: its own, or the message after its request (rows._reply).
    follows = (f"({_MAY_FOLLOW} and c.request_messages < coalesce(len(t.messages), 0) "
               "and t.messages[c.request_messages + 1].role = 'assistant')") if messages else "false"
    next_message = "t.messages[c.request_messages + 1]" if messages else "c.reply"
    reply_names = "array_to_string(list_transform({r}.tool_calls, lambda k: k.name), ', ')"
    lp_sum = ("case when len(c.tokens.logprobs) > 0 then 0.0::DOUBLE + list_reduce(c.tokens.logprobs::DOUBLE[], "
              "lambda a, b: a + b) end")
    calls = {
        **_ids(kinds, "calls"), "task_key": "t.task.key", "call": "c.index", "segment": "c.segment",
        "dialect": "c.dialect", "committed": "coalesce(c.committed, false)", "start": "c.start",
        "latency": _LATENCY, "input_tokens": "c.usage.input_tokens",
        "output_tokens": "c.usage.output_tokens", "cache_read_tokens": "c.usage.cache_read_tokens",
        "cache_write_tokens": "c.usage.cache_write_tokens", "new_input_tokens": "coalesce(c.new_input_tokens, 0)",
        "finish_reason": "c.finish_reason",
        "reply": f"case when c.reply is not null then c.reply.content when {follows} then {next_message}.content end",
        "reasoning": (f"case when c.reply is not null then c.reply.reasoning when {follows} then "
                      f"{next_message}.reasoning end"),
        "tool_calls": (f"case when c.reply is not null then coalesce({reply_names.format(r='c.reply')}, '') "
                       f"when {follows} then coalesce({reply_names.format(r=next_message)}, '') end"),
        "request_messages": "c.request_messages", "error_type": "c.error.type", "error_message": "c.error.message",
        "timing_issue": "c.timing_issue",
        # A plain sum left to right, as rows._logprob_stats adds them (null: no logprobs).
        "completion_logprob_sum": lp_sum,
        "completion_logprob_mean": f"{lp_sum} / len(c.tokens.logprobs)",
        "has_token_ids": "coalesce(c.tokens.ids is not null, false)",
        "cost_usd": "c.cost_usd", "end": "c.\"end\"", **totals, "_ordinal": "_ordinal",
    }
    return calls


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _pack(columns: dict[str, str]) -> str:
    return "struct_pack(" + ", ".join(f'"{name.replace(chr(34), chr(34) * 2)}" := {sql}'
                                      for name, sql in columns.items()) + ")"


def _queries(exprs: dict[str, dict[str, str]], signals: _Signals) -> dict[str, str]:
    """One query per table: a list of row structs per trace, unnested, in line order."""
    marker_why = ("case when coalesce(len(t.errors), 0) > 0 then 'run failed' when coalesce(t.aborted, false) "
                  "then 'run aborted' else 'not scored' end")
    marker_error = "case when coalesce(len(t.errors), 0) > 0 then t.errors[1].type || ': ' || t.errors[1].message end"
    marker = dict(exprs["signals"])
    marker.update({"kind": "null::VARCHAR", "name": "null::VARCHAR", "value": "null::DOUBLE",
                   "weight": "null::DOUBLE", "missing": "true", "why_missing": marker_why, "error": marker_error,
                   "_scored": "false"})
    entries = ("list_concat(list_transform(map_entries(t.rewards), lambda x: struct_pack(kind := 'reward', "
               "key := x.key, value := x.value)), list_transform(map_entries(t.metrics), lambda x: "
               "struct_pack(kind := 'metric', key := x.key, value := x.value)))")
    spans = "[" + ", ".join(f"struct_pack(phase := '{p}', s := t.phases.{p}.start, e := t.phases.{p}.\"end\", "
                            f"present := t.phases.{p} is not null)" for p in _PHASE_NAMES) + "]"

    def each(table: str, rows: str, element: dict[str, str] | None = None, source: str = "p") -> str:
        # The trace's own columns once per trace, beside the unnested rows
        # (a column in a row's struct is computed once per row).
        columns = exprs[table]
        own = {n: sql for n, sql in columns.items() if n in _PER_TRACE}
        packed = _pack({n: sql for n, sql in columns.items() if n not in own})
        rows = rows.format(row=packed, marker=_pack({n: sql for n, sql in (element or {}).items() if n not in own}))
        inner = ", ".join(f"{sql} as {_quoted(n)}" for n, sql in own.items())
        outer = ", ".join(_quoted(n) if n in own else f"r.{_quoted(n)}" for n in columns)
        return f"select {outer} from (select {inner}, unnest({rows}) as r from {source})"

    def unnested(table: str, items: str, each_one: str) -> str:
        # Rows that are a list's items as they are: unnested, then the columns (no struct a row to unnest).
        columns = exprs[table]
        inner = ", ".join(f"{sql} as {_quoted(n)}" for n, sql in columns.items() if n in _PER_TRACE)
        outer = ", ".join(_quoted(n) if n in _PER_TRACE else f"{sql} as {_quoted(n)}" for n, sql in columns.items())
        return f"select {outer} from (select t, {inner}, unnest({items}) as {each_one} from p)"

    return {
        "rollouts": f"select {', '.join(f'{sql} as {_quoted(n)}' for n, sql in exprs['rollouts'].items())} "
                    f"from (select *, {_COMMITTED} as cm, {signals.columns} from p)",
        "calls": unnested("calls", "t.model_calls", "c"),
        "turns": each("turns", f"list_transform({_COMMITTED}, lambda c, n: {{row}})"),
        "phases": each("phases", f"list_transform(list_filter({spans}, lambda s: s.present), lambda s: {{row}})",
                       source=f"(select *, {_T0} as _t0, {_TRACE_COST} as _cost from p)"),
        "signals": each("signals", f"case when {_SCORED} then list_transform({entries}, lambda e: {{row}}) "
                                   "else [{marker}] end", marker),
        "messages": each("messages", "list_transform(t.messages, lambda m, n: {row})"),
    }


# Columns of a trace, not of one of its calls, spans, signals or messages.
_PER_TRACE = {"id", "example_id", "repeat", "rollout_id", "task_key", "task_type", "_ordinal", "ok", *_NAN_FREE}


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


# What the rollouts table reads, and only that: no message (their text is
# most of a line), no call's request, reply or tokens. A first open builds
# the rollouts alone from it (the rollouts frame is what it is for); the
# other tables come from _LIGHT_FIELDS or _TRACE_FIELDS when first asked for.
_CALL_TOTALS = ("index", "segment", "start", "end", "usage", "committed", "cum_turns", "cum_input_tokens",
                "cum_output_tokens", "cum_total_tokens", "cum_cost_usd", "timing_issue")  # (an untimed call: model_time NA)
_ROLLOUT_FIELDS: dict[str, Any] = {
    **{k: v for k, v in _TRACE_FIELDS.items() if k not in ("messages", "limits", "timeouts", "signal_errors")},
    "model_calls": [{k: v for k, v in _TRACE_FIELDS["model_calls"][0].items() if k in _CALL_TOTALS}],
    # JSON text, typed per part (_Signals.of_part).
    "rewards": "JSON", "reward_weights": "JSON", "metrics": "JSON",
}


# What the turns, phases and signals tables read besides the rollouts': no
# message, no call's request, reply, tokens or error (a call's own numbers
# and the traces' limits, rewards and errors). A later ask for one of them
# builds the three from these; the calls and the messages read the text.
_TURN_CALL_FIELDS = (*_CALL_TOTALS, "new_input_tokens", "finish_reason", "dialect", "cost_usd", "cum_agent_time")
_LIGHT_FIELDS: dict[str, Any] = {
    **{k: v for k, v in _TRACE_FIELDS.items() if k != "messages"},
    "model_calls": [{k: v for k, v in _TRACE_FIELDS["model_calls"][0].items() if k in _TURN_CALL_FIELDS}],
}
LIGHT_TABLES = ("rollouts", "turns", "phases", "signals")
# The same without what only the rollouts read (the agent, where a task came
# from, the segments, how the run ended): a later ask, which has the rollouts.
_LIGHT_ALONE_FIELDS: dict[str, Any] = {
    **{k: v for k, v in _LIGHT_FIELDS.items() if k not in ("agent", "segments", "completed", "stop_condition")},
    "info": {k: _TRACE_FIELDS["info"][k] for k in (*_IDS_FREE, "cost_usd")},
}
# What each of them reads alone (a later ask of one: the part has its
# rollouts, so what only they read, and what tells a line that is no trace
# the fields read here do not hold, were read and checked already).
_TRACE_IDS: dict[str, Any] = {"id": "VARCHAR", "info": {k: _TRACE_FIELDS["info"][k] for k in _IDS_FREE},
                              "task": {"key": "VARCHAR"}}
_ALONE_FIELDS: dict[str, dict[str, Any]] = {
    "turns": {**_TRACE_IDS, **{k: _TRACE_FIELDS[k] for k in ("limits", "timeouts")},
              "model_calls": [{k: v for k, v in _LIGHT_FIELDS["model_calls"][0].items() if k != "usage"}
                              | {"usage": {f"{k}_tokens": "BIGINT" for k in ("input", "output")}}]},
    "phases": {**_TRACE_IDS, "info": {**_TRACE_IDS["info"], "cost_usd": "DOUBLE"}, "ok": "JSON",
               "phases": _TRACE_FIELDS["phases"], "model_calls": [{"cum_cost_usd": "DOUBLE"}]},
    "signals": {**_TRACE_IDS, "task": _TRACE_FIELDS["task"],
                **{k: _TRACE_FIELDS[k] for k in ("rewards", "reward_weights", "metrics", "signal_errors", "aborted")},
                "errors": [{"type": "VARCHAR", "message": "VARCHAR"}], "phases": {"scoring": _SPAN}},
}
# What the calls table reads (a first ask of the calls): every call field,
# and of the messages only what a committed call's reply is read from (the
# message after its request: its role, text, reasoning and tool names), no
# tool call's arguments, no limits, rewards or signal errors.
_CALL_FIELDS: dict[str, Any] = {
    **_TRACE_IDS,
    "messages": [{k: v for k, v in _TRACE_FIELDS["messages"][0].items() if k in ("role", "content", "reasoning")}
                 | {"tool_calls": [{"name": "VARCHAR"}]}],
    "model_calls": _TRACE_FIELDS["model_calls"],
}
# The calls' fields of a part where no call's reply is a message (_may_follow).
_CALL_FIELDS_ALONE = {k: v for k, v in _CALL_FIELDS.items() if k != "messages"}
# What the messages table reads (a first search).
_MESSAGE_FIELDS: dict[str, Any] = {"id": "VARCHAR", "task": {"key": "VARCHAR"}, "messages": [
    {k: v for k, v in _TRACE_FIELDS["messages"][0].items() if k != "reasoning"}]}


def _first(tables: tuple[str, ...]) -> bool:
    """Whether these are a first open's tables (the rollouts alone)."""
    return set(tables) <= {"rollouts"}


def _fields(tables: tuple[str, ...]) -> dict[str, Any]:
    """The trace fields `tables` read: the rollouts' own (a first open), the
    messages' alone, the calls' alone, the turns', phases' or signals' alone
    (_ALONE_FIELDS), the light tables' (LIGHT_TABLES: no text), else every
    field the tables read."""
    if _first(tables):
        return _ROLLOUT_FIELDS
    if set(tables) <= {"messages"}:
        return _MESSAGE_FIELDS
    if set(tables) <= {"calls"}:
        return _CALL_FIELDS
    if len(tables) == 1 and tables[0] in _ALONE_FIELDS:
        return _ALONE_FIELDS[tables[0]]
    if set(tables) <= set(LIGHT_TABLES):
        return _LIGHT_FIELDS if "rollouts" in tables else _LIGHT_ALONE_FIELDS
    return _TRACE_FIELDS


def _columns(fields: dict[str, Any], read: bool = False) -> dict[str, str]:
    """read_json's columns: each top-level field of `fields` with its
    DuckDB type; `read`: as read, an integer as a real (_doubt)."""
    return {name: _duck_type(kind, read) for name, kind in fields.items()}


def _duck_type(kind: Any, read: bool = False) -> str:
    if isinstance(kind, str):
        return "DOUBLE" if read and kind == "BIGINT" else kind
    if isinstance(kind, list):
        return _duck_type(kind[0], read) + "[]"
    return "STRUCT(" + ", ".join(f"{_quoted(name)} {_duck_type(k, read)}" for name, k in kind.items()) + ")"


# A real that is no integer, or one a double may not hold exactly (past 2**53; NaN and infinity too).
_FRACTION = "({x} <> trunc({x}) or abs({x}) > 9007199254740992)"
# The numbers of a call and of a segment the tables read that the trace
# schema takes no null for (core.trace.ModelCall, Segment; a call's index,
# segment and times _BROKEN finds): DuckDB's reader makes a null what it
# makes a missing key, in every column type (the default); rk.load refuses the null.
_NOT_NULL = {"model_calls": ("new_input_tokens", "cum_turns", "cum_input_tokens", "cum_output_tokens",
                             "cum_total_tokens", "cum_agent_time"),
             "segments": ("charged", "start")}
# Of those, the ones the schema has no default for: rk.load refuses them missing too
# (a segment's start: the rollouts read it only between two segments, the check reads it in every one).
_REQUIRED = {"segments": ("start",)}


def _doubt(kind: Any, x: str, depth: int = 0, name: str = "") -> str:
    """SQL of what the fields of `x` the tables read (as read: _columns)
    say of its line: 2 where an integer field holds a value no integer
    field of a trace takes (2.5: DuckDB's reader would make it 2; rk.load
    and the Python build refuse it); 1 where a line may read otherwise in
    rk.load, for Python to read it again (_check_doubtful): a real that is
    not finite (NaN, nan, -INF: DuckDB's parser takes every spelling; JSON
    none, but 1e400, infinity to both), a null (or a missing key) in a
    field of _NOT_NULL; else 0."""
    fractions, odd, lists = _doubts(kind, x, depth, name)  # `name`: the list `x` is an item of
    case = (f"case when {' or '.join(fractions) or 'false'} then 2 when {' or '.join(odd) or 'false'} then 1 else 0 end"
            if fractions or odd else None)
    return f"greatest({', '.join(filter(None, (case, *lists)))})" if case or lists else "0"


def _doubts(kind: Any, x: str, depth: int, name: str) -> tuple[list[str], list[str], list[str]]:
    """_doubt's conditions over `x`: a fraction (2), a doubtful value (1), and each list's code."""
    if isinstance(kind, list):
        each = f"e{depth}"
        inner = _doubt(kind[0], each, depth + 1, name)  # (its fields' names, `name` their list's)
        return [], [], [] if inner == "0" else [f"coalesce(list_max(list_transform({x}, lambda {each}: {inner})), 0)"]
    if isinstance(kind, dict):
        found: tuple[list[str], list[str], list[str]] = ([], [], [])
        for n, k in kind.items():
            # A field of a list's item: checked against its list's _NOT_NULL (only there a null says something).
            field = f"{name}.{n}" if name in _NOT_NULL else n
            for mine, theirs in zip(found, _doubts(k, f"{x}.{_quoted(n)}", depth, field)):
                mine.extend(theirs)
        return found
    owner, _, field = name.rpartition(".")
    odd = [f"{x} is null"] if field in _NOT_NULL.get(owner, ()) else []
    if kind == "BIGINT":  # (not a call's token ids: neither build reads them as numbers)
        return [_FRACTION.format(x=x)], odd, []
    if kind == "DOUBLE":
        return [], [*odd, f"not isfinite({x})"], []
    if isinstance(kind, str) and kind.startswith("MAP(VARCHAR, DOUBLE"):
        weight_null = " or v is null" if name == "reward_weights" else ""  # (a reward or metric may be None)
        return [], [f"list_bool_or(list_transform(map_values({x}), lambda v: not isfinite(v){weight_null}))"], []
    return [], odd, []


class WholeSource(NamedTuple):
    """A build's trace file for DuckDB to parse at once (Engine.whole_rows;
    a first open's, or the first ask's of a table without text:
    columns._whole_source): a descriptor of it the Engine owns and closes
    (a copy of the build's own: a part still running after Ctrl-C ended
    the build reads the same file, not a closed or reused descriptor), the
    threads to parse it on and the tables its parts build (their fields are
    the ones read: Engine.read_ahead)."""

    fd: int
    threads: int
    tables: tuple[str, ...]

    @property
    def path(self) -> str:
        return f"/proc/self/fd/{self.fd}"


class Engine:
    """One in-memory DuckDB database for the parts of a build, opened when
    the first part asks for it: a database is costly to open and close,
    a part's own connection to it (a cursor: its own temporary tables)
    is not, and a million rollouts are twenty parts. `threads`: DuckDB's,
    for the whole database (None: one a core). Closed once the build is
    over and the last connection is given back: a part still running when
    Ctrl-C ended the build keeps it open until it ends (DuckDB 1.3 leaves a
    query hanging when the database is closed under it)."""

    def __init__(self, threads: int | None = None, source: WholeSource | None = None) -> None:
        self._threads = threads
        self._database: Any = None
        self._lent = 0
        self._closing = False
        self._lock = threading.Lock()
        self._files: list[int] = []  # memfds a part gave back, for the next (_part_file)
        self._source = source
        self._reading = threading.Lock()
        self._whole: tuple[dict[str, Any] | None, int] | None = None  # (fields, rows) of table `whole`, once read
        self._whole_readers: set[int] = set()  # the connections (id) whose part reads its rows from `whole`
        self._whole_passed = False  # a part past `whole`'s rows asked: once its readers are done, it goes
        self._parsing: Any = None  # the connection parsing the source into `whole`, while one does (close)

    def connection(self) -> Any:
        with self._lock:
            if self._database is None:
                database = duckdb.connect()
                database.execute("set enable_progress_bar = false")
                if self._threads:
                    database.execute(f"set threads = {int(self._threads)}")
                database.execute("set arrow_large_buffer_size = true")  # text out as large_string, as the store keeps it
                self._database = database
            self._lent += 1
            return self._database.cursor()

    def give_back(self, connection: Any) -> None:
        try:
            connection.close()
        finally:
            with self._lock:
                self._lent -= 1
                self._whole_readers.discard(id(connection))
                self._drop_whole_when_done()
            self._close_when_free()

    def close(self) -> None:
        """Closed once the connections lent are given back; the source's
        parse, where one runs, is interrupted (its parts are not coming, or
        read their own bytes) and one not yet begun is not begun (_read_whole)."""
        with self._lock:
            self._closing = True
            if self._parsing is not None:  # (under the lock: the parse's connection is lent until it lets go)
                self._parsing.interrupt()
        self._close_when_free()

    def _close_when_free(self) -> None:
        with self._lock:
            if not self._closing or self._lent:
                return
            database, self._database = self._database, None
            files, self._files = self._files, []
            source, self._source = self._source, None
        if database is not None:
            database.close()
        for fd in files + ([source.fd] if source is not None else []):
            os.close(fd)

    def read_ahead(self) -> None:
        """The source parsed into table `whole` now, on the calling thread,
        for the parts to come (whole_rows): a first open starts it while it
        finds its first part's lines, so DuckDB's parse does not wait for
        them. Nothing where there is no source, the build is over or a part
        began the parse."""
        with self._lock:
            if self._source is None or self._closing:
                return
        try:
            con = self.connection()
        except duckdb.Error:  # (the parts find the same and say so)
            return
        try:
            self._read_whole(con, _fields(self._source.tables), wait=False)
        finally:
            self.give_back(con)

    def whole_rows(self, con: Any, fields: dict[str, Any], first: int, count: int) -> bool:
        """Whether table `whole` holds the source's lines `first` to
        `first + count` parsed (_parsed) with `fields` (WholeSource: the
        file whose lines from its start are this build's parts); if so, the
        part of connection `con` reads them there until it is given back.
        The source is parsed once, by read_ahead or else by the first part
        to ask (the other parts wait: they read it too), on the source's
        threads: a part's own bytes copied into a file in memory cost the
        kernel new pages to hold them and a second copy, which the source in
        the page cache does not. Where DuckDB refuses a
        line, no part's: each reads its own bytes, and the one holding the
        line is refused alone, as where there is no source; so do parts
        past its lines (lines written since). Once one of those has asked
        and the parts reading `whole` are given back, it is dropped."""
        if self._source is None:
            return False
        self._read_whole(con, fields)
        with self._lock:
            read, rows = self._whole or (None, 0)
            if read is fields and first + count <= rows:
                self._whole_readers.add(id(con))
                return True
            self._whole_passed = True
            self._drop_whole_when_done()
            return False

    def _read_whole(self, con: Any, fields: dict[str, Any], wait: bool = True) -> None:
        """Table `whole`: the source parsed with `fields` on connection
        `con`, once (whole_rows); `wait`: for a parse begun on another
        connection (else back at once). No LIMIT in the query: DuckDB runs a
        reader under one on one thread (the source's bytes are bounded:
        _whole_source)."""
        source = self._source
        assert source is not None  # (a build with one: its connections lent, it is not let go)
        if not self._reading.acquire(blocking=wait):
            return
        try:
            if self._whole is not None:
                return
            self._whole = (None, 0)  # (what the parts find where DuckDB refuses a line, or close interrupts it)
            try:
                con.execute(f"set threads = {int(source.threads)}")  # (set back below: the others wait)
                try:
                    with self._lock:
                        if self._closing:  # (an interrupt before the query begins, DuckDB forgets)
                            return
                        self._parsing = con
                    con.execute(f"create table whole as {_parsed(source.path, fields)}")
                    rows = con.execute("select count(*) from whole").fetchall()[0][0]
                finally:
                    with self._lock:
                        self._parsing = None
                    con.execute(f"set threads = {int(self._threads)}" if self._threads else "reset threads")
                self._whole = (fields, rows)
            except duckdb.Error:
                with suppress(duckdb.Error):
                    con.execute("drop table if exists whole")
        finally:
            self._reading.release()

    def _drop_whole_when_done(self) -> None:
        """(With the lock held.) Table `whole` dropped once a part past its
        rows has asked and no part reads it (whole_rows)."""
        if (self._whole_passed and not self._whole_readers and self._whole is not None
                and self._whole[0] is not None and self._database is not None):
            self._database.execute("drop table if exists whole")
            self._whole = (None, 0)  # read once, and gone

    @contextmanager
    def part_file(self, text: memoryview) -> Iterator[str]:
        """A path to a file holding `text` (_part_file), in a memfd an
        earlier part of the build gave back where there is one: writing
        over its pages costs about half of writing new ones (the kernel
        allocates and maps each new page), and a build's parts are of a
        size. A build's first parts (a first open's two side by side) pay
        for new pages however they are filled: the size set first
        (ftruncate or fallocate), sendfile or splice from the trace file
        cost as much as one pwrite or more (copy_file_range cannot cross
        into a memfd), and DuckDB reads no byte range of the trace file
        itself (a first open of a run of two parts or fewer, and the first
        ask of a table without text, have it read the whole file instead:
        whole_rows). Nor did a pipe save the copy's time: DuckDB reading the
        part from a pipe a thread fills by splice from the trace file (no
        copy, no new pages) cost a first open (two parts side by side) as
        much CPU as the memfd did, a part alone less; nor does DuckDB read
        a Python file object any faster (one read of it all, copied twice)."""
        if not _MEMFD:
            with _part_file(text) as path:
                yield path
            return
        with self._lock:
            fd = self._files.pop() if self._files else None
        fd = os.memfd_create("rollkit-part", os.MFD_CLOEXEC) if fd is None else fd
        try:
            _write_all(fd, text)
            os.ftruncate(fd, len(text))
            yield f"/proc/self/fd/{fd}"
        except BaseException:
            os.close(fd)
            raise
        with self._lock:
            if self._database is not None:
                self._files.append(fd)
                return
        os.close(fd)


# Whether the rollouts' agent and wait times are integers, as the Python
# build infers them: no rollout of the part has segments; none has a
# segment past its first that ends. Asked only with the rollouts: a first
# search reads the messages' fields, without the segments.
_TIME_FLAGS = ("bool_and(coalesce(len(t.segments), 0) = 0), bool_and(len(list_filter(range(1, "
               "coalesce(len(t.segments), 0)), lambda i: t.segments[i].\"end\" is not null)) = 0)")


def native_tables(lines: Any, ordinal: int, offsets: Any, lengths: Any, columns: dict[str, tuple[str, ...]],
                  types: dict[str, str], tables: tuple[str, ...], engine: Engine | None = None) -> Iterator[tuple[str, Any]]:
    """`tables` of a part, one after the other (name, Arrow table, before
    the store's string and metadata touches), from `lines` (a pyarrow string
    array, one trace a line), their first ordinal and each line's byte
    offset and length. The rollouts alone are parsed from the fields they
    read (_ROLLOUT_FIELDS), the turns, phases or signals alone from theirs
    (_ALONE_FIELDS), LIGHT_TABLES together from those without text
    (_LIGHT_FIELDS; without the rollouts' own, _LIGHT_ALONE_FIELDS), the
    messages alone from theirs (_MESSAGE_FIELDS), the
    calls alone from theirs (_CALL_FIELDS, without the messages where no
    call's reply is one: _CALL_FIELDS_ALONE), any others from all
    (_TRACE_FIELDS). `engine`:
    the build's DuckDB (None: one of its own, on every core).
    Raises NativeUnfit, or DuckDB's error, when the Python build must do it."""
    count = len(lines)
    own = engine is None
    engine = engine or Engine()
    con = engine.connection()
    try:
        fields = _fields(tables)
        if fields is _CALL_FIELDS and not _may_follow(lines):
            fields = _CALL_FIELDS_ALONE
        _read(con, lines, ordinal, fields, engine)
        flags = _checked(con, tables, fields)
        if flags is None:  # a call's reply is a message after all (a key the text test missed): read them too
            con.execute("drop view p; drop table if exists parsed_lines")
            fields = _CALL_FIELDS
            _read(con, lines, ordinal, fields, engine)
            flags = _checked(con, tables, fields)
        kinds = _free_types(con, tables)
        signals = _Signals.of_maps([])
        if "rollouts" in tables:  # the reward and metric columns
            signals = _Signals.of_part(con) if _first(tables) else _Signals.of_maps(sorted(row[0] for row in con.execute(
                "select distinct k from (select 'reward.' || unnest(map_keys(t.rewards)) as k from p union all "
                "select 'metric.' || unnest(map_keys(t.metrics)) as k from p)").fetchall()))
        queries = _queries(_expressions(kinds, signals, "messages" in fields), signals)
        for table in tables:
            arrow = _fetch_arrow(con.sql(queries[table]))
            if table == "rollouts":  # a row a line, in order
                arrow = arrow.set_column(arrow.column_names.index("_offset"), "_offset", _int64s(offsets)) \
                    .set_column(arrow.column_names.index("_length"), "_length", _int64s(lengths))
            yield table, _typed(arrow, table, columns[table], types, kinds, dict(zip(("agent_time", "wait_time"),
                                                                                     flags)))
    finally:
        engine.give_back(con)
        if own:
            engine.close()


def _checked(con: Any, tables: tuple[str, ...], fields: dict[str, Any]) -> list[bool] | None:
    """Raise NativeUnfit where a line is no trace (or holds a role no
    message has, where the messages table is made); the rollouts' two time
    flags (_TIME_FLAGS); None where the calls were read without the
    messages (_CALL_FIELDS_ALONE) and a call's reply is one of them. One
    pass over the part."""
    times = _TIME_FLAGS if "rollouts" in tables else "false, false"
    refused = f"{_broken(fields)} or {_BAD_ROLE}" if "messages" in tables else _broken(fields)
    follows = f"bool_or({_FOLLOWS})" if fields is _CALL_FIELDS_ALONE else "false"
    broken, *flags, follow = con.execute(f"select count(*) filter (where {refused}), {times}, {follows} "
                                         "from p").fetchall()[0]
    if broken:
        raise NativeUnfit(f"{broken} lines lack a field the tables need, or hold a role no message has")
    return None if follow else flags


_NUMBERED_REQUEST = re.compile(rb'"request_messages":\s*[-0-9]')
# How much of a part's text _may_follow looks at: a run's lines are alike, and
# looking through a whole part where no call's reply is a message cost an
# eighth of building its calls.
_FOLLOW_PROBE = 1 << 20


def _may_follow(lines: Any) -> bool:
    """Whether the part's first lines (_FOLLOW_PROBE bytes) hold a call whose
    reply is the message after its request: one that gives a call's
    `request_messages` as a number. Where none does, the calls are read
    without the messages, most of a line's text; _checked makes sure from
    the values (such a call further on, or a name written with an escape:
    read again, with the messages). Python's re over the bytes: DuckDB's
    contains and Arrow's count_substring took longer."""
    text = memoryview(lines.buffers()[2])
    return _NUMBERED_REQUEST.search(text[:_FOLLOW_PROBE]) is not None


def _read(con: Any, lines: Any, ordinal: int, fields: dict[str, Any], engine: Engine) -> None:
    """The part's lines parsed into view p: each line's `_ordinal` and its
    `fields` as the struct `t` (`_offset` and `_length` null: native_tables
    sets the rollouts'). DuckDB's
    newline-delimited reader parses them from a file of their bytes, not
    json_transform over the lines: that keeps the first of a key written
    twice, which this reader refuses in every object it reads, as it
    refuses a value it cannot cast (a line longer than its 16 MB too), and
    a line that is not UTF-8: the part goes to the Python build, which
    reads such a line as rk.load does. The file is the build's source
    itself, read whole once for all its parts (Engine.whole_rows), where
    the engine has one and DuckDB read it; else a file in memory of the
    part's bytes (_part_file). `lines` need not be valid UTF-8."""
    count = len(lines)
    if engine.whole_rows(con, fields, ordinal, count) and _aligned(con, lines, ordinal):
        # The part's rows of the source's (rowid: the line's ordinal, blank lines not counted as the parts count them).
        rows = f"(select rowid - {int(ordinal)} as _row, t, _doubt from whole where rowid >= {int(ordinal)} " \
               f"and rowid < {int(ordinal) + count})"
    else:
        _read_part(con, lines, fields, engine)
        rows = "(select rowid as _row, t, _doubt from parsed_lines)"
    made, doubt, doubtful = con.execute("select count(*), max(_doubt), list(_row) filter (where _doubt = 1) "
                                        f"from {rows}").fetchall()[0]
    if doubt == 2:
        raise NativeUnfit("an integer field holds a fraction")
    if made != count:
        raise NativeUnfit(f"{made} rows read from {count} lines")
    # Read as text only now: the reader refused a line that is not UTF-8 (no check of its own before).
    _check_strict(con, lines)
    _check_doubtful(lines, doubtful or [])
    # _offset and _length: the rollouts' own, set from `offsets` and `lengths` when they are fetched.
    con.execute(f"create temp view p as select _row + {int(ordinal)} as _ordinal, null::BIGINT as _offset, "
                f"null::BIGINT as _length, t from {rows}")


def _parsed(source: str, fields: dict[str, Any]) -> str:
    """SQL of the lines of `source` (a path) parsed: each line's `fields` as
    the struct `t`, and what _doubt says of it, a row a line, in order.
    The reader keeps the lines' order and makes a row of each line that is
    not blank: a row's rowid, once stored, is its line's place. Integers
    are read as reals (DuckDB's reader makes 2.5 2), checked (_doubt),
    then typed."""
    columns = ", ".join(f"{_literal(name)}: {_literal(kind)}" for name, kind in _columns(fields, True).items())
    return (f"select parsed::{_duck_type(fields)} as t, {_doubt(fields, 'parsed')} as _doubt "
            f"from read_json({_literal(source)}, format = 'newline_delimited', records = 'true', "
            f"columns = {{{columns}}}) as parsed")


def _read_part(con: Any, lines: Any, fields: dict[str, Any], engine: Engine) -> None:
    """The part's lines parsed (_parsed) into temp table parsed_lines, from a file in memory of their bytes."""
    count = len(lines)
    bounds = np.frombuffer(lines.buffers()[1], dtype=np.int64)[lines.offset:lines.offset + count + 1]
    with engine.part_file(memoryview(lines.buffers()[2])[int(bounds[0]):int(bounds[-1])]) as path:
        # A temp table: a view would be the database's, shared by the parts built side by side.
        con.execute(f"create temp table parsed_lines as {_parsed(path, fields)}")


def _aligned(con: Any, lines: Any, ordinal: int) -> bool:
    """Whether the source's rows from `ordinal` are the part's lines: its
    first and last lines' ids (Python's json) are those rows' ids. The
    parts and DuckDB's reader count the same lines as blank (whitespace
    alone) and DuckDB refuses a line that holds more or less than one
    value; this catches a file changed between the two readings."""
    try:
        ids = [json.loads(lines[k].as_py()).get("id") for k in (0, len(lines) - 1)]
    except (ValueError, AttributeError, RecursionError):  # (a part of lines rk.load refuses: read alone)
        return False
    read = con.execute(f"select t.id from whole where rowid = {int(ordinal)} or rowid = {int(ordinal) + len(lines) - 1} "
                       "order by rowid").fetchall()
    return [row[0] for row in read] * (2 if len(lines) == 1 else 1) == ids


@contextmanager
def _part_file(text: memoryview) -> Iterator[str]:
    """A path to a file holding `text`: a file in memory (Linux: memfd, read
    by DuckDB through /proc, no disk), else a temporary file. DuckDB reads it
    at its own speed, without Python: through a Python buffer (fsspec) it
    read slower and held the part twice."""
    if _MEMFD:
        fd = os.memfd_create("rollkit-part", os.MFD_CLOEXEC)
        try:
            _write_all(fd, text)
            yield f"/proc/self/fd/{fd}"
        finally:
            os.close(fd)
        return
    with tempfile.NamedTemporaryFile(prefix="rollkit-part-", suffix=".jsonl") as f:
        _write_all(f.fileno(), text)
        yield f.name


_MEMFD = hasattr(os, "memfd_create") and os.path.isdir("/proc/self/fd")


def _write_all(fd: int, text: memoryview) -> None:
    """`text` written at the file's start (pwrite: the offset of a memfd written before does not matter)."""
    done = 0
    while done < len(text):
        done += os.pwrite(fd, text[done:], done)


# What DuckDB's parser takes that JSON (and every Python reader) does not,
# looked for in the lines' text: NaN and Infinity. A line holding one of
# these words is parsed again, by Python's json; if it refuses it, the
# Python build reads the part, and names the line as rk.load does. Not
# looked for in the text (DuckDB reads them too): nan or inf in other
# spellings (their letters are in most lines; in a real the tables read,
# _doubt finds them) and a comma before a closing bracket (looking for
# four patterns cost a sizeable share of a part's build). Nor in Python,
# where the bytes already are: bytes.find runs at memchr's speed only for
# one byte; for two or three (',}', 'nan') it compares at most positions,
# slower than DuckDB's contains, and a comma is in most of a line's bytes.
_LENIENT = ("NaN", "Infinity")


def _check_strict(con: Any, lines: Any) -> None:
    """Raise NativeUnfit when a line holds what DuckDB reads and JSON does not (_LENIENT)."""
    texts = pa.table({"line": lines})  # read by name below (DuckDB's replacement scan)
    test = " or ".join(f"contains(line, {_literal(text)})" for text in _LENIENT)
    for (line,) in con.execute(f"select line from texts where {test}").fetchall():
        if _not_as_parsed(line):
            raise NativeUnfit("a line holds NaN or Infinity, which JSON does not have")


def _check_doubtful(lines: Any, rows: list[int]) -> None:
    """Raise NativeUnfit when a line _doubt doubted (`rows`: their places in
    the part) reads otherwise in rk.load. Parsed with orjson first: a part
    of lines written without a call's running totals has every line doubted."""
    if not rows:
        return
    try:
        import orjson
    except ImportError:
        orjson = None
    for row in rows:
        line = lines[row].as_py()
        try:
            record = orjson.loads(line) if orjson is not None else None
        except ValueError:  # (orjson refuses 1e400, which JSON has)
            record = None
        if _not_as_parsed(line, record):
            raise NativeUnfit("a line holds a number JSON does not have, or null where a call's number belongs")


def _not_as_parsed(line: str, record: Any = None) -> bool:
    """Whether rk.load reads `line` (parsed: `record`, None: not yet)
    otherwise than DuckDB's parser: Python's json refuses it (NaN, nan,
    -inf...), a call or a segment is null, holds null in a field of
    _NOT_NULL or lacks one of _REQUIRED, or a weight is null. (1e400 is
    JSON: infinity to both.)"""
    if record is None:
        try:
            record = json.loads(line, parse_constant=_not_json)
        except (ValueError, RecursionError):
            return True
    if not isinstance(record, dict):
        return False
    weights = record.get("reward_weights")
    return any(isinstance(items, list) and any(_refused_item(item, keys, _REQUIRED.get(name, ())) for item in items)
               for items, name, keys in ((record.get(name), name, keys) for name, keys in _NOT_NULL.items())) \
        or (isinstance(weights, dict) and None in weights.values())


def _refused_item(item: Any, keys: tuple[str, ...], required: tuple[str, ...]) -> bool:
    """Whether rk.load refuses a call or a segment for what _doubt looks at:
    no object (null: DuckDB's reader makes it a null struct), a null in
    `keys`, or one of `required` missing."""
    return not isinstance(item, dict) or any(item.get(k, 0) is None for k in keys) \
        or any(k not in item for k in required)


def _not_json(constant: str) -> None:
    raise ValueError(f"{constant} is not JSON")


def _int64s(values: Any) -> Any:
    """An Arrow int64 array of a NumPy array's values (pa.array would import pandas first, to look for its types)."""
    values = np.ascontiguousarray(values, dtype=np.int64)
    return pa.Array.from_buffers(pa.int64(), len(values), [None, pa.py_buffer(values)])


def _fetch_arrow(relation: Any) -> Any:
    fetch = getattr(relation, "to_arrow_table", None) or relation.arrow  # DuckDB 2 / 1
    return fetch()


def _typed(arrow: Any, table: str, order: tuple[str, ...], types: dict[str, str],
           kinds: dict[tuple[str, str], str | None], int_times: dict[str, bool]) -> Any:
    """The Arrow types the Python build gives these values: a column all
    missing is a null column (a number column when Python held NaN there)."""
    extra = [n for n in arrow.column_names if n not in order]
    if arrow.num_rows == 0:
        return pa.table({name: pa.nulls(0) for name in order})
    arrays = {}
    for name in (*order, *extra):
        column = arrow.column(name)
        kind = types.get(name)
        if kind == "float64" or name in extra or (name in _NAN_FREE and column.null_count == len(column)):
            target = pa.float64()
        elif table == "rollouts" and name in int_times:
            target = pa.int64() if int_times[name] else pa.float64()
        elif column.null_count == len(column):
            target = pa.null()
        elif kind is not None:
            target = getattr(pa, kind)()
        else:
            target = {pa.int32(): pa.int64()}.get(column.type, column.type)
        if target == pa.string():  # the store keeps text as large_string, as DuckDB gave it: no copy
            target = pa.large_string()
        if target == pa.null():
            arrays[name] = pa.nulls(len(column))
        else:
            arrays[name] = _nan_as_null(column.cast(target) if column.type != target else column)
    return pa.table(arrays)


def _nan_as_null(column: Any) -> Any:
    """A real-number column's NaN (infinity less infinity: a time of 1e400)
    as missing, as the Python build's Arrow conversion makes it (from_pandas)."""
    if not pa.types.is_floating(column.type) or not pc.any(pc.is_nan(column)).as_py():
        return column
    return pc.if_else(pc.is_nan(column), pa.scalar(None, column.type), column)
