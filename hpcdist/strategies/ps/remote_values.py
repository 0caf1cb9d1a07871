"""What `ClusterCoordinator.schedule` returns: `RemoteValue`, and values held per worker.

A `RemoteValue` is set by the coordinator's dispatch loop when the function's reply arrives (or
failed, when it raises, is cancelled or passes its deadline). It holds no lock or event of its
own: a thread fetching it asks the coordinator to wait, which drives the dispatch loop from that
thread for a moment and then sleeps on the coordinator's condition. A `PerWorkerValues` names a
resource every worker keeps (its dataset, its iterator); pickled into a scheduled function, it
becomes the value of the worker that runs it. `PerWorkerDataset` is what
`ClusterCoordinator.create_per_worker_dataset` returns.
"""

from __future__ import annotations

import enum
import functools
import inspect
from collections.abc import Callable
from typing import Any

import cloudpickle

from hpcdist import timeline
from hpcdist.core.variables import Variable
from hpcdist.data.nest import flatten, map_structure
from hpcdist.strategies.input import DatasetsFromFunction, DistributedDataset
from hpcdist.strategies.ps.runtime import creating_dataset, serving_runtime

__all__ = [
    "Closure",
    "PerWorkerDataset",
    "PerWorkerIterator",
    "PerWorkerValues",
    "RemoteValue",
    "RemoteValueStatus",
    "call_dataset_fn",
    "fetch_structure",
    "store_resource",
]


class RemoteValueStatus(enum.Enum):
    """State of a `RemoteValue`."""

    NOT_READY = "NOT_READY"
    ABORTED = "ABORTED"
    READY = "READY"


_NOT_READY = RemoteValueStatus.NOT_READY
_READY = RemoteValueStatus.READY
_ABORTED = RemoteValueStatus.ABORTED


class RemoteValue:
    """The future result of a scheduled function.

    Args:
        wait: ``wait(ready)`` returns once ``ready()`` is true (the coordinator's wait); it is
            only called while the value is not ready.
    """

    __slots__ = ("_error", "_status", "_value", "_wait")

    def __init__(self, wait: Callable[[Callable[[], bool]], None]) -> None:
        self._value: Any = None
        self._error: BaseException | None = None
        self._status = _NOT_READY
        self._wait = wait

    @property
    def status(self) -> RemoteValueStatus:
        """NOT_READY, READY, or ABORTED (the function failed or was cancelled)."""
        return self._status

    def is_ready(self) -> bool:
        """Whether the value or the error is known (``fetch`` returns at once)."""
        return self._status is not _NOT_READY

    def set_value(self, value: Any) -> None:
        """The coordinator's: the function returned ``value``."""
        self._value = value
        self._status = _READY  # last: a reader that sees the status sees the value

    def set_error(self, error: BaseException) -> None:
        """The coordinator's: the function failed (or was cancelled) with ``error``."""
        self._error = error
        self._status = _ABORTED

    def fetch(self) -> Any:
        """Wait for the result and return it (numpy values).

        Raises:
            The function's error, or `CancelledError` if it never ran.
        """
        if self._status is _NOT_READY:
            self._wait(self.is_ready)
        if self._error is not None:
            raise self._error
        return self._value

    def get(self) -> Any:
        """Same as `fetch`: the value on the coordinator."""
        return self.fetch()

    def __reduce__(self) -> Any:
        raise TypeError(
            "a RemoteValue cannot be passed to a scheduled function: call .fetch() on the "
            "coordinator and pass the value"
        )

    def __repr__(self) -> str:
        return f"<RemoteValue {self._status.value}>"


class Closure:
    """A scheduled call: its function's entry, pickled arguments, worker if targeted, value.

    Args:
        function: The function's `hpcdist.strategies.ps.functions.FunctionEntry`.
        args: The pickled ``(args, kwargs)``, or None for a call without arguments.
        worker: The worker it must run on, or None for any.
        wait: The coordinator's wait (see `RemoteValue`).
    """

    __slots__ = ("args", "avoid", "function", "remote_value", "sent", "t0", "worker")

    def __init__(self, function: Any, args: bytes | None, worker: int | None, wait: Any) -> None:
        self.function, self.args, self.worker = function, args, worker
        self.remote_value = RemoteValue(wait)
        self.avoid: int | None = None  # a worker not to run it again (it was preempted there)
        self.t0 = timeline.now() if timeline.active() else 0.0  # scheduled
        self.sent = 0.0

    @classmethod
    def make(
        cls, entry: Callable[[Any], Any], fn: Any, args: Any, kwargs: Any, worker: Any, wait: Any
    ) -> Closure:
        """The closure of ``fn(*args, **kwargs)``; ``entry(fn)`` gives the function's entry.

        Raises:
            TypeError: ``fn`` is not callable, or it or its arguments cannot be pickled (a
                `RemoteValue` argument among them).
        """
        if not callable(fn):
            raise TypeError(f"schedule needs a callable, got {type(fn).__name__}")
        function = entry(fn)
        if not args and not kwargs:
            return cls(function, None, worker, wait)
        args, kwargs = tuple(args or ()), dict(kwargs or {})
        for leaf in flatten((args, kwargs)):
            if isinstance(leaf, RemoteValue):
                raise TypeError(
                    "a RemoteValue cannot be passed to a scheduled function: call .fetch() "
                    "on the coordinator and pass the value"
                )
        try:
            blob = cloudpickle.dumps((args, kwargs))
        except Exception as exc:
            raise TypeError(f"cannot send the arguments of {fn!r} to the workers: {exc}") from exc
        return cls(function, blob, worker, wait)


class PerWorkerValues:
    """One value per worker (e.g. each worker's dataset iterator).

    Passed to a scheduled function, it becomes the value of the worker that runs the function.

    Args:
        resource: Key under which each worker keeps its value.
        values: The `RemoteValue` of each worker's creation.
    """

    def __init__(self, resource: int, values: tuple[RemoteValue, ...]) -> None:
        self._resource = resource
        self._values = tuple(values)

    @property
    def resource(self) -> int:
        """The key under which each worker keeps its value."""
        return self._resource

    @property
    def values(self) -> tuple[RemoteValue, ...]:
        """The `RemoteValue` of each worker's creation."""
        return self._values

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return _local_resource, (self._resource,)

    def __repr__(self) -> str:
        return f"<PerWorkerValues resource={self._resource} workers={len(self._values)}>"


class PerWorkerIterator(PerWorkerValues):
    """Each worker's iterator over its dataset.

    Pass it to scheduled functions, which call ``next()`` on it on their worker.
    """

    def __iter__(self) -> PerWorkerIterator:
        return self

    def __next__(self) -> Any:
        raise TypeError(
            "next() on a per-worker iterator runs inside a scheduled function: pass the "
            "iterator as an argument of coordinator.schedule"
        )


def fetch_structure(value: Any) -> Any:
    """``value`` with every `RemoteValue` fetched and every variable read (on the coordinator)."""

    def leaf(v: Any) -> Any:
        if isinstance(v, RemoteValue):
            return v.fetch()
        if isinstance(v, PerWorkerValues):
            return tuple(r.fetch() for r in v.values)
        if isinstance(v, Variable):
            return v.read_value()
        return v

    return map_structure(leaf, value)


def _local_resource(resource: int) -> Any:
    return serving_runtime().resources[resource]


def store_resource(resource: int, build: Callable[[], Any], dataset_fn: bool) -> None:
    """On a worker: keep ``build()`` as its value of ``resource``."""
    if dataset_fn:
        with creating_dataset():
            serving_runtime().resources[resource] = build()
    else:
        serving_runtime().resources[resource] = build()


def call_dataset_fn(dataset_fn: Callable[..., Any]) -> Any:
    """On a worker: this worker's dataset from the user's ``dataset_fn``."""
    strategy = serving_runtime().strategy
    try:
        wants_context = len(inspect.signature(dataset_fn).parameters) >= 1
    except (TypeError, ValueError):
        wants_context = False
    if wants_context:
        return strategy.distribute_datasets_from_function(dataset_fn)
    dataset = dataset_fn()
    if isinstance(dataset, (DistributedDataset, DatasetsFromFunction)):
        return dataset.dataset  # a distributed dataset: its per-worker data
    return dataset


def _iterate(resource: int) -> Any:
    return iter(serving_runtime().resources[resource])


class PerWorkerDataset:
    """A dataset built on every worker; ``iter()`` gives a per-worker iterator.

    Args:
        coordinator: The `ClusterCoordinator` that built it.
        values: Each worker's dataset.
    """

    def __init__(self, coordinator: Any, values: PerWorkerValues) -> None:
        self._coordinator = coordinator
        self._values = values

    def __iter__(self) -> PerWorkerIterator:
        resource = self._values.resource
        values = self._coordinator.create_per_worker_resources(
            functools.partial(_iterate, resource), dataset_fn=False
        )
        return PerWorkerIterator(values.resource, values.values)
