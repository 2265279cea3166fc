"""What the OpenTelemetry exporter costs per rollout (`rk.export(...,
format="otel")`, and so each rollout of `rk.evaluate(..., otel=URL)`).

The same traces (the demo agent's arithmetic rollouts: two model calls, one
tool call, five phases; 9 spans each) are sent four ways, so the cost
splits into its parts:

- spans only: built through the SDK into its `InMemorySpanExporter` (what
  rollkit's mapping and the SDK's span objects cost: the `span_exporter=` path);
- OTLP encoding alone: those finished spans encoded to OTLP protobuf by the
  SDK's encoder in batches of 512, as the OTLP exporter does before it
  sends (timed apart from building them; an endpoint is no longer sent
  spans this way: rollkit writes the protobuf itself, so the next line
  costing less than these two is that difference);
- OTLP/HTTP: to a sink on 127.0.0.1 (a `http.server` that reads each
  request and answers 200, like a collector that keeps nothing), the spans
  written as OTLP protobuf by rollkit and posted by the OTLP exporter's client;
- OTLP/HTTP with `content=True` (messages, tool arguments and results).

Best of a few runs; the machine may be shared, so compare the lines.

    PYTHONPATH=. python benchmarks/otel_export.py [--rollouts 2000] [--json PATH]
"""

from __future__ import annotations

import argparse
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import rollkit as rk
from rollkit.examples import arithmetic_tasks, demo_agent
from rollkit.interop.exports.otel import OtelSent
from _common import Results, json_option


class _Sink(BaseHTTPRequestHandler):
    received = 0

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        _Sink.received += 1
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def _encode(spans: Any) -> Any:
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    for i in range(0, len(spans), 512):
        encode_spans(spans[i:i + 512]).SerializePartialToString()
    return OtelSent(traces=0, spans=len(spans))


def _best(fn: Any, repeat: int = 3) -> tuple[float, Any]:
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return min(times), result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rollouts", type=int, default=2000)
    json_option(parser)
    args = parser.parse_args()
    n = args.rollouts
    results = Results("otel_export.py", f"the OpenTelemetry export of {n:,} demo rollouts (9 spans each), best of 3")
    base = rk.evaluate(demo_agent(), arithmetic_tasks(50), progress=False).traces
    traces = [base[i % len(base)] for i in range(n)]
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    server = ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}/v1/traces"
    try:
        memory = InMemorySpanExporter()
        ways = [
            ("spans built (InMemorySpanExporter)", lambda: (memory.clear(), rk.export(traces, format="otel",
                                                                                      span_exporter=memory))[1]),
            ("OTLP protobuf encoding alone", lambda: _encode(memory.get_finished_spans())),
            ("OTLP/HTTP to a 127.0.0.1 sink", lambda: rk.export(traces, format="otel", endpoint=url)),
            ("OTLP/HTTP, content=True", lambda: rk.export(traces, format="otel", endpoint=url, content=True)),
        ]
        print(f"{n} rollouts, {len(base)} distinct traces")
        for what, run in ways:
            seconds, sent = _best(run)
            print(f"{what:<36} {seconds * 1e6 / n:8.1f} µs/rollout   {seconds * 1e6 / sent.spans:6.1f} µs/span   "
                  f"({sent.spans / n:g} spans/rollout, {sent.failed} failed)")
            results.add(what, seconds * 1e6 / n, "µs/rollout")
        results.save(args.json)
        print(f"sink requests received: {_Sink.received}")
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


if __name__ == "__main__":
    main()
