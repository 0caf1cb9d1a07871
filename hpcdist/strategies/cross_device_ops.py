"""Reductions across the local replicas of one process (TF's ``CrossDeviceOps``).

Replicas on ``cpu:i`` devices hold numpy arrays in the same memory, so the implementations
differ in their algorithm and summation order, as TF's do: `ReductionToOneDevice` accumulates
every replica's value on one device in replica order; `HierarchicalCopyAllReduce` adds pairs in a
tree. `NcclAllReduce` needs GPUs (CuPy arrays).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from typing import Any

import numpy as np

from hpcdist.comm.ops import ReduceOp
from hpcdist.errors import UnavailableError
from hpcdist.strategies.values import Mirrored, local_results

__all__ = ["CrossDeviceOps", "HierarchicalCopyAllReduce", "NcclAllReduce", "ReductionToOneDevice"]


class CrossDeviceOps:
    """Base class: `reduce` and `batch_reduce` over local replicas."""

    def _combine(self, op: ReduceOp, values: Sequence[np.ndarray]) -> np.ndarray:
        raise NotImplementedError

    def reduce(self, reduce_op: ReduceOp | str, per_replica_value: Any, destinations: Any = None):
        """Combine the local replicas' values; every replica gets the result (`Mirrored`).

        MEAN divides by the number of local replicas.
        """
        del destinations
        op = ReduceOp.parse(reduce_op)
        values = [np.asarray(v) for v in local_results(per_replica_value)]
        out = self._combine(ReduceOp.SUM if op is ReduceOp.MEAN else op, values)
        if op is ReduceOp.MEAN:
            out = out / len(values) if out.dtype.kind in "fc" else out // len(values)
        return Mirrored([out.copy() for _ in values])

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
            return np.asarray(self.accumulation_fn(list(values)))
        out = values[0].copy()
        for v in values[1:]:
            out = op.ufunc(out, v)
        return out


class HierarchicalCopyAllReduce(CrossDeviceOps):
    """Pairwise tree reduction (TF's algorithm for DGX-like GPU topologies).

    Args:
        num_packs: Kept for TF compatibility (tensors are not packed on CPU).
    """

    def __init__(self, num_packs: int = 1) -> None:
        if num_packs < 0:
            raise ValueError(f"num_packs must be >= 0, got {num_packs}")
        self.num_packs = num_packs

    def _combine(self, op: ReduceOp, values: Sequence[np.ndarray]) -> np.ndarray:
        level = [v for v in values]
        while len(level) > 1:
            nxt = [op.ufunc(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
            if len(level) % 2:
                nxt.append(level[-1])
            level = nxt
        return level[0].copy()


class NcclAllReduce(CrossDeviceOps):
    """NCCL all-reduce between local GPUs.

    Raises:
        UnavailableError: CuPy or GPUs are missing; the NCCL path needs CuPy arrays on GPUs.
    """

    def __init__(self, num_packs: int = 1) -> None:
        self.num_packs = num_packs
        if importlib.util.find_spec("cupy") is None:
            raise UnavailableError(
                "NcclAllReduce needs CuPy and GPUs (pip install 'hpcdist[gpu]'); for CPU "
                "replicas use ReductionToOneDevice or HierarchicalCopyAllReduce"
            )
        raise UnavailableError(
            "NcclAllReduce between local GPUs is not available in this build; use "
            "HierarchicalCopyAllReduce"
        )
