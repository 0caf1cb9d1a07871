"""`ClusterCoordinator`: schedule functions on the workers of a `ParameterServerStrategy`.

``schedule(fn, args, kwargs)`` queues a closure and returns a `RemoteValue` at once; a
dispatcher thread on the coordinator hands closures to idle workers over MPI and collects their
results. Functions travel with cloudpickle (module-level ones by reference, others by value),
once per worker; their arguments are pickled when scheduled. Variables inside travel as handles
(`hpcdist.strategies.ps.variables`): the worker reads and updates them one-sidedly.

Error contract (TF's): the first error of a scheduled function (other than
`WorkerPreemptedError`, which re-runs the function on another worker: at-least-once) is raised
once, by the next `schedule`, `join` or `done`; at that point functions still queued are
cancelled (their `RemoteValue` raises `CancelledError`), functions already running finish, and
the error is cleared.
"""

from __future__ import annotations

import collections
import enum
import functools
import inspect
import itertools
import pickle
import threading
import time
from collections.abc import Callable
from typing import Any

import cloudpickle

from hpcdist.core.variables import Variable
from hpcdist.data.nest import flatten, map_structure
from hpcdist.errors import CancelledError, WorkerPreemptedError
from hpcdist.strategies.ps.runtime import creating_dataset, runtime
from hpcdist.strategies.ps.strategy import ParameterServerStrategy

__all__ = [
    "ClusterCoordinator",
    "PerWorkerDataset",
    "PerWorkerIterator",
    "PerWorkerValues",
    "RemoteValue",
    "RemoteValueStatus",
]


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


def _store_resource(resource: int, build: Callable[[], Any], dataset_fn: bool) -> None:
    if dataset_fn:
        with creating_dataset():
            runtime().resources[resource] = build()
    else:
        runtime().resources[resource] = build()


def _call_dataset_fn(dataset_fn: Callable[..., Any]) -> Any:
    strategy = runtime().strategy
    try:
        wants_context = len(inspect.signature(dataset_fn).parameters) >= 1
    except (TypeError, ValueError):
        wants_context = False
    if wants_context:
        return strategy.distribute_datasets_from_function(dataset_fn)
    dataset = dataset_fn()
    return getattr(dataset, "_dataset", dataset)  # a distributed dataset: its per-worker data


def _iterate(resource: int) -> Any:
    return iter(runtime().resources[resource])


class PerWorkerDataset:
    """A dataset built on every worker; ``iter()`` gives a per-worker iterator."""

    def __init__(self, coordinator: ClusterCoordinator, values: PerWorkerValues) -> None:
        self._coordinator = coordinator
        self._values = values

    def __iter__(self) -> PerWorkerIterator:
        resource = self._values._resource
        values = self._coordinator._create_per_worker_resources(
            functools.partial(_iterate, resource), dataset_fn=False
        )
        return PerWorkerIterator(values._resource, values._values)


class _Closure:
    __slots__ = ("args", "avoid", "key", "remote_value", "worker")

    def __init__(self, key: int, args: bytes, worker: int | None) -> None:
        self.key, self.args, self.worker = key, args, worker
        self.remote_value = RemoteValue()
        self.avoid: int | None = None


class ClusterCoordinator:
    """Schedules functions on the workers of a `ParameterServerStrategy` (one per strategy).

    Args:
        strategy: The strategy; this process must be its coordinator.

    Raises:
        ValueError: ``strategy`` is not a `ParameterServerStrategy`.
    """

    def __new__(cls, strategy: Any) -> ClusterCoordinator:
        """The strategy's coordinator (created on first use)."""
        if not isinstance(strategy, ParameterServerStrategy):
            raise ValueError(
                "ClusterCoordinator needs a ParameterServerStrategy, got "
                f"{type(strategy).__name__}: only parameter-server jobs schedule functions"
            )
        rt = runtime()
        if rt.cluster_coordinator is not None:
            return rt.cluster_coordinator
        self = super().__new__(cls)
        self._init(strategy, rt)
        rt.cluster_coordinator = self
        rt.add_shutdown_hook(self._stop)
        return self

    def __init__(self, strategy: Any) -> None:
        del strategy  # set up once, in __new__

    def _init(self, strategy: ParameterServerStrategy, rt: Any) -> None:
        self.strategy = strategy
        self._rt = rt
        self._workers = list(self._rt.roles.workers)
        self._cond = threading.Condition()
        self._queue: collections.deque[_Closure] = collections.deque()
        self._targeted: dict[int, collections.deque[_Closure]] = {
            w: collections.deque() for w in self._workers
        }
        self._inflight: dict[int, _Closure] = {}
        self._error: BaseException | None = None
        self._stopping = False
        self._functions: dict[int, tuple[int, Any]] = {}  # id(fn) -> (key, fn), fn kept alive
        self._blobs: dict[int, bytes] = {}  # key -> pickled function
        self._sent: dict[int, set[int]] = {w: set() for w in self._workers}
        self._keys = itertools.count()
        self._resources = itertools.count()
        self._thread: threading.Thread | None = None

    # -- scheduling ----------------------------------------------------------------------------

    def _function_key(self, fn: Callable[..., Any]) -> int:
        entry = self._functions.get(id(fn))
        if entry is None:
            try:
                blob = cloudpickle.dumps(fn)
            except Exception as exc:
                raise TypeError(f"cannot send function {fn!r} to the workers: {exc}") from exc
            entry = (next(self._keys), fn)  # keep fn alive: its id stays unique
            self._functions[id(fn)] = entry
            self._blobs[entry[0]] = blob
        return entry[0]

    def _closure(self, fn: Callable[..., Any], args: Any, kwargs: Any, worker: int | None):
        if not callable(fn):
            raise TypeError(f"schedule needs a callable, got {type(fn).__name__}")
        args = tuple(args or ())
        kwargs = dict(kwargs or {})
        for leaf in flatten((args, kwargs)):
            if isinstance(leaf, RemoteValue):
                raise TypeError(
                    "a RemoteValue cannot be passed to a scheduled function: call .fetch() on "
                    "the coordinator and pass the value"
                )
        key = self._function_key(fn)
        try:
            blob = cloudpickle.dumps((args, kwargs))
        except Exception as exc:
            raise TypeError(f"cannot send the arguments of {fn!r} to the workers: {exc}") from exc
        return _Closure(key, blob, worker)

    def schedule(
        self, fn: Callable[..., Any], args: Any = None, kwargs: dict[str, Any] | None = None
    ) -> RemoteValue:
        """Queue ``fn(*args, **kwargs)`` for some worker; returns at once.

        Raises:
            The pending error of an earlier function (once; queued functions are cancelled).
            TypeError: ``fn`` or its arguments cannot be sent (e.g. a `RemoteValue` argument).
        """
        self._raise_if_error()
        closure = self._closure(fn, args, kwargs, None)
        with self._cond:
            self._queue.append(closure)
            self._cond.notify_all()
        self._start()
        return closure.remote_value

    def join(self) -> None:
        """Wait until every scheduled function has run.

        Raises:
            The first error of a scheduled function (once; queued functions are cancelled).
        """
        with self._cond:
            self._cond.wait_for(lambda: self._error is not None or self._idle())
        self._raise_if_error()

    def done(self) -> bool:
        """Whether every scheduled function has run (raises a pending error, once)."""
        self._raise_if_error()
        with self._cond:
            return self._idle()

    def fetch(self, value: Any) -> Any:
        """``value`` with every `RemoteValue` fetched and every variable read."""

        def leaf(v: Any) -> Any:
            if isinstance(v, RemoteValue):
                return v.fetch()
            if isinstance(v, PerWorkerValues):
                return tuple(r.fetch() for r in v._values)
            if isinstance(v, Variable):
                return v.read_value()
            return v

        return map_structure(leaf, value)

    def create_per_worker_dataset(self, dataset_fn: Any) -> PerWorkerDataset:
        """Build a dataset on every worker from ``dataset_fn`` (blocks until all are built).

        Args:
            dataset_fn: A function of no argument (or of an `InputContext`) returning a dataset,
                or a dataset (each worker gets a copy).

        Raises:
            The error of ``dataset_fn`` on a worker (e.g. creating variables in it).
        """
        if not callable(dataset_fn):
            data = dataset_fn
            dataset_fn = functools.partial(lambda d: d, data)
        build = functools.partial(_call_dataset_fn, dataset_fn)
        return PerWorkerDataset(self, self._create_per_worker_resources(build, dataset_fn=True))

    def _create_per_worker_resources(self, build: Any, dataset_fn: bool) -> PerWorkerValues:
        self._raise_if_error()
        resource = next(self._resources)
        fn = functools.partial(_store_resource, resource, build, dataset_fn)
        closures = [self._closure(fn, (), {}, w) for w in self._workers]
        with self._cond:
            for w, c in zip(self._workers, closures, strict=True):
                self._targeted[w].append(c)
            self._cond.notify_all()
        self._start()
        for c in closures:
            c.remote_value._event.wait()
        self._blobs.pop(self._functions.pop(id(fn))[0], None)
        for c in closures:
            c.remote_value.fetch()  # the first worker's error, if any
        return PerWorkerValues(resource, tuple(c.remote_value for c in closures))

    # -- errors --------------------------------------------------------------------------------

    def _idle(self) -> bool:
        return not self._queue and not self._inflight and not any(self._targeted.values())

    def _raise_if_error(self) -> None:
        with self._cond:
            if self._error is None:
                return
            self._cond.wait_for(lambda: not self._inflight)  # running functions finish
            self._cancel_queued()
            error, self._error = self._error, None
        raise error

    def _cancel_queued(self) -> None:
        while self._queue:
            self._queue.popleft().remote_value._fail(
                CancelledError("cancelled: an earlier scheduled function failed")
            )

    # -- the dispatcher thread -----------------------------------------------------------------

    def _start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._dispatch, name="hpcdist-coordinator", daemon=True
            )
            self._thread.start()

    def _stop(self) -> None:
        """Cancel queued functions, let running ones finish, stop the dispatcher."""
        with self._cond:
            self._cancel_queued()
            self._stopping = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join()

    def _next_for(self, worker: int) -> _Closure | None:
        if self._targeted[worker]:
            return self._targeted[worker].popleft()
        if self._error is not None or self._stopping:
            return None
        for i, closure in enumerate(self._queue):
            if closure.avoid != worker or len(self._workers) == 1:
                del self._queue[i]
                return closure
        return None

    def _send(self, worker: int, closure: _Closure) -> None:
        sent = self._sent[worker]
        blob = None if closure.key in sent else self._blobs[closure.key]
        sent.add(closure.key)
        self._rt.send_command(worker, ("run", closure.key, blob, closure.args))

    def _receive(self, worker: int, reply: bytes) -> None:
        kind, payload, remote_tb = pickle.loads(reply)
        with self._cond:
            closure = self._inflight.pop(worker)
            if kind == "ok":
                closure.remote_value._set(payload)
            elif isinstance(payload, WorkerPreemptedError):
                closure.avoid = worker  # at-least-once: run it again, elsewhere
                if closure.worker is None:
                    self._queue.appendleft(closure)
                else:
                    self._targeted[worker].appendleft(closure)
            else:
                index = self._workers.index(worker)
                if remote_tb:
                    payload.add_note(f"raised on worker {index} (rank {worker}):\n{remote_tb}")
                closure.remote_value._fail(payload)
                if closure.worker is None and self._error is None:
                    self._error = payload
            self._cond.notify_all()

    def _dispatch(self) -> None:
        idle = 0
        while True:
            got = False
            while (result := self._rt.poll_result()) is not None:
                self._receive(*result)
                got = True
            with self._cond:
                if self._stopping and not self._inflight and not any(self._targeted.values()):
                    return
                sends = []
                for worker in self._workers:
                    if worker not in self._inflight:
                        closure = self._next_for(worker)
                        if closure is not None:
                            self._inflight[worker] = closure
                            sends.append((worker, closure))
                if not sends and not got and not self._inflight:
                    self._cond.wait(timeout=0.05)  # nothing running: wait for schedule()
                    continue
            for worker, closure in sends:
                self._send(worker, closure)
            if got or sends:
                idle = 0
            else:
                idle += 1
                if idle > 50:
                    time.sleep(min(5e-4, 1e-5 * (idle - 50)))
