"""HTML for traces and conversations, as a notebook shows them.

`chat_html(messages)` draws a conversation as chat bubbles (user, assistant,
tool calls and their results, a reply's reasoning, long texts folded);
`trace_html(trace)` draws a whole trace: summary, transcript (with
`logprobs=True`, each reply whose call kept its token logprobs coloured
token by token, the less likely the redder), the replies
the transcript no longer holds (a program that rewrote its history, a
side call such as a title), signals, phases. The rollout panel and the
trace browser reuse both, so a trace looks the same live, loaded back from a
file, or picked in the browser.

Everything a model, a user, a tool or a task wrote passes through
`html.escape` before it becomes HTML: a reply holding `<script>` is shown as
text, never run. This module produces strings only; it holds no widget and
runs nothing, and imports nothing beyond the standard library and the
trace, so the core `Trace._repr_html_` can use it without the notebook extra.
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterable
from typing import Any

from ..core.prices import dollars
from ..core.trace import PHASES, Trace

__all__ = ["chat_html", "message_html", "tokens_html", "token_chances", "trace_html", "status_html", "error_html", "STYLE"]

# Texts longer than this (or with more lines) are folded behind a summary
# line, so one huge tool result does not push the conversation off screen.
FOLD_CHARS = 600
FOLD_LINES = 12

STYLE = """<style>
.rk-trace, .rk-chat {font-family: var(--jp-ui-font-family, sans-serif); font-size: 13px;}
.rk-msg {margin: 4px 0; padding: 6px 9px; border-radius: 8px; max-width: 92%; white-space: pre-wrap;
  word-break: break-word; border: 1px solid rgba(0,0,0,.08);}
.rk-msg .rk-role {font-size: 11px; font-weight: 600; opacity: .65; margin-bottom: 2px; white-space: normal;}
.rk-user {background: #e8f0fe; margin-left: auto;}
.rk-assistant {background: #f1f3f4;}
.rk-system {background: #fff8e1; font-style: italic;}
.rk-tool {background: #e6f4ea; font-family: var(--jp-code-font-family, monospace); font-size: 12px;}
.rk-reasoning {font-size: 12px; opacity: .75; font-style: italic; border-left: 2px solid #bbb; padding-left: 6px;}
.rk-call {font-family: var(--jp-code-font-family, monospace); font-size: 12px; color: #1a5e20;}
.rk-msg details summary {cursor: pointer; opacity: .8;}
.rk-table {border-collapse: collapse; margin: 4px 0 10px 0;}
.rk-table td, .rk-table th {padding: 2px 10px 2px 0; text-align: left; border-bottom: 1px solid rgba(0,0,0,.08);}
.rk-missing {color: #b00020; font-style: italic;}
.rk-ok {color: #1e7e34; font-weight: 600;} .rk-bad {color: #b00020; font-weight: 600;}
.rk-stopped {color: #8a6d00; font-weight: 600;}
.rk-bar {display: block; height: 9px; background: #4e79a7;}
.rk-bartrack {display: inline-block; width: 120px; height: 9px; background: #e0e0e0; vertical-align: middle;}
.rk-tok {border-radius: 2px;}
</style>"""


def _fold(text: str) -> str:
    """Escaped text, folded behind its first line when long."""
    escaped = html.escape(text)
    if len(text) <= FOLD_CHARS and text.count("\n") < FOLD_LINES:
        return escaped
    first = text.strip().splitlines()[0] if text.strip() else ""
    preview = html.escape(first[:120])
    return (
        f"<details><summary>{preview}… ({len(text)} characters, click to unfold)</summary>"
        f"{escaped}</details>"
    )


def token_chances(tokens: Any) -> list[tuple[str, float, float]]:
    """A reply's tokens (`TokenLogprobs` with `text` and `logprobs`) as
    (text, logprob, probability); [] when the call kept no such tokens."""
    if tokens is None or not tokens.text or not tokens.logprobs or len(tokens.text) != len(tokens.logprobs):
        return []
    return [(text, logprob, math.exp(min(0.0, logprob))) for text, logprob in zip(tokens.text, tokens.logprobs)]


def tokens_html(tokens: Any) -> str:
    """A reply's tokens, each escaped and shaded by its probability (red:
    unlikely, clear: certain), its logprob in the tooltip; "" when the call
    kept no such tokens."""
    return "".join(f'<span class="rk-tok" style="background: rgba(220,40,40,{0.75 * (1 - p):.2f})" '
                   f'title="logprob {logprob:.3f} (p {p:.3f})">{html.escape(text)}</span>'
                   for text, logprob, p in token_chances(tokens))


def message_html(message: Any, tokens: Any = None, *, fold_reasoning: bool = False) -> str:
    """One message as a chat bubble; a reply whose `tokens` (its call's
    `TokenLogprobs`) are given is shown coloured by logprob (`tokens_html`):
    in place of its text when they spell it, else below it. With
    `fold_reasoning` a reply's reasoning is folded behind one line."""
    role = getattr(message, "role", "?")
    content = getattr(message, "content", None) or ""
    parts = []
    if role == "tool":
        label = f"tool result · {getattr(message, 'name', None) or getattr(message, 'tool_call_id', '')}"
    else:
        label = role
    parts.append(f'<div class="rk-role">{html.escape(label)}</div>')
    reasoning = getattr(message, "reasoning", None)
    if reasoning and fold_reasoning:
        parts.append(f'<details class="rk-reasoning"><summary>thinking ({len(reasoning):,} characters)</summary>'
                     f"{html.escape(reasoning)}</details>")
    elif reasoning:
        parts.append(f'<div class="rk-reasoning">thinking: {_fold(reasoning)}</div>')
    shaded = tokens_html(tokens)
    spelled = bool(shaded) and "".join(tokens.text) == content
    if content:
        parts.append(shaded if spelled else _fold(content))
    if shaded and not spelled:
        parts.append(f'<details class="rk-tokens"><summary>tokens by logprob</summary>{shaded}</details>')
    for call in getattr(message, "tool_calls", None) or ():
        parts.append(
            f'<div class="rk-call">→ calls <b>{html.escape(call.name)}</b>({_fold(call.arguments)})</div>'
        )
    if role == "assistant" and not content and not getattr(message, "tool_calls", None):
        parts.append('<span class="rk-missing">(empty reply)</span>')
    css = role if role in ("user", "assistant", "system", "tool") else "assistant"
    return f'<div class="rk-msg rk-{css}" data-role="{html.escape(role)}">{"".join(parts)}</div>'


def error_html(text: str) -> str:
    """A refusal or failure shown beside a widget's controls, escaped."""
    return f'<span style="color:#b00020">{html.escape(text)}</span>'


def chat_html(messages: Iterable[Any], *, style: bool = True, tokens: dict[int, Any] | None = None) -> str:
    """A conversation as chat bubbles; `tokens` maps a reply's id() to its
    call's `TokenLogprobs`, to colour it by logprob (see `message_html`)."""
    tokens = tokens or {}
    body = "".join(message_html(m, tokens.get(id(m))) for m in messages)
    return f'{STYLE if style else ""}<div class="rk-chat">{body}</div>'


def _fmt(value: float | None, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return '<span class="rk-missing">missing</span>'
    return f"{value:.{digits}f}" if isinstance(value, float) else html.escape(str(value))


def status_html(trace: Trace) -> str:
    """A one-line verdict from the trace's outcome: ok, stopped (and why),
    failed (and with what), aborted, not closed."""
    outcome = trace.outcome
    if outcome.kind == "failed":
        return (
            f'<span class="rk-bad">failed</span> · {html.escape(outcome.error_type or "")}: '
            f"{html.escape(outcome.message or '')}"
        )
    if outcome.kind == "aborted":
        return '<span class="rk-bad">aborted</span> (not scored)'
    if outcome.kind == "incomplete":
        return '<span class="rk-stopped">not closed</span>'
    value = trace.scored_reward
    reward = "" if value is None else f" · reward {value:.3f}"
    if outcome.kind == "stopped":
        return f'<span class="rk-stopped">stopped</span> by {html.escape(outcome.reason or "")}{reward}'
    return f'<span class="rk-ok">ok</span>{reward}'


def _signals_html(trace: Trace) -> str:
    rows = []
    for kind, values in (("reward", trace.rewards), ("metric", trace.metrics)):
        for name, value in values.items():
            weight = f"× {trace.reward_weights.get(name, 1.0):g}" if kind == "reward" else ""
            why = trace.signal_errors.get(name, "")
            rows.append(
                f"<tr><td>{kind}</td><td>{html.escape(name)}</td><td>{_fmt(value)}</td>"
                f"<td>{weight}</td><td>{html.escape(why)}</td></tr>"
            )
    if not rows:
        reason = "not scored: the run failed" if trace.errors else "no rewards or metrics"
        return f'<p class="rk-missing">{reason}</p>'
    return (
        '<table class="rk-table"><tr><th>kind</th><th>name</th><th>value</th><th>weight</th>'
        f"<th>why missing</th></tr>{''.join(rows)}</table>"
    )


def _phases_html(trace: Trace) -> str:
    # Keyed by the PHASES name, never Span.name: a loaded trace file can hold
    # any text in `name`, and the key is what the row means.
    spans = [(p, trace.phases[p]) for p in PHASES if p in trace.phases]
    if not spans:
        return '<p class="rk-missing">no phase started</p>'
    longest = max((s.duration or 0.0) for _, s in spans) or 1.0
    rows = []
    for phase, span in spans:
        duration = span.duration
        width = 0 if duration is None else max(1, int(120 * duration / longest))
        note = ""
        if phase == "agent":
            note = f"model {trace.model_time * 1000:.1f} ms · harness {trace.harness_time * 1000:.1f} ms"
        shown = "running" if duration is None else f"{duration * 1000:.1f} ms"
        rows.append(
            f"<tr><td>{phase}</td><td>{shown}</td>"
            f'<td><span class="rk-bartrack"><span class="rk-bar" style="width:{width}px"></span></span></td>'
            f"<td>{note}</td></tr>"
        )
    return f'<table class="rk-table">{"".join(rows)}</table>'


def _other_replies_html(trace: Trace) -> str:
    """The replies of model calls that the transcript does not hold (each
    under the call that got it), or "" when it holds them all."""
    shown = {id(message) for message in trace.messages}
    rows = []
    for call in trace.model_calls:
        reply = call.reply
        if reply is None or id(reply) in shown or reply in trace.messages:
            continue
        about = [f"call {call.index}", f"segment {call.segment}"]
        if call.finish_reason:
            about.append(f"finish {call.finish_reason}")
        if call.error is not None:
            about.append(f"then failed: {call.error.type}")
        rows.append(f'<div class="rk-role">{html.escape(" · ".join(about))}</div>{message_html(reply)}')
    if not rows:
        return ""
    return (f'<details open class="rk-other-replies"><summary><b>replies the transcript does not hold</b> '
            f"({len(rows)}: the program rewrote its history or made side calls)</summary>{''.join(rows)}</details>")


def _limit(value: Any) -> str:
    return "no limit" if value is None else html.escape(str(value))


def _count(value: int | None) -> str:
    """A token total; NA when a turn did not report its usage."""
    return "NA" if value is None else str(value)


# What an importer may have guessed (`trace.info["inferred"]`), in words.
_INFERRED = {"outcome": "how the run ended (the source does not say)",
             "task.key": "the task's key (the source names no task)",
             "model_calls.start": "when each model call started (the time of the message before it)"}


def _inferred_html(trace: Trace) -> str:
    """What the importer guessed rather than read, named as inferred."""
    guessed = trace.info.get("inferred")
    if not isinstance(guessed, list) or not guessed:
        return ""
    words = [_INFERRED.get(name) or (f"{name.rsplit('.', 1)[-1].replace('_', ' ')} of message "
                                     f"{name.split('.')[1]}" if name.startswith("messages.") else name)
             for name in guessed]
    return ('<p class="rk-inferred"><i>inferred by the importer, not read from the source:</i> '
            f"{html.escape('; '.join(str(w) for w in words))}</p>")


def _reply_tokens(trace: Trace) -> dict[int, Any]:
    """Each reply's call's token logprobs, by the reply's id()."""
    return {id(call.reply): call.tokens for call in trace.model_calls
            if call.reply is not None and call.tokens is not None}


def trace_html(trace: Trace, *, logprobs: bool = False, transcript: str | None = None) -> str:
    """A whole trace as HTML: summary, transcript, signals, phases. With
    `logprobs=True` a reply whose call kept its token logprobs is coloured
    by them (off by default: it is a lot of markup). `transcript` is HTML
    drawn in place of the chat (the rollout page's, rollkit.notebook.timeline)."""
    limits = trace.limits or {}
    inferred = trace.info.get("inferred") if isinstance(trace.info.get("inferred"), list) else []
    summary = (
        '<table class="rk-table">'
        f"<tr><th>trace</th><td>{html.escape(trace.id)}</td><th>task</th>"
        f"<td>{html.escape(trace.task.type)} · {html.escape(trace.task.key)}</td></tr>"
        f"<tr><th>agent</th><td>{html.escape(str(trace.agent.get('name', '?')))}</td>"
        f"<th>result</th><td>{status_html(trace)}{' <i>(inferred)</i>' if 'outcome' in inferred else ''}</td></tr>"
        f"<tr><th>turns</th><td>{trace.num_turns} / {_limit(limits.get('max_turns'))}</td>"
        f"<th>tokens</th><td>in {_count(trace.num_input_tokens)} · out {_count(trace.num_output_tokens)} · "
        f"total {_count(trace.num_total_tokens)} / {_limit(limits.get('max_total_tokens'))}</td></tr>"
        f"<tr><th>agent time</th><td>{trace.agent_time:.3f} s / "
        f"{_limit(trace.timeouts.get('agent'))}</td><th>segments</th><td>{len(trace.segments)}</td></tr>"
        f"<tr><th>cost</th><td>{dollars(trace.cost_usd)} / {_limit(limits.get('max_cost_usd'))}</td>"
        f"<th>priced by</th><td>{html.escape(str(trace.info.get('cost_from', '-')))}</td></tr>"
        "</table>"
    )
    warnings = "".join(f'<p class="rk-stopped">warning: {html.escape(w)}</p>' for w in trace.warnings)
    chat = transcript if transcript is not None else chat_html(
        trace.messages, style=False, tokens=_reply_tokens(trace) if logprobs else None)
    return (
        f'{STYLE}<div class="rk-trace" data-trace="{html.escape(trace.id)}">'
        f"<b>rollkit trace</b>{summary}{_inferred_html(trace)}{warnings}"
        f"<details open><summary><b>transcript</b> ({len(trace.messages)} messages)</summary>"
        f"{chat}</details>"
        f"{_other_replies_html(trace)}"
        f"<details open><summary><b>signals</b></summary>{_signals_html(trace)}</details>"
        f"<details><summary><b>phases</b></summary>{_phases_html(trace)}</details>"
        "</div>"
    )
