"""`ReplicaContext`: what a function run by ``strategy.run`` sees of its replica."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from hpcdist.comm.reduce_op import ReduceOp
from hpcdist.core import context
from hpcdist.data.nest import flatten, pack_sequence_as
from hpcdist.strategies.values import PerReplica, local_results

if TYPE_CHECKING:
    from hpcdist.strategies.strategy import Strategy

__all__ = ["ReplicaContext", "check_axis"]

_REPLICA_OPS = (ReduceOp.SUM, ReduceOp.MEAN, ReduceOp.MIN, ReduceOp.MAX)


class ReplicaContext:
    """The context of one replica inside ``strategy.run``.

    Args:
        strategy: The strategy running the replica.
        replica_id_in_sync_group: ``worker_index * local_replicas + local_id``.
    """

    def __init__(self, strategy: Strategy, replica_id_in_sync_group: int) -> None:
        self._strategy = strategy
        self._replica_id = replica_id_in_sync_group

    @property
    def strategy(self) -> Strategy:
        """The strategy."""
        return self._strategy

    @property
    def replica_id_in_sync_group(self) -> int:
        """This replica's index among all replicas in sync."""
        return self._replica_id

    @property
    def num_replicas_in_sync(self) -> int:
        """Number of replicas in sync."""
        return self._strategy.num_replicas_in_sync

    def all_reduce(self, reduce_op: ReduceOp | str, value: Any) -> Any:
        """Reduce ``value`` (an array or a structure of arrays) over all replicas.

        Raises:
            ValueError: ``reduce_op`` is not SUM, MEAN, MIN or MAX.
        """
        op = ReduceOp.parse(reduce_op)
        if op not in _REPLICA_OPS:
            raise ValueError(f"all_reduce supports SUM, MEAN, MIN and MAX, got {op.name}")
        if self._strategy.extended.local_replicas > 1:
            return self.merge_call(_merge_all_reduce, args=(op, value))
        leaves = [np.asarray(v) for v in flatten(value)]
        comm = self._strategy.extended.communicator
        if comm is None:
            reduced = [leaf.copy() for leaf in leaves]
        else:
            reduced = comm.grouped_allreduce(leaves, op)
        return pack_sequence_as(value, reduced)

    def all_gather(self, value: Any, axis: int) -> Any:
        """Concatenate every replica's ``value`` along ``axis`` (sizes along it may differ)."""
        if self._strategy.extended.local_replicas > 1:
            return self.merge_call(_merge_all_gather, args=(value, axis))
        leaves = [np.asarray(v) for v in flatten(value)]
        comm = self._strategy.extended.communicator
        out = []
        for leaf in leaves:
            ax = check_axis(axis, leaf.ndim)
            if comm is None:
                out.append(leaf.copy())
            else:
                out.append(np.moveaxis(comm.allgather(np.moveaxis(leaf, ax, 0)), 0, ax))
        return pack_sequence_as(value, out)

    def merge_call(
        self,
        merge_fn: Callable[..., Any],
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        """Run ``merge_fn(strategy, *args, **kwargs)`` in cross-replica context."""
        context.push(self._strategy, None)
        try:
            return merge_fn(self._strategy, *args, **(kwargs or {}))
        finally:
            context.pop()

    def __repr__(self) -> str:
        return (
            f"ReplicaContext(replica_id_in_sync_group={self._replica_id}, "
            f"num_replicas_in_sync={self.num_replicas_in_sync})"
        )


def check_axis(axis: int, ndim: int) -> int:
    """``axis`` as a non-negative index into a value of rank ``ndim`` (a scalar has axis 0).

    Raises:
        ValueError: ``axis`` is not an integer in ``[-ndim, max(ndim, 1))``.
    """
    if not isinstance(axis, (int, np.integer)) or not -ndim <= axis < max(ndim, 1):
        raise ValueError(f"axis {axis!r} is out of range for a value of rank {ndim}")
    return int(axis) % max(ndim, 1)


def _merge_all_reduce(strategy: Strategy, op: ReduceOp, value: Any) -> Any:
    """Cross-replica half of `ReplicaContext.all_reduce` with several local replicas.

    A value that every local replica passed as the same object arrives here non-distributed
    and counts as one replica's value, as in TF (SUM and MEAN of it give it back).
    """
    per_replica = local_results(value)
    structure = per_replica[0]
    columns = list(zip(*(flatten(v) for v in per_replica), strict=True))
    ext = strategy.extended
    partials = [ext.combine_local(op, PerReplica([np.asarray(c) for c in col])) for col in columns]
    reduced = ext.reduce_across_workers(op, partials, [len(per_replica)] * len(partials))
    return PerReplica(
        [
            pack_sequence_as(structure, [r.copy() for r in reduced])
            for _ in range(strategy.extended.local_replicas)
        ]
    )


def _merge_all_gather(strategy: Strategy, value: Any, axis: int) -> Any:
    """Cross-replica half of `ReplicaContext.all_gather` with several local replicas."""
    per_replica = local_results(value)
    columns = list(zip(*(flatten(v) for v in per_replica), strict=True))
    gathered = [strategy.gather(PerReplica([np.asarray(c) for c in col]), axis) for col in columns]
    return PerReplica(
        [
            pack_sequence_as(per_replica[0], [g.copy() for g in gathered])
            for _ in range(strategy.extended.local_replicas)
        ]
    )
