"""Variables of `ParameterServerStrategy`: `PSVariable` and `ShardedVariable`.

A `PSVariable` is a single copy in an RMA window on one ps rank (`RmaStorage`): every read is a
``Get`` and every update an ``Accumulate``, issued by whichever process runs the code (the
coordinator, or a worker inside a scheduled function). A variable travels to workers as a small
handle (segment, ps, offset, shape, dtype) when a scheduled function is pickled; a worker
rebuilds it once and keeps it, so the same variable is the same object in every function.

A `ShardedVariable` splits one logical variable along its first axis into `PSVariable` shards
placed round-robin on the ps ranks (the first ``rows % k`` shards one row larger, TF's rule).
``sparse_read`` and ``scatter_add`` move only the rows they touch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from hpcdist.core.variables import Variable, VariableAggregation, VariableSynchronization
from hpcdist.strategies.ps.runtime import runtime
from hpcdist.strategies.ps.store import RmaStorage
from hpcdist.utils.rows import sum_rows, unique_inverse

__all__ = ["PSVariable", "ShardedVariable"]


def _ids(ids: Any, rows: int, name: str) -> np.ndarray:
    ids = np.asarray(ids)
    if ids.dtype.kind not in "iu":
        raise TypeError(f"variable {name!r}: ids must be integers, got dtype {ids.dtype}")
    ids = ids.astype(np.int64, copy=False)
    if ids.size and (ids.min() < 0 or ids.max() >= rows):
        raise ValueError(
            f"variable {name!r}: ids must be in [0, {rows}), got min {ids.min()} max {ids.max()}"
        )
    return ids


def _flat(ids: np.ndarray, rows: Any, dtype: np.dtype, trailing: tuple[int, ...]):
    flat = ids.reshape(-1)
    rows = np.asarray(rows, dtype)
    if rows.shape != (*ids.shape, *trailing):
        rows = np.broadcast_to(rows, (*ids.shape, *trailing))
    return flat, rows.reshape(len(flat), *trailing)


def _last(flat: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Unique sorted ids and, for each, the last row given (scatter_update's rule)."""
    reverse = flat[::-1]
    unique, first_in_reverse = np.unique(reverse, return_index=True)
    return unique, rows[len(flat) - 1 - first_in_reverse]


def _read_rows(storages: list[RmaStorage], bounds: np.ndarray, ids: np.ndarray, trailing, dtype):
    """Rows ``ids`` (any shape) of a table split at ``bounds``: each distinct row read once."""
    unique, inverse = unique_inverse(ids.reshape(-1))
    rows = np.empty((len(unique), *trailing), dtype)
    cuts = np.searchsorted(unique, bounds)
    for s, storage in enumerate(storages):
        lo, hi = cuts[s], cuts[s + 1]
        if hi > lo:
            storage.read_rows(unique[lo:hi] - bounds[s], out=rows[lo:hi])
    return rows[inverse].reshape(*ids.shape, *trailing)


def _write_rows(storages: list[RmaStorage], bounds: np.ndarray, unique, rows, add: bool) -> None:
    """Add (or write) ``rows`` at sorted unique ``unique`` of a table split at ``bounds``."""
    cuts = np.searchsorted(unique, bounds)
    for s, storage in enumerate(storages):
        lo, hi = cuts[s], cuts[s + 1]
        if hi > lo:
            if add:
                storage.add_rows(unique[lo:hi] - bounds[s], rows[lo:hi])
            else:
                storage.write_rows(unique[lo:hi] - bounds[s], rows[lo:hi])


class PSVariable(Variable):
    """A variable living in an RMA window on one parameter server.

    Created by `ParameterServerStrategy.Variable`, never directly.

    Args:
        storage: Where the value lives.
        name: Name.
        trainable: Whether optimizers update it.
        synchronization: Recorded (one copy needs no synchronization).
        aggregation: Recorded.
        uid: Identity shared by every process's copy of this variable.
    """

    def __init__(
        self,
        storage: RmaStorage,
        name: str,
        trainable: bool,
        synchronization: VariableSynchronization,
        aggregation: VariableAggregation,
        uid: int,
    ) -> None:
        self._storage = [storage]
        self.name = name
        self.trainable = trainable
        self.synchronization = synchronization
        self.aggregation = aggregation
        self._key = ("ps", uid)

    @property
    def uid(self) -> int:
        """The identity every process's copy of this variable shares."""
        return self._key[1]

    @property
    def dtype(self) -> np.dtype:
        """The dtype."""
        return self._storage[0].dtype

    @property
    def shape(self) -> tuple[int, ...]:
        """The shape."""
        return self._storage[0].shape

    @property
    def device(self) -> str:
        """The ps task holding the value, e.g. ``/job:ps/replica:0/task:1/device:CPU:0``."""
        return f"/job:ps/replica:0/task:{self._storage[0].ps}/device:CPU:0"

    def read_value(self) -> np.ndarray:
        """``Get`` the value (a fresh array)."""
        return self._storage[0].read()

    _value = read_value

    def checkpoint_value(self) -> np.ndarray:
        """What a checkpoint saves: the whole value, ``Get`` into a fresh host array."""
        return self._storage[0].read()

    def assign(self, value: Any, read_value: bool = True) -> Any:
        """``Accumulate(REPLACE)`` the value (element-wise atomic)."""
        self._storage[0].write(value)
        return self._storage[0].read() if read_value else None

    def assign_add(self, delta: Any, read_value: bool = True) -> Any:
        """``Accumulate(SUM)`` ``delta`` (element-wise atomic: concurrent adds all count)."""
        self._storage[0].add(delta)
        return self._storage[0].read() if read_value else None

    def _table(self) -> tuple[list[RmaStorage], np.ndarray]:
        return self._storage, np.array([0, self.shape[0]])

    def sparse_read(self, ids: Any) -> np.ndarray:
        """Rows ``ids`` (any shape) of the first axis; only those rows are read."""
        ids = _ids(ids, self.shape[0], self.name)
        return _read_rows(*self._table(), ids, self.shape[1:], self.dtype)

    def scatter_add(self, ids: Any, rows: Any) -> None:
        """Add ``rows`` into rows ``ids`` (duplicates add up); only those rows move."""
        ids = _ids(ids, self.shape[0], self.name)
        unique, summed = sum_rows(*_flat(ids, rows, self.dtype, self.shape[1:]))
        _write_rows(*self._table(), unique, summed, add=True)

    def scatter_update(self, ids: Any, rows: Any) -> None:
        """Replace rows ``ids`` by ``rows`` (for duplicates the last row wins)."""
        ids = _ids(ids, self.shape[0], self.name)
        unique, last = _last(*_flat(ids, rows, self.dtype, self.shape[1:]))
        _write_rows(*self._table(), unique, last, add=False)

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return _rebuild_variable, (
            self._storage[0].handle,
            self.name,
            self.trainable,
            self.synchronization.value,
            self.aggregation.value,
            self._key[1],
        )


def _rebuild_variable(
    handle: tuple[int, int, int, tuple[int, ...], str],
    name: str,
    trainable: bool,
    synchronization: int,
    aggregation: int,
    uid: int,
) -> PSVariable:
    rt = runtime()
    var = rt.variables.get(uid)
    if var is None:
        segment, ps, offset, shape, dtype = handle
        storage = RmaStorage(rt.store, segment, ps, offset, shape, np.dtype(dtype), name)
        var = PSVariable(
            storage,
            name,
            trainable,
            VariableSynchronization(synchronization),
            VariableAggregation(aggregation),
            uid,
        )
        rt.variables[uid] = var
    return var


class ShardedVariable(Variable):
    """One logical variable split along its first axis into `PSVariable` shards.

    Args:
        variables: The shards, in order (same dtype and trailing shape).
        name: Name of the logical variable.
        uid: Identity shared by every process's copy.

    Raises:
        ValueError: No shards, or shards that do not stack along the first axis.
    """

    def __init__(self, variables: Sequence[PSVariable], name: str, uid: int) -> None:
        variables = list(variables)
        if not variables:
            raise ValueError(f"ShardedVariable {name!r} needs at least one shard")
        first = variables[0]
        for v in variables[1:]:
            if v.dtype != first.dtype or tuple(v.shape[1:]) != tuple(first.shape[1:]):
                raise ValueError(
                    f"ShardedVariable {name!r}: shards must share dtype and trailing shape; "
                    f"{first.name} is {first.dtype}{list(first.shape)}, "
                    f"{v.name} is {v.dtype}{list(v.shape)}"
                )
        self._variables = variables
        self._bounds = np.cumsum([0] + [v.shape[0] for v in variables])
        self.name = name
        self.trainable = first.trainable
        self.synchronization = first.synchronization
        self.aggregation = first.aggregation
        self._key = ("ps", uid)

    @property
    def uid(self) -> int:
        """The identity every process's copy of this variable shares."""
        return self._key[1]

    @property
    def variables(self) -> list[PSVariable]:
        """The shards."""
        return list(self._variables)

    @property
    def dtype(self) -> np.dtype:
        """The dtype."""
        return self._variables[0].dtype

    @property
    def shape(self) -> tuple[int, ...]:
        """The logical shape."""
        return (int(self._bounds[-1]), *self._variables[0].shape[1:])

    def _value(self) -> np.ndarray:
        return np.concatenate([v.read_value() for v in self._variables], axis=0)

    def read_value(self) -> np.ndarray:
        """The whole logical value (every shard read)."""
        return self._value()

    def _split(self, value: Any) -> list[np.ndarray]:
        full = np.broadcast_to(np.asarray(value, self.dtype), self.shape)
        return [full[lo:hi] for lo, hi in zip(self._bounds[:-1], self._bounds[1:], strict=True)]

    def assign(self, value: Any, read_value: bool = True) -> Any:
        """Set the whole value (each shard gets its slice)."""
        for var, part in zip(self._variables, self._split(value), strict=True):
            var.assign(part, read_value=False)
        return self.read_value() if read_value else None

    def assign_add(self, delta: Any, read_value: bool = True) -> Any:
        """Add ``delta`` (each shard its slice)."""
        for var, part in zip(self._variables, self._split(delta), strict=True):
            var.assign_add(part, read_value=False)
        return self.read_value() if read_value else None

    def _table(self) -> tuple[list[RmaStorage], np.ndarray]:
        return [v.storage for v in self._variables], self._bounds

    def checkpoint_value(self) -> _ShardSlices:
        """What a checkpoint saves: the logical value as consecutive shards, read one at a time.

        Returns:
            An object with the logical ``shape`` and ``dtype`` whose ``slices()`` yields each
            shard's value in order, so a writer never holds the whole value.
        """
        return _ShardSlices(self)

    sparse_read = PSVariable.sparse_read
    scatter_add = PSVariable.scatter_add
    scatter_update = PSVariable.scatter_update

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return _rebuild_sharded, (self._variables, self.name, self._key[1])

    def __repr__(self) -> str:
        return (
            f"<ShardedVariable {self.name!r} shape={self.shape} dtype={self.dtype} "
            f"shards={[v.shape[0] for v in self._variables]}>"
        )


class _ShardSlices:
    """A sharded variable's logical value, read shard by shard when written."""

    def __init__(self, var: ShardedVariable) -> None:
        self.var = var
        self.shape, self.dtype = var.shape, var.dtype

    def slices(self) -> Any:
        """Each shard's value, in order."""
        for shard in self.var.variables:
            yield shard.read_value()


def _rebuild_sharded(variables: list[PSVariable], name: str, uid: int) -> ShardedVariable:
    rt = runtime()
    var = rt.variables.get(uid)
    if var is None:
        var = ShardedVariable(variables, name, uid)
        rt.variables[uid] = var
    return var
