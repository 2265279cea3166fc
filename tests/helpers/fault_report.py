"""Lines a test wants in every run's summary, passed or not, by section: the
fault suite's findings, one line each (what it tried and what held), and
the notebooks' run times of tests/test_binder.py. The test report's summary
prints them (conftest.pytest_terminal_summary), so they show in every run of
the test command (scripts/test.sh's output, a CI log), not only when a test
fails."""

from __future__ import annotations

SECTIONS: dict[str, list[str]] = {}


def report(line: str, section: str = "fault suite") -> None:
    SECTIONS.setdefault(section, []).append(line)
