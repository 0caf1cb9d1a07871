"""Parameter-server variable memory: one-sided MPI RMA windows owned by the ps ranks.

Memory comes in **segments**: one `hpcdist.comm.rma.Window` (``MPI_Win_allocate``) over every
rank of the job, on a `hpcdist.comm.p2p.Channel` of its own, in which each ps rank exposes some
bytes and every other rank none. Creating a segment is a
collective; the coordinator decides when (`SegmentAllocator`), tells every rank, and places
variables inside segments without any communication. Every rank holds a shared passive-target
lock on every segment for its whole life (``Lock_all(MODE_NOCHECK)``), so a read is a ``Get``,
an update an ``Accumulate`` (``SUM``, or ``REPLACE`` for assignment), each completed by
``Flush`` of the owning rank: the ps process takes no part.

Element-wise atomicity: MPI makes concurrent ``Accumulate`` calls with the same operation
element-wise atomic, so many workers adding into one variable give the exact total. A ``Get``
concurrent with an update sees each element either before or after it (whole-variable snapshots
are not guaranteed, as with asynchronous training in TF).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hpcdist.comm import rma
from hpcdist.comm.p2p import Channel
from hpcdist.core.variables import Storage

__all__ = ["RmaStorage", "RmaStore", "SegmentAllocator", "mpi_datatype"]

_ALIGN = 64


def mpi_datatype(dtype: np.dtype, name: str) -> Any:
    """The MPI datatype of ``dtype`` (one that ``MPI_Accumulate`` can add).

    Raises:
        TypeError: ``dtype`` is not an integer, float32/64 or complex64/128 type (e.g. float16,
            which MPI cannot add).
    """
    dtype = np.dtype(dtype)
    if dtype.kind not in "iufc" or (dtype.kind in "fc" and dtype.itemsize < 4):
        raise TypeError(
            f"variable {name!r}: MPI cannot add dtype {dtype}, so it cannot live in an RMA "
            "window on a parameter server; use float32, float64, complex or an integer type"
        )
    return rma.datatype(dtype)


class RmaStore:
    """The segments of this rank (every rank of the job has one; creation is collective).

    Args:
        channel: A private channel over every rank of the job (the segments' ranks; freed by
            its owner after `free`).
        ps_ranks: Ranks (in ``channel``) of the parameter servers, by ps index.
    """

    def __init__(self, channel: Channel, ps_ranks: list[int]) -> None:
        self.channel = channel
        self.ps_ranks = list(ps_ranks)
        self.windows: list[rma.Window] = []

    def create_segment(self, sizes: list[int]) -> int:
        """Collective: a new segment where ps ``i`` exposes ``sizes[i]`` bytes; its index."""
        rank = self.channel.rank
        mine = sizes[self.ps_ranks.index(rank)] if rank in self.ps_ranks else 0
        self.windows.append(rma.Window.allocate(self.channel, mine, 1, lock_all=True))
        return len(self.windows) - 1

    def local_memory(self, segment: int) -> memoryview:
        """This rank's bytes of ``segment`` (empty on a rank that exposes none)."""
        return self.windows[segment].memory()

    def free(self) -> None:
        """Collective: release every segment."""
        for win in self.windows:
            win.free()
        self.windows = []


class SegmentAllocator:
    """The coordinator's bookkeeping: which bytes of which segment hold which variable.

    Args:
        num_ps: Number of parameter servers.
        segment_bytes: Default bytes per ps per segment.
    """

    def __init__(self, num_ps: int, segment_bytes: int) -> None:
        self.segment_bytes = segment_bytes
        # Per ps: [segment, capacity, used] of every segment that gave this ps memory.
        self.free_lists: list[list[list[int]]] = [[] for _ in range(num_ps)]

    def place(self, ps: int, nbytes: int) -> tuple[int, int] | None:
        """``(segment, offset)`` for ``nbytes`` on ``ps``, or None when a segment is needed."""
        need = -(-max(nbytes, 1) // _ALIGN) * _ALIGN
        for entry in self.free_lists[ps]:
            segment, capacity, used = entry
            if capacity - used >= need:
                entry[2] += need
                return segment, used
        return None

    def new_segment_sizes(self, ps: int, nbytes: int) -> list[int]:
        """Sizes of the next segment: the default everywhere, at least ``nbytes`` on ``ps``."""
        need = -(-max(nbytes, 1) // _ALIGN) * _ALIGN
        return [
            max(self.segment_bytes, need) if i == ps else self.segment_bytes
            for i in range(len(self.free_lists))
        ]

    def add_segment(self, segment: int, sizes: list[int]) -> None:
        """Record a created segment."""
        for ps, size in enumerate(sizes):
            if size:
                self.free_lists[ps].append([segment, size, 0])


class RmaStorage(Storage):
    """A variable's value in a segment: ``Get`` to read, ``Accumulate`` to update.

    Args:
        store: This rank's segments.
        segment: Segment index.
        ps: The owning ps index.
        offset: Byte offset in the owner's part of the segment.
        shape: Shape of the value.
        dtype: Dtype of the value.
        name: Variable name (for errors).
    """

    def __init__(
        self,
        store: RmaStore,
        segment: int,
        ps: int,
        offset: int,
        shape: tuple[int, ...],
        dtype: np.dtype,
        name: str,
    ) -> None:
        self.store = store
        self.segment, self.ps, self.offset = segment, ps, offset
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)
        self.size = int(np.prod(self.shape, dtype=np.int64))
        self.row = int(np.prod(self.shape[1:], dtype=np.int64)) if self.shape else 1
        self.mpi_type = mpi_datatype(self.dtype, name)
        self._spec = (offset, self.size, self.mpi_type)
        self._where: tuple[rma.Window, int] | None = None  # (window, target rank), once known

    @property
    def handle(self) -> tuple[int, int, int, tuple[int, ...], str]:
        """What another rank needs to address the same memory."""
        return self.segment, self.ps, self.offset, self.shape, self.dtype.str

    def located(self) -> tuple[rma.Window, int]:
        """``(window, target rank)`` of this value's memory.

        On a worker of a fault-tolerant job the window is a
        `hpcdist.strategies.ps.remote_store.RemoteWindow` (the same methods, as requests).
        """
        if self._where is None:
            self._where = (self.store.windows[self.segment], self.store.ps_ranks[self.ps])
        return self._where

    def read(self) -> np.ndarray:
        """``Get`` the whole value (a fresh array)."""
        out = np.empty(self.shape, self.dtype)
        if self.size:
            win, target = self._where or self.located()
            win.read(out, target, self._spec)
        return out

    def _accumulate(self, value: Any, op: Any) -> None:
        buf = np.asarray(value, self.dtype)
        if buf.shape != self.shape:
            buf = np.broadcast_to(buf, self.shape)
        if not buf.flags.c_contiguous:
            buf = np.ascontiguousarray(buf)
        if self.size:
            win, target = self._where or self.located()
            win.update(buf, target, self._spec, op)

    def write(self, value: Any) -> None:
        """``Accumulate(REPLACE)`` (element-wise atomic)."""
        self._accumulate(value, rma.REPLACE)

    def add(self, delta: Any) -> None:
        """``Accumulate(SUM)`` (element-wise atomic)."""
        self._accumulate(delta, rma.SUM)

    # -- atomics on one element (integer dtypes) ----------------------------------------------

    def _element(self, index: int) -> tuple[rma.Window, int, int]:
        if not 0 <= index < self.size:
            raise IndexError(f"element {index} of a value of {self.size} elements")
        win, target = self.located()
        return win, target, self.offset + index * self.dtype.itemsize

    def fetch_add(self, index: int, delta: int) -> int:
        """Atomically add ``delta`` to element ``index``; the value before."""
        win, target, disp = self._element(index)
        result = np.empty(1, self.dtype)
        win.fetch_and_op(np.array([delta], self.dtype), result, target, disp, rma.SUM)
        return int(result[0])

    def compare_and_swap(self, index: int, expected: int, new: int) -> int:
        """Atomically set element ``index`` to ``new`` if it is ``expected``; the value found."""
        win, target, disp = self._element(index)
        result = np.empty(1, self.dtype)
        win.compare_and_swap(
            np.array([new], self.dtype), np.array([expected], self.dtype), result, target, disp
        )
        return int(result[0])

    def atomic_read(self, index: int) -> int:
        """Element ``index``, read atomically (``Fetch_and_op(NO_OP)``)."""
        win, target, disp = self._element(index)
        result = np.empty(1, self.dtype)
        win.fetch_and_op(np.zeros(1, self.dtype), result, target, disp, rma.NO_OP)
        return int(result[0])

    # -- rows: only the touched rows move -----------------------------------------------------

    def _row_op(self, ids: np.ndarray, buf: np.ndarray, kind: str, op: Any = None) -> None:
        """``Get`` (``kind="get"``) or ``Accumulate`` rows ``ids`` (sorted, unique)."""
        if not len(ids) or not self.row:
            return
        win, target = self.located()
        displacements = (ids * self.row).astype(np.int64).tolist()
        if len(ids) == 1:  # one row: a contiguous target, no datatype to build
            spec = (self.offset + displacements[0] * self.dtype.itemsize, self.row, self.mpi_type)
            self._move(win, target, buf, spec, kind, op)
            return
        if not isinstance(win, rma.Window):  # a worker of a fault-tolerant job: a request
            if kind == "get":
                win.read_rows(buf, target, self.offset, self.row, displacements)
            else:
                win.update_rows(buf, target, self.offset, self.row, displacements, op)
            return
        with rma.indexed_rows(self.mpi_type, self.row, displacements) as rows:
            self._move(win, target, buf, (self.offset, 1, rows), kind, op)

    @staticmethod
    def _move(win: rma.Window, target: int, buf: np.ndarray, spec: Any, kind: str, op: Any) -> None:
        if kind == "get":
            win.read(buf, target, spec)
        else:
            win.update(buf, target, spec, op)

    def read_rows(self, ids: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """``Get`` rows ``ids`` (sorted, unique, in range) of the first axis (into ``out``)."""
        if out is None:
            out = np.empty((len(ids), *self.shape[1:]), self.dtype)
        self._row_op(np.asarray(ids, np.int64), out, "get")
        return out

    def add_rows(self, ids: np.ndarray, rows: np.ndarray) -> None:
        """``Accumulate(SUM)`` into rows ``ids`` (sorted, unique, in range)."""
        buf = np.ascontiguousarray(rows, self.dtype)
        self._row_op(np.asarray(ids, np.int64), buf, "acc", rma.SUM)

    def write_rows(self, ids: np.ndarray, rows: np.ndarray) -> None:
        """``Accumulate(REPLACE)`` rows ``ids`` (sorted, unique, in range)."""
        buf = np.ascontiguousarray(rows, self.dtype)
        self._row_op(np.asarray(ids, np.int64), buf, "acc", rma.REPLACE)
