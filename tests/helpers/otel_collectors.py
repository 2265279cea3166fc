"""Collectors on 127.0.0.1 the OpenTelemetry tests send spans to."""

from __future__ import annotations

from http.server import BaseHTTPRequestHandler
from typing import Any


class Keeper(BaseHTTPRequestHandler):
    """A collector that keeps each request's body (in `bodies`, reset by the test) and answers 200."""

    bodies: list[bytes] = []

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        self.bodies.append(self.rfile.read(int(self.headers["Content-Length"])))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass
