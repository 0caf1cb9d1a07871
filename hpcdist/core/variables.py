"""The base `Variable`, its synchronization and aggregation enums, and where a copy lives.

Storage is behind a small interface (`Storage`: ``read``, ``write``, ``add``; optionally an
in-place array and atomic element updates for counters) so that the same variable classes keep
their data in this process (`LocalStorage`), in a node's shared memory
(``CentralStorageStrategy``) or in remote RMA windows (parameter servers); see
``docs/variables.md``. `Variable.storage` is a single-copy variable's storage. Strategies build
their distributed variables on this class (`hpcdist.strategies.variables`).

Arithmetic on a variable is differentiable: the operators dispatch to `hpcdist.core.math_ops`,
and a variable read under a `GradientTape` becomes a traced leaf through
`hpcdist.core.autodiff.variable_accessed`.
"""

from __future__ import annotations

import enum
import threading
from typing import Any

import numpy as np

from hpcdist.core.autodiff import Operators, Tensor, register_tensor_conversion, variable_accessed
from hpcdist.utils.xp import (
    as_array,
    as_array_like,
    device_of,
    device_scope,
    parse_gpu,
    put,
    to_numpy,
)

__all__ = [
    "LocalStorage",
    "Storage",
    "Variable",
    "VariableAggregation",
    "VariableSynchronization",
    "initial_array",
    "unique_name",
    "variable_key",
    "variable_options",
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
    """Where one copy of a variable lives.

    ``read``, ``write`` and ``add`` are the whole value. Two optional parts of the protocol:

    * `local_array`: the array holding the value in this process, the one sanctioned way to
      modify it in place (``read``'s array must not be modified);
    * element atomics (`fetch_add`, `compare_and_swap`, `atomic_read`), for integer counters
      (the TF1 layer's global step, `hpcdist.compat.v1.atomics`): atomic with respect to each
      other on the same element. The defaults work on `local_array` under one lock of this
      process; a storage in another process's memory (an RMA window) overrides them with MPI's
      atomic operations.
    """

    def read(self) -> np.ndarray:
        """Return the current value (a copy-free view where possible; do not modify it).

        To update the value in place use `local_array`, whose array is meant for that.
        """
        raise NotImplementedError

    def write(self, value: np.ndarray) -> None:
        """Replace the value."""
        raise NotImplementedError

    def add(self, delta: np.ndarray) -> None:
        """Add ``delta`` to the value."""
        raise NotImplementedError

    def local_array(self) -> np.ndarray | None:
        """The array holding the value in this process, for in-place updates; or None.

        The caller serialises its own in-place updates (a lock); nothing else synchronises
        them. None (the default) when the value is not in memory this process may write alone
        (a remote window, a node's shared segment).
        """
        return None

    # -- element atomics (integer values) ------------------------------------------------------

    def fetch_add(self, index: int, delta: int) -> int:
        """Add ``delta`` to element ``index`` of the flat value; the value before.

        Raises:
            TypeError: The storage has no `local_array` and no atomics of its own.
        """
        with _element_lock:
            array = self._flat("fetch_add")
            old = int(array[index])
            array[index] = old + delta
            return old

    def compare_and_swap(self, index: int, expected: int, new: int) -> int:
        """Set element ``index`` to ``new`` if it equals ``expected``; the value found.

        Raises:
            TypeError: The storage has no `local_array` and no atomics of its own.
        """
        with _element_lock:
            array = self._flat("compare_and_swap")
            old = int(array[index])
            if old == expected:
                array[index] = new
            return old

    def atomic_read(self, index: int) -> int:
        """Element ``index`` of the flat value, read atomically with the updates above.

        Raises:
            TypeError: The storage has no `local_array` and no atomics of its own.
        """
        with _element_lock:
            return int(self._flat("atomic_read")[index])

    def _flat(self, operation: str) -> np.ndarray:
        array = self.local_array()
        if array is None:
            raise TypeError(
                f"{operation}: expected a storage in this process's memory or one with its own "
                f"atomics, got a {type(self).__name__}"
            )
        return array.reshape(-1)


#: Serialises the element atomics of every storage in this process's memory.
_element_lock = threading.Lock()


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

    def local_array(self) -> np.ndarray:
        """The array itself (updates in place change the variable)."""
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


_counter = [0]


def variable_key(var: Any) -> Any:
    """A key naming ``var`` in this process (optimizer slots and checkpoints use it).

    Copies of one parameter-server variable in different processes share the key.
    """
    return getattr(var, "_key", None) or id(var)


def unique_name(name: str | None) -> str:
    """``name``, or a fresh default name (``Variable_N``)."""
    _counter[0] += 1
    return name or f"Variable_{_counter[0]}"


class Variable(Operators):
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
        value = initial_array(initial_value, dtype)
        self._storage: list[Storage] = [LocalStorage(value, device)]
        self.name = unique_name(name)
        self.trainable = trainable
        self.synchronization = synchronization
        self.aggregation = aggregation

    @property
    def storage(self) -> Storage:
        """Where the value lives (the first copy's storage when there are several)."""
        return self._storage[0]

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

    def local_value(self) -> np.ndarray:
        """The value where it lives, as seen from the current context, without a copy.

        A CuPy array stays on its GPU. Read it, never modify it: it may be the storage itself.
        """
        return self._value()

    def _value(self) -> np.ndarray:  # subclasses say where the current context's copy lives
        return self._storage[0].read()

    def checkpoint_value(self) -> np.ndarray:
        """The whole logical value as a host array, for checkpoints.

        No copy for a host variable: the array may be the variable's own storage, so read it
        before the variable changes (a GPU copy is copied to the host). Reading a sync-on-read
        variable in cross-replica context reduces its copies (a collective).
        """
        return to_numpy(self._value())

    def dense_tensor(self) -> Tensor:
        """The value as a `Tensor`: a traced leaf when a recording tape watches this variable."""
        return variable_accessed(self, self._value())

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

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} shape={self.shape} dtype={self.dtype}>"


register_tensor_conversion(Variable, Variable.dense_tensor)


def initial_array(initial: Any, dtype: Any) -> np.ndarray:
    """A host copy of ``initial`` (an array-like, a variable, or a callable returning one)."""
    value = initial() if callable(initial) else initial
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
