"""One-sided MPI traffic: RMA windows and their lifetime.

A `Window` is one ``MPI_Win`` over a communicator (a `hpcdist.comm.p2p.Channel`'s, or any
intracommunicator), created collectively by `Window.allocate` (each rank exposes some bytes,
possibly none) or `Window.allocate_shared` (the ranks of one node share memory). An allocated
window is normally held in a shared passive-target epoch for its whole life
(``Lock_all(MODE_NOCHECK)``, ``lock_all=True``), so that a read is a `Window.get` and an update
a `Window.accumulate`, each completed by `Window.flush` of the target: the target process takes
no part. `Window.read` and `Window.update` are ``get``/``accumulate`` followed by ``flush``.

Lifetime, as ``mpi4py.util.sync.Counter`` does it: `Window.free` is collective, runs once
(later calls do nothing) and leaves the window unusable: any later operation raises
`RuntimeError` instead of reaching MPI with a freed handle.

Targets are mpi4py's: a ``target`` argument is ``(displacement, count, datatype)`` in the target's
displacement units, datatypes come from `datatype` or `indexed_rows`, ops are `SUM`, `REPLACE`,
`NO_OP` (element-wise atomic for concurrent accumulates with the same op).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
from mpi4py import MPI
from mpi4py.util.dtlib import from_numpy_dtype

from hpcdist.comm import creation
from hpcdist.comm.counters import COUNTING, add
from hpcdist.comm.p2p import Channel

__all__ = ["NO_OP", "REPLACE", "SUM", "Window", "datatype", "indexed_rows"]

#: Accumulate op: add.
SUM = MPI.SUM
#: Accumulate op: replace (an element-wise atomic write).
REPLACE = MPI.REPLACE
#: Fetch-and-op op: read only.
NO_OP = MPI.NO_OP


def datatype(dtype: Any) -> MPI.Datatype:
    """The MPI datatype of numpy ``dtype``."""
    return from_numpy_dtype(np.dtype(dtype))


@contextlib.contextmanager
def indexed_rows(base: MPI.Datatype, row: int, displacements: Sequence[int]) -> Iterator[Any]:
    """A committed datatype selecting blocks of ``row`` elements at ``displacements``; freed after.

    Args:
        base: The element datatype.
        row: Elements per block.
        displacements: Offset of each block, in elements.
    """
    dtype = base.Create_indexed_block(row, list(displacements))
    dtype.Commit()
    try:
        yield dtype
    finally:
        dtype.Free()


def _nbytes(buf: Any) -> int:
    """Bytes of an origin buffer: an array, or ``[array, datatype]`` (counting only)."""
    data = buf[0] if isinstance(buf, (list, tuple)) else buf
    return int(getattr(data, "nbytes", len(memoryview(data).cast("B"))))


def _freed() -> RuntimeError:
    return RuntimeError("RMA window already freed: expected a live window")


def _raw(comm: Channel | MPI.Intracomm) -> MPI.Intracomm:
    return comm.comm if isinstance(comm, Channel) else comm


class Window:
    """One RMA window: creation, one-sided operations, and a free guarded against reuse.

    Build with `allocate` or `allocate_shared` (collective).

    Args:
        win: The ``MPI.Win``.
        locked: Whether it is held in a ``Lock_all`` epoch (released by `free`).
    """

    __slots__ = ("_locked", "_win")

    def __init__(self, win: MPI.Win, locked: bool) -> None:
        self._win = win
        self._locked = locked

    @classmethod
    def allocate(
        cls, comm: Channel | MPI.Intracomm, nbytes: int, disp_unit: int = 1, lock_all: bool = True
    ) -> Window:
        """Collective: a window in which this rank exposes ``nbytes`` (0: none).

        Args:
            comm: The ranks of the window.
            nbytes: Bytes this rank exposes.
            disp_unit: Bytes per displacement unit.
            lock_all: Hold a shared passive-target epoch on every rank until `free`
                (``Lock_all(MODE_NOCHECK)``).

        Raises:
            DeadlineExceededError: Some ranks did not come to create it within
                ``HPCDIST_TIMEOUT_SECONDS`` (named, on every rank that came).
        """
        comm = _raw(comm)
        # MPI_Win_allocate waits for ever for a rank that never calls it: bounded first
        creation.arrive_in_time(comm, "allocating an RMA window")
        win = MPI.Win.Allocate(nbytes, disp_unit, comm=comm)
        if lock_all:
            win.Lock_all(MPI.MODE_NOCHECK)
        return cls(win, lock_all)

    @classmethod
    def allocate_shared(
        cls, comm: Channel | MPI.Intracomm, nbytes: int, disp_unit: int = 1
    ) -> Window:
        """Collective over the ranks of one node: a shared-memory window (no epoch held).

        Args:
            comm: Ranks that share memory (one node).
            nbytes: Bytes this rank contributes.
            disp_unit: Bytes per displacement unit.

        Raises:
            DeadlineExceededError: As `allocate`.
        """
        comm = _raw(comm)
        creation.arrive_in_time(comm, "allocating a shared-memory window")
        return cls(MPI.Win.Allocate_shared(nbytes, disp_unit, comm=comm), False)

    @property
    def freed(self) -> bool:
        """Whether `free` ran."""
        return self._win == MPI.WIN_NULL

    @property
    def handle(self) -> MPI.Win:
        """The raw ``MPI.Win``, for tools that time raw one-sided MPI beside this window.

        Calls through it bypass the guard against use after `free`.
        """
        return self._live()

    def _live(self) -> MPI.Win:
        win = self._win
        if not win:
            raise _freed()
        return win

    # -- memory --------------------------------------------------------------------------------

    def memory(self) -> memoryview:
        """This rank's exposed bytes (local loads and stores)."""
        return memoryview(self._live().tomemory())

    def shared_memory(self, rank: int = 0) -> tuple[memoryview, int]:
        """``(bytes, displacement unit)`` of ``rank``'s part of a shared window."""
        buf, unit = self._live().Shared_query(rank)
        return memoryview(buf), unit

    # -- epochs --------------------------------------------------------------------------------

    def lock_all(self) -> None:
        """Open a shared passive-target epoch on every rank (``Lock_all(MODE_NOCHECK)``)."""
        self._live().Lock_all(MPI.MODE_NOCHECK)
        self._locked = True

    def unlock_all(self) -> None:
        """Close the epoch of `lock_all` (completes every pending operation)."""
        self._live().Unlock_all()
        self._locked = False

    def sync(self) -> None:
        """Synchronise this rank's public and private copies of its memory (``Win_sync``)."""
        self._live().Sync()

    def flush(self, target: int) -> None:
        """Complete this rank's pending operations at ``target``, there."""
        self._live().Flush(target)

    # -- operations ----------------------------------------------------------------------------

    def get(self, buf: Any, rank: int, target: Any = None) -> None:
        """Start reading ``rank``'s memory into ``buf`` (complete with `flush`)."""
        if COUNTING:
            add("rma.get", _nbytes(buf))
        self._live().Get(buf, rank, target)

    def put(self, buf: Any, rank: int, target: Any = None) -> None:
        """Start writing ``buf`` into ``rank``'s memory (complete with `flush`)."""
        if COUNTING:
            add("rma.put", _nbytes(buf))
        self._live().Put(buf, rank, target)

    def accumulate(self, buf: Any, rank: int, target: Any = None, op: Any = SUM) -> None:
        """Start combining ``buf`` into ``rank``'s memory with ``op`` (complete with `flush`)."""
        if COUNTING:
            add("rma.accumulate", _nbytes(buf))
        self._live().Accumulate(buf, rank, target, op=op)

    def read(self, buf: Any, rank: int, target: Any = None) -> None:
        """`get` then `flush`: ``buf`` holds ``rank``'s memory on return."""
        win = self._win
        if not win:  # inlined `_live`: the variables' read path
            raise _freed()
        if COUNTING:
            add("rma.get", _nbytes(buf))
        win.Get(buf, rank, target)
        win.Flush(rank)

    def update(self, buf: Any, rank: int, target: Any = None, op: Any = SUM) -> None:
        """`accumulate` then `flush`: the update is complete at ``rank`` on return."""
        win = self._win
        if not win:  # inlined `_live`: the variables' update path
            raise _freed()
        if COUNTING:
            add("rma.accumulate", _nbytes(buf))
        win.Accumulate(buf, rank, target, op=op)
        win.Flush(rank)

    def fetch_and_op(self, value: Any, result: Any, rank: int, disp: int, op: Any = SUM) -> None:
        """Atomically combine one element at ``disp`` with ``value``; ``result`` gets the old one.

        Completed (flushed) on return.
        """
        win = self._live()
        if COUNTING:
            add("rma.fetch_and_op", _nbytes(value))
        win.Fetch_and_op(value, result, rank, disp, op)
        win.Flush(rank)

    def compare_and_swap(self, new: Any, expected: Any, result: Any, rank: int, disp: int) -> None:
        """Atomically set one element at ``disp`` to ``new`` if it equals ``expected``.

        ``result`` gets the value found; completed (flushed) on return.
        """
        win = self._live()
        if COUNTING:
            add("rma.compare_and_swap", _nbytes(new))
        win.Compare_and_swap(new, expected, result, rank, disp)
        win.Flush(rank)

    # -- lifetime ------------------------------------------------------------------------------

    def free(self) -> None:
        """Collective: close the epoch (if held) and free the window, once."""
        win, self._win = self._win, MPI.WIN_NULL
        if win == MPI.WIN_NULL:
            return
        if self._locked:
            win.Unlock_all()
            self._locked = False
        win.Free()
