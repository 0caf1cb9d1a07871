"""Distributed variables: `MirroredVariable` (ON_WRITE) and `SyncOnReadVariable` (ON_READ).

Built on the base `hpcdist.core.variables.Variable`: one copy per local replica, tied together by
the strategy. Semantics follow TF (mirrored_variable_test, values_test), with one deliberate
difference: an ON_WRITE variable with aggregation NONE assigned in replica context with more than
one replica in sync raises `ValueError` instead of letting the copies diverge silently.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from hpcdist.comm.reduce_op import ReduceOp
from hpcdist.core import context
from hpcdist.core.variables import (
    Storage,
    Variable,
    VariableAggregation,
    VariableSynchronization,
    initial_array,
    unique_name,
    variable_options,
)
from hpcdist.strategies.values import Mirrored, PerReplica, local_results
from hpcdist.utils.xp import as_array, to_numpy

if TYPE_CHECKING:
    from hpcdist.strategies.strategy import Strategy

__all__ = ["MirroredVariable", "ReplicaCopy", "SyncOnReadVariable", "create_variable"]


class _DistributedVariable(Variable):
    """One copy per local replica; the strategy ties the copies together."""

    def __init__(
        self,
        strategy: Strategy,
        value: np.ndarray,
        name: str | None,
        trainable: bool,
        synchronization: VariableSynchronization,
        aggregation: VariableAggregation,
    ) -> None:
        self._strategy = strategy
        self._storage = strategy.extended.make_storage(value, synchronization)
        self.name = unique_name(name)
        self.trainable = trainable
        self.synchronization = synchronization
        self.aggregation = aggregation
        self._copies: tuple[ReplicaCopy, ...] | None = None

    @property
    def values(self) -> tuple[np.ndarray, ...]:
        """The local copies (live arrays, one per local replica)."""
        return tuple(s.read() for s in self._storage)

    @property
    def storages(self) -> tuple[Storage, ...]:
        """Each local replica's storage, in local order (one shared object may repeat)."""
        return tuple(self._storage)

    def replica_copies(self) -> tuple[ReplicaCopy, ...]:
        """One `ReplicaCopy` per local replica (the same objects on every call)."""
        if self._copies is None:
            self._copies = tuple(ReplicaCopy(self, i) for i in range(len(self._storage)))
        return self._copies

    def _unique_storage(self) -> list[Storage]:
        """Each distinct copy once (central storage shares one copy among replicas)."""
        seen: dict[int, Storage] = {}
        for storage in self._storage:
            seen.setdefault(id(storage), storage)
        return list(seen.values())

    @property
    def distribute_strategy(self) -> Strategy:
        """The strategy the variable belongs to."""
        return self._strategy

    def _local_index(self) -> int | None:
        ctx = context.get_replica_context()
        if ctx is None or ctx.strategy is not self._strategy:
            return None
        return ctx.replica_id_in_sync_group - self._strategy.extended.local_replica_ids[0]


class ReplicaCopy(Variable):
    """One local replica's copy of a distributed variable (TF's component variable).

    `Strategy.experimental_local_results` returns these for a `MirroredVariable` or a
    `SyncOnReadVariable`. A copy is a plain `Variable` over that replica's storage: reading it
    reads that copy in any context, and assigning it changes that copy only (as assigning a
    component does in TF). Replica 0's copy has the variable's name, the others
    ``"<name>/replica_<i>"``.

    Args:
        container: The distributed variable.
        index: The local replica (0 to ``local_replicas - 1``).
    """

    def __init__(self, container: _DistributedVariable, index: int) -> None:
        self._container = container
        self._storage = [container.storages[index]]
        self.name = container.name if index == 0 else f"{container.name}/replica_{index}"
        self.trainable = container.trainable
        self.synchronization = container.synchronization
        self.aggregation = container.aggregation
        self._device = container.distribute_strategy.extended.worker_devices[index]

    @property
    def device(self) -> str:
        """The replica's device (``"cpu:1"``, ``"gpu:0"``)."""
        return self._device


class MirroredVariable(_DistributedVariable):
    """ON_WRITE: every replica holds the same value; updates are aggregated before writing."""

    def _value(self) -> np.ndarray:
        index = self._local_index()
        return self._storage[0 if index is None else index].read()

    def _update(self, value: Any, is_delta: bool, negate: bool = False) -> None:
        """Write (or add) ``value``, negated if ``negate``; aggregated in replica context.

        In replica context the value goes to ``merge_call`` as the replica passed it, so that
        every replica passing the same object (a Python constant, one array made outside
        ``strategy.run``) gives a non-distributed value, as in TF: SUM aggregation of it over
        several local replicas raises `ValueError`, MEAN keeps it (see `Strategy.reduce`).
        """
        if self._local_index() is None:  # cross-replica context: same update on every copy
            value = as_array(value, self.dtype if is_delta else None)
            if negate:
                value = -value
            for storage in self._unique_storage():
                if is_delta:
                    storage.add(value)
                else:
                    storage.write(value)
            return
        n = self._strategy.num_replicas_in_sync
        if self.aggregation is VariableAggregation.NONE and n > 1:
            raise ValueError(
                f"variable {self.name!r} (ON_WRITE, aggregation NONE) updated in replica context "
                f"with {n} replicas in sync: the copies would diverge. Create it with "
                "aggregation=SUM, MEAN or ONLY_FIRST_REPLICA, or update it in cross-replica "
                "context (e.g. inside merge_call)"
            )
        ctx = context.get_replica_context()
        ctx.merge_call(self._merge_update, args=(value, is_delta, negate))

    def _merge_update(self, strategy: Strategy, value: Any, is_delta: bool, negate: bool) -> None:
        """Cross-replica half of a replica-context update (``merge_call``'s function)."""
        agg = self.aggregation
        if agg is VariableAggregation.ONLY_FIRST_REPLICA:
            first = to_numpy(local_results(value)[0])
            comm = strategy.extended.communicator
            reduced = first if comm is None else comm.broadcast(first, root=0)
        else:
            op = ReduceOp.SUM if agg is VariableAggregation.SUM else ReduceOp.MEAN
            reduced = strategy.reduce(op, value, axis=None)
        reduced = to_numpy(reduced).astype(self.dtype, copy=False)
        if negate:
            reduced = -reduced
        for storage in self._unique_storage():
            if is_delta:
                storage.add(reduced)
            else:
                storage.write(reduced)

    def assign(self, value: Any, read_value: bool = True) -> Any:
        """Set the value (aggregated across replicas in replica context)."""
        self._update(value, is_delta=False)
        return self._updated(read_value)

    def assign_add(self, delta: Any, read_value: bool = True) -> Any:
        """Add ``delta`` (aggregated across replicas in replica context)."""
        self._update(delta, is_delta=True)
        return self._updated(read_value)

    def assign_sub(self, delta: Any, read_value: bool = True) -> Any:
        """Subtract ``delta`` (aggregated across replicas in replica context)."""
        self._update(delta, is_delta=True, negate=True)
        return self._updated(read_value)

    def _updated(self, read_value: bool) -> Any:
        """An update's result: across several local copies a `Mirrored` of them (TF's)."""
        if not read_value:
            return None
        if self._local_index() is None and len(self._storage) > 1:
            return Mirrored([s.read().copy() for s in self._storage])
        return self.read_value()


class SyncOnReadVariable(_DistributedVariable):
    """ON_READ: each replica updates its own copy; reading across replicas aggregates them."""

    def _value(self) -> np.ndarray:
        index = self._local_index()
        if index is not None:
            return self._storage[index].read()
        agg = self.aggregation
        if agg is VariableAggregation.ONLY_FIRST_REPLICA:
            # TF's: this worker's first copy, no communication (each worker may read another).
            return self._storage[0].read()
        if agg is VariableAggregation.NONE:
            raise ValueError(
                f"cannot read sync-on-read variable {self.name!r} with aggregation NONE in "
                "cross-replica context: give it aggregation SUM, MEAN or ONLY_FIRST_REPLICA"
            )
        op = ReduceOp.SUM if agg is VariableAggregation.SUM else ReduceOp.MEAN
        per_replica = PerReplica([s.read() for s in self._storage])
        return to_numpy(self._strategy.reduce(op, per_replica, axis=None)).astype(self.dtype)

    def assign(self, value: Any, read_value: bool = True) -> Any:
        """Set this replica's copy; across replicas, set every copy (SUM: value / N each)."""
        value = as_array(value)
        index = self._local_index()
        if index is not None:
            self._storage[index].write(value)
        else:
            if self.aggregation is VariableAggregation.SUM:
                n = self._strategy.num_replicas_in_sync
                value = value / n if self.dtype.kind in "fc" else value // n
            for storage in self._storage:
                storage.write(value)
        return self.read_value() if read_value else None

    def assign_add(self, delta: Any, read_value: bool = True) -> Any:
        """Add to this replica's copy (replica context) or to every copy (cross-replica).

        Raises:
            ValueError: Cross-replica, with aggregation SUM (TF's rule: which copy would the
                delta go to?).
        """
        return self._add(as_array(delta, self.dtype), "assign_add", read_value)

    def assign_sub(self, delta: Any, read_value: bool = True) -> Any:
        """``assign_add`` of ``-delta`` (same rules)."""
        return self._add(-as_array(delta, self.dtype), "assign_sub", read_value)

    def _add(self, delta: np.ndarray, op: str, read_value: bool) -> Any:
        index = self._local_index()
        if index is not None:
            self._storage[index].add(delta)
        elif self.aggregation is VariableAggregation.SUM:
            raise ValueError(
                f"SyncOnReadVariable does not support `{op}` in cross-replica context when "
                f"aggregation is set to `tf.VariableAggregation.SUM` (variable {self.name!r})."
            )
        else:
            for storage in self._storage:
                storage.add(delta)
        return self.read_value() if read_value else None


def create_variable(
    strategy: Strategy,
    initial_value: Any,
    name: str | None = None,
    trainable: bool | None = None,
    synchronization: Any = None,
    aggregation: Any = None,
    dtype: Any = None,
) -> Variable:
    """Create a variable for ``strategy`` (see `Strategy.Variable`)."""
    synchronization, aggregation, trainable = variable_options(
        name, synchronization, aggregation, trainable
    )
    value = initial_array(initial_value, dtype)
    if aggregation is VariableAggregation.MEAN and value.dtype.kind not in "fc":
        raise ValueError(
            f"aggregation MEAN is not supported for integer variable {name!r} "
            f"(dtype {value.dtype}): use SUM or ONLY_FIRST_REPLICA"
        )
    comm = strategy.extended.communicator
    if comm is not None:  # every rank starts from the chief's value
        value = np.asarray(comm.broadcast(value, root=0))
    on_read = synchronization is VariableSynchronization.ON_READ
    if strategy.single_copy_variables:
        device = strategy.extended.worker_devices[0]
        return Variable(value, name, trainable, None, synchronization, aggregation, device)
    cls = SyncOnReadVariable if on_read else MirroredVariable
    if synchronization is VariableSynchronization.AUTO:
        synchronization = VariableSynchronization.ON_WRITE
    return cls(strategy, value, name, trainable, synchronization, aggregation)
