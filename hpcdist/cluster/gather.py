"""Every rank's clock reading and payload on rank 0: the cross-rank merge of per-rank records.

The timeline (`hpcdist.timeline`) records events on each rank's own clock; to write one trace,
rank 0 needs every rank's events and the offset between the clocks. `gather_with_clocks` is
that step: a barrier on a private duplicate of ``COMM_WORLD``, each rank's clock read as it
leaves the barrier (the exits are taken as simultaneous), then both gathered on rank 0. It
belongs to the foundation's MPI owners (`cluster`) so that foundation modules can merge
per-rank records without importing mpi4py themselves.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mpi4py import MPI

__all__ = ["gather_with_clocks"]


def gather_with_clocks(payload: Any, clock: Callable[[], float]) -> list[tuple[float, Any]] | None:
    """``(clock reading, payload)`` of every rank, in rank order, on rank 0 (collective).

    Every rank of ``COMM_WORLD`` calls it. The communicator is duplicated for the call, so the
    traffic never meets the user's or hpcdist's own messages, and freed before returning.

    Args:
        payload: This rank's picklable record.
        clock: Read once, right after the barrier (the records' clock, e.g. `time.perf_counter`).

    Returns:
        On rank 0, one ``(clock reading, payload)`` pair per rank; None on the other ranks.
    """
    comm = MPI.COMM_WORLD.Dup()
    try:
        comm.Barrier()
        mark = clock()
        marks = comm.gather(mark, root=0)
        payloads = comm.gather(payload, root=0)
    finally:
        comm.Free()
    if payloads is None or marks is None:
        return None
    return list(zip(marks, payloads, strict=True))
