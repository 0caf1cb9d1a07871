"""``cupy.cuda.nccl`` of the device simulator: NCCL's calls on raw device pointers, over MPI.

Communicators of several processes (``NcclCommunicator(n, uid, rank)``) are the processes that
passed the same unique id, split from ``MPI.COMM_WORLD`` (so every world rank must create one at
the same time, as hpcdist's backends do); a one-process communicator is ``COMM_SELF``.
``initAll`` makes one communicator per device of this process; calls between ``groupStart`` and
``groupEnd`` are collected and run together, as NCCL's group semantics require.
"""

from __future__ import annotations

import ctypes
import os
import zlib
from typing import Any

import numpy as np

NCCL_INT8 = NCCL_CHAR = 0
NCCL_UINT8 = 1
NCCL_INT32 = NCCL_INT = 2
NCCL_UINT32 = 3
NCCL_INT64 = 4
NCCL_UINT64 = 5
NCCL_FLOAT16 = NCCL_HALF = 6
NCCL_FLOAT32 = NCCL_FLOAT = 7
NCCL_FLOAT64 = NCCL_DOUBLE = 8
NCCL_BFLOAT16 = 9
NCCL_SUM, NCCL_PROD, NCCL_MAX, NCCL_MIN, NCCL_AVG = 0, 1, 2, 3, 4
available = True

_DTYPES = {
    0: np.int8,
    1: np.uint8,
    2: np.int32,
    3: np.uint32,
    4: np.int64,
    5: np.uint64,
    6: np.float16,
    7: np.float32,
    8: np.float64,
    9: np.uint16,
}
_group: list[Any] | None = None


class NcclError(RuntimeError):
    """NCCL's error type."""


def get_version() -> int:
    return 0


def get_unique_id() -> bytes:
    return os.urandom(128)


def _view(ptr: int, count: int, dtype: Any) -> np.ndarray:
    nbytes = count * np.dtype(dtype).itemsize
    return np.frombuffer((ctypes.c_char * nbytes).from_address(ptr), dtype=dtype, count=count)


def _bf16(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


def _to_bf16(x: np.ndarray) -> np.ndarray:
    b = x.astype(np.float32).view(np.uint32)
    return ((b + np.uint32(0x7FFF) + ((b >> 16) & np.uint32(1))) >> 16).astype(np.uint16)


def _reduce(parts: list[np.ndarray], op: int) -> np.ndarray:
    fn = {NCCL_SUM: np.add, NCCL_PROD: np.multiply, NCCL_MAX: np.maximum, NCCL_MIN: np.minimum}
    out = parts[0].copy()
    for p in parts[1:]:
        out = fn[op](out, p)
    return out


class _Clique:
    """The communicators ``initAll`` made in one process."""

    def __init__(self, size: int) -> None:
        self.size = size


class NcclCommunicator:
    def __init__(self, ndev: int, commId: bytes, rank: int) -> None:  # noqa: N803
        from mpi4py import MPI

        import cupy

        self._device = cupy._current()
        self._clique: _Clique | None = None
        self._rank = rank
        if ndev == 1:
            self._mpi = MPI.COMM_SELF
        elif isinstance(commId, _Clique):
            self._mpi, self._clique = None, commId
        else:
            color = zlib.crc32(commId) & 0x3FFFFFFF
            self._mpi = MPI.COMM_WORLD.Split(color, rank)
            if self._mpi.Get_size() != ndev or self._mpi.Get_rank() != rank:
                raise NcclError(
                    f"unique id shared by {self._mpi.Get_size()} processes, expected {ndev}"
                )

    @staticmethod
    def initAll(devices: Any) -> list[NcclCommunicator]:  # noqa: N802
        import cupy

        devices = list(range(devices)) if isinstance(devices, int) else list(devices)
        clique = _Clique(len(devices))
        comms = []
        for rank, device in enumerate(devices):
            with cupy.cuda.Device(device):
                comms.append(NcclCommunicator(len(devices), clique, rank))
        return comms

    def device_id(self) -> int:
        return self._device

    def rank_id(self) -> int:
        return self._rank

    def _check_current(self) -> None:
        import cupy

        if cupy._current() != self._device:
            raise NcclError(
                f"communicator of device {self._device} used with device {cupy._current()} current"
            )

    def _collective(self, kind: str, args: tuple) -> None:
        self._check_current()
        if self._clique is not None:
            if _group is None:
                raise NcclError("initAll communicators need groupStart/groupEnd in one thread")
            _group.append((self, kind, args))
            return
        _run_mpi(self, kind, args)

    def allReduce(self, sendbuf, recvbuf, count, datatype, op, stream):  # noqa: N802
        self._collective("allreduce", (sendbuf, recvbuf, count, datatype, op))

    def bcast(self, buff, count, datatype, root, stream):
        self._collective("bcast", (buff, count, datatype, root))

    def allGather(self, sendbuf, recvbuf, count, datatype, stream):  # noqa: N802
        self._collective("allgather", (sendbuf, recvbuf, count, datatype))

    def reduceScatter(self, sendbuf, recvbuf, recvcount, datatype, op, stream):  # noqa: N802
        self._collective("reducescatter", (sendbuf, recvbuf, recvcount, datatype, op))

    def abort(self) -> None:
        self._mpi = None

    def destroy(self) -> None:
        if self._mpi is not None and self._clique is None:
            from mpi4py import MPI

            if self._mpi not in (MPI.COMM_SELF, MPI.COMM_WORLD):
                self._mpi.Free()
        self._mpi = None


def _run_mpi(comm: NcclCommunicator, kind: str, args: tuple) -> None:
    from mpi4py import MPI

    mpi = comm._mpi
    if mpi is None:
        raise NcclError("communicator was aborted or destroyed")
    size = mpi.Get_size()
    if kind == "bcast":
        buff, count, datatype, root = args
        mpi.Bcast(_view(buff, count, _DTYPES[datatype]), root=root)
        return
    if kind == "allgather":
        send, recv, count, datatype = args
        dt = _DTYPES[datatype]
        mpi.Allgather(_view(send, count, dt).copy(), _view(recv, count * size, dt))
        return
    send, recv, count, datatype, op = args
    total = count * size if kind == "reducescatter" else count
    parts = mpi.allgather(_view(send, total, _DTYPES[datatype]).copy())
    if datatype == NCCL_BFLOAT16:
        result = _to_bf16(_reduce([_bf16(p) for p in parts], op))
    else:
        result = _reduce(parts, op)
    if kind == "reducescatter":
        result = result[mpi.Get_rank() * count : (mpi.Get_rank() + 1) * count]
    _view(recv, count, _DTYPES[datatype])[...] = result
    del MPI


def groupStart() -> None:  # noqa: N802
    global _group
    _group = []


def groupEnd() -> None:  # noqa: N802
    global _group
    calls, _group = _group or [], None
    by_clique: dict[int, list[Any]] = {}
    for comm, kind, args in calls:
        by_clique.setdefault(id(comm._clique), []).append((comm, kind, args))
    for members in by_clique.values():
        kind = members[0][1]
        if kind != "allreduce" or len(members) != members[0][0]._clique.size:
            raise NcclError(f"group of {len(members)} {kind} calls: the simulator runs all-reduce")
        members.sort(key=lambda m: m[0]._rank)
        _, _, _, datatype, op = members[0][2]
        parts = [_view(a[0], a[2], _DTYPES[datatype]).copy() for _, _, a in members]
        result = _reduce(parts, op)
        for _, _, a in members:
            _view(a[1], a[2], _DTYPES[datatype])[...] = result
