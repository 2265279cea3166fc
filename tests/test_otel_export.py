"""OpenTelemetry GenAI spans (rollkit.interop.exports.otel): each rollout is one
OTel trace (invoke_agent, its phases, a chat span per model call at the
call's own times, an execute_tool span per answered tool call), with the
GenAI semantic conventions' attributes, sent over OTLP/HTTP.

The spans go to a real Arize Phoenix, started here on 127.0.0.1 from the
virtualenv scripts/test.sh builds ($ROLLKIT_ORACLE_PHOENIX_PYTHON or
~/.cache/rollkit-oracles/phoenix/bin/python, made by
    python -m venv ~/.cache/rollkit-oracles/phoenix
    ~/.cache/rollkit-oracles/phoenix/bin/pip install arize-phoenix
), and are read back through Phoenix's REST API. Phoenix always opens an
OTLP/gRPC listener on every interface ([::]); rollkit sends OTLP/HTTP only,
so the server is started with that listener disabled (Phoenix's own
`disabled` switch of its gRPC server, which `phoenix serve` does not
expose), and the test checks it listens on 127.0.0.1 alone.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import struct
import subprocess
import sys
import threading
import time
import warnings
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
import urllib.error
import urllib.request
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from conftest import prompt_task
from helpers.otel_collectors import Keeper
from helpers.processes import listening_sockets

import rollkit as rk
from rollkit.examples import arithmetic_tasks, demo_agent
from rollkit.interop.exports import otel
from rollkit.interop.exports.otel import SEMCONV_VERSION, OtelExporter

pytest.importorskip("opentelemetry.sdk", reason="the OpenTelemetry SDK is a dependency of rollkit: pip install -e .")
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402

_PHASES = ("boot", "setup", "agent", "finalize", "scoring")

# Phoenix's server, with its gRPC listener (bound to [::], all interfaces) switched off.
_LAUNCH = """
import runpy, sys
from phoenix.server import grpc_server
_init = grpc_server.GrpcServer.__init__
def _http_only(self, *args, **kwargs):
    kwargs["disabled"] = True
    _init(self, *args, **kwargs)
grpc_server.GrpcServer.__init__ = _http_only
sys.argv = ["phoenix", "serve"]
runpy.run_module("phoenix.server.main", run_name="__main__")
"""


def _phoenix_python() -> Path | None:
    named = os.environ.get("ROLLKIT_ORACLE_PHOENIX_PYTHON")
    default = Path.home() / ".cache" / "rollkit-oracles" / "phoenix" / "bin" / "python"
    return Path(named) if named else default if default.exists() else None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=30) as response:
        return json.loads(response.read())


class _Phoenix:
    def __init__(self, process: subprocess.Popen[bytes], port: int, log: Path) -> None:
        self.process, self.port, self.log = process, port, log
        self.url = f"http://127.0.0.1:{port}"
        self.traces_url = f"{self.url}/v1/traces"

    def spans(self, project: str) -> list[dict[str, Any]]:
        found, cursor = [], None
        while True:
            query = f"?limit=1000{'&cursor=' + cursor if cursor else ''}"
            try:
                page = _get(f"{self.url}/v1/projects/{project}/spans{query}")
            except urllib.error.HTTPError as exc:
                if exc.code == 404:  # the project is made by its first span
                    return []
                raise
            found += page["data"]
            cursor = page.get("next_cursor")
            if not cursor:
                return found

    def spans_when(self, project: str, count: int, guard: float = 120.0) -> list[dict[str, Any]]:
        """The project's spans once Phoenix has stored `count` of them (it
        inserts what it receives in the background); `guard` bounds a hang."""
        deadline = time.monotonic() + guard
        while True:
            spans = self.spans(project)
            if len(spans) >= count or time.monotonic() > deadline:
                return spans
            time.sleep(0.2)


def _wait_until_up(phoenix: _Phoenix, guard: float) -> None:
    deadline = time.monotonic() + guard
    while True:
        if phoenix.process.poll() is not None:
            pytest.fail(f"Phoenix exited ({phoenix.process.returncode}): {phoenix.log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{phoenix.url}/healthz", timeout=5) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        if time.monotonic() > deadline:
            pytest.fail(f"Phoenix did not answer within {guard:.0f} s: {phoenix.log.read_text()[-3000:]}")
        time.sleep(0.2)


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Any:
    python = _phoenix_python()
    if python is None:
        pytest.skip("no virtualenv with arize-phoenix (scripts/test.sh builds ~/.cache/rollkit-oracles/phoenix; "
                    "or set ROLLKIT_ORACLE_PHOENIX_PYTHON)")
    home = tmp_path_factory.mktemp("phoenix")
    port = _free_port()
    env = {**os.environ, "PHOENIX_HOST": "127.0.0.1", "PHOENIX_PORT": str(port), "PHOENIX_GRPC_PORT": str(_free_port()),
           "PHOENIX_WORKING_DIR": str(home), "PHOENIX_TELEMETRY_ENABLED": "false"}
    log = home / "phoenix.log"
    with open(log, "wb") as out:
        process = subprocess.Popen([str(python), "-c", _LAUNCH], env=env, stdout=out, stderr=subprocess.STDOUT,
                                   cwd=home)
    server = _Phoenix(process, port, log)
    try:
        _wait_until_up(server, guard=280.0)  # a cold start imports a great deal; only bounds a hang
        yield server
    finally:
        process.terminate()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _when(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


def _by_trace(spans: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for span in spans:
        out.setdefault(span["context"]["trace_id"], []).append(span)
    return out


def _expected_spans(trace: rk.Trace) -> int:
    answered = {m.tool_call_id for m in trace.messages if m.role == "tool"}
    tools = sum(1 for c in trace.model_calls if c.reply is not None for t in c.reply.tool_calls if t.id in answered)
    return 1 + len(trace.phases) + len(trace.model_calls) + tools


# ---- against Phoenix ----------------------------------------------------------------


@pytest.mark.timeout(600)
def test_each_rollout_is_one_trace_in_phoenix_with_its_phases_calls_and_tools_nested(phoenix):
    listening = listening_sockets(phoenix.process.pid)
    assert listening == {("127.0.0.1", phoenix.port)}, f"Phoenix listens beyond loopback: {listening}"
    traces = rk.evaluate(demo_agent(), arithmetic_tasks(3), progress=False).traces
    sent = rk.export(traces, format="otel", endpoint=phoenix.traces_url,
                     resource_attributes={"openinference.project.name": "nesting"})
    expected = sum(_expected_spans(t) for t in traces)
    assert (sent.traces, sent.spans, sent.failed) == (3, expected, 0)
    assert expected == 3 * (1 + 5 + 2 + 1)
    spans = phoenix.spans_when("nesting", expected)
    assert len(spans) == expected
    groups = _by_trace(spans)
    assert len(groups) == 3
    for group in groups.values():
        roots = [s for s in group if s["parent_id"] is None]
        assert [r["name"] for r in roots] == ["invoke_agent toy-calculator"]
        root = roots[0]
        trace = next(t for t in traces if t.id == root["attributes"]["rollkit.trace.id"])
        _check_nesting(group, root, trace)
        _check_root(root, trace)
        _check_calls(group, trace)


def _check_nesting(group: list[dict[str, Any]], root: dict[str, Any], trace: rk.Trace) -> None:
    ids = {s["context"]["span_id"]: s for s in group}
    phases = {s["name"]: s for s in group if s["parent_id"] == root["context"]["span_id"]}
    assert sorted(phases) == sorted(_PHASES)
    for name, span in phases.items():
        assert abs(_when(span["start_time"]) - trace.phases[name].start) < 2e-6
        assert abs(_when(span["end_time"]) - trace.phases[name].end) < 2e-6
    agent = phases["agent"]["context"]["span_id"]
    under_agent = [s for s in group if s["parent_id"] == agent]
    assert sorted(s["name"] for s in under_agent) == ["chat toy-calculator"] * 2 + ["execute_tool calculator"]
    assert all(s["parent_id"] in ids for s in group if s["parent_id"] is not None)


def _check_root(root: dict[str, Any], trace: rk.Trace) -> None:
    a = root["attributes"]
    assert a["gen_ai.operation.name"] == "invoke_agent"
    assert a["gen_ai.agent.name"] == "toy-calculator"
    assert a["gen_ai.request.model"] == "toy-calculator"
    assert a["gen_ai.conversation.id"] == trace.id
    assert a["gen_ai.usage.input_tokens"] == sum(c.usage.input_tokens for c in trace.model_calls)
    assert a["gen_ai.usage.output_tokens"] == sum(c.usage.output_tokens for c in trace.model_calls)
    assert a["rollkit.reward"] == trace.reward
    assert a["rollkit.reward.correct"] == trace.rewards["correct"]
    assert a["rollkit.task.key"] == trace.task.key
    assert a["rollkit.rollout_id"] == trace.info["rollout_id"]
    assert (a["rollkit.ok"], a["rollkit.outcome"]) == (True, "ok")
    assert a["rollkit.total_tokens"] == a["gen_ai.usage.input_tokens"] + a["gen_ai.usage.output_tokens"]
    assert a["rollkit.final_sequence_tokens"] == trace.num_total_tokens
    assert "rollkit.stop_condition" not in a  # ended on its own: no stop, and no None written as a value
    assert root["status_code"] == "UNSET"


def _check_calls(group: list[dict[str, Any]], trace: rk.Trace) -> None:
    chats = sorted((s for s in group if s["name"].startswith("chat ")),
                   key=lambda s: s["attributes"]["rollkit.call.index"])
    assert len(chats) == len(trace.model_calls) == 2
    for span, call in zip(chats, trace.model_calls):
        a = span["attributes"]
        assert a["gen_ai.operation.name"] == "chat"
        assert a["gen_ai.provider.name"] == "rollkit"
        assert a["gen_ai.usage.input_tokens"] == call.usage.input_tokens
        assert a["gen_ai.usage.output_tokens"] == call.usage.output_tokens
        assert a["gen_ai.response.finish_reasons"] == [call.finish_reason]
        assert abs(_when(span["start_time"]) - call.start) < 2e-6
        assert abs(_when(span["end_time"]) - call.end) < 2e-6
        assert "gen_ai.input.messages" not in a  # content is off by default
    [tool] = [s for s in group if s["name"].startswith("execute_tool ")]
    asked = trace.model_calls[0].reply.tool_calls[0]
    a = tool["attributes"]
    assert (a["gen_ai.operation.name"], a["gen_ai.tool.name"], a["gen_ai.tool.call.id"]) == (
        "execute_tool", "calculator", asked.id)
    assert a["rollkit.timing"] == "inferred"
    # between the call that asked for it and the next one
    assert abs(_when(tool["start_time"]) - trace.model_calls[0].end) < 2e-6
    assert abs(_when(tool["end_time"]) - trace.model_calls[1].start) < 2e-6


def _graphql(phoenix: _Phoenix, query: str) -> Any:
    request = urllib.request.Request(f"{phoenix.url}/graphql", data=json.dumps({"query": query}).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())["data"]


@pytest.mark.timeout(600)
def test_phoenix_reads_each_calls_usage_cost_and_answering_model(phoenix):
    # Issue 44: Phoenix totals the cost of a trace's LLM spans, pricing
    # their tokens by its own table (found by llm.model_name); rollkit's own
    # price rides as OpenInference's llm.cost.total, and the answer's model
    # and id as the GenAI conventions name them.
    answer = rk.Response(message=rk.AssistantMessage(content="4"), usage=rk.Usage(input_tokens=1000, output_tokens=500),
                         model="gpt-4o-mini-2024-07-18", id="chatcmpl-44")
    model = rk.ScriptedModel([answer], name="gpt-4o-mini")
    rk.prices({"gpt-4o-mini": {"input": 0.15, "output": 0.6}})
    try:
        trace = rk.evaluate(rk.Agent(model=model), prompt_task(), progress=False).traces[0]
    finally:
        rk.prices({"gpt-4o-mini": None})
    [call] = trace.model_calls
    assert (call.response_model, call.response_id) == ("gpt-4o-mini-2024-07-18", "chatcmpl-44")
    rk.export(trace, format="otel", endpoint=phoenix.traces_url, resource_attributes={"openinference.project.name": "cost"})
    spans = phoenix.spans_when("cost", _expected_spans(trace))
    [chat] = [s for s in spans if s["name"] == "chat gpt-4o-mini"]
    a = chat["attributes"]
    assert (a["gen_ai.response.model"], a["gen_ai.response.id"]) == ("gpt-4o-mini-2024-07-18", "chatcmpl-44")
    assert (chat["span_kind"], a["llm.model_name"]) == ("LLM", "gpt-4o-mini")
    assert (a["llm.token_count.prompt"], a["llm.token_count.completion"], a["llm.token_count.total"]) == (1000, 500, 1500)
    assert a["llm.cost.total"] == pytest.approx(trace.cost_usd) == pytest.approx(0.00045)
    [root] = [s for s in spans if s["parent_id"] is None]
    assert root["attributes"]["rollkit.total_tokens"] == 1500 and "llm.cost.total" not in root["attributes"]
    costs = _graphql(phoenix, "{ projects { edges { node { name costSummary { total { cost tokens } } } } } }")
    [total] = [e["node"]["costSummary"]["total"] for e in costs["projects"]["edges"] if e["node"]["name"] == "cost"]
    assert total["tokens"] == 1500
    assert total["cost"] == pytest.approx(0.00045, rel=0.01)  # Phoenix's own price of gpt-4o-mini: not $0


def _project_cost(phoenix: _Phoenix, project: str) -> dict[str, Any] | None:
    costs = _graphql(phoenix, "{ projects { edges { node { name costSummary { total { cost tokens } } } } } }")
    found = [e["node"]["costSummary"]["total"] for e in costs["projects"]["edges"] if e["node"]["name"] == project]
    return found[0] if found else None


def _unlisted_trace(name: str, input_tokens: int, output_tokens: int) -> rk.Trace:
    answer = rk.Response(message=rk.AssistantMessage(content="4"),
                         usage=rk.Usage(input_tokens=input_tokens, output_tokens=output_tokens))
    return rk.evaluate(rk.Agent(model=rk.ScriptedModel([answer], name=name)), prompt_task(), progress=False).traces[0]


@pytest.mark.timeout(600)
def test_phoenix_totals_rollkits_cost_for_a_model_it_does_not_list_once_given_the_price(phoenix):
    # Issue 44: Phoenix prices a span's tokens by its own models, not by
    # llm.cost.total: a model it does not list is $0 there. phoenix_prices
    # defines the model in Phoenix with rollkit's rates; the spans it then
    # stores cost what rollkit says. Phoenix reads its models every few
    # seconds: probe traces go to their own project until one is priced.
    from rollkit.interop.exports.phoenix import phoenix_prices

    name = "rollkit-test-unlisted-44"
    rk.prices({name: {"input": 2.0, "output": 8.0}})
    try:
        before = _unlisted_trace(name, 1000, 500)
        rk.export(before, format="otel", endpoint=phoenix.traces_url,
                  resource_attributes={"openinference.project.name": "unpriced"})
        phoenix.spans_when("unpriced", _expected_spans(before))
        assert _project_cost(phoenix, "unpriced") == {"cost": 0.0, "tokens": 1500}  # what the issue saw: $0
        ids = phoenix_prices(phoenix.url, [name, name])
        assert list(ids) == [name]
        assert phoenix_prices(phoenix.url, [name]) == ids  # given again: the same model, updated in place
        deadline, probes = time.monotonic() + 120, 0
        while not (_project_cost(phoenix, "probe") or {}).get("cost") and time.monotonic() < deadline:
            probe = _unlisted_trace(name, 10, 10)
            rk.export(probe, format="otel", endpoint=phoenix.traces_url,
                      resource_attributes={"openinference.project.name": "probe"})
            probes += 1
            phoenix.spans_when("probe", probes * _expected_spans(probe))
        trace = _unlisted_trace(name, 1000, 500)
    finally:
        rk.prices({name: None})
    assert trace.cost_usd == pytest.approx(0.006)  # 1,000 x $2 + 500 x $8 per million
    rk.export(trace, format="otel", endpoint=phoenix.traces_url,
              resource_attributes={"openinference.project.name": "priced"})
    phoenix.spans_when("priced", _expected_spans(trace))
    total = _project_cost(phoenix, "priced")
    assert total["tokens"] == 1500 and total["cost"] == pytest.approx(trace.cost_usd)
    with pytest.raises(rk.UsageError, match="no price for model 'not-priced-44' to give Phoenix"), \
            pytest.warns(UserWarning, match="no price for model 'not-priced-44'"):
        phoenix_prices(phoenix.url, ["not-priced-44"])
    with pytest.raises(rk.Unavailable, match=r"Phoenix at http://127.0.0.1:\d+ did not take") as caught:
        phoenix_prices(f"http://user:secret@127.0.0.1:{_free_port()}/?key=hidden", ["gpt-4o-mini"])
    assert "secret" not in str(caught.value) and "hidden" not in str(caught.value)


@pytest.mark.timeout(600)
def test_a_failed_rollout_is_an_error_trace_in_phoenix(phoenix):
    trace = rk.evaluate(rk.Agent(model=rk.ScriptedModel([])), prompt_task(), progress=False).traces[0]
    assert trace.error.type == "ProviderError"
    rk.export(trace, format="otel", endpoint=phoenix.traces_url, resource_attributes={"openinference.project.name": "errors"})
    spans = phoenix.spans_when("errors", _expected_spans(trace))
    by_name = {s["name"]: s for s in spans}
    assert sorted(by_name) == ["agent", "boot", "chat scripted", "invoke_agent scripted", "setup"]
    for name in ("invoke_agent scripted", "agent", "chat scripted"):
        span = by_name[name]
        assert span["status_code"] == "ERROR", name
        assert span["status_message"].startswith("ProviderError: ScriptedModel 'scripted' has no reply #1"), name
        assert span["attributes"]["error.type"] == "ProviderError"
    assert by_name["setup"]["status_code"] == "UNSET"
    assert by_name["invoke_agent scripted"]["attributes"]["rollkit.outcome"] == "failed"


@pytest.mark.timeout(600)
def test_evaluate_otel_sends_each_rollout_to_phoenix(phoenix):
    result = rk.evaluate(demo_agent(), arithmetic_tasks(2), progress=False, otel=phoenix.traces_url)
    expected = sum(_expected_spans(t) for t in result.traces)
    spans = phoenix.spans_when("default", expected)
    ours = [s for s in spans if s["attributes"].get("rollkit.run_id") == result.manifest["run_id"]]
    assert sorted(s["attributes"]["rollkit.task.key"] for s in ours) == ["arith-0-000", "arith-0-001"]
    assert len(_by_trace(spans)) >= 2


@pytest.mark.timeout(600)
def test_content_true_sends_the_messages_as_the_conventions_json(phoenix):
    trace = rk.evaluate(demo_agent(), arithmetic_tasks(1), progress=False).traces[0]
    rk.export([trace], format="otel", endpoint=phoenix.traces_url, content=True,
              resource_attributes={"openinference.project.name": "content"})
    spans = phoenix.spans_when("content", _expected_spans(trace))
    second = next(s for s in spans if s["name"].startswith("chat ") and s["attributes"]["rollkit.call.index"] == 1)
    a = second["attributes"]
    assert json.loads(a["gen_ai.system_instructions"]) == [{"type": "text", "content": trace.messages[0].content}]
    sent = json.loads(a["gen_ai.input.messages"])
    assert [m["role"] for m in sent] == ["user", "assistant", "tool"]
    call = trace.model_calls[0].reply.tool_calls[0]
    assert sent[1]["parts"] == [{"type": "tool_call", "id": call.id, "name": "calculator", "arguments": call.args()}]
    assert sent[2]["parts"] == [{"type": "tool_call_response", "id": call.id, "response": trace.messages[3].content}]
    assert json.loads(a["gen_ai.output.messages"]) == [
        {"role": "assistant", "parts": [{"type": "text", "content": trace.last_reply}], "finish_reason": "stop"}]
    [tool] = [s for s in spans if s["name"] == "execute_tool calculator"]
    assert tool["attributes"]["gen_ai.tool.call.result"] == trace.messages[3].content


# ---- in process (the SDK's own in-memory exporter) -------------------------------------------


class _Held(InMemorySpanExporter):
    """An exporter whose first export waits until the test lets it go, so
    rollouts queue up meanwhile; it records each batch's rollouts."""

    def __init__(self) -> None:
        super().__init__()
        self.entered, self.release = threading.Event(), threading.Event()
        self.batches: list[list[str]] = []

    def export(self, spans):  # type: ignore[no-untyped-def]
        self.batches.append(sorted(s.attributes["rollkit.task.key"] for s in spans if s.parent is None))
        self.entered.set()
        self.release.wait(120)  # bounds a hang only: the test sets it
        return super().export(spans)


def test_rollouts_queued_while_an_export_runs_leave_together_in_one_batch():
    traces = rk.evaluate(demo_agent(), arithmetic_tasks(5), progress=False).traces
    held = _Held()
    exporter = OtelExporter(span_exporter=held)
    exporter.send(traces[0])
    assert held.entered.wait(120)
    for trace in traces[1:]:
        exporter.send(trace)
    held.release.set()
    sent = exporter.close()
    assert held.batches == [["arith-0-000"], ["arith-0-001", "arith-0-002", "arith-0-003", "arith-0-004"]]
    assert (sent.traces, sent.spans, sent.failed, sent.dropped) == (5, 45, 0, 0)
    assert len(held.get_finished_spans()) == 45


def test_a_full_queue_drops_rollouts_and_counts_them_never_waiting(monkeypatch):
    monkeypatch.setattr(otel, "_QUEUE_ROLLOUTS", 2)
    traces = rk.evaluate(demo_agent(), arithmetic_tasks(5), progress=False).traces
    held = _Held()
    exporter = OtelExporter(span_exporter=held)
    exporter.send(traces[0])
    assert held.entered.wait(120)
    for trace in traces[1:]:
        exporter.send(trace)  # two queue, two are dropped: the caller goes on
    assert (exporter.sent.failed, exporter.sent.dropped) == (18, 18)
    held.release.set()
    sent = exporter.close()
    assert (sent.traces, sent.spans, sent.failed, sent.dropped) == (5, 45, 18, 18)
    assert held.batches == [["arith-0-000"], ["arith-0-001", "arith-0-002"]]


def test_span_count_is_what_emit_makes_for_every_kind_of_rollout():
    from rollkit.core.outcome import Outcome
    from rollkit.examples import support_agent, support_tasks, toy_customer

    traces = [*rk.evaluate(demo_agent(), arithmetic_tasks(3), progress=False).traces,
              *rk.evaluate(support_agent(), support_tasks(2), user=toy_customer(), progress=False).traces,
              *rk.evaluate(demo_agent(limits=rk.RolloutLimits(max_turns=1)), arithmetic_tasks(1),
                           progress=False).traces]
    cut = traces[0].model_copy(deep=True)
    Outcome("aborted", scored=False, phase="agent").record(cut)
    for trace in [*traces, cut]:
        memory = InMemorySpanExporter()
        sent = rk.export(trace, format="otel", span_exporter=memory)
        assert sent.spans == otel.span_count(trace) == len(memory.get_finished_spans()), trace.task.key


def _without_ids(request: Any) -> tuple[list[dict[str, Any]], list[list[int | None]]]:
    """A decoded OTLP request's spans with their random ids taken out, and
    each rollout's tree as the index of each span's parent."""
    from google.protobuf.json_format import MessageToDict

    spans, trees = [], {}
    for resource_spans in request.resource_spans:
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                tree = trees.setdefault(span.trace_id, {})
                tree[span.span_id] = (len(tree), tree.get(span.parent_span_id, (None,))[0])
                whole = MessageToDict(resource_spans)
                whole.pop("scopeSpans")
                spans.append({**MessageToDict(span), "resource": whole,
                              "scope": MessageToDict(scope_spans.scope), "schema": scope_spans.schema_url})
    for span in spans:
        for key in ("traceId", "spanId", "parentSpanId"):
            span.pop(key, None)
    return spans, [[parent for _, parent in tree.values()] for tree in trees.values()]


def test_what_an_endpoint_receives_is_what_the_sdks_own_encoder_makes_of_the_same_spans():
    # The spans sent to an endpoint are written as OTLP protobuf by rollkit
    # (not the SDK's span objects and encoder: ~1 ms a rollout); over every
    # kind of rollout, content on, and every attribute type, the request a
    # collector decodes must be the one the SDK makes, ids aside.
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    from rollkit.core.outcome import Outcome
    from rollkit.examples import support_agent, support_tasks, toy_customer

    traces = [*rk.evaluate(demo_agent(), arithmetic_tasks(2), progress=False).traces,
              *rk.evaluate(support_agent(), support_tasks(2), user=toy_customer(), progress=False).traces]
    cut = traces[0].model_copy(deep=True)
    Outcome("aborted", scored=False, phase="agent").record(cut)
    traces.append(cut)
    options = {"content": True, "resource_attributes": {"note": "é ✓ 🙂", "offset": -3, "big": 2**40,
                                                        "flags": [True, False], "scale": 0.5}}
    Keeper.bodies = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Keeper)
    serving = threading.Thread(target=server.serve_forever)
    serving.start()
    try:
        sent = rk.export(traces, format="otel", endpoint=f"http://127.0.0.1:{server.server_address[1]}/v1/traces",
                         **options)
    finally:
        server.shutdown()
        server.server_close()
        serving.join()
    memory = InMemorySpanExporter()
    rk.export(traces, format="otel", span_exporter=memory, **options)
    received = [ExportTraceServiceRequest.FromString(body) for body in Keeper.bodies]
    got = [_without_ids(r) for r in received]
    spans, trees = [s for g in got for s in g[0]], [t for g in got for t in g[1]]
    want_spans, want_trees = _without_ids(encode_spans(memory.get_finished_spans()))
    assert sent.spans == len(spans) == len(want_spans) == sum(otel.span_count(t) for t in traces)
    assert spans == want_spans
    assert trees == want_trees and len(trees) == len(traces)
    assert any(s.get("status", {}).get("code") == "STATUS_CODE_ERROR" for s in spans)
    assert any(a["key"] == "gen_ai.tool.name" for s in spans for a in s["attributes"])


def test_the_tracer_names_the_pinned_semantic_conventions_and_spans_keep_no_none():
    memory = InMemorySpanExporter()
    trace = rk.evaluate(demo_agent(), arithmetic_tasks(1), progress=False).traces[0]
    rk.export(trace, format="otel", span_exporter=memory, service_name="evals")
    spans = memory.get_finished_spans()
    assert {s.instrumentation_scope.schema_url for s in spans} == {f"https://opentelemetry.io/schemas/{SEMCONV_VERSION}"}
    assert {s.resource.attributes["service.name"] for s in spans} == {"evals"}
    kinds = {s.name: s.kind.name for s in spans}
    assert (kinds["chat toy-calculator"], kinds["invoke_agent toy-calculator"]) == ("CLIENT", "INTERNAL")


def test_a_span_exporter_the_caller_gave_is_left_open_for_the_next_export():
    memory = InMemorySpanExporter()
    traces = rk.evaluate(demo_agent(), arithmetic_tasks(2), progress=False).traces
    first = rk.export(traces[0], format="otel", span_exporter=memory)
    second = rk.export(traces[1], format="otel", span_exporter=memory)
    assert (first.spans, second.spans, second.failed) == (9, 9, 0)
    assert len({s.context.trace_id for s in memory.get_finished_spans()}) == 2


def test_an_aborted_rollout_is_an_error_span_naming_where_it_was_cut():
    from rollkit.core.outcome import Outcome

    trace = rk.evaluate(demo_agent(), arithmetic_tasks(1), progress=False).traces[0].model_copy(deep=True)
    Outcome("aborted", scored=False, phase="agent").record(trace)
    memory = InMemorySpanExporter()
    rk.export(trace, format="otel", span_exporter=memory)
    [root] = [s for s in memory.get_finished_spans() if s.parent is None]
    assert (root.status.status_code.name, root.status.description) == ("ERROR", "aborted: the rollout was aborted in agent")
    assert (root.attributes["error.type"], root.attributes["rollkit.outcome"]) == ("aborted", "aborted")


def test_otel_is_not_loaded_by_import_rollkit_nor_by_evaluate_without_it():
    code = ("import sys, rollkit as rk; from rollkit.examples import demo_agent, arithmetic_tasks; "
            "rk.evaluate(demo_agent(), arithmetic_tasks(1), progress=False); "
            "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# ---- bad input and an endpoint that does not answer -------------------------------------------


@pytest.mark.parametrize(("options", "message"), [
    ({}, r"needs endpoint=, the collector's OTLP/HTTP traces URL"),
    ({"endpoint": "127.0.0.1:6006"}, r"endpoint '127.0.0.1:6006' is not an http\(s\) URL"),
    ({"endpoint": 6006}, r"endpoint must be the OTLP/HTTP URL of a trace collector.*got int"),
    ({"endpoint": "http://127.0.0.1:6006", "timeout": 0}, r"timeout must be a number of seconds > 0, got 0"),
])
def test_bad_otel_options_are_refused_naming_them(options, message):
    trace = rk.evaluate(demo_agent(), arithmetic_tasks(1), progress=False).traces[0]
    with pytest.raises(rk.UsageError, match=message):
        rk.export(trace, format="otel", **options)


def test_otel_export_writes_no_file_and_says_so(tmp_path):
    trace = rk.evaluate(demo_agent(), arithmetic_tasks(1), progress=False).traces[0]
    with pytest.raises(rk.UsageError, match=r"sends spans to a collector and writes no file; drop the path"):
        rk.export(trace, tmp_path / "spans.json", format="otel", endpoint="http://127.0.0.1:6006/v1/traces")
    assert list(tmp_path.iterdir()) == []


def test_evaluate_refuses_an_otel_that_is_neither_url_nor_exporter():
    with pytest.raises(rk.UsageError, match=r"otel= takes the OTLP/HTTP URL of a trace collector.*got int"):
        rk.evaluate(demo_agent(), arithmetic_tasks(1), progress=False, otel=6006)


def test_an_endpoint_that_takes_nothing_is_unavailable_naming_it_and_why():
    trace = rk.evaluate(demo_agent(), arithmetic_tasks(1), progress=False).traces[0]
    url = f"http://127.0.0.1:{_free_port()}/v1/traces"  # nobody listens there
    with pytest.raises(rk.Unavailable, match=rf"{url} did not take 9 of 9 spans \(.*(refused|timeout)"):
        rk.export(trace, format="otel", endpoint=url, timeout=1)


def test_a_live_run_whose_collector_is_down_finishes_and_warns():
    url = f"http://127.0.0.1:{_free_port()}/v1/traces"
    exporter = OtelExporter(url, timeout=1)
    with pytest.warns(UserWarning, match=rf"18 of 18 spans were not taken by {url}"):
        result = rk.evaluate(demo_agent(), arithmetic_tasks(2), progress=False, otel=exporter)
    assert [t.ok for t in result.traces] == [True, True]
    exporter.close()


def test_a_password_in_the_endpoint_never_reaches_a_message():
    trace = rk.evaluate(demo_agent(), arithmetic_tasks(1), progress=False).traces[0]
    port = _free_port()  # nobody listens there
    with pytest.raises(rk.Unavailable) as refused:
        rk.export(trace, format="otel", endpoint=f"http://evals:s3cret@127.0.0.1:{port}/v1/traces", timeout=1)
    assert f"http://***@127.0.0.1:{port}/v1/traces did not take" in str(refused.value)
    assert "s3cret" not in str(refused.value) and "evals" not in str(refused.value)


class _Broken(InMemorySpanExporter):
    """An exporter that raises instead of answering (as an older OTLP
    exporter can when its collector is down)."""

    def export(self, spans):  # type: ignore[no-untyped-def]
        raise RuntimeError("collector gone")


def test_an_exporter_that_raises_is_a_failed_export_not_a_crash(tmp_path):
    trace = rk.evaluate(demo_agent(), arithmetic_tasks(1), progress=False).traces[0]
    with pytest.raises(rk.Unavailable, match=r"did not take 9 of 9 spans \(RuntimeError: collector gone\)"):
        rk.export(trace, format="otel", span_exporter=_Broken())
    exporter = OtelExporter(span_exporter=_Broken())
    with pytest.warns(UserWarning, match=r"18 of 18 spans were not taken"):
        result = rk.evaluate(demo_agent(), arithmetic_tasks(2), progress=False, otel=exporter, out=tmp_path / "run")
    assert [t.ok for t in result.traces] == [True, True]
    assert len(rk.open_run(tmp_path / "run")) == 2  # the run's files were closed and its tables written
    exporter.close()


@pytest.mark.parametrize(("given", "used"), [
    ("http://127.0.0.1:6006", "http://127.0.0.1:6006/v1/traces"),
    ("http://127.0.0.1:6006/", "http://127.0.0.1:6006/v1/traces"),
    ("http://127.0.0.1:4318/custom/v1/traces", "http://127.0.0.1:4318/custom/v1/traces"),
])
def test_a_base_url_gets_the_otlp_traces_path(given, used):
    exporter = OtelExporter(given)
    assert exporter.endpoint == used
    assert exporter.close().spans == 0


# ---- a collector that is dead, silent or refuses: the run never waits on it (issue 44) --------------


def _silent_listener() -> socket.socket:
    """A port on 127.0.0.1 that takes connections (the kernel's backlog) and never reads or answers."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    return listener


class _Misbehaving:
    """A collector on 127.0.0.1 that takes each connection, then either
    answers 200 only after `slow` seconds (or once told to end) or resets
    it (an RST once the request has come). Ended by `close`, by its handle."""

    def __init__(self, how: str, slow: float = 5.0) -> None:
        self.how, self.slow, self.done = how, slow, threading.Event()
        self.listener = _silent_listener()
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}/v1/traces"
        self.connections: list[socket.socket] = []
        self.thread = threading.Thread(target=self._serve)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self.listener.accept()
            except OSError:  # the listener was shut down: the end
                return
            self.connections.append(connection)
            connection.recv(1 << 16)
            if self.how == "reset":
                connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                connection.close()
            elif not self.done.wait(self.slow):
                connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")

    def close(self) -> None:
        self.done.set()
        self.listener.shutdown(socket.SHUT_RDWR)
        self.thread.join()
        self.listener.close()
        for connection in self.connections:
            connection.close()


@pytest.mark.parametrize("collector", ["silent", "refused", "slow", "reset"])
def test_a_silent_refusing_slow_or_resetting_collector_costs_ten_rollouts_at_most_the_export_timeout(collector):
    # slow: answers each export after 5 s (the export timeout); reset: an RST for each.
    listener = _silent_listener() if collector in ("silent", "refused") else _Misbehaving(collector)
    url = f"http://127.0.0.1:{listener.getsockname()[1]}/v1/traces" if collector in ("silent", "refused") \
        else listener.url
    if collector == "refused":
        listener.close()  # nobody listens there now
    try:
        started = time.monotonic()
        with pytest.warns(UserWarning, match=rf"90 of 90 spans were not taken by {url}") as said:
            result = rk.evaluate(demo_agent(), arithmetic_tasks(10), progress=False, otel=url)
        took = time.monotonic() - started
    finally:
        listener.close()
    assert [t.ok for t in result.traces] == [True] * 10
    assert len([w for w in said if "spans were not taken" in str(w.message)]) == 1  # said once
    # One export's timeout (5 s) and the end's grace (1 s) at most, plus a
    # loaded machine's margin; before issue 44: 70-101 s.
    assert took < otel._TIMEOUT + otel._END_GRACE + 8, took


def test_a_silent_collector_that_never_answered_costs_the_runs_end_about_a_second_not_the_export_timeout():
    # An exporter with a long export timeout (30 s): the end would wait it
    # and more for the batch in flight; while no export has come back it
    # waits _FIRST_ANSWER (1 s) at most, then drops the batch and says so.
    listener = _silent_listener()
    url = f"http://127.0.0.1:{listener.getsockname()[1]}/v1/traces"
    exporter = OtelExporter(url, timeout=30)
    try:
        started = time.monotonic()
        with pytest.warns(UserWarning, match=r"90 of 90 spans were not taken .*90 of them never sent .*wait of 1 s"):
            result = rk.evaluate(demo_agent(), arithmetic_tasks(10), progress=False, otel=exporter)
        took = time.monotonic() - started
    finally:
        exporter.close(0)
        listener.close()
    assert [t.ok for t in result.traces] == [True] * 10
    assert took < otel._FIRST_ANSWER + 8, took  # the export timeout plus the grace would be 31 s


@pytest.mark.parametrize(("collector", "why"), [
    ("silent", "timeout"), ("slow", "timeout"), ("reset", "reset by peer|aborted"), ("refused", "refused")])
def test_rk_export_to_a_dead_collector_is_a_clear_error_within_its_timeout(collector, why):
    traces = rk.evaluate(demo_agent(), arithmetic_tasks(3), progress=False).traces
    listener = _silent_listener() if collector in ("silent", "refused") else _Misbehaving(collector, slow=30)
    url = f"http://127.0.0.1:{listener.getsockname()[1]}/v1/traces" if collector in ("silent", "refused") \
        else listener.url
    if collector == "refused":
        listener.close()
    try:
        started = time.monotonic()
        with pytest.raises(rk.Unavailable, match=rf"{url} did not take 27 of 27 spans \(.*({why}).*is the collector "
                                                 "running"):
            rk.export(traces, format="otel", endpoint=url)
        assert time.monotonic() - started < otel._TIMEOUT + 8
    finally:
        listener.close()


class _Echoes(BaseHTTPRequestHandler):
    """A collector that refuses every batch, echoing in its reason the
    credentials it was sent (as a careless one might)."""

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(401, f"refused {self.headers.get('Authorization')} {self.headers.get('X-Key')} "
                                f"at {self.path}")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def test_the_warning_never_holds_a_credential_from_any_part_of_the_url_or_the_headers():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Echoes)
    serving = threading.Thread(target=server.serve_forever)
    serving.start()
    port = server.server_address[1]
    secrets = ["user-secret", "pw-secret", "query-secret", "other%20secret", "other secret", "frag-secret",
               "header-secret", "key-secret"]
    url = (f"http://user-secret:pw-secret@127.0.0.1:{port}/v1/traces?api_key=query-secret&tag=other%20secret"
           "#frag-secret")
    exporter = OtelExporter(url, headers={"X-Key": "key-secret", "Authorization": "Bearer header-secret"}, timeout=2)
    try:
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            rk.evaluate(demo_agent(), arithmetic_tasks(2), progress=False, otel=exporter)
        [warning] = [str(w.message) for w in said if "spans were not taken" in str(w.message)]
        exporter.close()
    finally:
        server.shutdown()
        server.server_close()
        serving.join()
    shown = f"http://***@127.0.0.1:{port}/v1/traces?api_key=***&tag=***#***"
    assert f"18 of 18 spans were not taken by {shown} (" in warning
    assert "code: 401, reason: refused Basic *** *** at /v1/traces?api_key=***&tag=***)" in warning  # echoes masked
    assert not [s for s in secrets if s in warning] and "user-secret" not in repr(exporter)


def test_the_otlp_exporters_own_log_never_holds_a_credential(caplog):
    # The OTLP client logs each retry with the endpoint's URL, query and all:
    # a user's logging (here pytest's, on the root logger) must see it masked.
    listener = _silent_listener()
    port = listener.getsockname()[1]
    listener.close()  # refused: the client logs a retry, then gives up
    url = f"http://user-secret:pw-secret@127.0.0.1:{port}/v1/traces?api_key=query-secret"
    headers = {"X-Key": "key-secret"}
    trace = rk.evaluate(demo_agent(), arithmetic_tasks(1), progress=False).traces[0]
    with caplog.at_level(logging.WARNING):
        with pytest.raises(rk.Unavailable):
            rk.export(trace, format="otel", endpoint=url, headers=headers, timeout=2)
        exporter = OtelExporter(url, headers=headers, timeout=2)
        try:
            with pytest.warns(UserWarning, match="spans were not taken"):
                rk.evaluate(demo_agent(), arithmetic_tasks(1), progress=False, otel=exporter)
        finally:
            exporter.close(0)
    said = [r for r in caplog.records if r.name.startswith("opentelemetry.exporter")]
    assert any("Max retries exceeded with url: /v1/traces?api_key=***" in r.getMessage() for r in said), said
    assert not [s for s in ("user-secret", "pw-secret", "query-secret", "key-secret") if s in caplog.text]
