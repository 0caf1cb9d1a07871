"""Reductions across the local replicas of one process (TF's ``CrossDeviceOps``).

Replicas on ``cpu:i`` devices hold numpy arrays in the same memory, so the implementations
differ in their algorithm and summation order, as TF's do: `ReductionToOneDevice` accumulates
every replica's value on one device in replica order; `HierarchicalCopyAllReduce` adds pairs in a
tree. On ``gpu:i`` replicas (CuPy arrays) both copy between devices with CuPy (peer copies where
the GPUs allow), and `NcclAllReduce` runs one NCCL all-reduce per device inside an NCCL group
call, with communicators made by ``ncclCommInitAll``.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from typing import Any

import numpy as np

from hpcdist.comm import nccl_dtype, nccl_op
from hpcdist.comm.reduce_op import ReduceOp
from hpcdist.errors import UnavailableError
from hpcdist.strategies.values import Mirrored, local_results
from hpcdist.utils.xp import as_array, as_array_like, device_of, device_scope, is_device_array, put

__all__ = ["CrossDeviceOps", "HierarchicalCopyAllReduce", "NcclAllReduce", "ReductionToOneDevice"]


def _copy_to(out: Any, like: Any) -> Any:
    """A copy of ``out`` on the device of ``like`` (host numpy for host values)."""
    return put(out, device_of(like)) if is_device_array(like) else np.array(out, copy=True)


class CrossDeviceOps:
    """Base class: `reduce` and `batch_reduce` over local replicas."""

    def _combine(self, op: ReduceOp, values: Sequence[np.ndarray]) -> np.ndarray:
        raise NotImplementedError

    def reduce(self, reduce_op: ReduceOp | str, per_replica_value: Any, destinations: Any = None):
        """Combine the local replicas' values; every replica gets the result (`Mirrored`).

        MEAN divides by the number of local replicas. Each replica's copy of the result is on
        that replica's device.
        """
        del destinations
        op = ReduceOp.parse(reduce_op)
        values = [as_array(v) for v in local_results(per_replica_value)]
        out = self._combine(ReduceOp.SUM if op is ReduceOp.MEAN else op, values)
        if op is ReduceOp.MEAN:
            with device_scope(device_of(out)):
                out = out / len(values) if out.dtype.kind in "fc" else out // len(values)
        return Mirrored([_copy_to(out, v) for v in values])

    def batch_reduce(
        self, reduce_op: ReduceOp | str, value_destination_pairs: Sequence[Any]
    ) -> list:
        """`reduce` for each ``(value, destinations)`` pair."""
        return [self.reduce(reduce_op, v, d) for v, d in value_destination_pairs]


class ReductionToOneDevice(CrossDeviceOps):
    """Accumulate every replica's value on one device, in replica order, then copy it back.

    Args:
        reduce_to_device: The accumulating device (informational for CPU replicas).
        accumulation_fn: ``fn(list_of_arrays) -> array`` used for SUM (default: in-order sum).
    """

    def __init__(self, reduce_to_device: str | None = None, accumulation_fn: Any = None) -> None:
        self.reduce_to_device = reduce_to_device
        self.accumulation_fn = accumulation_fn

    def _combine(self, op: ReduceOp, values: Sequence[np.ndarray]) -> np.ndarray:
        if op is ReduceOp.SUM and self.accumulation_fn is not None:
            return as_array(self.accumulation_fn(list(values)))
        with device_scope(device_of(values[0])):  # accumulate on the first replica's device
            out = values[0].copy()
            for v in values[1:]:
                out = op.ufunc(out, as_array_like(v, out))
        return out


class HierarchicalCopyAllReduce(CrossDeviceOps):
    """Pairwise tree reduction (TF's algorithm for DGX-like GPU topologies).

    Args:
        num_packs: Kept for TF compatibility (tensors are not packed).
    """

    def __init__(self, num_packs: int = 1) -> None:
        if num_packs < 0:
            raise ValueError(f"num_packs must be >= 0, got {num_packs}")
        self.num_packs = num_packs

    def _combine(self, op: ReduceOp, values: Sequence[np.ndarray]) -> np.ndarray:
        level = [v for v in values]
        while len(level) > 1:
            nxt = []
            for i in range(0, len(level) - 1, 2):
                with device_scope(device_of(level[i])):  # each pair adds on its left device
                    nxt.append(op.ufunc(level[i], as_array_like(level[i + 1], level[i])))
            if len(level) % 2:
                nxt.append(level[-1])
            level = nxt
        with device_scope(device_of(level[0])):
            return level[0].copy()


class NcclAllReduce(CrossDeviceOps):
    """NCCL all-reduce between the local GPUs of one process (``gpu:i`` replicas).

    The communicators are created once per set of devices (``ncclCommInitAll``); each reduce
    enqueues one all-reduce per device on that device's current stream inside
    ``ncclGroupStart``/``ncclGroupEnd`` (one thread drives every GPU without deadlock).

    Args:
        num_packs: Kept for TF compatibility.

    Raises:
        UnavailableError: CuPy is not installed.
    """

    def __init__(self, num_packs: int = 1) -> None:
        if num_packs < 0:
            raise ValueError(f"num_packs must be >= 0, got {num_packs}")
        self.num_packs = num_packs
        if importlib.util.find_spec("cupy") is None:
            raise UnavailableError(
                "NcclAllReduce needs CuPy and GPUs (pip install 'hpcdist[gpu]'); for CPU "
                "replicas use ReductionToOneDevice or HierarchicalCopyAllReduce"
            )
        self._comms: dict[tuple[int, ...], list[Any]] = {}

    def _communicators(self, devices: tuple[int, ...]) -> list[Any]:
        if devices not in self._comms:
            from cupy.cuda import nccl

            self._comms[devices] = nccl.NcclCommunicator.initAll(list(devices))
        return self._comms[devices]

    def reduce(self, reduce_op: ReduceOp | str, per_replica_value: Any, destinations: Any = None):
        """All-reduce the replicas' CuPy arrays with NCCL; each keeps its result on its GPU.

        Host values (CPU replicas, Python numbers) are reduced on the host instead.

        Raises:
            TypeError: Host and GPU values are mixed, or two replicas share a GPU.
        """
        del destinations
        import cupy
        from cupy.cuda import nccl

        op = ReduceOp.parse(reduce_op)
        values = list(local_results(per_replica_value))
        if not any(is_device_array(v) for v in values):  # host values (CPU replicas, scalars)
            return ReductionToOneDevice().reduce(op, per_replica_value)
        if not all(is_device_array(v) for v in values):
            kinds = sorted({type(v).__name__ for v in values})
            raise TypeError(
                f"NcclAllReduce reduces CuPy arrays on distinct GPUs, got a mix of {kinds}"
            )
        devices = tuple(v.device.id for v in values)
        if len(set(devices)) != len(devices):
            raise TypeError(f"NcclAllReduce needs one replica per GPU, got devices {devices}")
        code = nccl_dtype(values[0].dtype)
        wire = nccl_op(ReduceOp.SUM if op is ReduceOp.MEAN else op)
        if code is None or wire is None:
            raise TypeError(f"NCCL cannot reduce dtype {values[0].dtype} with {op.name}")
        comms = self._communicators(devices)
        outs, keep = [], []  # inputs stay referenced until the group has been enqueued
        nccl.groupStart()
        try:
            for comm, v, d in zip(comms, values, devices, strict=True):
                with cupy.cuda.Device(d):
                    src = cupy.ascontiguousarray(v).reshape(-1)  # 0-d becomes (1,)
                    out = cupy.empty_like(src)
                    stream = cupy.cuda.get_current_stream()
                    comm.allReduce(src.data.ptr, out.data.ptr, src.size, code, wire, stream.ptr)
                    outs.append(out.reshape(v.shape))
                    keep.append(src)
        finally:
            nccl.groupEnd()
        if op is ReduceOp.MEAN:
            for d, out in zip(devices, outs, strict=True):
                with cupy.cuda.Device(d):
                    if out.dtype.kind == "f":
                        out /= len(values)
                    else:
                        out //= len(values)
        return Mirrored(outs)
