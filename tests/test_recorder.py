"""A trace is written through its public recorder only.

`Trace` (rollkit/core/trace.py) and `Session` (rollkit/core/session.py) keep
their own state behind underscore names; whoever records on a trace (the
rollout, the session, the conversation with a user, the importers, the Ray
backend) calls the recorder's public methods (`record_call`,
`record_conversation`, `record_outcome`, `record_user_traces`, `open_span`,
`close_open_spans`, `Session.next_call`). These tests read the source with
`ast` and fail when a module reaches another object's private name of
either class (`trace._record_call(...)`, `session._next_call = ...`), or
(one writer) when a module outside trace.py assigns, deletes or mutates in
place any field of a trace, public names included (`trace.ok = ...`,
`trace.info["x"] = ...`, `trace.errors.append(...)`): how a run ended is
written by `Trace.record_outcome` alone.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

import rollkit as rk
from rollkit.core.messages import AssistantMessage, Response, Usage
from rollkit.core.trace import Segment, TaskRef

ROOT = Path(__file__).resolve().parent.parent / "rollkit"
# The classes whose private names stay inside their module.
OWNERS = {"core/trace.py": "Trace", "core/session.py": "Session"}


def _private_names(path: Path, cls: str) -> set[str]:
    """The underscore names class `cls` of `path` defines: its methods,
    its annotated attributes and what its methods assign on `self`."""
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for item in ast.walk(node):
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    names.add(item.name)
                elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    names.add(item.target.id)
                elif (isinstance(item, ast.Attribute) and isinstance(item.value, ast.Name)
                      and item.value.id == "self" and isinstance(item.ctx, ast.Store)):
                    names.add(item.attr)
    return {n for n in names if n.startswith("_") and not n.startswith("__")}


def _reaches(source: str, private: set[str]) -> list[tuple[int, str]]:
    """(line, name) of each `x._name` in `source` whose name is in
    `private` and whose object is not `self` or `cls` (a class's own
    attribute of the same name is its business)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Attribute) and node.attr in private
                and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))):
            found.append((node.lineno, node.attr))
    return sorted(found)


def _violations() -> list[str]:
    out = []
    for owner, cls in OWNERS.items():
        private = _private_names(ROOT / owner, cls)
        assert private, f"found no private names in {cls} ({owner}): the scan reads nothing"
        for path in sorted(ROOT.rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel == owner:
                continue
            out += [f"rollkit/{rel}:{line}: {cls}.{name}" for line, name in _reaches(path.read_text(), private)]
    return out


def test_no_module_reaches_a_private_name_of_the_trace_or_the_session() -> None:
    found = _violations()
    assert found == [], (
        "a module reaches into a trace or a session by a private name; record through the public "
        "recorder (Trace.record_call, record_conversation, record_outcome, record_user_traces, open_span, "
        "close_open_spans; Session.next_call):\n" + "\n".join(found)
    )


def test_the_scan_finds_what_the_old_code_did() -> None:
    # What session.py, runs/formats/_build.py, users.py and rollout.py did before the recorder.
    old = (
        "trace._record_call(index=0)\n"
        "self.trace._record_conversation([], None)\n"
        "trace._user_traces = companions\n"
        "self.session._next_call = prefix.next_call\n"
        "self._user_traces = []\n"  # a class's own attribute of the same name: fine
    )
    # (the old code's names that no longer exist are added by hand)
    private = _private_names(ROOT / "core/trace.py", "Trace") | {"_record_call", "_record_conversation",
                                                                    "_next_call", "_user_traces"}
    assert "_last_turn" in private and "_resolve_replies" in private
    assert _reaches(old, private) == [(1, "_record_call"), (2, "_record_conversation"), (3, "_user_traces"),
                                      (4, "_next_call")]


def _reply(text: str, prompt: int, output: int) -> Response:
    return Response(message=AssistantMessage(content=text), usage=Usage(input_tokens=prompt, output_tokens=output))


def test_the_running_totals_are_the_last_committed_call_s() -> None:
    trace = rk.Trace(task=TaskRef.of(rk.Task(prompt="q")))
    trace.record_call(index=0, segment=0, start=1.0, end=2.0, response=_reply("a", 10, 5), error=None, agent_time=1.0)
    trace.record_call(index=1, segment=0, start=2.0, end=3.0, response=None, error=None, agent_time=2.0)
    trace.record_call(index=2, segment=0, start=3.0, end=4.0, response=_reply("b", 20, 7), error=None, agent_time=3.0)
    # 10 new, then 20 - (10 + 5) = 5 new: the prompt continued the sequence.
    assert (trace.num_turns, trace.num_input_tokens, trace.num_output_tokens, trace.num_total_tokens) == (2, 15, 12, 27)
    assert [c.cum_turns for c in trace.model_calls] == [1, 1, 2]
    # A trace cut to its first call (a fork's prefix, replay's view) reads its own totals.
    view = trace.model_copy(update={"model_calls": trace.model_calls[:2]})
    assert (view.num_turns, view.num_input_tokens, view.num_total_tokens) == (1, 10, 15)
    loaded = rk.Trace.model_validate_json(trace.model_dump_json())
    assert (loaded.num_turns, loaded.num_input_tokens, loaded.num_total_tokens) == (2, 15, 27)
    assert loaded == trace


def test_user_traces_are_kept_in_memory_and_none_reads_as_empty() -> None:
    trace = rk.Trace(task=TaskRef.of(rk.Task(prompt="q")))
    assert trace.user_traces == []
    trace.record_user_traces([])
    assert trace == rk.Trace.model_validate_json(trace.model_dump_json())  # none equals its saved copy
    other = trace.model_copy()
    trace.record_user_traces([other])
    assert trace.user_traces == [other]
    assert trace == rk.Trace.model_validate_json(trace.model_dump_json())  # not a field: saved copies link them
    with pytest.raises(ValueError, match="ends before it starts"):
        trace.record_call(index=0, segment=0, start=2.0, end=1.0, response=None, error=None, agent_time=0.0)
    # Kept beside the trace, and gone with it.
    from rollkit.core.trace import _USER_TRACES

    key = id(trace)
    assert _USER_TRACES[key] == [other]
    del trace
    assert key not in _USER_TRACES


# ---- typed values where modules used to agree through strings -------------------


async def test_rollout_states_are_one_enum_that_still_equals_the_old_texts() -> None:
    from rollkit.core.rollout import RolloutState

    agent = rk.Agent(model=rk.ScriptedModel(lambda request: "hi"))
    rollout = agent.rollout(rk.Task(prompt="q"))
    seen = [rollout.state]
    await rollout.open()
    seen.append(rollout.state)
    await rollout.step()
    rollout.stop("enough")
    seen.append(rollout.state)
    await rollout.close()
    seen.append(rollout.state)
    assert seen == [RolloutState.NEW, RolloutState.OPEN, RolloutState.ENDED, RolloutState.CLOSED]
    assert all(type(state) is RolloutState for state in seen)
    assert seen == ["new", "open", "ended", "closed"]  # code comparing to the texts keeps working
    assert f"{rollout.state}" == "closed" and json.dumps(rollout.state) == '"closed"'


def test_why_a_signal_is_missing_is_read_where_it_is_written() -> None:
    from rollkit.core.outcome import MissingSignal

    assert MissingSignal.of_error(MissingSignal.timed_out(5.0)) is MissingSignal.SCORING_TIMED_OUT
    assert MissingSignal.of_error("ValueError: scoring timed out") is MissingSignal.SCORING_RAISED
    assert MissingSignal.of_error("not in the source") is MissingSignal.NOT_IN_SOURCE
    assert MissingSignal.of_error(None) is MissingSignal.RETURNED_NONE
    assert [MissingSignal.of_outcome(k) for k in ("failed", "aborted", "incomplete")] == [
        "run failed", "run aborted", "not scored"]


def test_a_failed_tool_call_s_text_is_defined_once() -> None:
    from rollkit.core.tools import ToolResult

    failed = ToolResult.error("tool 'lookup' raised KeyError: 'x'")
    assert (failed.content, failed.ok) == ("error: tool 'lookup' raised KeyError: 'x'", False)
    assert ToolResult.is_error(failed.content) and not ToolResult.is_error("no error: all fine")


# ---- one writer: no module assigns a trace's fields but trace.py --------------------

from rollkit.core.trace import Trace as _Trace  # noqa: E402

# What changes a list or a dict in place.
_MUTATORS = {"append", "extend", "insert", "pop", "popitem", "clear", "update", "setdefault", "remove", "sort",
             "reverse", "__setitem__", "__delitem__"}


def _names_a_trace(node: ast.AST) -> bool:
    """An expression the package uses for a trace: a name or attribute
    spelled with "trace" (`trace`, `self.trace`, `ctx.trace`,
    `talk.trace`, `traces[0]`): the package's own naming rule, which this
    scan also holds it to."""
    if isinstance(node, ast.Name):
        return "trace" in node.id.lower()
    if isinstance(node, ast.Attribute):
        return "trace" in node.attr.lower()
    if isinstance(node, ast.Subscript):
        return _names_a_trace(node.value)
    return False


def _trace_field(node: ast.AST, fields: set[str]) -> str | None:
    """The trace field that an assignment target (or a mutated object)
    reaches: `trace.ok`, `trace.info["x"]`, `trace.model_calls[0].usage`."""
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        if isinstance(node, ast.Attribute) and node.attr in fields and _names_a_trace(node.value):
            return node.attr
        node = node.value
    return None


def _field_writes(source: str, fields: set[str]) -> list[tuple[int, str]]:
    """(line, target) of each assignment, augmented assignment, deletion
    or in-place mutation (`.append`, `.update`, `[k] = v`, ...) of a
    trace's field in `source`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        for one in _written(node):
            if _trace_field(one, fields) is not None:
                found.append((node.lineno, ast.unparse(one)))
    return sorted(found)


def _written(node: ast.AST) -> list[ast.AST]:
    """What `node` assigns, deletes or mutates in place, one target each."""
    if isinstance(node, (ast.Assign, ast.Delete)):
        targets = node.targets
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        targets = [node.target]
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _MUTATORS:
        targets = [node.func.value]
    else:
        return []
    return [one for target in targets for one in (target.elts if isinstance(target, (ast.Tuple, ast.List)) else [target])]


# The records a trace holds (rollkit/core/trace.py): a parameter typed as one
# of them holds a record some trace may already hold.
_RECORDS = {"Span", "ModelCall", "Segment", "Rewrite", "TaskRef", "UserTurn"}


def _bound_records(function: ast.AST, fields: set[str]) -> dict[str, int]:
    """Local names of `function` that hold a record a trace holds, with the
    line from which they do: bound from a trace's field (`turn =
    trace.user_turns[-1]`, `for call in trace.model_calls`), handed to a
    trace's recorder (`trace.record_segment(segment)`: from that call on),
    or a parameter typed as a trace record (`segment: Segment`)."""
    held: dict[str, int] = {}
    arguments = getattr(function, "args", None)
    for arg in (arguments.args + arguments.kwonlyargs) if arguments else []:
        annotation = ast.unparse(arg.annotation) if arg.annotation is not None else ""
        if any(name in _RECORDS for name in annotation.replace("|", " ").replace("[", " ").split()):
            held[arg.arg] = 0
    for node in ast.walk(function):
        if isinstance(node, (ast.Assign, ast.For)):
            source = node.value if isinstance(node, ast.Assign) else node.iter
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if _trace_field(source, fields) is not None:
                for target in targets:
                    for one in target.elts if isinstance(target, ast.Tuple) else [target]:
                        if isinstance(one, ast.Name):
                            held.setdefault(one.id, node.lineno)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr.startswith("record_") and _names_a_trace(node.func.value)):
            for arg in node.args:
                if isinstance(arg, ast.Name):
                    held.setdefault(arg.id, node.lineno)
    return held


def _record_writes(source: str, fields: set[str]) -> list[tuple[int, str]]:
    """(line, target) of each write to a record a trace already holds,
    reached through a local name (see `_bound_records`)."""
    found = []
    for function in ast.walk(ast.parse(source)):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        held = _bound_records(function, fields)
        for node in ast.walk(function):
            for one in _written(node):
                root = one
                while isinstance(root, (ast.Attribute, ast.Subscript)):
                    root = root.value
                if root is not one and isinstance(root, ast.Name) and node.lineno >= held.get(root.id, node.lineno + 1):
                    found.append((node.lineno, ast.unparse(one)))
    return sorted(set(found))


def _trace_writes_outside_the_recorder() -> list[str]:
    fields = set(_Trace.model_fields)
    out = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel != "core/trace.py":
            source = path.read_text()
            writes = _field_writes(source, fields) + _record_writes(source, fields)
            out += [f"rollkit/{rel}:{line}: {target}" for line, target in sorted(writes)]
    return out


def test_one_writer_no_module_assigns_a_trace_field_outside_trace_py() -> None:
    found = _trace_writes_outside_the_recorder()
    assert found == [], (
        "a module writes a trace's field by hand; write through the recorder in rollkit/core/trace.py "
        "(record_outcome for how the run ended, record_error, record_cut, record_stop, record_info, "
        "record_signal, record_layout, ...):\n" + "\n".join(found))


def test_the_one_writer_scan_finds_every_kind_of_write() -> None:
    # What rollout.py, runner.py, atif.py, scoring.py and program.py did before the recorder.
    old = (
        "self.trace.ok = False\n"
        "trace.completed = True\n"
        "trace.errors.append(error)\n"
        "ctx.trace.info['program_runs'] = runs\n"
        "trace.reward_weights[name] += 1\n"
        "del trace.phases['scoring']\n"
        "traces[0].model_calls[1].usage = usage\n"
        "trace.ok, trace.aborted = True, False\n"
        "rollout.trace.warnings.extend(more)\n"
        "span.end = now\n"  # not a trace: fine
        "self.ok = True\n"  # a field of the same name on another object: fine
        "trace.info.get('x')\n"  # a read: fine
    )
    fields = set(_Trace.model_fields)
    assert {"ok", "completed", "aborted", "info", "messages"} <= fields
    assert _field_writes(old, fields) == [
        (1, "self.trace.ok"), (2, "trace.completed"), (3, "trace.errors"), (4, "ctx.trace.info['program_runs']"),
        (5, "trace.reward_weights[name]"), (6, "trace.phases['scoring']"), (7, "traces[0].model_calls[1].usage"),
        (8, "trace.aborted"), (8, "trace.ok"), (9, "rollout.trace.warnings")]


def test_the_one_writer_scan_finds_a_record_written_through_a_local_name() -> None:
    # What rollout.py and users.py did before record_segment_end and
    # record_user_turn_similarity.
    old = (
        "def step(self):\n"
        "    segment = Segment(index=0, start=0.0)\n"
        "    segment.user_messages = 1\n"  # before the trace holds it: fine
        "    self.trace.record_segment(segment)\n"
        "    segment.turns_added = 2\n"
        "def _end_segment(self, segment: Segment) -> None:\n"
        "    segment.end = 1.0\n"
        "def talk(trace, reply):\n"
        "    turn = trace.user_turns[-1]\n"
        "    turn.similarity, turn.diverged = 0.5, True\n"
        "    for call in trace.model_calls:\n"
        "        call.usage.input_tokens += 1\n"
        "    note = {}\n"
        "    note['x'] = 1\n"  # not a trace's record: fine
    )
    fields = set(_Trace.model_fields)
    assert _record_writes(old, fields) == [
        (5, "segment.turns_added"), (7, "segment.end"), (10, "turn.diverged"), (10, "turn.similarity"),
        (12, "call.usage.input_tokens")]


def test_a_segment_s_end_and_a_replayed_turn_s_similarity_are_recorded_by_the_trace() -> None:
    trace = rk.Trace(task=TaskRef.of(rk.Task(prompt="q")))
    trace.record_segment(Segment(index=0, start=1.0, turns_before=0))
    trace.record_call(index=0, segment=0, start=1.0, end=2.0, response=_reply("a", 3, 2), error=None, agent_time=1.0)
    segment = trace.record_segment_end(0, end=2.5, charged=1.25, remaining=3.75)
    assert (segment.end, segment.charged, segment.remaining, segment.turns_added) == (2.5, 1.25, 3.75, 1)
    assert trace.segments[0] is segment
    trace.record_user_turn(rk.UserTurn(index=0, segment=1, by="replay", replying_to="a"))
    trace.record_user_turn_similarity(0, 0.25, True)
    assert (trace.user_turns[0].similarity, trace.user_turns[0].diverged) == (0.25, True)


def _ended(kind: str) -> rk.Trace:
    trace = rk.Trace(task=TaskRef.of(rk.Task(prompt="q")))
    trace.record_span("agent", 1.0, 2.0)
    outcome = {"ok": rk.Outcome.ok(), "stopped": rk.Outcome.stopped("max_turns"),
               "failed": rk.Outcome.failed("ProviderError", "provider", message="down", phase="agent"),
               "aborted": rk.Outcome.aborted("finalize"), "incomplete": rk.Outcome.incomplete()}[kind]
    trace.record_outcome(outcome)
    return trace


@pytest.mark.parametrize("kind", ["ok", "stopped", "failed", "aborted", "incomplete"])
def test_one_writer_the_outcome_written_is_the_outcome_read(kind: str) -> None:
    trace = _ended(kind)
    outcome = trace.outcome
    assert (outcome.kind, trace.ok, trace.completed) == (
        kind, kind in ("ok", "stopped"),
        kind in ("ok", "stopped", "failed"))
    assert outcome.phase == {"failed": "agent", "aborted": "finalize"}.get(kind)
    assert outcome.scored is (kind in ("ok", "stopped"))
