"""What the fault suite tried and what held, one line per finding; the
test report's summary prints them (conftest.pytest_terminal_summary), so the
counts show in every run of the test command, passed or not."""

from __future__ import annotations

LINES: list[str] = []


def report(line: str) -> None:
    LINES.append(line)
