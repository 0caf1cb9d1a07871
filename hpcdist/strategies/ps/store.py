"""Parameter-server variable memory: one-sided MPI RMA windows owned by the ps ranks.

Memory comes in **segments**: one ``MPI.Win.Allocate`` window over every rank of the job, in
which each ps rank exposes some bytes and every other rank none. Creating a segment is a
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
from mpi4py import MPI
from mpi4py.util.dtlib import from_numpy_dtype

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
    return from_numpy_dtype(dtype)


class RmaStore:
    """The segments of this rank (every rank of the job has one; creation is collective).

    Args:
        comm: A private communicator over every rank of the job.
        ps_ranks: Ranks (in ``comm``) of the parameter servers, by ps index.
    """

    def __init__(self, comm: Any, ps_ranks: list[int]) -> None:
        self.comm = comm
        self.ps_ranks = list(ps_ranks)
        self.windows: list[Any] = []

    def create_segment(self, sizes: list[int]) -> int:
        """Collective: a new segment where ps ``i`` exposes ``sizes[i]`` bytes; its index."""
        rank = self.comm.Get_rank()
        mine = sizes[self.ps_ranks.index(rank)] if rank in self.ps_ranks else 0
        win = MPI.Win.Allocate(mine, 1, comm=self.comm)
        win.Lock_all(MPI.MODE_NOCHECK)
        self.windows.append(win)
        return len(self.windows) - 1

    def free(self) -> None:
        """Collective: release every segment."""
        for win in self.windows:
            win.Unlock_all()
            win.Free()
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
        self._where: tuple[Any, int] | None = None  # (window, target rank), once known

    @property
    def handle(self) -> tuple[int, int, int, tuple[int, ...], str]:
        """What another rank needs to address the same memory."""
        return self.segment, self.ps, self.offset, self.shape, self.dtype.str

    @property
    def _win(self) -> Any:
        return self.store.windows[self.segment]

    @property
    def _target(self) -> int:
        return self.store.ps_ranks[self.ps]

    def _located(self) -> tuple[Any, int]:
        if self._where is None:
            self._where = (self._win, self._target)
        return self._where

    def read(self) -> np.ndarray:
        """``Get`` the whole value (a fresh array)."""
        out = np.empty(self.shape, self.dtype)
        if self.size:
            win, target = self._where or self._located()
            win.Get(out, target, self._spec)
            win.Flush(target)
        return out

    def _accumulate(self, value: Any, op: Any) -> None:
        buf = np.asarray(value, self.dtype)
        if buf.shape != self.shape:
            buf = np.broadcast_to(buf, self.shape)
        if not buf.flags.c_contiguous:
            buf = np.ascontiguousarray(buf)
        if self.size:
            win, target = self._where or self._located()
            win.Accumulate(buf, target, self._spec, op=op)
            win.Flush(target)

    def write(self, value: Any) -> None:
        """``Accumulate(REPLACE)`` (element-wise atomic)."""
        self._accumulate(value, MPI.REPLACE)

    def add(self, delta: Any) -> None:
        """``Accumulate(SUM)`` (element-wise atomic)."""
        self._accumulate(delta, MPI.SUM)

    # -- rows: only the touched rows move -----------------------------------------------------

    def _rows_type(self, ids: np.ndarray) -> Any:
        """A target datatype selecting rows ``ids`` (sorted, unique); None for a single row."""
        displacements = (ids * self.row).astype(np.int64).tolist()
        if len(ids) == 1:
            return None, displacements[0]
        dtype = self.mpi_type.Create_indexed_block(self.row, displacements)
        dtype.Commit()
        return dtype, 0

    def _row_op(self, ids: np.ndarray, buf: np.ndarray, kind: str, op: Any = None) -> None:
        if not len(ids) or not self.row:
            return
        win, target = self._located()
        dtype, first = self._rows_type(ids)
        itemsize = self.dtype.itemsize
        if dtype is None:
            spec = (self.offset + first * itemsize, self.row, self.mpi_type)
        else:
            spec = (self.offset, 1, dtype)
        try:
            if kind == "get":
                win.Get(buf, target, spec)
            else:
                win.Accumulate(buf, target, spec, op=op)
            win.Flush(target)
        finally:
            if dtype is not None:
                dtype.Free()

    def read_rows(self, ids: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """``Get`` rows ``ids`` (sorted, unique, in range) of the first axis (into ``out``)."""
        if out is None:
            out = np.empty((len(ids), *self.shape[1:]), self.dtype)
        self._row_op(np.asarray(ids, np.int64), out, "get")
        return out

    def add_rows(self, ids: np.ndarray, rows: np.ndarray) -> None:
        """``Accumulate(SUM)`` into rows ``ids`` (sorted, unique, in range)."""
        buf = np.ascontiguousarray(rows, self.dtype)
        self._row_op(np.asarray(ids, np.int64), buf, "acc", MPI.SUM)

    def write_rows(self, ids: np.ndarray, rows: np.ndarray) -> None:
        """``Accumulate(REPLACE)`` rows ``ids`` (sorted, unique, in range)."""
        buf = np.ascontiguousarray(rows, self.dtype)
        self._row_op(np.asarray(ids, np.int64), buf, "acc", MPI.REPLACE)
