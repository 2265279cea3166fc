"""inspect-ai eval logs (`.eval` and `.json`) read as rollkit traces, with
inspect-ai's own models and reader (the optional extra
`pip install 'rollkit[inspect]'`). A finished log is read directly (a
`.eval` from its zip members): each sample's messages, scores, usage,
error and limit through inspect's models, its events (which inspect's
reader validates whole, most of its time) raw for the few fields rollkit
keeps; a log in any other shape (still being written, an older sample
shape, a member that does not parse) goes through inspect's
`read_eval_log`, which also says what is wrong with a damaged one.

Read: one trace per sample and epoch. Messages with tool calls and results
come from the sample's messages, their content parts kept apart
(`rollkit.core.messages.split_parts`: reasoning never merged into the text);
one model call per assistant reply from its model events (usage, start and
end), and a failed call for each model event with an error (an attempt
inspect retried, or the one the sample died on); phases from its spans (`init` is
setup, `solvers` the agent, `scorers` scoring); each score is a reward by
its scorer's name (inspect's "C"/"I"/"P" read as 1, 0, 0.5, a dict of values
as one reward per key); a sample error is an error of the harness, a limit
the stop condition. `trace.info` keeps the file, sample id, epoch, the
eval's task and run id, and `example_id` / `repeat` / `rollout_id` as a
rollkit batch writes them. The task cannot be rebuilt in rollkit (its
scorer lives in inspect), so a fork needs `task=`.

A model-graded scorer's grader calls (model events inside the `scorers`
span, or a `scorer` span or step in older logs) are not the agent's: they
are counted apart (`info["scorer_usage"]`). Per-call usage keeps inspect's
cache reads and writes and reasoning tokens, read as the inspect version
that wrote the log counted them (`_usage`): rollkit's input is the whole
prompt, its output the whole reply. A tool
result with a ToolCallError is listed in `info["tool_errors"]`. One scorer
with one value is the reward; several are separate signals (metrics, named
in `info["scorers"]`), never summed.

Which reader ran is recorded on every trace: `info["inspect_reader"]` is
`{"name": "rollkit"}` for the direct read, `{"name": "inspect-ai", "why":
...}` when the log went to inspect's reader (the reason the direct reader
gave it up), `"inspect-ai, sample by sample"` for errors="skip" on a log
inspect refuses whole. Nothing falls back silently. Writing a log is
rollkit.interop.formats.inspect_write; this module reads only.
"""

from __future__ import annotations

import contextlib
import copy
import json
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ...core.messages import Usage
from ...core.trace import ErrorInfo, TaskRef, Trace
from ...core import safe_read
from . import docparse
from .census import merged_notes, noted
from ._inspect_api import log_api, off_loop
from ._build import Call, Where, build, messages as to_messages, number, outcome_kept
from ...core.dependencies import inspect_ai_constants, inspect_ai_log, inspect_ai_model, inspect_ai_scorer

__all__ = ["sniff", "read"]

_JSON_HEAD = re.compile(rb'\s*\{\s*"version"\s*:\s*\d+\s*,\s*"status"\s*:')


def sniff(path: Path) -> bool:
    """An .eval zip, or a .json log: opening as inspect writes one, or (its
    keys in another order: jq -S sorts them) a document holding an `eval`
    record beside its `version` and `status`."""
    head = safe_read.read_head(path, 64 * 1024)
    if head.startswith(b"PK\x03\x04"):  # a zip: inspect's .eval holds header.json, samples/, _journal/
        return b"_journal/" in head or b"header.json" in head or b"samples/" in head
    if _JSON_HEAD.match(head) is not None:
        return True
    try:
        document = docparse.document(path)
    except ValueError:
        return False
    return (isinstance(document, dict) and isinstance(document.get("eval"), dict)
            and {"version", "status"} <= document.keys())


def _seconds(moment: Any) -> float | None:
    """A time as inspect writes it (an ISO string, a datetime, or seconds
    since the epoch) in seconds; a time without a zone is UTC, as inspect
    reads it."""
    if moment is None:
        return None
    if isinstance(moment, (int, float)) and not isinstance(moment, bool):
        return float(moment)
    if isinstance(moment, str):
        moment = datetime.fromisoformat(moment)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.timestamp()


def _phases(events: list[Any]) -> dict[str, tuple[float, float | None]]:
    """init/solvers/scorers spans as setup/agent/scoring."""
    names = {"init": "setup", "solvers": "agent", "scorers": "scoring"}
    open_spans: dict[str, tuple[str, float]] = {}
    phases: dict[str, tuple[float, float | None]] = {}
    for event in events:
        kind = getattr(event, "event", None)
        if kind == "span_begin" and getattr(event, "type", None) in names:
            open_spans[event.id] = (names[event.type], _seconds(event.timestamp))  # type: ignore[assignment]
        elif kind == "span_end" and getattr(event, "id", None) in open_spans:
            phase, start = open_spans.pop(event.id)
            phases[phase] = (start, _seconds(event.timestamp))
    return phases


# The inspect version from which every provider's input_tokens leave out the
# cache reads (inspect-ai #3341, first in 0.3.184): before it, the OpenAI
# API family (OpenAI's chat, responses and o1 APIs, the OpenAI-compatible
# providers, Grok) counted them in input_tokens as well as in
# input_tokens_cache_read; Anthropic and Bedrock always kept them apart,
# Google reported no cache reads.
_CACHE_READS_APART = (0, 3, 184)
_CACHE_READS_ALWAYS_APART = ("anthropic", "bedrock")
# The inspect version from which Gemini's output_tokens hold its thinking
# (inspect-ai #4427, first in 0.3.245); before it they were the candidates'
# tokens only, the thoughts counted in reasoning_tokens alone.
_THOUGHTS_IN_OUTPUT = (0, 3, 245)


def _version(log: Any) -> tuple[int, ...] | None:
    """The inspect-ai version that wrote the log, as numbers ("0.3.95.dev16+g65" -> (0, 3, 95));
    None when the log does not say (logs of before 0.3.4x)."""
    text = str((getattr(log.eval, "packages", None) or {}).get("inspect_ai") or "")
    numbers = re.match(r"(\d+)\.(\d+)\.(\d+)", text)
    return tuple(int(n) for n in numbers.groups()) if numbers else None


def _usage(usage: Any, version: tuple[int, ...] | None, model: str | None) -> Usage | None:
    """inspect's usage of one call as rollkit's, read as the inspect version
    that wrote it counted (see `_CACHE_READS_APART`, `_THOUGHTS_IN_OUTPUT`):
    rollkit's input is the whole prompt (inspect's input_tokens plus the
    cache reads and writes it leaves out), its output the whole reply
    (reasoning included), reasoning_tokens the reasoning part of it."""
    if usage is None:
        return None
    provider = (model or "").split("/", 1)[0]
    old = version is None or version < _CACHE_READS_APART
    read, written, reasoning = usage.input_tokens_cache_read, usage.input_tokens_cache_write, usage.reasoning_tokens
    included = read if old and read and provider not in _CACHE_READS_ALWAYS_APART else 0
    output = usage.output_tokens
    if provider == "google" and reasoning and (version is None or version < _THOUGHTS_IN_OUTPUT):
        output += reasoning
    return Usage(input_tokens=usage.input_tokens + (read or 0) - included + (written or 0), output_tokens=output,
                 cache_read_tokens=read, cache_write_tokens=written, reasoning_tokens=reasoning)


def _call_error(event: Any, start: float | None) -> ErrorInfo:
    """A model event's error (a failed attempt, retried or not) as a
    provider error: its type from the exception inspect wrote
    ("RateLimitError('...')" -> RateLimitError), else ModelError."""
    text = str(event.error)
    plain = re.match(r"([A-Za-z_][\w.]*): (.*)\Z", text, re.S)  # "Type: message", as rollkit writes it
    kind = plain or re.match(r"([A-Za-z_][\w.]*)\(", text)
    return ErrorInfo(type=kind.group(1).rsplit(".", 1)[-1] if kind else "ModelError", boundary="provider",
                     message=plain.group(2) if plain else text, phase="agent",
                     traceback=getattr(event, "traceback", None) or "", time=start if start is not None else 0.0)


def _scoring(events: list[Any]) -> list[bool]:
    """For each event, whether a scorer made it: inside a `scorers` or
    `scorer` span (inspect >= 0.3.7x) or between a scorer step's begin and
    end (the `step` events of older logs)."""
    spans: set[str] = set()
    steps = 0
    out = []
    for event in events:
        kind = getattr(event, "event", None)
        if kind == "span_begin" and (getattr(event, "type", None) in ("scorers", "scorer")
                                     or getattr(event, "parent_id", None) in spans):
            spans.add(event.id)
        elif kind == "step" and getattr(event, "type", None) in ("scorers", "scorer"):
            steps = max(0, steps + (1 if getattr(event, "action", None) == "begin" else -1))
        out.append(steps > 0 or getattr(event, "span_id", None) in spans)
    return out


def _calls(events: list[Any], version: tuple[int, ...] | None) -> tuple[list[Call], list[Call]]:
    """The agent's model calls, failed attempts included, and the scorers'
    (a model-graded scorer's grader calls: not the agent's)."""
    calls: list[Call] = []
    grader: list[Call] = []
    for event, scored in zip(events, _scoring(events)):
        if getattr(event, "event", None) != "model":
            continue
        usage = getattr(event.output, "usage", None)
        start = _seconds(event.timestamp)
        end = _seconds(getattr(event, "completed", None))
        if end is None and start is not None and getattr(event.output, "time", None) is not None:
            end = start + event.output.time
        choice = event.output.choices[0] if event.output.choices else None
        failed = getattr(event, "error", None) is not None
        (grader if scored else calls).append(Call(
            usage=_usage(usage, version, getattr(event, "model", None)), start=start, end=end,
            finish_reason=None if failed else getattr(choice, "stop_reason", None),
            error=_call_error(event, start) if failed else None,
        ))
    return calls, grader


def _signals(scores: dict[str, Any] | None, where: Where) -> tuple[dict[str, float | None] | None, dict[str, Any]]:
    """(rewards, metrics): each scorer's value is a signal under its own
    name. A sample scored by one scorer with one value has that as its
    reward; several scorers (or one with a dict of values) are separate
    signals, kept as metrics, never summed into a reward the source does not
    have."""
    values = _scores(scores, where)
    if values is None:
        return None, {}
    if len(values) == 1:
        return values, {}
    return None, values


def _scores(scores: dict[str, Any] | None, where: Where) -> dict[str, float | None] | None:
    if not scores:
        return None

    as_float = inspect_ai_scorer.value_to_float()  # inspect's own reading of "C", "I", "P", "N" and numbers
    out: dict[str, float | None] = {}
    for name, score in scores.items():
        if name.startswith("metric."):  # a rollkit metric, as an older rollkit wrote it
            continue
        value = score.value
        if isinstance(value, dict):
            for key, item in value.items():
                out[f"{name}.{key}"] = _score(item, as_float, where, f"scores.{name}.value.{key}")
        else:
            out[name] = _score(value, as_float, where, f"scores.{name}.value")
    return out


def _score(value: Any, as_float: Any, where: Where, field_path: str) -> float | None:
    if value is None or isinstance(value, (bool, int, float)):
        return number(value, where, field_path)
    if isinstance(value, str):
        return float(as_float(value))
    raise where.error(field_path, f"is a {type(value).__name__}, not a score rollkit can read as a number")


def _error(sample: Any) -> list[ErrorInfo]:
    """The sample's error: an error of the harness, its type from the last
    line of the traceback, at the time the sample completed. (When rollkit
    wrote the log, the errors it had come back whole: `outcome_kept`.)"""
    if sample.error is None:
        return []
    last = (sample.error.traceback or "").strip().splitlines()[-1:] or [""]
    kind = last[0].split(":", 1)[0].rsplit(".", 1)[-1] if ":" in last[0] else "EvalError"
    return [ErrorInfo(type=kind or "EvalError", boundary="harness", message=sample.error.message, phase="agent",
                      traceback=sample.error.traceback or "", time=_seconds(sample.completed_at) or 0.0)]


def _kept(sample: Any) -> dict[str, Any]:
    """What rollkit wrote in a sample's metadata when it wrote the log (its
    trace id, task type, agent, metrics, stop condition), for what inspect
    has no field of its own; {} for a log inspect wrote."""
    metadata = getattr(sample, "metadata", None)
    if not isinstance(metadata, dict) or not isinstance(metadata.get("rollkit_trace_id"), str):
        return {}
    return metadata


def _total(calls: list[Call], count: str) -> int | None:
    """The calls' tokens (`count`: "input_tokens"); None (NA, never a partial sum) when one did not report it."""
    values = [getattr(c.usage, count) if c.usage is not None else None for c in calls]
    return None if any(v is None for v in values) else sum(values)


def _trace(log: Any, sample: Any, path: Path, reader: dict[str, str]) -> Trace:
    where = Where(path, f"sample {sample.id!r} epoch {sample.epoch}")
    raw = [m.model_dump(mode="json") for m in sample.messages]
    conversation = to_messages(raw, where, "messages")
    prompt = sample.input if isinstance(sample.input, str) else next(
        (m.content for m in conversation if m.role == "user"), None)
    limit = getattr(sample, "limit", None)
    phases = _phases(sample.events or [])
    calls, grader = _calls(sample.events or [], _version(log))
    rewards, signals = _signals(sample.scores, where)
    tool_errors = [{"tool_call_id": m.get("tool_call_id"), "error": m["error"]} for m in raw
                   if m.get("role") == "tool" and m.get("error")]
    if "agent" not in phases and sample.started_at:
        phases["agent"] = (_seconds(sample.started_at), _seconds(sample.completed_at))  # type: ignore[assignment]
    kept = _kept(sample)
    metrics = kept.get("rollkit_metrics")
    if not isinstance(metrics, dict):
        metrics = {**({"working_time": sample.working_time} if sample.working_time is not None else {}),
                   **{name.removeprefix("metric."): _score(score.value, inspect_ai_scorer.value_to_float(), where,
                                                           f"scores.{name}.value")
                      for name, score in (sample.scores or {}).items() if name.startswith("metric.")}}
    stop = kept.get("rollkit_stop_condition") if limit is not None else None
    trace = build(
        fmt="inspect", where=where, conversation=conversation, calls=calls,
        task=TaskRef(type=str(kept.get("rollkit_task_type") or f"inspect:{log.eval.task}"), key=str(sample.id),
                     data={"prompt": prompt, "target": sample.target}),
        agent=kept["rollkit_agent"] if isinstance(kept.get("rollkit_agent"), dict) else {
            "name": log.eval.solver or "inspect", "model": log.eval.model, "harness": "inspect-ai"},
        rewards=rewards, phases=phases,
        stop_condition=(stop if isinstance(stop, str) and stop else f"{limit.type} limit") if limit is not None else None,
        metrics={**signals, **metrics},
        info={**({"tool_errors": tool_errors} if tool_errors else {}),
              **({"scorers": list(signals)} if signals else {}),
              **({"inspect_limit": limit.limit} if limit is not None else {}),
              **({"scorer_usage": {"input_tokens": _total(grader, "input_tokens"),
                                   "output_tokens": _total(grader, "output_tokens"),
                                   "model_calls": len(grader)}} if grader else {}),
              **({"source_usage": {name: u.model_dump(exclude_none=True) for name, u in sample.model_usage.items()}}
                 if sample.model_usage else {}),
              "inspect_reader": dict(reader), "sample_id": sample.id, "epoch": sample.epoch, "eval_task": log.eval.task, "run_id": log.eval.run_id,
              "example_id": str(sample.id), "repeat": sample.epoch - 1, "rollout_id": f"{sample.id}#{sample.epoch - 1}",
              **merged_notes(getattr(log, "census_notes", {}), getattr(sample, "census_notes", {}))},
        # How a rollkit trace ended, when rollkit wrote the log; else the sample's error.
        **{"errors": _error(sample), **outcome_kept(sample.metadata)},
        trace_id=kept.get("rollkit_trace_id"),
    )
    return trace


class _Fields:
    """The fields of one raw inspect record (an event, a model output) that
    the conversion reads, as attributes; a field the record lacks is None
    (inspect's default for each of them)."""

    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)


_EVENT_FIELDS = {"span_begin": ("id", "type", "parent_id", "timestamp", "span_id"),
                 "span_end": ("id", "timestamp", "span_id"),
                 "step": ("type", "action", "timestamp", "span_id"),
                 "model": ("timestamp", "completed", "span_id", "model", "error", "traceback")}


_OTHER_EVENTS: dict[str, _Fields] = {}


class _NotPlain(Exception):
    """A log the direct reader leaves to inspect's own reader."""


def _raw_event(raw: Any, usage_model: Any) -> _Fields:
    """One event of a sample's JSON as the conversion reads it: its kind,
    and for spans and model calls the fields `_phases` and `_calls` use."""
    if not isinstance(raw, dict) or not isinstance(raw.get("event"), str):
        raise _NotPlain("an event that is not an object with a kind")
    kind = raw["event"]
    wanted = _EVENT_FIELDS.get(kind)
    if wanted is None:  # an event the conversion only counts past: one shared record per kind
        other = _OTHER_EVENTS.get(kind)
        if other is None:
            other = _Fields(event=kind)
            if len(_OTHER_EVENTS) < 256:  # inspect has a few dozen kinds; a hostile file's millions are not kept
                _OTHER_EVENTS[kind] = other
        return other
    fields = {name: raw.get(name) for name in wanted}
    if kind == "model":
        output = raw.get("output")
        if not isinstance(output, dict):
            raise _NotPlain("a model event without its output")
        usage = output.get("usage")
        choices = output.get("choices") or []
        if not isinstance(choices, list) or not all(isinstance(c, dict) for c in choices):
            raise _NotPlain("a model output whose choices are not objects")
        fields["output"] = _Fields(usage=None if usage is None else usage_model.model_validate(usage),
                                   time=output.get("time"),
                                   choices=[_Fields(stop_reason=c.get("stop_reason")) for c in choices])
    return _Fields(event=kind, **fields)


def _raw_sample(data: Any, models: Any, at: str) -> _Fields:
    """A sample's JSON as the conversion reads it. The parts rollkit keeps
    whole (messages, scores, usage, error, limit) go through inspect's own
    models, so they read exactly as inspect's reader gives them; the
    events, which inspect validates whole and rollkit reads a few fields
    of, are read raw. A sample in an older shape (a `score` or
    `transcript` field inspect migrates) is left to inspect's reader."""
    chat, usage_model, score_model, error_model, limit_model, output_model, context = models
    if not isinstance(data, dict) or "score" in data or "transcript" in data:
        raise _NotPlain("a sample in an older shape")
    sample_id, epoch, events = data.get("id"), data.get("epoch"), data.get("events") or []
    if not isinstance(sample_id, (int, str)) or isinstance(sample_id, bool) or type(epoch) is not int:
        raise _NotPlain("a sample without an id and epoch")
    if not isinstance(events, list):
        raise _NotPlain("events that are not a list")
    working = data.get("working_time")
    if working is not None and (isinstance(working, bool) or not isinstance(working, (int, float))):
        raise _NotPlain("a working time that is not a number")
    scores = data.get("scores")
    if _parted(data.get("output")):  # not kept, but a sample inspect refuses is not read past it
        output_model.model_validate(data["output"], context=context())
    return _Fields(
        id=sample_id, epoch=epoch, input=data.get("input"), target=data.get("target"),
        messages=chat.validate_python(data.get("messages") or [], context=context()),
        events=[_raw_event(e, usage_model) for e in events],
        scores=None if scores is None else {name: score_model.model_validate(score, context=context())
                                            for name, score in scores.items()},
        error=None if data.get("error") is None else error_model.model_validate(data["error"]),
        limit=None if data.get("limit") is None else limit_model.model_validate(data["limit"]),
        started_at=data.get("started_at"), completed_at=data.get("completed_at"),
        working_time=None if working is None else float(working), metadata=data.get("metadata"),
        census_notes=noted("inspect", data, at, "samples.*"),
        model_usage={name: usage_model.model_validate(u) for name, u in (data.get("model_usage") or {}).items()},
    )


def _parted(output: Any) -> bool:
    """Whether a sample's output is to go through inspect's model: one whose
    reply holds content parts (where a writer other than inspect goes
    wrong: the R package vitals writes an empty part as `{"type": {}}`), or
    one of another shape. A reply of plain text has nothing inspect could
    refuse that rollkit reads; validating it cost a sixth of a read."""
    if output is None:
        return False
    choices = output.get("choices") if isinstance(output, dict) else None
    if not isinstance(choices, list):
        return True
    return not all(isinstance(c, dict) and isinstance(c.get("message"), dict)
                   and isinstance(c["message"].get("content"), str) for c in choices)


_ZSTD = 93  # the zip compression method inspect writes (zstandard)


def _member(archive: Any, path: Path, info: Any) -> bytes:
    """A zip member's bytes, never inflated past the size its directory
    declares (which `safe_read.check_zip` bounded). Python's reader keeps
    to that for stored and deflated members; for a zstandard member (the
    zipfile_zstd patch inflates all of it at once) the compressed bytes are
    read here and inflated through a stream cut at the declared size, and
    the CRC checked."""
    import struct
    import zlib

    if info.compress_type in (0, 8):  # stored, deflated
        return archive.read(info)  # type: ignore[no-any-return]
    if info.compress_type != _ZSTD:  # bzip2, lzma: Python inflates those whole too; inspect's reader reads them
        raise _NotPlain("a member compressed with a method inspect does not write")
    import zstandard

    with open(path, "rb") as f:
        f.seek(info.header_offset)
        local = f.read(30)
        if len(local) != 30 or local[:4] != b"PK\x03\x04":
            raise _NotPlain("a member without its local header")
        name_length, extra_length = struct.unpack("<HH", local[26:30])
        f.seek(info.header_offset + 30 + name_length + extra_length)
        compressed = f.read(info.compress_size)
    out = bytearray()
    with zstandard.ZstdDecompressor().stream_reader(compressed) as stream:
        while len(out) <= info.file_size:
            chunk = stream.read(min(1 << 20, info.file_size + 1 - len(out)))
            if not chunk:
                break
            out += chunk
    if len(out) != info.file_size or zlib.crc32(out) != info.CRC:
        raise _NotPlain("a member that does not inflate to the size and CRC its directory declares")
    return bytes(out)


def _read_directly(path: Path, api: Any, zipped: bool) -> tuple[Any, list[_Fields]]:
    """(the log's header, its samples) of a finished log, read without
    validating each sample whole (inspect's reader spent most of its time
    on events rollkit does not keep): a `.eval` from its zip members, a
    `.json` from the document. Raises _NotPlain (or any error) for a log it
    leaves to inspect's reader: no header (a `.eval` still being written),
    a log version other than 2, a sample in an older shape, a member it
    cannot inflate or parse."""
    from pydantic import TypeAdapter

    # Deserializing (no new message ids), without inspect's cache of equal
    # messages (a hash of each message's JSON: a third of the read, and
    # rollkit shares nothing through it).
    models = (TypeAdapter(list[inspect_ai_model.ChatMessage]), inspect_ai_model.ModelUsage, inspect_ai_scorer.Score, inspect_ai_log.EvalError, inspect_ai_log.EvalSampleLimit, inspect_ai_model.ModelOutput,
              lambda: {inspect_ai_constants.DESERIALIZING: True})
    if zipped:
        import zipfile

        import zipfile_zstd  # noqa: F401  (inspect's dependency: zstandard members, as inspect writes them)

        with zipfile.ZipFile(path) as archive:
            names = {info.filename: info for info in archive.infolist()}  # a re-logged member: the last, as inspect
            if "header.json" not in names:
                raise _NotPlain("no header: a log still being written")
            header = safe_read.loads(_member(archive, path, names["header.json"]))
            as_written = copy.deepcopy(header)  # inspect's model migrates what it validates, in place
            log = _header(header, api, inspect_ai_constants.get_deserializing_context)
            _note_header(log, as_written)
            # One member at a time, each parsed and read before the next (never all the JSON at once).
            samples = [_raw_sample(safe_read.loads(_member(archive, path, info)), models, name)
                       for name, info in names.items() if name.startswith("samples/") and name.endswith(".json")]
        # inspect's order: by epoch, then id (numbers zero-filled so they sort as numbers)
        samples.sort(key=lambda s: (s.epoch, s.id if isinstance(s.id, str) else str(s.id).zfill(20)))
        return log, samples
    document = safe_read.loads(safe_read.read_document(path))
    if not isinstance(document, dict) or not isinstance(document.get("samples") or [], list):
        raise _NotPlain("a document of another shape")
    raw = document.pop("samples", None) or []
    as_written = copy.deepcopy(document)  # inspect's model migrates what it validates, in place
    log = _header(document, api, inspect_ai_constants.get_deserializing_context)
    _note_header(log, as_written)
    return log, [_raw_sample(sample, models, f"samples.{i}") for i, sample in enumerate(raw)]


def _note_header(log: Any, header: dict[str, Any]) -> None:
    """The census's notes on the log's header (keys it does not list, what it keeps at its path),
    for every sample's trace; kept on the log object rollkit read."""
    object.__setattr__(log, "census_notes", noted("inspect", {k: v for k, v in header.items() if k != "samples"}))


def _header(header: Any, api: Any, context: Any) -> Any:
    """The log without its samples, through inspect's model (a log version
    other than 2 is left to inspect's reader)."""
    if not isinstance(header, dict) or "samples" in header:
        raise _NotPlain("a header of another shape")
    if header.get("version") != 2:
        raise _NotPlain("a log version this reader was not written for")
    return api.EvalLog.model_validate(header, context=context())


def read(path: Path, errors: str) -> list[Trace]:
    """The traces of an inspect log: read directly, else through inspect's
    reader, each trace saying which reader ran and why (`info["inspect_reader"]`)."""
    from ...core.store import TraceFileError

    api = log_api()
    with open(path, "rb") as f:
        zipped = f.read(4) == b"PK\x03\x04"
    if zipped:
        safe_read.check_zip(path)  # member and total decompressed sizes bounded before inspect inflates any
    else:
        safe_read.check_document(path)  # inspect reads the whole JSON log at once
    try:
        log, samples = _read_directly(path, api, zipped)
        return [_trace(log, sample, path, {"name": "rollkit"}) for sample in samples]
    except (TraceFileError, MemoryError):  # the conversion's refusal (a score it cannot read), as through inspect's reader
        raise
    except safe_read.TooDeep as exc:  # past a bound: inspect's reader would parse it unbounded
        raise TraceFileError(f"{path}: {exc}", path=path) from None
    except _NotPlain as exc:  # a shape the direct reader leaves to inspect's
        reader = {"name": "inspect-ai", "why": str(exc)}
    except Exception as exc:  # noqa: BLE001  one it did not foresee: inspect's reader, and its word on what is wrong
        reader = {"name": "inspect-ai", "why": f"the direct reader failed: {_refusal(exc)[1]}"}
    try:
        log = off_loop(api.read_eval_log, str(path))
    except Exception as exc:  # inspect's reader: a damaged zip, a cut file, a field of the wrong type
        field, what = _refusal(exc)
        also = ""
        if errors == "skip":
            try:
                return _each_sample_alone(path, api, zipped, {"name": "inspect-ai, sample by sample",
                                                              "why": f"inspect-ai cannot read the log whole: {what}"})
            except Exception as alone:  # noqa: BLE001  said in the error below, with the log's own refusal
                also = f"; read sample by sample: {_refusal(alone)[1]}"
        raise TraceFileError(f"{path}: inspect-ai cannot read this log{field and f' (field {field})'}: {what}{also}",
                             path=path, field=field or None,
                             hint="load with errors='skip' to read the samples inspect-ai accepts") from None
    unnoted = _note_raw(path, zipped, log)
    if unnoted:
        reader["census"] = unnoted
    return [_trace(log, sample, path, reader) for sample in (log.samples or [])]


def _note_raw(path: Path, zipped: bool, log: Any) -> str | None:
    """The census's notes for a log inspect's own reader read (whose models
    drop the keys they do not know): from the raw JSON, the header's on the
    log and each sample's on it. A member that does not parse here (inspect
    read it) adds no notes: returns why (the reader's record keeps it)."""
    try:
        if zipped:
            import zipfile

            import zipfile_zstd  # noqa: F401

            with zipfile.ZipFile(path) as archive:
                names = {info.filename: info for info in archive.infolist()}
                header = safe_read.loads(_member(archive, path, names["header.json"])) if "header.json" in names else {}
                raws = [(name, safe_read.loads(_member(archive, path, info))) for name, info in names.items()
                        if name.startswith("samples/") and name.endswith(".json")]
        else:
            header = safe_read.loads(safe_read.read_document(path))
            raws = list(enumerate(header.get("samples") or [] if isinstance(header, dict) else []))
    except Exception as exc:  # noqa: BLE001  no notes, and the reason recorded
        return f"no census notes: {_refusal(exc)[1]}"
    if isinstance(header, dict):
        _note_header(log, header)
    notes = {(raw.get("id"), raw.get("epoch")): noted("inspect", raw, at if isinstance(at, str) else f"samples.{at}",
                                                      "samples.*")
             for at, raw in raws if isinstance(raw, dict)}
    for sample in log.samples or []:
        object.__setattr__(sample, "census_notes", notes.get((sample.id, sample.epoch), {}))
    return None


def _refusal(exc: BaseException) -> tuple[str, str]:
    """(the field a pydantic ValidationError names or "", what went wrong) of inspect's refusal."""
    field = ""
    if hasattr(exc, "errors"):
        with contextlib.suppress(Exception):
            field = ".".join(str(p) for p in exc.errors()[0]["loc"])  # type: ignore[attr-defined]
    return field, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}".rstrip(": ")


def _each_sample_alone(path: Path, api: Any, zipped: bool, reader: dict[str, str]) -> list[Trace]:
    """A log inspect's reader refuses whole (errors="skip"): each sample
    through inspect's own sample model, one at a time; a sample it refuses
    is skipped with a warning naming it and the field."""
    import warnings

    log = off_loop(api.read_eval_log, str(path), True)  # the header alone
    if zipped:
        import zipfile

        import zipfile_zstd  # noqa: F401

        with zipfile.ZipFile(path) as archive:
            raws = [safe_read.loads(_member(archive, path, info)) for info in archive.infolist()
                    if info.filename.startswith("samples/") and info.filename.endswith(".json")]
    else:
        raws = (safe_read.loads(safe_read.read_document(path)) or {}).get("samples") or []
    traces = []
    for at, raw in enumerate(raws):
        try:
            sample = inspect_ai_log.EvalSample.model_validate(raw, context=inspect_ai_constants.get_deserializing_context())
        except Exception as exc:  # noqa: BLE001  inspect's refusal of this sample, said and skipped
            field, what = _refusal(exc)
            who = f"sample {raw.get('id')!r} epoch {raw.get('epoch')!r}" if isinstance(raw, dict) else "a sample"
            warnings.warn(f"{path}: {who}: inspect-ai cannot read it{field and f' (field {field})'}: {what}; "
                          "skipped", stacklevel=5)
            continue
        object.__setattr__(sample, "census_notes", noted("inspect", raw, f"samples.{at}", "samples.*"))
        traces.append(_trace(log, sample, path, reader))
    traces.sort(key=lambda t: (t.info["epoch"], str(t.info["sample_id"]).zfill(20)))
    return traces
