"""The one wait loop (`hpcdist.utils.waiting.Waiter`): deadline, stall warning, back-off."""

from __future__ import annotations

import itertools
import os
import time

import numpy as np
import pytest

from hpcdist.comm.deadline import Deadline
from hpcdist.errors import DeadlineExceededError
from hpcdist.utils.waiting import Waiter, wait_until, wait_value


class Late(Exception):
    pass


def test_done_at_once_starts_no_clock():
    waiter = Waiter(0.01)
    assert waiter.wait(lambda: True) is True
    assert waiter.start is None and waiter.elapsed() == 0.0


def test_a_condition_that_becomes_true_is_seen():
    end = time.monotonic() + 0.05
    assert wait_until(lambda: time.monotonic() > end, timeout=5.0) is True
    assert wait_value(lambda: 7 if time.monotonic() > end else None, timeout=5.0) == 7


def test_deadline_raises_in_time():
    begin = time.monotonic()
    with pytest.raises(Late, match="late after"):
        Waiter(0.2, on_timeout=lambda elapsed: Late(f"late after {elapsed:.1f} s")).wait(
            lambda: False
        )
    waited = time.monotonic() - begin
    assert 0.2 <= waited < 1.0, waited


def test_without_an_error_the_wait_gives_up():
    begin = time.monotonic()
    assert wait_until(lambda: False, timeout=0.1) is False
    assert wait_value(lambda: None, timeout=0.1) is None
    assert time.monotonic() - begin < 1.0


def test_stall_warning_fires_once_per_wait():
    stalls: list[float] = []
    waiter = Waiter(0.3, 0.05, on_stall=stalls.append)
    assert waiter.wait(lambda: False) is False
    assert len(stalls) == 1 and stalls[0] > 0.05
    assert waiter.warned
    waiter.restart()
    assert not waiter.warned and waiter.start is None
    waiter.wait(lambda: False)
    assert len(stalls) == 2


def test_a_long_wait_sleeps_instead_of_spinning():
    cpu, wall = time.process_time(), time.monotonic()
    assert wait_until(lambda: False, timeout=1.0) is False
    cpu, wall = time.process_time() - cpu, time.monotonic() - wall
    assert wall >= 1.0
    # Spinning would cost a whole core (cpu == wall); the back-off sleeps up to 1 ms per poll.
    assert cpu < 0.3 * wall, f"{cpu:.3f} s of CPU in {wall:.3f} s of waiting"


def test_the_schedule_spins_then_yields_then_sleeps():
    waiter = Waiter(None, spins=5, yield_s=0.05, max_sleep_s=2e-3)
    stamps: list[float] = []

    def done() -> bool:
        stamps.append(time.monotonic())
        return waiter.elapsed() > 0.6

    waiter.wait(done)
    start = waiter.start
    assert start is not None and len(stamps) > 5
    yielding = [t for t in stamps if t - start < 0.05]
    sleeping = [t for t in stamps if t - start > 0.06]
    gaps = [b - a for a, b in itertools.pairwise(sleeping)]
    # Yielding polls do not sleep (several in 50 ms even on a loaded machine); sleeps would be
    # an eighth of the time waited (7.5-75 ms here) but are capped at 2 ms, plus scheduling
    # slack.
    assert len(yielding) > 5
    assert gaps and min(gaps) >= 1.9e-3 and float(np.median(gaps)) < 25e-3


def test_a_waiter_that_does_not_yield_polls_back_to_back(monkeypatch):
    calls = {"yield": 0}
    real_yield = os.sched_yield

    def counting_yield() -> None:
        calls["yield"] += 1
        real_yield()

    monkeypatch.setattr(os, "sched_yield", counting_yield)
    for yield_cpu, expect_yields in ((False, False), (True, True)):
        calls["yield"] = 0
        waiter = Waiter(None, spins=1, yield_s=0.03, yield_cpu=yield_cpu)
        waiter.wait(lambda w=waiter: w.elapsed() > 0.02)
        # Within the 30 ms yield phase: no yield at all without yield_cpu, one per poll with it.
        assert (calls["yield"] > 0) is expect_yields, (yield_cpu, calls)


def test_deadline_names_the_collective_and_rearms_on_reset():
    deadline = Deadline(0.1, None, seq=3)
    with pytest.raises(DeadlineExceededError, match=r"collective #3 did not complete within 0.1 s"):
        deadline.wait(lambda: False)
    deadline.reset(4, 0.1)
    assert deadline.start is None and not deadline.warned and deadline.seq == 4
    with pytest.raises(DeadlineExceededError, match="collective #4"):
        deadline.wait(lambda: False)
