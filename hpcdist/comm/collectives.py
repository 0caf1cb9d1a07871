"""Broadcast, all-gather, reduce-scatter, all-to-all, barrier and the object collectives.

Each one validates its arguments locally, checks its header across ranks (an invalid argument
poisons the check, see `hpcdist.comm.envelope`), then moves data with the backend that
`hpcdist.comm.selection` picks: NCCL for GPU arrays where it loads, else the host backends.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from mpi4py.util import pkl5

from hpcdist.comm.arrays import check_reducible, from_wire, mean_from_sum, to_host, to_wire
from hpcdist.comm.checks import KINDS, Header
from hpcdist.comm.context import Context, same
from hpcdist.comm.options import CommunicationOptions
from hpcdist.comm.reduce_op import ReduceOp
from hpcdist.utils.split import balanced_sizes
from hpcdist.utils.xp import array_module

__all__ = ["Collectives"]


class Collectives:
    """The collectives of one communicator other than all-reduce.

    Args:
        ctx: What the communicator's collectives share.
    """

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.env = ctx.env
        self.backends = ctx.backends
        self.rank, self.size = ctx.rank, ctx.size
        self._pkl = pkl5.Intracomm(ctx.comm)

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
        opts = self.ctx.opts(options)
        path, why = self.backends.device_path(x, opts.implementation)
        arr, back = (x, same) if path else to_host(x)
        kind = KINDS["nccl_broadcast" if path else "broadcast"]
        header, deadline = self.env.begin(
            lambda seq: Header(seq, kind, 0, ord(arr.dtype.char), arr.shape, root + 1),
            opts.timeout,
        )
        error = self.env.rank_error(why, why)
        if not isinstance(root, (int, np.integer)) or not 0 <= root < self.size:
            error = ValueError(
                f"rank {self.rank}: broadcast root must be in [0, {self.size}), got {root!r}"
            )
        elif in_place and not ((isinstance(x, np.ndarray) and x.flags.writeable) or path):
            error = TypeError(f"rank {self.rank}: broadcast_ needs a writeable numpy array")

        def run_device() -> Any:
            self.env.check(header, deadline, error)
            buf = arr.reshape(-1) if in_place and arr.flags.c_contiguous else arr.copy().ravel()
            self.backends.for_device(path, arr).broadcast(buf, root, None, deadline)
            if in_place:
                if buf.data.ptr != arr.data.ptr:
                    arr[...] = buf.reshape(arr.shape)
                return x
            return buf.reshape(arr.shape)

        if path:
            return self.env.guard(run_device)

        def run() -> Any:
            backend = self.backends.for_host("broadcast")
            fused = backend is self.backends.shm and error is None and self.env.checks
            if not fused:
                self.env.check(header, deadline, error)
            buf = np.ascontiguousarray(arr).reshape(-1)
            buf = buf if (in_place and np.shares_memory(buf, arr)) else buf.copy()
            if self.size > 1:
                backend.broadcast(buf, root, header if fused else None, deadline)
            result = buf.reshape(arr.shape)
            if in_place:
                if not np.shares_memory(result, arr):
                    arr[...] = result
                return x
            return back(result)

        return self.env.guard(run)

    def allgather(self, x: Any, options: CommunicationOptions | None) -> Any:
        """Every rank's ``x`` concatenated along the first axis."""
        opts = self.ctx.opts(options)
        path, why = self.backends.device_path(x, opts.implementation)
        arr, back = (x, same) if path else to_host(x)
        if arr.ndim == 0:
            arr = arr.reshape(1)
        kind = KINDS["nccl_allgather" if path else "allgather"]
        header, deadline = self.env.begin(
            lambda seq: Header(seq, kind, 0, ord(arr.dtype.char), arr.shape[1:]), opts.timeout
        )
        error = self.env.rank_error(why, why)

        def run() -> Any:
            self.env.check(header, deadline, error)
            if path:
                backend, xp = self.backends.for_device(path, arr), array_module(arr)
            else:
                backend, xp = self.backends.for_host("allgather"), np
            rows = self._rows(arr.shape[0], deadline)
            row = int(np.prod(arr.shape[1:], dtype=np.int64))
            out = xp.empty((int(rows.sum()), *arr.shape[1:]), dtype=arr.dtype)
            src = xp.ascontiguousarray(arr).reshape(-1)
            counts = [int(r) * row for r in rows]
            backend.allgather(src, out.reshape(-1), counts, None, deadline)
            return back(out)

        return self.env.guard(run)

    def reduce_scatter(
        self, x: Any, op: ReduceOp | str, options: CommunicationOptions | None
    ) -> Any:
        """This rank's block of rows of the reduction of ``x`` over ranks."""
        op = ReduceOp.parse(op)
        opts = self.ctx.opts(options)
        path, why = self.backends.device_path(x, opts.implementation)
        arr, back = (x, same) if path else to_host(x)
        kind = KINDS["nccl_reduce_scatter" if path else "reduce_scatter"]
        header, deadline = self.env.begin(
            lambda seq: Header(seq, kind, op.code, ord(arr.dtype.char), arr.shape), opts.timeout
        )
        error = why or check_reducible(arr.dtype, op)
        if error is None and arr.ndim == 0:
            error = "reduce_scatter needs an array with at least one axis"
        if error is None and path and arr.dtype.kind == "c":
            error = "reduce_scatter of complex GPU arrays is not supported by NCCL"
        local_error = self.env.rank_error(error, why)

        def run() -> Any:
            self.env.check(header, deadline, local_error)
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

        return self.env.guard(run)

    def alltoall(
        self, x: Any, splits: Sequence[int] | None, options: CommunicationOptions | None
    ) -> Any:
        """Send ``splits[i]`` rows of ``x`` to rank ``i``; the rows received, by source rank."""
        opts = self.ctx.opts(options)
        arr, back = to_host(x)
        header, deadline = self.env.begin(
            lambda seq: Header(seq, KINDS["alltoall"], 0, ord(arr.dtype.char), arr.shape[1:]),
            opts.timeout,
        )
        error = None
        if arr.ndim == 0:
            error = ValueError(f"rank {self.rank}: alltoall needs an array with at least one axis")
        elif splits is None:
            if arr.shape[0] % self.size:
                error = ValueError(
                    f"rank {self.rank}: alltoall without splits needs dim 0 ({arr.shape[0]}) "
                    f"divisible by the number of ranks ({self.size})"
                )
            else:
                splits = [arr.shape[0] // self.size] * self.size
        else:
            splits = [int(s) for s in splits]
            if (
                len(splits) != self.size
                or any(s < 0 for s in splits)
                or sum(splits) != arr.shape[0]
            ):
                error = ValueError(
                    f"rank {self.rank}: alltoall splits {splits} must be {self.size} non-negative "
                    f"counts adding up to dim 0 ({arr.shape[0]})"
                )

        def run() -> Any:
            self.env.check(header, deadline, error)
            backend = self.backends.for_host("alltoall")
            mpi, one = self.backends.mpi, [1] * self.size
            row = int(np.prod(arr.shape[1:], dtype=np.int64))
            send_rows = np.asarray(splits, dtype=np.int64)
            recv_rows = np.empty(self.size, dtype=np.int64)
            mpi.alltoall(send_rows, recv_rows, one, one, None, deadline)
            out = np.empty((int(recv_rows.sum()), *arr.shape[1:]), dtype=arr.dtype)
            backend.alltoall(
                np.ascontiguousarray(arr).reshape(-1),
                out.reshape(-1),
                [int(r) * row for r in send_rows],
                [int(r) * row for r in recv_rows],
                None,
                deadline,
            )
            return back(out)

        return self.env.guard(run)

    def barrier(self, options: CommunicationOptions | None) -> None:
        """Wait until every rank arrives (checking that they all called `barrier`)."""
        opts = self.ctx.opts(options)
        header, deadline = self.env.begin(lambda seq: Header(seq, KINDS["barrier"]), opts.timeout)

        def run() -> None:
            if self.size > 1:
                backend = self.backends.for_host("barrier")
                backend.barrier(header if self.env.checks else None, deadline)

        self.env.guard(run)

    def objects(self, kind: str, obj: Any, root: int, options: CommunicationOptions | None) -> Any:
        """``allgather_object`` or ``broadcast_object`` of a picklable ``obj``."""
        opts = self.ctx.opts(options)
        header, deadline = self.env.begin(
            lambda seq: Header(seq, KINDS[kind], extra=root + 1), opts.timeout
        )
        error = None
        if not 0 <= root < self.size:
            error = ValueError(f"rank {self.rank}: root must be in [0, {self.size}), got {root}")

        def run() -> Any:
            if self.size == 1 and error is None:
                return [obj] if kind == "allgather_object" else obj
            self.env.check(header, deadline, error)
            if kind == "allgather_object":
                return self._pkl.allgather(obj)
            return self._pkl.bcast(obj, root=root)

        return self.env.guard(run)
