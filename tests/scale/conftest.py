"""The scale step's summary: what each case covered, its wall-clock and memory per rank."""

from __future__ import annotations

import time

import pytest

#: One row per case that ran: (case, ranks, seconds of its launches, memory text, what it covers).
ROWS: list[tuple[str, str, float, str, str]] = []
_START = time.monotonic()


@pytest.fixture
def record():
    """``record(case, ranks, seconds, memory, covers)`` adds a row to the step's summary."""

    def add(case: str, ranks: str, seconds: float, memory: str, covers: str) -> None:
        ROWS.append((case, ranks, seconds, memory, covers))

    return add


def pytest_terminal_summary(terminalreporter) -> None:
    """Print the table of cases after pytest's own summary."""
    if not ROWS:
        return
    write = terminalreporter.write_line
    write("")
    write(f"scale step: {time.monotonic() - _START:.0f} s wall-clock in all")
    for case, ranks, seconds, memory, covers in ROWS:
        write(f"  {case:<18} {ranks:>6} ranks {seconds:6.1f} s  {memory}  {covers}")
