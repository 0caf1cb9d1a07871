"""A timeline of every rank: collectives, training steps, checkpoints, scheduled functions.

Off by default, and then free (one module attribute test per event). On with
``HPCDIST_TIMELINE=trace.json`` (or ``hpcdist run --timeline trace.json``, or `start`), each rank
records, in memory, spans of:

* ``collective`` events: kind (``allreduce``, ``grouped_allreduce``, ``broadcast``, ...), bytes,
  dtype, the communicator and the call's sequence number on it, from this rank's arrival to its
  return (the straggler analysis matches the same call across ranks by that number);
* ``step`` events: each ``strategy.run`` (custom loops and ``fit``);
* ``input`` events: each wait of a distributed dataset's iterator for this rank's next element
  (its pipeline's time not hidden by prefetching);
* ``checkpoint`` events: save and restore;
* ``ps`` events: a function scheduled, sent to a worker, run there, its result back.

At `stop` (collective: every rank calls it) or at the end of the program, the events are
gathered on rank 0 and written as one Chrome trace-event JSON file (``{"traceEvents": [...]}``,
one process track per rank, timestamps in microseconds on rank 0's clock), which Perfetto and
chrome://tracing read. ``hpcdist timeline trace.json`` summarises it
(`hpcdist.cli.timeline_summary`).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

from hpcdist.cluster.gather import gather_with_clocks
from hpcdist.settings import get_settings

__all__ = [
    "ENV_VARIABLE",
    "MAX_EVENTS",
    "active",
    "new_channel",
    "next_sequence",
    "now",
    "record",
    "span",
    "start",
    "start_from_environment",
    "stop",
]

#: The environment variable naming the trace file.
ENV_VARIABLE = "HPCDIST_TIMELINE"
#: Events kept per rank (later ones are counted, not kept).
MAX_EVENTS = 1_000_000

_recorder: _Recorder | None = None
_lock = threading.Lock()


class _Recorder:
    def __init__(self, path: str) -> None:
        self.path = path
        self.events: list[tuple[str, str, float, float, int, dict[str, Any] | None]] = []
        self.dropped = 0
        self.sequences: dict[int, int] = {}

    def add(self, cat: str, name: str, begin: float, end: float, args: dict | None) -> None:
        if len(self.events) >= MAX_EVENTS:
            self.dropped += 1
            return
        self.events.append((cat, name, begin, end, threading.get_ident(), args))


def active() -> bool:
    """Whether this process is recording (the public test for every other module).

    One global read and a call: cheap enough for a collective's fast path. Code that records
    only when recording (a timestamp taken before a call, a gate around a fast path) asks
    here instead of reading the module's state.
    """
    return _recorder is not None


def now() -> float:
    """The clock of the timeline (seconds)."""
    return time.perf_counter()


def record(cat: str, name: str, begin: float, end: float, args: dict | None = None) -> None:
    """Record a span from ``begin`` to ``end`` (`now` seconds) when recording."""
    rec = _recorder
    if rec is not None:
        rec.add(cat, name, begin, end, args)


def next_sequence(channel: int) -> int:
    """The next call number on ``channel`` (a communicator's id): same order on every rank."""
    rec = _recorder
    if rec is None:
        return -1
    n = rec.sequences.get(channel, 0)
    rec.sequences[channel] = n + 1
    return n


@contextlib.contextmanager
def span(cat: str, name: str, **args: Any) -> Iterator[None]:
    """Record the block as a span (nothing when not recording)."""
    if _recorder is None:
        yield
        return
    begin = now()
    try:
        yield
    finally:
        record(cat, name, begin, now(), args or None)


def start(path: str) -> None:
    """Start recording on this rank; ``path`` is the trace file rank 0 writes at `stop`."""
    global _recorder
    with _lock:
        if _recorder is None:
            _recorder = _Recorder(os.path.abspath(path))
            atexit.register(_stop_at_exit)


def start_from_environment() -> None:
    """Start recording if ``HPCDIST_TIMELINE`` names a file (idempotent, cheap)."""
    if _recorder is None:
        path = get_settings().timeline
        if path:
            start(path)


_channels = [0]


def new_channel() -> int:
    """A number for a new communicator: the same on every rank (they are made in one order)."""
    _channels[0] += 1
    return _channels[0]


def _stop_at_exit() -> None:
    if _recorder is not None:
        stop()


def stop() -> str | None:
    """Stop recording and write the trace (collective over ``COMM_WORLD``).

    Returns:
        The trace path on rank 0, None elsewhere (and when not recording).
    """
    global _recorder
    with _lock:
        rec, _recorder = _recorder, None
    if rec is None:
        return None
    from_world = _gather(rec)
    if from_world is None:
        return None
    with open(rec.path + ".tmp", "w") as f:
        json.dump(from_world, f)
    os.replace(rec.path + ".tmp", rec.path)
    return rec.path


def _gather(rec: _Recorder) -> dict[str, Any] | None:
    """Every rank's events on rank 0, on rank 0's clock, as a trace-event document."""
    payload = (rec.events, rec.dropped, os.uname().nodename, os.getpid())
    gathered = gather_with_clocks(payload, now)
    if gathered is None:
        return None
    marks = [mark for mark, _ in gathered]
    everything = [entry for _, entry in gathered]
    events: list[dict[str, Any]] = []
    for rank, (rank_events, dropped, host, pid) in enumerate(everything):
        offset = marks[0] - marks[rank]  # barrier exit taken as simultaneous
        events.append(_meta("process_name", rank, {"name": f"rank {rank} ({host}, pid {pid})"}))
        events.append(_meta("process_sort_index", rank, {"sort_index": rank}))
        threads: dict[int, int] = {}
        for cat, name, begin, end, ident, args in sorted(rank_events, key=lambda e: e[2]):
            tid = threads.setdefault(ident, len(threads))
            event = {
                "name": name,
                "cat": cat,
                "ph": "X",
                "ts": round((begin + offset) * 1e6, 3),
                "dur": round(max(end - begin, 0.0) * 1e6, 3),
                "pid": rank,
                "tid": tid,
            }
            if args:
                event["args"] = args
            events.append(event)
        if dropped:
            events.append(_meta("dropped_events", rank, {"count": dropped}))
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": {"ranks": len(marks)}}


def _meta(name: str, rank: int, args: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "ph": "M", "pid": rank, "tid": 0, "args": args}
