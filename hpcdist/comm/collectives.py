"""Broadcast, all-gather, reduce-scatter, all-to-all, barrier and the object collectives.

Each one takes its sequence number, then, inside the envelope's guard, validates its arguments
locally and checks its header across ranks (any local failure poisons the check, see
`hpcdist.comm.envelope`), then moves data with the backend that `hpcdist.comm.selection` picks:
NCCL for GPU arrays where it loads, else the host backends. Objects are pickled before the check
(an object that cannot be pickled is an error on every rank) and travel as bytes through the
same backends, under the same deadline.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np
from mpi4py import MPI

from hpcdist.comm.arrays import (
    check_reducible,
    from_wire,
    mean_from_sum,
    native_view,
    to_host,
    to_wire,
)
from hpcdist.comm.checks import KINDS, Header, dtype_code
from hpcdist.comm.collective_state import CollectiveState, same
from hpcdist.comm.deadline import Deadline
from hpcdist.comm.options import CommunicationOptions
from hpcdist.comm.reduce_op import ReduceOp
from hpcdist.utils.split import balanced_sizes
from hpcdist.utils.xp import array_module

__all__ = ["Collectives"]

#: Largest number of bytes of one rank in one round of an object collective: counts and
#: displacements of every round fit in a C ``int`` (``MPI_Allgatherv``'s limit).
_OBJECT_ROUND_BYTES = 1 << 30


def _valid_root(root: Any, size: int) -> bool:
    return isinstance(root, (int, np.integer)) and not isinstance(root, bool) and 0 <= root < size


class Collectives:
    """The collectives of one communicator other than all-reduce.

    Args:
        state: What the communicator's collectives share.
    """

    def __init__(self, state: CollectiveState) -> None:
        self.state = state
        self.env = state.env
        self.backends = state.backends
        self.rank, self.size = state.rank, state.size

    def _rows(self, mine: int, deadline: Any) -> np.ndarray:
        """Every rank's count ``mine``, exchanged over MPI."""
        rows = np.empty(self.size, dtype=np.int64)
        one = [1] * self.size
        self.backends.mpi.allgather(np.array([mine], dtype=np.int64), rows, one, None, deadline)
        return rows

    def broadcast(
        self, x: Any, root: int, options: CommunicationOptions | None, in_place: bool
    ) -> Any:
        """Rank ``root``'s ``x`` on every rank (written into ``x`` with ``in_place``)."""
        opts = self.state.opts(options)
        deadline = self.env.begin(KINDS["broadcast"], opts.timeout)
        return self.env.guard(deadline, lambda: self._broadcast(x, root, opts, in_place, deadline))

    def _broadcast(self, x: Any, root: int, opts: Any, in_place: bool, deadline: Deadline) -> Any:
        path, why = self.backends.device_path(x, opts.implementation)
        arr, back = (x, same) if path else to_host(x)
        kind = KINDS["nccl_broadcast" if path else "broadcast"]
        if not _valid_root(root, self.size):
            raise ValueError(
                f"rank {self.rank}: broadcast root must be in [0, {self.size}), got {root!r}"
            )
        header = Header(deadline.seq, kind, 0, dtype_code(arr.dtype), arr.shape, int(root) + 1)
        self.env.reject(why, why)
        if in_place and not ((isinstance(x, np.ndarray) and x.flags.writeable) or path):
            raise TypeError(f"rank {self.rank}: broadcast_ needs a writeable numpy array")

        if path:
            self.env.check(header, deadline)
            buf = arr.reshape(-1) if in_place and arr.flags.c_contiguous else arr.copy().ravel()
            self.backends.for_device(path, arr).broadcast(buf, root, None, deadline)
            if in_place:
                if buf.data.ptr != arr.data.ptr:
                    arr[...] = buf.reshape(arr.shape)
                return x
            return buf.reshape(arr.shape)

        backend = self.backends.for_host("broadcast")
        fused = backend is self.backends.shm and self.env.checks
        if not fused:
            self.env.check(header, deadline)
        buf = np.ascontiguousarray(arr).reshape(-1)
        buf = buf if (in_place and np.shares_memory(buf, arr)) else buf.copy()
        if self.size > 1:
            backend.broadcast(
                native_view(buf),
                root,
                self.env.fused(header, deadline) if fused else None,
                deadline,
            )
        result = buf.reshape(arr.shape)
        if in_place:
            if not np.shares_memory(result, arr):
                arr[...] = result
            return x
        return back(result)

    def allgather(self, x: Any, options: CommunicationOptions | None) -> Any:
        """Every rank's ``x`` concatenated along the first axis."""
        opts = self.state.opts(options)
        deadline = self.env.begin(KINDS["allgather"], opts.timeout)
        return self.env.guard(deadline, lambda: self._allgather(x, opts, deadline))

    def _allgather(self, x: Any, opts: Any, deadline: Deadline) -> Any:
        path, why = self.backends.device_path(x, opts.implementation)
        arr, back = (x, same) if path else to_host(x)
        if arr.ndim == 0:
            arr = arr.reshape(1)
        kind = KINDS["nccl_allgather" if path else "allgather"]
        header = Header(deadline.seq, kind, 0, dtype_code(arr.dtype), arr.shape[1:])
        self.env.reject(why, why)
        self.env.check(header, deadline)
        if path:
            backend, xp = self.backends.for_device(path, arr), array_module(arr)
        else:
            backend, xp = self.backends.for_host("allgather"), np
        rows = self._rows(arr.shape[0], deadline)
        row = int(np.prod(arr.shape[1:], dtype=np.int64))
        out = xp.empty((int(rows.sum()), *arr.shape[1:]), dtype=arr.dtype)
        src = xp.ascontiguousarray(arr).reshape(-1)
        counts = [int(r) * row for r in rows]
        backend.allgather(native_view(src), native_view(out.reshape(-1)), counts, None, deadline)
        return back(out)

    def reduce_scatter(
        self, x: Any, op: ReduceOp | str, options: CommunicationOptions | None
    ) -> Any:
        """This rank's block of rows of the reduction of ``x`` over ranks."""
        opts = self.state.opts(options)
        deadline = self.env.begin(KINDS["reduce_scatter"], opts.timeout)
        return self.env.guard(deadline, lambda: self._reduce_scatter(x, op, opts, deadline))

    def _reduce_scatter(self, x: Any, op: ReduceOp | str, opts: Any, deadline: Deadline) -> Any:
        op = ReduceOp.parse(op)
        path, why = self.backends.device_path(x, opts.implementation)
        arr, back = (x, same) if path else to_host(x)
        kind = KINDS["nccl_reduce_scatter" if path else "reduce_scatter"]
        header = Header(deadline.seq, kind, op.code, dtype_code(arr.dtype), arr.shape)
        error = why or check_reducible(arr.dtype, op)
        if error is None and arr.ndim == 0:
            error = "reduce_scatter needs an array with at least one axis"
        if error is None and path and arr.dtype.kind == "c":
            error = "reduce_scatter of complex GPU arrays is not supported by NCCL"
        self.env.reject(error, why)
        self.env.check(header, deadline)
        if path:
            backend, xp = self.backends.for_device(path, arr), array_module(arr)
        else:
            backend, xp = self.backends.for_host("reduce_scatter"), np
        wire, how = to_wire(xp.ascontiguousarray(arr).reshape(-1), backend.dtypes)
        rows = balanced_sizes(arr.shape[0], self.size)
        row = int(np.prod(arr.shape[1:], dtype=np.int64))
        out = xp.empty(rows[self.rank] * row, dtype=wire.dtype)
        wire_op = ReduceOp.SUM if op is ReduceOp.MEAN else op
        backend.reduce_scatter(wire, out, [r * row for r in rows], wire_op, None, deadline)
        if op is ReduceOp.MEAN:
            mean_from_sum(out, self.size)
        result = from_wire(out, how, arr.dtype).reshape(rows[self.rank], *arr.shape[1:])
        return back(result)

    def alltoall(
        self, x: Any, splits: Sequence[int] | None, options: CommunicationOptions | None
    ) -> Any:
        """Send ``splits[i]`` rows of ``x`` to rank ``i``; the rows received, by source rank."""
        opts = self.state.opts(options)
        deadline = self.env.begin(KINDS["alltoall"], opts.timeout)
        return self.env.guard(deadline, lambda: self._alltoall(x, splits, deadline))

    def _alltoall(self, x: Any, splits: Sequence[int] | None, deadline: Deadline) -> Any:
        arr, back = to_host(x)
        header = Header(deadline.seq, KINDS["alltoall"], 0, dtype_code(arr.dtype), arr.shape[1:])
        if arr.ndim == 0:
            raise ValueError(f"rank {self.rank}: alltoall needs an array with at least one axis")
        if splits is None:
            if arr.shape[0] % self.size:
                raise ValueError(
                    f"rank {self.rank}: alltoall without splits needs dim 0 ({arr.shape[0]}) "
                    f"divisible by the number of ranks ({self.size})"
                )
            splits = [arr.shape[0] // self.size] * self.size
        else:
            splits = [int(s) for s in splits]
            if (
                len(splits) != self.size
                or any(s < 0 for s in splits)
                or sum(splits) != arr.shape[0]
            ):
                raise ValueError(
                    f"rank {self.rank}: alltoall splits {splits} must be {self.size} non-negative "
                    f"counts adding up to dim 0 ({arr.shape[0]})"
                )
        self.env.check(header, deadline)
        backend = self.backends.for_host("alltoall")
        mpi, one = self.backends.mpi, [1] * self.size
        row = int(np.prod(arr.shape[1:], dtype=np.int64))
        send_rows = np.asarray(splits, dtype=np.int64)
        recv_rows = np.empty(self.size, dtype=np.int64)
        mpi.alltoall(send_rows, recv_rows, one, one, None, deadline)
        out = np.empty((int(recv_rows.sum()), *arr.shape[1:]), dtype=arr.dtype)
        backend.alltoall(
            native_view(np.ascontiguousarray(arr).reshape(-1)),
            native_view(out.reshape(-1)),
            [int(r) * row for r in send_rows],
            [int(r) * row for r in recv_rows],
            None,
            deadline,
        )
        return back(out)

    def barrier(self, options: CommunicationOptions | None) -> None:
        """Wait until every rank arrives (checking that they all called `barrier`)."""
        opts = self.state.opts(options)
        deadline = self.env.begin(KINDS["barrier"], opts.timeout)
        header = Header(deadline.seq, KINDS["barrier"])

        def run() -> None:
            if self.size > 1:
                backend = self.backends.for_host("barrier")
                checked = self.env.fused(header, deadline) if self.env.checks else None
                backend.barrier(checked, deadline)

        self.env.guard(deadline, run)

    def objects(self, kind: str, obj: Any, root: int, options: CommunicationOptions | None) -> Any:
        """``allgather_object`` or ``broadcast_object`` of a picklable ``obj``.

        The object is pickled (with ``MPI.pickle``, as mpi4py does) before the header check,
        so that an object that cannot be pickled is an error on every rank; the bytes travel
        through the backends under the deadline, in rounds of at most 1 GiB per rank.
        """
        opts = self.state.opts(options)
        deadline = self.env.begin(KINDS[kind], opts.timeout)
        run = self._allgather_object if kind == "allgather_object" else self._broadcast_object
        return self.env.guard(deadline, functools.partial(run, obj, root, deadline))

    def _pickle(self, obj: Any, what: str) -> np.ndarray:
        try:
            data = MPI.pickle.dumps(obj)
        except Exception as exc:
            exc.add_note(f"hpcdist: rank {self.rank} could not pickle the object of {what}")
            raise
        return np.frombuffer(data, dtype=np.uint8)

    def _broadcast_object(self, obj: Any, root: int, deadline: Deadline) -> Any:
        if not _valid_root(root, self.size):
            raise ValueError(f"rank {self.rank}: root must be in [0, {self.size}), got {root!r}")
        header = Header(deadline.seq, KINDS["broadcast_object"], extra=int(root) + 1)
        if self.size == 1:
            return obj
        mine = self._pickle(obj, "broadcast_object") if self.rank == root else None
        self.env.check(header, deadline, always=True)
        backend = self.backends.for_host("broadcast")
        count = np.array([0 if mine is None else mine.size], dtype=np.int64)
        backend.broadcast(count, root, None, deadline)
        data = mine if mine is not None else np.empty(int(count[0]), dtype=np.uint8)
        for lo in range(0, data.size, _OBJECT_ROUND_BYTES):
            backend.broadcast(data[lo : lo + _OBJECT_ROUND_BYTES], root, None, deadline)
        return obj if mine is not None else MPI.pickle.loads(data)

    def _allgather_object(self, obj: Any, root: int, deadline: Deadline) -> list[Any]:
        header = Header(deadline.seq, KINDS["allgather_object"], extra=int(root) + 1)
        if self.size == 1:
            return [obj]
        mine = self._pickle(obj, "allgather_object")
        self.env.check(header, deadline, always=True)
        sizes = self._rows(mine.size, deadline)
        parts = [np.empty(int(n), dtype=np.uint8) for n in sizes]
        parts[self.rank] = mine
        per_round = max(1, min(_OBJECT_ROUND_BYTES, (2**31 - 1) // self.size))
        backend = self.backends.for_host("allgather")
        for lo in range(0, int(sizes.max()), per_round):
            counts = [max(0, min(int(n) - lo, per_round)) for n in sizes]
            out = np.empty(sum(counts), dtype=np.uint8)
            backend.allgather(mine[lo : lo + counts[self.rank]], out, counts, None, deadline)
            offset = 0
            for r, c in enumerate(counts):
                if r != self.rank:
                    parts[r][lo : lo + c] = out[offset : offset + c]
                offset += c
        return [obj if r == self.rank else MPI.pickle.loads(p) for r, p in enumerate(parts)]
