"""`StrategyExtended`: a strategy's topology and the reductions built on it (``strategy.extended``).

A strategy has ``num_workers`` workers (MPI ranks) with ``local_replicas`` replicas each;
replica ``worker_index * local_replicas + local_id`` is its id in the sync group
(`StrategyExtended.local_replica_ids`). Reductions run in two steps, which the strategy, its
replica contexts and its variables share: `StrategyExtended.combine_local` combines this
worker's replicas with the strategy's `CrossDeviceOps`, then
`StrategyExtended.reduce_across_workers` reduces the workers' partial results over the
`hpcdist.comm.Communicator` (None when there is one worker).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from hpcdist.comm import Communicator
from hpcdist.comm.reduce_op import ReduceOp
from hpcdist.core.variables import LocalStorage
from hpcdist.strategies.cross_device_ops import CrossDeviceOps, ReductionToOneDevice
from hpcdist.strategies.values import DistributedValues, PerReplica, local_results
from hpcdist.strategies.variables import MirroredVariable, SyncOnReadVariable
from hpcdist.utils.xp import as_array

if TYPE_CHECKING:
    from hpcdist.strategies.strategy import Strategy

__all__ = ["StrategyExtended"]


class StrategyExtended:
    """Topology and communication of a strategy (``strategy.extended``).

    Args:
        strategy: The owning strategy.
        communicator: Carries cross-worker traffic; None for a single worker.
        devices: Device names of the local replicas (one replica each).
        cross_device_ops: Combines the local replicas' values.
    """

    def __init__(
        self,
        strategy: Strategy,
        communicator: Communicator | None,
        devices: tuple[str, ...] = ("cpu:0",),
        cross_device_ops: CrossDeviceOps | None = None,
    ) -> None:
        self._strategy = strategy
        self.communicator = communicator
        self.local_replicas = len(devices)
        self.worker_devices = tuple(devices)
        self.cross_device_ops = cross_device_ops or ReductionToOneDevice()
        self.num_workers = 1 if communicator is None else communicator.size
        self.worker_index = 0 if communicator is None else communicator.rank

    @property
    def should_checkpoint(self) -> bool:
        """Whether this worker writes checkpoints (the chief)."""
        return self.worker_index == 0

    @property
    def local_replica_ids(self) -> range:
        """Sync-group ids of this worker's replicas, in local order."""
        first = self.worker_index * self.local_replicas
        return range(first, first + self.local_replicas)

    def make_storage(self, value: np.ndarray, synchronization: Any) -> list:
        """Storage of a new distributed variable: one `LocalStorage` per local replica."""
        del synchronization
        return [LocalStorage(value, device) for device in self.worker_devices]

    # -- the two steps of a reduction ----------------------------------------------------------

    def local_components(self, value: Any, copies: bool = False) -> tuple[Any, ...] | None:
        """The local replicas' components of a distributed ``value``; None for any other value.

        Distributed values are `PerReplica`/`Mirrored` values and, where the strategy's
        ``variables_per_replica`` is set, its distributed variables: their live arrays, or
        with ``copies`` their `ReplicaCopy` variables.
        """
        if isinstance(value, DistributedValues):
            return value.values
        if (
            self._strategy.variables_per_replica
            and isinstance(value, (MirroredVariable, SyncOnReadVariable))
            and value.distribute_strategy is self._strategy
        ):
            return value.replica_copies() if copies else value.values
        return None

    def combine_local(self, op: ReduceOp, value: Any) -> np.ndarray:
        """Combine the local replicas' values (SUM for MEAN: the division comes later)."""
        parts = local_results(value)
        if len(parts) == 1:
            return as_array(parts[0])
        wire = ReduceOp.SUM if op is ReduceOp.MEAN else op
        return self.cross_device_ops.reduce(wire, PerReplica(parts)).values[0]

    def reduce_across_workers(
        self, op: ReduceOp, partials: list[np.ndarray], counts: list[int] | None = None
    ) -> list[np.ndarray]:
        """Reduce each worker's partial results; MEAN divides by the values that went in.

        ``counts[i]`` is how many values each worker combined into ``partials[i]`` (default: its
        local replicas).
        """
        comm = self.communicator
        wire = ReduceOp.SUM if op is ReduceOp.MEAN else op
        if comm is None:
            out = [p.copy() for p in partials]
        elif len(partials) == 1:  # the common case: one value, the latency-optimised path
            out = [comm.allreduce(partials[0], wire)]
        else:
            out = comm.grouped_allreduce(partials, wire)
        if op is ReduceOp.MEAN:
            counts = counts or [self.local_replicas] * len(out)
            workers = self.num_workers
            out = [
                o / (c * workers) if o.dtype.kind in "fc" else o // (c * workers)
                for o, c in zip(out, counts, strict=True)
            ]
        return out

    # -- TF's cross-replica API ----------------------------------------------------------------

    def reduce_to(self, reduce_op: ReduceOp | str, value: Any, destinations: Any = None) -> Any:
        """Reduce a distributed value across all replicas (the result is the same everywhere)."""
        del destinations
        return self._strategy.reduce(reduce_op, value, axis=None)

    def batch_reduce_to(self, reduce_op: ReduceOp | str, value_destination_pairs: Any) -> list:
        """`reduce_to` for several ``(value, destinations)`` pairs, fused into one collective."""
        op = ReduceOp.parse(reduce_op)
        partials, counts = [], []
        for value, _ in value_destination_pairs:
            parts = self.local_components(value)
            # TF: a non-distributed value counts as one replica's value (MEAN returns it).
            if parts is None:
                partials.append(as_array(value))
                counts.append(1)
            else:
                partials.append(self.combine_local(op, PerReplica(parts)))
                counts.append(len(parts))
        return self.reduce_across_workers(op, partials, counts)

    def update(
        self, var: Any, fn: Callable[..., Any], args: tuple = (), kwargs: dict | None = None
    ):
        """Run ``fn(var, *args, **kwargs)`` (on each local copy of ``var``)."""
        return fn(var, *args, **(kwargs or {}))
