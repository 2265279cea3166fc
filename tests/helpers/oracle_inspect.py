"""The oracle for inspect-ai logs: `rk.load` of a log against what
inspect-ai's own reader (`inspect_ai.log.read_eval_log`) returns for it,
field by field, every difference listed.

What is compared, per sample and epoch (a trace per sample, found by its
`info["sample_id"]` and `info["epoch"]`):

- every message: role, text (inspect's `.text`), reasoning (each reasoning
  part's text, or its summary when redacted, never the encrypted blob),
  the content parts (text, reasoning with its signature / summary /
  redaction flag, images by their reference, any other part whole, in
  order), tool calls (id, function, arguments), tool results (the call
  they answer, the function, a ToolCallError's type and message);
- every model call the agent made (the model events outside the scorers),
  failed attempts included: whether it answered, its error, usage (cache
  reads and writes, reasoning tokens, and the whole prompt and reply: their
  sum is inspect's `total_tokens` whenever inspect recorded one, whatever
  the version's convention for `input_tokens`), start and end, stop reason;
  the grader calls a scorer made, by count;
- every score (a scorer's value read as inspect's `value_to_float` reads
  it; one scorer with one value is the reward, otherwise each is a metric),
  the limit, the error.

A log inspect's reader refuses whole, rollkit refuses too, saying that
inspect cannot read it; read with errors="skip", it gives the samples
inspect's own sample model accepts one by one, compared as above.

The expectations are written here from inspect's objects, not from
rollkit's reading of them; a difference is a string naming the file, the
sample, the field, inspect's value and rollkit's.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import rollkit as rk


def _when(moment: Any) -> float | None:
    from datetime import datetime, timezone

    if moment is None:
        return None
    if isinstance(moment, str):
        moment = datetime.fromisoformat(moment)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.timestamp()


def _their_part(part: Any) -> tuple[Any, ...]:
    if part.type == "text":
        return ("text", part.text)
    if part.type == "reasoning":
        return ("reasoning", part.reasoning, part.summary or None, part.signature or None, bool(part.redacted))
    if part.type == "image":
        return ("image", part.image, part.detail if part.detail not in (None, "auto") else None)
    return (part.type, {k: v for k, v in part.model_dump(mode="json").items() if k != "type" and v is not None})


def _our_part(part: Any) -> tuple[Any, ...]:
    if part.type == "text":
        return ("text", part.text)
    if part.type == "reasoning":
        return ("reasoning", part.reasoning, part.summary, part.signature, part.redacted)
    if part.type == "image":
        return ("image", part.image, part.detail if part.detail not in (None, "auto") else None)
    return (part.type, {k: v for k, v in part.data.items() if v is not None})


def _their_reasoning(message: Any) -> str | None:
    if isinstance(message.content, str):
        return None
    readable = [(p.summary if p.redacted else (p.reasoning or p.summary)) for p in message.content
                if p.type == "reasoning"]
    return "\n".join(r for r in readable if r) or None


def _their_parts(message: Any) -> list[tuple[Any, ...]]:
    """The parts as rollkit is to keep them: a plain string is one text part."""
    if isinstance(message.content, str):
        return [("text", message.content)] if message.content else []
    return [_their_part(p) for p in message.content]


def _our_parts(message: Any) -> list[tuple[Any, ...]]:
    if getattr(message, "parts", None) is not None:
        return [_our_part(p) for p in message.parts]
    reasoning = getattr(message, "reasoning", None)
    return ([("reasoning", reasoning, None, None, False)] if reasoning else []) + (
        [("text", message.content)] if message.content else [])


def _scoring(events: list[Any]) -> list[bool]:
    spans: set[str] = set()
    depth = 0
    out = []
    for e in events:
        if e.event == "span_begin" and (e.type in ("scorers", "scorer") or e.parent_id in spans):
            spans.add(e.id)
        if e.event == "step" and e.type in ("scorers", "scorer"):
            depth += 1 if e.action == "begin" else -1
        out.append(depth > 0 or getattr(e, "span_id", None) in spans)
    return out


def _compare(found: list[str], where: str, field: str, theirs: Any, ours: Any) -> None:
    if theirs != ours:
        found.append(f"{where} {field}: inspect {theirs!r:.200} != rollkit {ours!r:.200}")


def _messages(found: list[str], where: str, sample: Any, trace: rk.Trace) -> None:
    theirs, ours = sample.messages, trace.messages
    _compare(found, where, "message count", len(theirs), len(ours))
    failed = {e["tool_call_id"]: e["error"] for e in trace.info.get("tool_errors") or []}
    for n, (m, o) in enumerate(zip(theirs, ours)):
        at = f"{where} message {n}"
        _compare(found, at, "role", m.role, o.role)
        _compare(found, at, "text", m.text, o.content or "")
        _compare(found, at, "parts", _their_parts(m), _our_parts(o))
        if m.role == "assistant":
            _compare(found, at, "reasoning", _their_reasoning(m), o.reasoning)
            _compare(found, at, "tool calls", [(c.id, c.function, c.arguments) for c in m.tool_calls or []],
                     [(c.id, c.name, c.args()) for c in o.tool_calls])
        if m.role == "tool":
            _compare(found, at, "tool call id", m.tool_call_id, o.tool_call_id)
            _compare(found, at, "function", m.function, o.name)
            _compare(found, at, "tool error",
                     None if m.error is None else {"type": m.error.type, "message": m.error.message},
                     None if o.tool_call_id not in failed else
                     {"type": failed[o.tool_call_id]["type"], "message": failed[o.tool_call_id]["message"]})


def _calls(found: list[str], where: str, sample: Any, trace: rk.Trace) -> None:
    events = sample.events or []
    agent = [e for e, scored in zip(events, _scoring(events)) if e.event == "model" and not scored]
    graders = sum(1 for e, scored in zip(events, _scoring(events)) if e.event == "model" and scored)
    _compare(found, where, "model call count", len(agent), len(trace.model_calls))
    _compare(found, where, "grader calls", graders, (trace.info.get("scorer_usage") or {}).get("model_calls", 0))
    for n, (e, c) in enumerate(zip(agent, trace.model_calls)):
        at = f"{where} model call {n}"
        _compare(found, at, "answered", e.error is None, c.committed)
        ours = None if c.error is None else c.error.message if e.error == c.error.message else (
            f"{c.error.type}: {c.error.message}")  # rollkit writes a failed call's error so
        _compare(found, at, "error", e.error, ours)
        start = _when(e.timestamp)
        end = _when(e.completed)
        if end is None:
            end = start + e.output.time if e.output.time is not None else start
        _compare(found, at, "start", start, c.start)
        _compare(found, at, "end", max(end, start), c.end)
        if e.error is None and e.output.choices:
            _compare(found, at, "stop reason", e.output.choices[0].stop_reason, c.finish_reason)
        u = e.output.usage
        if u is None:
            _compare(found, at, "usage", None, c.usage.input_tokens)
            continue
        _compare(found, at, "cache read", u.input_tokens_cache_read, c.usage.cache_read_tokens)
        _compare(found, at, "cache write", u.input_tokens_cache_write, c.usage.cache_write_tokens)
        _compare(found, at, "reasoning tokens", u.reasoning_tokens, getattr(c.usage, "reasoning_tokens", None))
        prompt = [u.input_tokens, u.input_tokens + (u.input_tokens_cache_read or 0) + (u.input_tokens_cache_write or 0)]
        if c.usage.input_tokens not in prompt:
            found.append(f"{at} input: rollkit {c.usage.input_tokens} is neither inspect's input_tokens nor it with "
                         f"the cached tokens ({prompt})")
        if u.total_tokens:  # the whole prompt and the whole reply: the provider's total, in every version
            _compare(found, at, "input + output (inspect's total_tokens)", u.total_tokens,
                     (c.usage.input_tokens or 0) + (c.usage.output_tokens or 0))
        else:
            _compare(found, at, "input", prompt[1], c.usage.input_tokens)
            _compare(found, at, "output", u.output_tokens, c.usage.output_tokens)


def _scores(found: list[str], where: str, sample: Any, trace: rk.Trace) -> None:
    from inspect_ai.scorer import value_to_float

    as_float = value_to_float()
    values: dict[str, float | None] = {}
    for name, score in (sample.scores or {}).items():
        if isinstance(score.value, dict):
            values.update({f"{name}.{k}": None if v is None else float(as_float(v)) for k, v in score.value.items()})
        else:
            values[name] = None if score.value is None else float(as_float(score.value))
    if sample.error is not None:
        ours = trace.info.get("source_rewards") or {
            k: v for k, v in trace.metrics.items() if k in values}
    elif len(values) == 1:
        ours = dict(trace.rewards)
    else:
        ours = {k: v for k, v in trace.metrics.items() if k in values}
        _compare(found, where, "rewards of a sample without one score", {"reward": None}, dict(trace.rewards))
    _compare(found, where, "scores", values, ours)
    limit = sample.limit
    # A log rollkit wrote keeps rollkit's name of the stop condition beside inspect's limit.
    named = (sample.metadata or {}).get("rollkit_stop_condition") or (limit and f"{limit.type} limit")
    _compare(found, where, "limit", None if limit is None else (named, limit.limit),
             None if trace.stop_condition is None else (trace.stop_condition, trace.info.get("inspect_limit")))
    error = sample.error
    mine = trace.errors[0] if trace.errors else None
    _compare(found, where, "error", None if error is None else (error.message, error.traceback),
             None if mine is None else (mine.message if error is None or error.message == mine.message
                                        else f"{mine.type}: {mine.message}", mine.traceback))
    _compare(found, where, "outcome", "failed" if error is not None else "stopped" if limit is not None else "ok",
             trace.outcome.kind)


def _accepted_samples(path: Path) -> list[Any]:
    """The samples of a log inspect's reader refuses whole that its sample model accepts alone."""
    import zipfile

    import zipfile_zstd  # noqa: F401
    from inspect_ai.log import EvalSample

    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            raws = [json.loads(archive.read(n)) for n in archive.namelist() if n.startswith("samples/")]
    else:
        raws = json.loads(path.read_text())["samples"]
    accepted = []
    for raw in raws:
        try:
            accepted.append(EvalSample.model_validate(raw))
        except ValueError:
            continue
    return accepted


def differences(path: Path, traces: list[rk.Trace] | None = None) -> list[str]:
    """Every difference between `rk.load(path)` (or `traces`, as read from
    it) and inspect's reading of the log."""
    from inspect_ai.log import read_eval_log

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # inspect's notes on a log of an older version
        try:
            log = read_eval_log(str(path))
            samples = log.samples or []
        except Exception:  # noqa: BLE001  refused whole: rollkit refuses it too, and reads with errors="skip"
            try:  # the samples inspect's sample model accepts one by one
                rk.load(path)
                return [f"{path.name}: inspect refuses it, rollkit reads it"]
            except rk.TraceFileError as error:
                if "inspect-ai cannot read this log" not in str(error):
                    return [f"{path.name}: inspect refuses it, rollkit's refusal does not say so: {error}"]
            log, samples = read_eval_log(str(path), header_only=True), _accepted_samples(path)
            if traces is None:
                traces = rk.load(path, errors="skip")
    if traces is None:
        traces = rk.load(path)
    found: list[str] = []
    _compare(found, path.name, "trace count", len(samples), len(traces))
    ours = {(str(t.info["sample_id"]), t.info["epoch"]): t for t in traces}
    for sample in samples:
        where = f"{path.name} sample {sample.id!r} epoch {sample.epoch}"
        trace = ours.get((str(sample.id), sample.epoch))
        if trace is None:
            found.append(f"{where}: no trace")
            continue
        _compare(found, where, "model", (sample.metadata or {}).get("rollkit_agent", {}).get("model", log.eval.model),
                 trace.agent.get("model"))
        _compare(found, where, "target", sample.target, trace.task.data.get("target"))
        _messages(found, where, sample, trace)
        _calls(found, where, sample, trace)
        _scores(found, where, sample, trace)
    return found


if __name__ == "__main__":  # python tests/helpers/oracle_inspect.py LOG...: print the differences
    import sys

    total = 0
    for name in sys.argv[1:]:
        diffs = differences(Path(name))
        total += len(diffs)
        print(f"{name}: {len(diffs)} differences")
        for d in diffs[:40]:
            print("  ", d)
    print(json.dumps({"files": len(sys.argv) - 1, "differences": total}))
