"""What `ClusterCoordinator.schedule` returns: `RemoteValue`, and values held per worker.

A `RemoteValue` is set by the coordinator's dispatch loop when the function's reply arrives (or
failed, when it raises, is cancelled or passes its deadline); a thread fetching it drives that
loop itself for a moment before it sleeps. A `PerWorkerValues` names a
resource every worker keeps (its dataset, its iterator); pickled into a scheduled function, it
becomes the value of the worker that runs it.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable
from typing import Any

from hpcdist.strategies.ps.runtime import runtime

__all__ = ["PerWorkerIterator", "PerWorkerValues", "RemoteValue", "RemoteValueStatus"]


class RemoteValueStatus(enum.Enum):
    """State of a `RemoteValue`."""

    NOT_READY = "NOT_READY"
    ABORTED = "ABORTED"
    READY = "READY"


class RemoteValue:
    """The future result of a scheduled function."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._value: Any = None
        self._error: BaseException | None = None
        self._status = RemoteValueStatus.NOT_READY
        # Set by the coordinator: drives its dispatch loop from the fetching thread.
        self._pump: Callable[[Callable[[], bool]], None] | None = None

    @property
    def status(self) -> RemoteValueStatus:
        """NOT_READY, READY, or ABORTED (the function failed or was cancelled)."""
        return self._status

    def _set(self, value: Any) -> None:
        self._value, self._status = value, RemoteValueStatus.READY
        self._event.set()

    def _fail(self, error: BaseException) -> None:
        self._error, self._status = error, RemoteValueStatus.ABORTED
        self._event.set()

    def fetch(self) -> Any:
        """Wait for the result and return it (numpy values).

        Raises:
            The function's error, or `CancelledError` if it never ran.
        """
        if self._pump is not None and not self._event.is_set():
            self._pump(self._event.is_set)
        self._event.wait()
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


def _local_resource(resource: int) -> Any:
    return runtime().resources[resource]
