"""The span sender (rollkit.interop.exports.otelprocess): `rk.evaluate(otel=URL)`
makes and sends its spans in a process of its own, fed each rollout's JSON
line (issue 44). The spans a collector gets are the ones the in-process
exporter makes of the same traces; the sender never outlives its parent,
holds none of the host's API keys, and a sender that is killed or stops
answering is one warning, never a failed or hung run.

The collectors are real HTTP servers on 127.0.0.1; the sender a real child
process, inspected through /proc.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import warnings
from http.server import ThreadingHTTPServer
from typing import Any

import pytest
from helpers.otel_collectors import Keeper
from helpers.processes import gone

import rollkit as rk
from rollkit.core.events import RunSink
from rollkit.examples import arithmetic_tasks, demo_agent, support_agent, support_tasks, toy_customer
from rollkit.interop.exports import otel, otelprocess
from rollkit.runs.evaluation import run_to_end

pytest.importorskip("opentelemetry.sdk", reason="the OpenTelemetry SDK is a dependency of rollkit: pip install -e .")


@pytest.fixture
def collector():
    """A keeping collector on 127.0.0.1: (its URL, its bodies); ended by its handle."""
    Keeper.bodies = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Keeper)
    serving = threading.Thread(target=server.serve_forever)
    serving.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1/traces", Keeper.bodies
    server.shutdown()
    server.server_close()
    serving.join()


def _spans(bodies: list[bytes]) -> list[tuple[Any, ...]]:
    """Every span the requests hold, ids aside, with its parent's name and its resource, in a stable order."""
    from google.protobuf.json_format import MessageToDict
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    found = []
    for body in bodies:
        for resource_spans in ExportTraceServiceRequest.FromString(body).resource_spans:
            resource = MessageToDict(resource_spans.resource)  # its service.instance.id is each exporter's own
            resource["attributes"] = [a for a in resource["attributes"] if a["key"] != "service.instance.id"]
            for scope_spans in resource_spans.scope_spans:
                names = {s.span_id: s.name for s in scope_spans.spans}
                for span in scope_spans.spans:
                    whole = MessageToDict(span)
                    for key in ("traceId", "spanId", "parentSpanId"):
                        whole.pop(key, None)
                    found.append((str(sorted(whole.items())), names.get(span.parent_span_id), str(resource),
                                  scope_spans.schema_url))
    return sorted(found)


def _dead_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}/v1/traces"  # nobody listens there once closed


@pytest.mark.parametrize("folder", [True, False])
def test_the_sender_sends_what_the_in_process_exporter_makes_of_the_same_traces(collector, tmp_path, folder):
    # With a folder the sender is given the run's traces.jsonl line; without,
    # the line serialized for it: either way its spans are the in-process ones.
    url, bodies = collector
    out = {"out": tmp_path / "run"} if folder else {}
    traces = [*rk.evaluate(demo_agent(), arithmetic_tasks(3), progress=False, otel=url, **out).traces,
              *rk.evaluate(support_agent(), support_tasks(2), user=toy_customer(), progress=False, otel=url).traces]
    by_sender = list(bodies)
    bodies.clear()
    sent = rk.export(traces, format="otel", endpoint=url)  # in this process
    assert sent.spans == sum(otel.span_count(t) for t in traces) > 20
    assert _spans(by_sender) == _spans(bodies)
    assert len(_spans(by_sender)) == sent.spans


_CHILD_OF = """
import os, signal, sys, warnings
import rollkit as rk
from rollkit.examples import arithmetic_tasks, demo_agent
from rollkit.interop.exports import otelprocess
warnings.simplefilter("ignore")
rk.evaluate(demo_agent(), arithmetic_tasks(2), progress=False, otel=sys.argv[1])
print(otelprocess.sender().pid, flush=True)
if sys.argv[2] == "killed":
    os.kill(os.getpid(), signal.SIGKILL)
"""


def _wait_gone(pid: int) -> bool:
    """Wait (at most 60 s: a bound on a hang, not a timing) until `pid` has exited."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        select.select([fd], [], [], 60)
    finally:
        os.close(fd)
    return gone(pid)


@pytest.mark.parametrize("how", ["exits", "killed"])
def test_the_sender_ends_with_its_parent_whether_it_exits_or_is_killed(how):
    parent = subprocess.run([sys.executable, "-c", _CHILD_OF, _dead_url(), how], capture_output=True, text=True,
                            timeout=120)
    assert parent.returncode == (-signal.SIGKILL if how == "killed" else 0), parent.stderr
    pid = int(parent.stdout.split()[-1])
    assert _wait_gone(pid), f"the span sender {pid} outlived its parent"


def test_the_sender_holds_no_api_key_and_gets_the_collectors_credentials_down_its_pipe(monkeypatch, collector):
    url, bodies = collector
    monkeypatch.setenv("OPENAI_API_KEY", "sk-host-secret")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "anthropic-host-secret")
    monkeypatch.setenv("OTEL_ROLLKIT_TEST_SETTING", "kept")  # the OTLP exporter's own settings are passed
    otelprocess.stop()  # a sender started before the keys were set would prove nothing
    try:
        rk.evaluate(demo_agent(), arithmetic_tasks(1), progress=False, otel=url + "?api_key=query-secret")
        pid = otelprocess.sender().pid
        environ = open(f"/proc/{pid}/environ", "rb").read().decode()
        argv = open(f"/proc/{pid}/cmdline", "rb").read().decode()
    finally:
        otelprocess.stop()
    assert len(bodies) == 1
    assert "OTEL_ROLLKIT_TEST_SETTING=kept" in environ.split("\0")
    for secret in ("sk-host-secret", "anthropic-host-secret", "query-secret"):
        assert secret not in environ and secret not in argv
    assert gone(pid)


class _KillsTheSender(RunSink):
    """A watcher that SIGKILLs the span sender when the third rollout finishes."""

    def __init__(self) -> None:
        self.seen = 0
        self.pid = 0

    def finished(self, trace: Any) -> None:
        self.seen += 1
        if self.seen == 3:
            process = otelprocess.sender()
            self.pid = process.pid
            process.popen.kill()
            process.popen.wait()


def test_a_sender_killed_mid_run_is_one_warning_and_the_next_run_starts_a_new_one(collector, tmp_path):
    url, bodies = collector
    killer = _KillsTheSender()
    pending = rk.evaluate_async(demo_agent(), arithmetic_tasks(10), progress=False, otel=url, out=tmp_path / "run",
                                concurrency=1)
    pending.attach(killer)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        result = run_to_end(pending)
    assert [t.ok for t in result.traces] == [True] * 10
    assert len(rk.open_run(tmp_path / "run")) == 10
    [warning] = [str(w.message) for w in said if "span sender" in str(w.message)]
    assert warning == (f"rollkit: the spans of up to 10 rollouts may not have reached {url}: the span sender "
                       f"process (pid {killer.pid}) was killed by SIGKILL")
    bodies.clear()
    again = rk.evaluate(demo_agent(), arithmetic_tasks(2), progress=False, otel=url)
    assert otelprocess.sender().pid != killer.pid
    assert len(_spans(bodies)) == sum(otel.span_count(t) for t in again.traces) == 18


def test_a_sender_that_stops_answering_costs_the_end_its_bound_and_is_ended(collector, monkeypatch):
    url, _ = collector
    monkeypatch.setattr(otel, "LIVE_END_WAIT", 0.5)
    monkeypatch.setattr(otelprocess, "_START_GRACE", 0.5)
    rk.evaluate(demo_agent(), arithmetic_tasks(1), progress=False, otel=url)  # a sender that has started
    process = otelprocess.sender()
    os.kill(process.pid, signal.SIGSTOP)
    started = time.monotonic()
    with pytest.warns(UserWarning, match=rf"the spans of up to 3 rollouts may not have reached {url}: the span "
                                         rf"sender process \(pid {process.pid}\) did not answer within 1 s and was "
                                         "ended") as said:
        result = rk.evaluate(demo_agent(), arithmetic_tasks(3), progress=False, otel=url)
    took = time.monotonic() - started
    assert [t.ok for t in result.traces] == [True] * 3
    assert len([w for w in said if "span sender" in str(w.message)]) == 1
    assert gone(process.pid) and process.popen.returncode == -signal.SIGKILL
    assert took < 1 + 8, took  # the bound (1 s here) plus a loaded machine's margin



class _StopsTheSender(RunSink):
    """A watcher that SIGSTOPs the span sender when the first rollout
    finishes and lets it go on at the run's end (before the otel sink's
    end: watchers are told first), so the lines meanwhile fill its pipe and
    the backlog."""

    def __init__(self) -> None:
        self.pid = 0

    def finished(self, trace: Any) -> None:
        if not self.pid:
            self.pid = otelprocess.sender().pid
            os.kill(self.pid, signal.SIGSTOP)

    def end(self, status: str) -> None:
        os.kill(self.pid, signal.SIGCONT)


def test_what_the_backlog_cannot_take_is_dropped_counted_and_said_once_credentials_masked(collector, monkeypatch):
    url, bodies = collector
    monkeypatch.setattr(otelprocess, "_BACKLOG", 64 << 10)  # 64 KB: about 20 demo rollouts' lines
    secret_url = url.replace("http://", "http://user:pass-secret@") + "?api_key=query-secret"
    stopper = _StopsTheSender()
    pending = rk.evaluate_async(demo_agent(), arithmetic_tasks(300), progress=False, otel=secret_url)
    pending.attach(stopper)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        result = run_to_end(pending)
    assert [t.ok for t in result.traces] == [True] * 300
    [warning] = [str(w.message) for w in said if "span" in str(w.message)]
    shown = otel.shown(secret_url)
    unsent = int(warning.split("the spans of ")[1].split()[0])
    assert warning == (f"rollkit: the spans of {unsent} of 300 rollouts were not sent to {shown}: the span "
                       "sender's backlog of 0.0625 MB was full")
    assert "pass-secret" not in warning and "query-secret" not in warning
    received = len(_spans(bodies))
    assert received == 9 * (300 - unsent) and 0 < unsent < 300  # every demo rollout is 9 spans


def _evaluate_in_a_fork(url: str, answers: Any) -> None:
    result = rk.evaluate(demo_agent(), arithmetic_tasks(2), progress=False, otel=url)
    answers.put((otelprocess.sender().pid, [t.ok for t in result.traces]))
    otelprocess.stop()  # a multiprocessing child ends without running atexit


def test_a_forked_process_starts_its_own_sender_and_leaves_its_parents_alone(collector):
    import multiprocessing

    url, bodies = collector
    rk.evaluate(demo_agent(), arithmetic_tasks(1), progress=False, otel=url)
    parents = otelprocess.sender().pid
    fork = multiprocessing.get_context("fork")
    answers = fork.Queue()
    child = fork.Process(target=_evaluate_in_a_fork, args=(url, answers))
    child.start()
    forks_sender, oks = answers.get(timeout=120)
    child.join(120)
    assert child.exitcode == 0 and oks == [True, True]
    assert forks_sender != parents and _wait_gone(forks_sender)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the parent's sender still answers: no warning
        rk.evaluate(demo_agent(), arithmetic_tasks(1), progress=False, otel=url)
    assert otelprocess.sender().pid == parents
    assert len(_spans(bodies)) == 9 * (1 + 2 + 1)
    answers.close()
    answers.join_thread()
