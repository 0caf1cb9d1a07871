"""Asynchronous collectives: `Handle` and the one background thread per communicator.

Async collectives run in order on a single worker thread (MPI thread level ``multiple``;
otherwise they run at once, in the caller's thread). A synchronous collective first waits for
the pending async ones, so every rank issues the same sequence. CUDA's current device is per
thread: each async collective runs on its caller's.

`Runner.lock` is held by every collective while it runs, whichever thread runs it: a
communicator's state (sequence numbers, the envelope's stage, the shared-memory phase, the
reused deadline of the small all-reduce) is changed by one collective at a time. Code that runs
a collective without `Runner.sync` (the small all-reduce of `hpcdist.comm.communicator`) must
do what it does: nothing pending (else `sync`), then hold ``lock``.
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Callable
from typing import Any

from mpi4py import MPI

from hpcdist import timeline
from hpcdist.utils.xp import current_gpu, device_scope

__all__ = ["Handle", "Runner"]


class Handle:
    """The pending result of an ``*_async`` collective.

    Args:
        future: The future running the collective, or None when it already ran.
        result: The result when it already ran.
    """

    def __init__(self, future: concurrent.futures.Future | None, result: Any = None) -> None:
        self._future = future
        self._result = result

    def wait(self, timeout: float | None = None) -> Any:
        """Block until the collective completes and return its result (or raise its error)."""
        if self._future is None:
            return self._result
        return self._future.result(timeout)

    def test(self) -> bool:
        """Return whether the collective has completed."""
        return self._future is None or self._future.done()


class Runner:
    """Runs a communicator's collectives one at a time, synchronously or in the background."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pending: list[concurrent.futures.Future] = []
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self.channel = timeline.new_channel()  # names the communicator in a timeline

    def drain(self) -> None:
        """Wait for every pending async collective (their errors stay in their handles)."""
        pending = list(self.pending)
        self.pending.clear()  # in place: callers may hold the list
        for future in pending:
            future.exception()

    def sync(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run ``fn(*args)`` now, after the pending async collectives."""
        if self.pending:
            self.drain()
        with self.lock:
            if not timeline.active():
                return fn(*args)
            return self._traced(fn, args)

    def start(self, fn: Callable[..., Any], *args: Any) -> Handle:
        """Queue ``fn(*args)`` on the background thread (or run it now, as `sync`, without one)."""
        if MPI.Query_thread() < MPI.THREAD_MULTIPLE:
            return Handle(None, self.sync(fn, *args))
        if self._executor is None:
            self._executor = concurrent.futures.ThreadPoolExecutor(1, "hpcdist-comm")
        future = self._executor.submit(self._run, current_gpu(), fn, *args)
        self.pending.append(future)
        return Handle(future)

    def _run(self, device: str | None, fn: Callable[..., Any], *args: Any) -> Any:
        with self.lock, device_scope(device):
            if not timeline.active():
                return fn(*args)
            return self._traced(fn, args)

    def _traced(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
        """Run ``fn(*args)`` and record it on the timeline (kind, bytes, dtype, call number)."""
        seq = timeline.next_sequence(self.channel)
        first = args[0] if args else None
        if isinstance(first, list | tuple):
            nbytes = sum(int(getattr(x, "nbytes", 0)) for x in first)
            dtype = str(getattr(first[0], "dtype", "")) if first else ""
        else:
            nbytes, dtype = int(getattr(first, "nbytes", 0)), str(getattr(first, "dtype", ""))
        name = getattr(fn, "__name__", "collective")
        if name == "grouped":
            name = "grouped_allreduce"
        begin = timeline.now()
        try:
            return fn(*args)
        finally:
            timeline.record(
                "collective",
                name,
                begin,
                timeline.now(),
                {"bytes": nbytes, "dtype": dtype, "comm": self.channel, "seq": seq},
            )

    def close(self) -> None:
        """Finish the pending collectives and stop the thread."""
        self.drain()
        if self._executor is not None:
            self._executor.shutdown()
