"""The one wait loop: poll a condition with a deadline, one stall warning and a polite back-off.

Every wait of the library that polls (a collective's request, a shared-memory flag, a probe for a
message, a reply from a worker, a counter in another rank's memory) goes through `Waiter`:

1. **spin**: the first `Waiter.SPINS` unsuccessful polls run back to back (a collective's data
   often arrives within microseconds; spinning is not waiting and starts no clock);
2. **yield**: for the next `Waiter.YIELD_S` seconds each poll is followed by ``sched_yield``,
   which returns at once when no other process wants the core, so latency stays that of
   spinning (with ``yield_cpu=False`` the polls of this phase run back to back instead);
3. **sleep**: after that each poll is followed by a sleep of `Waiter.SLEEP_FRACTION` (an
   eighth) of the time waited so far, up to `Waiter.MAX_SLEEP_S` (1 ms), so a long wait costs
   almost no CPU and a wait that just passed the yield phase still answers within a fraction
   of what it has waited.

The clock starts at the first slow poll. Past ``stall_warning`` seconds `Waiter.stalled` runs once
(the ``on_stall`` callback: it builds and logs the message); past ``timeout`` seconds
`Waiter.expired` builds the error that is raised (``on_timeout``), or, without one, the wait
returns False. Subclasses override the two methods to build richer messages
(`hpcdist.comm.deadline.Deadline` names the ranks a collective waits for).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TypeVar

__all__ = ["Waiter", "wait_until", "wait_value"]

T = TypeVar("T")


class Waiter:
    """Polls for completion with a deadline, a stall warning and the spin/yield/sleep schedule.

    One `Waiter` serves one wait at a time; `restart` arms it for the next one (same settings).

    Args:
        timeout: Seconds of slow polling before the wait ends (`expired`); None waits for ever.
        stall_warning: Seconds before `stalled` runs (once per wait); None never.
        on_stall: ``on_stall(elapsed)`` at the stall warning (e.g. logs what is missing).
        on_timeout: ``on_timeout(elapsed)`` returns the error raised at the deadline; None: the
            wait returns False instead.
        spins: Polls before the first slow poll (default `SPINS`).
        yield_s: Seconds of yielding before sleeping (default `YIELD_S`).
        max_sleep_s: Longest sleep between two polls (default `MAX_SLEEP_S`).
        yield_cpu: Whether polls of the yield phase yield the processor; False polls back to
            back (for a loop whose next message usually follows within microseconds).
    """

    __slots__ = (
        "_warned",
        "max_sleep_s",
        "on_stall",
        "on_timeout",
        "spins",
        "stall_warning",
        "start",
        "timeout",
        "yield_cpu",
        "yield_s",
    )

    #: Unsuccessful polls spent spinning before the first slow poll.
    SPINS = 200
    #: Seconds of yielding the processor before sleeping.
    YIELD_S = 0.02
    #: Each sleep lasts this fraction of the time waited so far (then `MAX_SLEEP_S` at most).
    SLEEP_FRACTION = 0.125
    #: The longest sleep between two polls, in seconds.
    MAX_SLEEP_S = 1e-3

    def __init__(
        self,
        timeout: float | None = None,
        stall_warning: float | None = None,
        on_stall: Callable[[float], None] | None = None,
        on_timeout: Callable[[float], BaseException] | None = None,
        *,
        spins: int | None = None,
        yield_s: float | None = None,
        max_sleep_s: float | None = None,
        yield_cpu: bool = True,
    ) -> None:
        self.timeout = timeout
        self.stall_warning = stall_warning
        self.on_stall = on_stall
        self.on_timeout = on_timeout
        self.spins = self.SPINS if spins is None else spins
        self.yield_s = self.YIELD_S if yield_s is None else yield_s
        self.max_sleep_s = self.MAX_SLEEP_S if max_sleep_s is None else max_sleep_s
        self.yield_cpu = yield_cpu
        #: When the first slow poll of the current wait ran (None: not yet).
        self.start: float | None = None
        self._warned = False

    @property
    def warned(self) -> bool:
        """Whether the stall warning of the current wait has run."""
        return self._warned

    def restart(self) -> None:
        """Arm the waiter for a new wait: the clock and the stall warning start again."""
        self.start = None
        self._warned = False

    def elapsed(self) -> float:
        """Seconds since the first slow poll of the current wait (0 before it)."""
        return 0.0 if self.start is None else time.monotonic() - self.start

    def wait(self, done: Callable[[], bool]) -> bool:
        """Poll ``done()`` until it is true.

        Returns:
            True once ``done()`` is true; False when the timeout passed first and the waiter
            has no ``on_timeout``.

        Raises:
            BaseException: What `expired` returns, when the timeout passed first.
        """
        spins = 0
        limit = self.spins
        while not done():
            spins += 1
            if spins >= limit and not self.poll_slow(spins):
                return False
        return True

    def wait_value(self, ready: Callable[[], T | None]) -> T | None:
        """Poll ``ready()`` until it returns something other than None; return that.

        Returns:
            The first value other than None; None when the timeout passed first and the waiter
            has no ``on_timeout``.

        Raises:
            BaseException: What `expired` returns, when the timeout passed first.
        """
        spins = 0
        limit = self.spins
        while (value := ready()) is None:
            spins += 1
            if spins >= limit and not self.poll_slow(spins):
                return None
        return value

    def poll_slow(self, spins: int) -> bool:
        """After an unsuccessful poll: yield or sleep, warn about a stall, enforce the deadline.

        Args:
            spins: Unsuccessful polls of this wait so far.

        Returns:
            False when the timeout passed and there is no error to raise (the wait gives up).

        Raises:
            BaseException: What `expired` returns, when the timeout passed.
        """
        now = time.monotonic()
        if self.start is None:
            self.start = now
        elapsed = now - self.start
        if elapsed < self.yield_s:
            if self.yield_cpu:
                os.sched_yield()
        else:
            time.sleep(min(self.max_sleep_s, self.SLEEP_FRACTION * elapsed))
        if self.stall_warning is not None and not self._warned and elapsed > self.stall_warning:
            self._warned = True
            self.stalled(elapsed)
        if self.timeout is not None and elapsed > self.timeout:
            error = self.expired(elapsed)
            if error is not None:
                raise error
            return False
        return True

    def stalled(self, elapsed: float) -> None:
        """The wait passed its stall warning (once per wait): calls ``on_stall``."""
        if self.on_stall is not None:
            self.on_stall(elapsed)

    def expired(self, elapsed: float) -> BaseException | None:
        """The error to raise at the deadline (from ``on_timeout``); None: give up quietly."""
        return None if self.on_timeout is None else self.on_timeout(elapsed)


def wait_until(
    done: Callable[[], bool],
    timeout: float | None = None,
    stall_warning: float | None = None,
    on_stall: Callable[[float], None] | None = None,
    on_timeout: Callable[[float], BaseException] | None = None,
) -> bool:
    """Poll ``done()`` with a fresh `Waiter` (see there); whether it became true in time."""
    return Waiter(timeout, stall_warning, on_stall, on_timeout).wait(done)


def wait_value(
    ready: Callable[[], T | None],
    timeout: float | None = None,
    stall_warning: float | None = None,
    on_stall: Callable[[float], None] | None = None,
    on_timeout: Callable[[float], BaseException] | None = None,
) -> T | None:
    """Poll ``ready()`` with a fresh `Waiter` until it returns a value other than None."""
    return Waiter(timeout, stall_warning, on_stall, on_timeout).wait_value(ready)
