"""Variables under strategies: `Variable`, `MirroredVariable`, `SyncOnReadVariable`.

Storage is behind a small interface (`Storage`: ``read``, ``write``, ``add``) so that the same
variable classes can later keep their data in remote RMA windows (parameter servers) or in
shards; see ``docs/variables.md``. Today every copy is a `LocalStorage` (a numpy array).

Semantics follow TF (mirrored_variable_test, values_test), with one deliberate difference: an
ON_WRITE variable with aggregation NONE assigned in replica context with more than one replica
in sync raises `ValueError` instead of letting the copies diverge silently.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from hpcdist.comm.reduce_op import ReduceOp
from hpcdist.strategies import context
from hpcdist.strategies.values import PerReplica
from hpcdist.utils.xp import (
    as_array,
    as_array_like,
    device_of,
    device_scope,
    parse_gpu,
    put,
    to_numpy,
)

if TYPE_CHECKING:
    from hpcdist.strategies.strategy import Strategy

__all__ = [
    "LocalStorage",
    "MirroredVariable",
    "SharedStorage",
    "Storage",
    "SyncOnReadVariable",
    "Variable",
    "VariableAggregation",
    "VariableSynchronization",
    "variable_key",
]


class VariableSynchronization(enum.Enum):
    """When the copies of a distributed variable are made consistent."""

    AUTO = 0
    NONE = 1
    ON_WRITE = 2
    ON_READ = 3


class VariableAggregation(enum.Enum):
    """How replicas' updates (ON_WRITE) or copies (ON_READ) are combined."""

    NONE = 0
    SUM = 1
    MEAN = 2
    ONLY_FIRST_REPLICA = 3


class Storage:
    """Where one copy of a variable lives."""

    def read(self) -> np.ndarray:
        """Return the current value (a copy-free view where possible; do not modify it)."""
        raise NotImplementedError

    def write(self, value: np.ndarray) -> None:
        """Replace the value."""
        raise NotImplementedError

    def add(self, delta: np.ndarray) -> None:
        """Add ``delta`` to the value."""
        raise NotImplementedError


class LocalStorage(Storage):
    """A copy in this process's memory, or on one of its GPUs (a CuPy array).

    Args:
        value: The initial value (copied).
        device: ``"cpu:N"`` or None for host memory, ``"gpu:N"`` for CUDA device N.
    """

    def __init__(self, value: np.ndarray, device: str | None = None) -> None:
        self.array = put(value, device)
        # Updates of a GPU copy run on its device, whichever device is current (CuPy requires
        # it: the optimizer updates every replica's copy from one thread).
        self._gpu = device if parse_gpu(device) is not None else None

    def read(self) -> np.ndarray:
        """The array itself."""
        return self.array

    def write(self, value: np.ndarray) -> None:
        """Copy ``value`` in (broadcasting and casting to the variable's dtype)."""
        if self._gpu is None:
            self.array[...] = as_array_like(value, self.array)
            return
        with device_scope(self._gpu):
            self.array[...] = as_array_like(value, self.array)

    def add(self, delta: np.ndarray) -> None:
        """In-place add."""
        if self._gpu is None:
            self.array += as_array_like(delta, self.array)
            return
        with device_scope(self._gpu):
            self.array += as_array_like(delta, self.array)


class SharedStorage(Storage):
    """One copy per node, in an ``MPI_Win_allocate_shared`` segment (`CentralStorageStrategy`).

    Every rank of the node reads the same memory. Updates are collective: a node barrier (every
    rank has finished reading the old value), the leader applies the update once, a second
    barrier (nobody reads a half-written value); so a delta applied by every rank counts once.

    Args:
        value: The initial value (only the leader's is used).
        node_comm: The ranks of this node (collective construction).
    """

    def __init__(self, value: np.ndarray, node_comm: Any) -> None:
        from mpi4py import MPI

        value = np.asarray(value)
        self.comm = node_comm
        self.leader = node_comm.Get_rank() == 0
        nbytes = max(value.nbytes, 1)
        self.win = MPI.Win.Allocate_shared(nbytes if self.leader else 0, 1, comm=node_comm)
        buf, _ = self.win.Shared_query(0)
        self.array = np.frombuffer(buf, dtype=value.dtype, count=value.size).reshape(value.shape)
        if self.leader:
            self.array[...] = value
        node_comm.Barrier()

    def read(self) -> np.ndarray:
        """The shared array (read-only by convention)."""
        return self.array

    def write(self, value: np.ndarray) -> None:
        """Collective: the leader writes between two node barriers."""
        self.comm.Barrier()
        if self.leader:
            self.array[...] = to_numpy(value)  # host memory: a GPU value is copied back
        self.comm.Barrier()

    def add(self, delta: np.ndarray) -> None:
        """Collective: the leader adds between two node barriers."""
        self.comm.Barrier()
        if self.leader:
            self.array += to_numpy(delta)
        self.comm.Barrier()


_counter = [0]


def variable_key(var: Any) -> Any:
    """A key naming ``var`` in this process (optimizer slots and checkpoints use it).

    Copies of one parameter-server variable in different processes share the key.
    """
    return getattr(var, "_key", None) or id(var)


def _unique_name(name: str | None) -> str:
    _counter[0] += 1
    return name or f"Variable_{_counter[0]}"


class Variable:
    """A single-copy variable (default and one-device strategies).

    Args:
        initial_value: An array-like or a callable returning one.
        name: Name (unique default).
        trainable: Whether optimizers update it.
        dtype: Cast the initial value to this dtype.
        synchronization: Recorded (a single copy needs none).
        aggregation: Recorded.
    """

    def __init__(
        self,
        initial_value: Any,
        name: str | None = None,
        trainable: bool = True,
        dtype: Any = None,
        synchronization: VariableSynchronization = VariableSynchronization.AUTO,
        aggregation: VariableAggregation = VariableAggregation.NONE,
        device: str | None = None,
    ) -> None:
        value = _initial(initial_value, dtype)
        self._storage: list[Storage] = [LocalStorage(value, device)]
        self.name = _unique_name(name)
        self.trainable = trainable
        self.synchronization = synchronization
        self.aggregation = aggregation

    # -- reading ---------------------------------------------------------------------------

    @property
    def dtype(self) -> np.dtype:
        """The dtype."""
        return self._storage[0].read().dtype

    @property
    def shape(self) -> tuple[int, ...]:
        """The shape."""
        return self._storage[0].read().shape

    def read_value(self) -> np.ndarray:
        """A copy of the value as seen from the current context (on the variable's device)."""
        return self._value().copy()

    def value(self) -> np.ndarray:
        """Same as `read_value`."""
        return self.read_value()

    def numpy(self) -> np.ndarray:
        """A host (numpy) copy of the value as seen from the current context."""
        value = self._value()
        return value.copy() if type(value) is np.ndarray else to_numpy(value)

    @property
    def device(self) -> str:
        """Where this copy lives: ``"cpu:0"`` or ``"gpu:N"``."""
        return device_of(self._value())

    def _value(self) -> np.ndarray:
        return self._storage[0].read()

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        value = self.numpy()
        return value if dtype is None else value.astype(dtype)

    # -- writing ---------------------------------------------------------------------------

    def assign(self, value: Any, read_value: bool = True) -> Any:
        """Set the value."""
        self._storage[0].write(as_array(value))
        return self.read_value() if read_value else None

    def assign_add(self, delta: Any, read_value: bool = True) -> Any:
        """Add ``delta``."""
        self._storage[0].add(as_array(delta, self.dtype))
        return self.read_value() if read_value else None

    def assign_sub(self, delta: Any, read_value: bool = True) -> Any:
        """Subtract ``delta``."""
        return self.assign_add(-as_array(delta, self.dtype), read_value)

    # -- arithmetic: differentiable, through hpcdist.nn (a traced leaf under a tape) ---------

    def _op(self, name: str, *args: Any) -> Any:
        from hpcdist.nn import ops

        return getattr(ops, name)(*args)

    def __add__(self, other: Any) -> Any:
        return self._op("add", self, other)

    def __radd__(self, other: Any) -> Any:
        return self._op("add", other, self)

    def __sub__(self, other: Any) -> Any:
        return self._op("subtract", self, other)

    def __rsub__(self, other: Any) -> Any:
        return self._op("subtract", other, self)

    def __mul__(self, other: Any) -> Any:
        return self._op("multiply", self, other)

    def __rmul__(self, other: Any) -> Any:
        return self._op("multiply", other, self)

    def __truediv__(self, other: Any) -> Any:
        return self._op("divide", self, other)

    def __rtruediv__(self, other: Any) -> Any:
        return self._op("divide", other, self)

    def __neg__(self) -> Any:
        return self._op("negative", self)

    def __pow__(self, exponent: float) -> Any:
        return self._op("power", self, exponent)

    def __matmul__(self, other: Any) -> Any:
        return self._op("matmul", self, other)

    def __rmatmul__(self, other: Any) -> Any:
        return self._op("matmul", other, self)

    def __getitem__(self, index: Any) -> Any:
        return self._op("getitem", self, index)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} shape={self.shape} dtype={self.dtype}>"


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
        self.name = _unique_name(name)
        self.trainable = trainable
        self.synchronization = synchronization
        self.aggregation = aggregation

    @property
    def values(self) -> tuple[np.ndarray, ...]:
        """The local copies (live arrays, one per local replica)."""
        return tuple(s.read() for s in self._storage)

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
        return ctx.replica_id_in_sync_group - self._strategy._replica_ids()[0]


class MirroredVariable(_DistributedVariable):
    """ON_WRITE: every replica holds the same value; updates are aggregated before writing."""

    def _value(self) -> np.ndarray:
        index = self._local_index()
        return self._storage[0 if index is None else index].read()

    def _update(self, value: Any, apply: Callable[[Storage, np.ndarray], None], is_delta: bool):
        value = as_array(value)
        if self._local_index() is None:  # cross-replica context: same update on every copy
            for storage in self._unique_storage():
                apply(storage, value)
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
        merged = ctx.merge_call(_merge_update, args=(self, value, is_delta))
        del merged

    def assign(self, value: Any, read_value: bool = True) -> Any:
        """Set the value (aggregated across replicas in replica context)."""
        self._update(value, lambda s, v: s.write(v), is_delta=False)
        return self.read_value() if read_value else None

    def assign_add(self, delta: Any, read_value: bool = True) -> Any:
        """Add ``delta`` (aggregated across replicas in replica context)."""
        self._update(as_array(delta, self.dtype), lambda s, v: s.add(v), is_delta=True)
        return self.read_value() if read_value else None


def _merge_update(strategy: Strategy, var: MirroredVariable, value: Any, is_delta: bool) -> None:
    """Cross-replica half of a replica-context update of a mirrored variable."""
    agg = var.aggregation
    if agg is VariableAggregation.ONLY_FIRST_REPLICA:
        from hpcdist.strategies.values import local_results

        first = to_numpy(local_results(value)[0])
        comm = strategy.extended.communicator
        reduced = first if comm is None else comm.broadcast(first, root=0)
    else:
        op = ReduceOp.SUM if agg is VariableAggregation.SUM else ReduceOp.MEAN
        reduced = strategy.reduce(op, value, axis=None)
    reduced = to_numpy(reduced).astype(var.dtype, copy=False)
    for storage in var._unique_storage():
        if is_delta:
            storage.add(reduced)
        else:
            storage.write(reduced)


class SyncOnReadVariable(_DistributedVariable):
    """ON_READ: each replica updates its own copy; reading across replicas aggregates them."""

    def _value(self) -> np.ndarray:
        index = self._local_index()
        if index is not None:
            return self._storage[index].read()
        agg = self.aggregation
        if agg is VariableAggregation.ONLY_FIRST_REPLICA:
            first = self._storage[0].read()
            comm = self._strategy.extended.communicator
            return first if comm is None else to_numpy(comm.broadcast(to_numpy(first), root=0))
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
        """Add to this replica's copy (replica context) or to the aggregate (cross-replica)."""
        index = self._local_index()
        if index is not None:
            self._storage[index].add(as_array(delta, self.dtype))
            return self.read_value() if read_value else None
        return self.assign(self._value() + to_numpy(delta), read_value)


def _initial(initial_value: Any, dtype: Any) -> np.ndarray:
    value = initial_value() if callable(initial_value) else initial_value
    if isinstance(value, Variable):
        value = value.numpy()
    return np.array(to_numpy(value), dtype=dtype, copy=True)


def variable_options(
    name: str | None, synchronization: Any, aggregation: Any, trainable: bool | None
) -> tuple[VariableSynchronization, VariableAggregation, bool]:
    """Parse a strategy variable's options (None means AUTO, NONE, and ``not ON_READ``).

    Raises:
        ValueError: Synchronization NONE (not supported under a strategy).
    """
    synchronization = VariableSynchronization(
        synchronization if synchronization is not None else VariableSynchronization.AUTO
    )
    aggregation = VariableAggregation(
        aggregation if aggregation is not None else VariableAggregation.NONE
    )
    if synchronization is VariableSynchronization.NONE:
        raise ValueError(
            f"synchronization NONE is not supported for variable {name!r} under a strategy; "
            "use ON_WRITE (default) or ON_READ"
        )
    if trainable is None:
        trainable = synchronization is not VariableSynchronization.ON_READ
    return synchronization, aggregation, trainable


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
    value = _initial(initial_value, dtype)
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
