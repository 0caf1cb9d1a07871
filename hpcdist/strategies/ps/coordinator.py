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

Liveness (`hpcdist.strategies.ps.liveness`): a function running longer than
``HPCDIST_STALL_WARNING_SECONDS`` is named in a warning; past ``HPCDIST_TIMEOUT_SECONDS`` it fails
with `DeadlineExceededError` (an error like any other under the contract above) and its worker
is not used again.
"""

from __future__ import annotations

import collections
import functools
import inspect
import itertools
import pickle
import threading
import time
from collections.abc import Callable
from typing import Any

import cloudpickle

from hpcdist import timeline
from hpcdist.core.variables import Variable
from hpcdist.data.nest import flatten, map_structure
from hpcdist.errors import CancelledError, WorkerPreemptedError
from hpcdist.settings import get_settings
from hpcdist.strategies.ps.functions import FunctionCache, FunctionEntry, WorkerFunctions
from hpcdist.strategies.ps.liveness import Liveness, Running
from hpcdist.strategies.ps.remote_values import (
    PerWorkerIterator,
    PerWorkerValues,
    RemoteValue,
    RemoteValueStatus,
)
from hpcdist.strategies.ps.runtime import creating_dataset, runtime
from hpcdist.strategies.ps.strategy import ParameterServerStrategy

__all__ = [
    "PUMP_SECONDS",
    "ClusterCoordinator",
    "PerWorkerDataset",
    "PerWorkerIterator",
    "PerWorkerValues",
    "RemoteValue",
    "RemoteValueStatus",
]


_NO_ARGUMENTS = pickle.dumps(((), {}))

#: How long a thread waiting for a result drives the dispatch loop itself without progress
#: before it sleeps until the dispatcher thread wakes it.
PUMP_SECONDS = 2e-3


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
    __slots__ = ("args", "avoid", "function", "remote_value", "running", "sent", "t0", "worker")

    def __init__(self, function: FunctionEntry, args: bytes, worker: int | None) -> None:
        self.function, self.args, self.worker = function, args, worker
        self.remote_value = RemoteValue()
        self.avoid: int | None = None
        self.running: Running | None = None
        self.t0 = timeline.now()  # scheduled (for the timeline)
        self.sent = 0.0


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
        self._functions = FunctionCache()
        self._held = {w: WorkerFunctions() for w in self._workers}
        settings = get_settings()
        self._liveness = Liveness(
            self._workers, settings.timeout_seconds, settings.stall_warning_seconds
        )
        self._resources = itertools.count()
        self._thread: threading.Thread | None = None
        # One pass of the dispatch loop at a time, by the dispatcher thread or by a user thread
        # waiting for a result (which then needs no thread switch to learn of it).
        self._step_lock = threading.Lock()
        self._pumping = 0  # user threads pumping now (the dispatcher thread then sleeps)

    # -- scheduling ----------------------------------------------------------------------------

    def _closure(self, fn: Callable[..., Any], args: Any, kwargs: Any, worker: int | None):
        if not callable(fn):
            raise TypeError(f"schedule needs a callable, got {type(fn).__name__}")
        function = self._functions.entry(fn)
        if not args and not kwargs:
            blob = _NO_ARGUMENTS
        else:
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
                raise TypeError(
                    f"cannot send the arguments of {fn!r} to the workers: {exc}"
                ) from exc
        closure = _Closure(function, blob, worker)
        closure.remote_value._pump = self._pump
        return closure

    def schedule(
        self, fn: Callable[..., Any], args: Any = None, kwargs: dict[str, Any] | None = None
    ) -> RemoteValue:
        """Queue ``fn(*args, **kwargs)`` for some worker; returns at once.

        Raises:
            The pending error of an earlier function (once; queued functions are cancelled).
            TypeError: ``fn`` or its arguments cannot be sent (e.g. a `RemoteValue` argument).
            UnavailableError: Every worker was lost to a deadline.
        """
        self._raise_if_error()
        if not self._liveness.live():
            raise self._liveness.unavailable(f"cannot schedule {fn!r}")
        closure = self._closure(fn, args, kwargs, None)
        with self._cond:
            self._queue.append(closure)
            self._cond.notify_all()
        self._start()
        self._progress()  # an idle worker gets it now, from this thread
        return closure.remote_value

    def join(self) -> None:
        """Wait until every scheduled function has run.

        Raises:
            The first error of a scheduled function (once; queued functions are cancelled).
        """
        self._pump(lambda: self._error is not None or self._idle())
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
        workers = self._liveness.live()  # a lost worker gets no function: it needs none
        if not workers:
            raise self._liveness.unavailable("cannot create per-worker resources")
        resource = next(self._resources)
        fn = functools.partial(_store_resource, resource, build, dataset_fn)
        closures = [self._closure(fn, (), {}, w) for w in workers]
        del fn  # its pickle travels with the closures; the workers forget it after running
        with self._cond:
            for w, c in zip(workers, closures, strict=True):
                self._targeted[w].append(c)
            self._cond.notify_all()
        self._start()
        for c in closures:
            c.remote_value._event.wait()
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
        """Cancel queued functions, let running ones finish, stop the dispatcher.

        A worker lost to a deadline must have returned for the job to end collectively: it
        is given the deadline once more, then the job is aborted with a message naming it.
        """
        with self._cond:
            self._cancel_queued()
            self._stopping = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join()
        stuck = self._liveness.wait_for_stuck(self._rt.poll_result)
        if stuck:
            who = "; ".join(
                f"{self._liveness.who(r)} is still in {self._liveness.lost[r]}" for r in stuck
            )
            self._rt.abort_job(
                f"the program ended but {who}, past the deadline of "
                f"{self._liveness.timeout:g} s plus {self._liveness.timeout:g} s of grace: "
                "ending the job needs every rank, so it is aborted instead of hanging"
            )

    def _next_for(self, worker: int) -> _Closure | None:
        if self._targeted[worker]:
            return self._targeted[worker].popleft()
        if self._error is not None or self._stopping:
            return None
        for i, closure in enumerate(self._queue):
            if closure.avoid != worker or len(self._liveness.live()) == 1:
                del self._queue[i]
                return closure
        return None

    def _send(self, worker: int, closure: _Closure) -> None:
        blob, forget = self._held[worker].message(closure.function)
        key = closure.function.key
        closure.sent = timeline.now()
        self._rt.send_command(worker, ("run", key, blob, closure.args, forget))

    def _receive(self, worker: int, reply: bytes) -> None:
        with self._cond:
            if worker in self._liveness.lost:  # its function failed at the deadline already
                self._liveness.returned(worker)
                self._rt.lost.pop(worker, None)
                return
        kind, payload, remote_tb = pickle.loads(reply)
        with self._cond:
            closure = self._inflight.pop(worker)
            if timeline._recorder is not None:
                end, name = timeline.now(), closure.function.name
                args = {"worker_rank": worker, "outcome": kind}
                timeline.record("ps", f"queued {name}", closure.t0, closure.sent, args)
                timeline.record("ps", f"remote {name}", closure.sent, end, args)
            if kind == "ok":
                closure.remote_value._set(payload)
            elif isinstance(payload, WorkerPreemptedError):
                closure.avoid = worker  # at-least-once: run it again, elsewhere
                if closure.worker is None:
                    self._queue.appendleft(closure)
                else:
                    self._targeted[worker].appendleft(closure)
            else:
                if remote_tb:
                    who = self._liveness.who(worker)
                    payload.add_note(f"raised on {who}:\n{remote_tb}")
                self._fail(closure, payload)
            self._cond.notify_all()

    def _fail(self, closure: _Closure, error: BaseException) -> None:
        """Fail one closure; the first failure of a scheduled one is raised by join (with lock)."""
        closure.remote_value._fail(error)
        if closure.worker is None and self._error is None:
            self._error = error

    def _check_running(self) -> None:
        """Warn about stalled functions; fail those past the deadline, drop their workers."""
        running = {w: c.running for w, c in self._inflight.items() if c.running is not None}
        for worker, error in self._liveness.overdue(running):
            self._rt.lost[worker] = self._liveness.lost[worker]
            self._fail(self._inflight.pop(worker), error)
            while self._targeted[worker]:
                self._targeted[worker].popleft().remote_value._fail(error)
            if not self._liveness.live():
                while self._queue:
                    self._queue.popleft().remote_value._fail(
                        self._liveness.unavailable("cannot run a queued function")
                    )
            self._cond.notify_all()

    def _forget_dead_functions(self) -> None:
        for key in self._functions.drain_dead():
            for held in self._held.values():
                held.drop(key)

    def _progress(self) -> bool:
        """One pass of the dispatch loop, unless another thread is in one; whether it did work.

        Receives every result that arrived, forgets dead functions, checks deadlines, and sends
        a closure to each idle worker.
        """
        if not self._step_lock.acquire(blocking=False):
            return False
        try:
            got = False
            while (result := self._rt.poll_result()) is not None:
                self._receive(*result)
                got = True
            self._forget_dead_functions()
            with self._cond:
                self._check_running()
                sends = []
                for worker in self._liveness.live():
                    if worker not in self._inflight:
                        closure = self._next_for(worker)
                        if closure is not None:
                            closure.running = Running(closure.function.name)
                            self._inflight[worker] = closure
                            sends.append((worker, closure))
            for worker, closure in sends:
                self._send(worker, closure)
            return got or bool(sends)
        finally:
            self._step_lock.release()

    def _pump(self, done: Callable[[], bool]) -> None:
        """Drive the dispatch loop from this thread until ``done()`` or ``PUMP_SECONDS`` idle.

        A thread waiting for a result receives it itself: no wake-up of the dispatcher thread,
        no hand-over of the interpreter lock between the two. After ``PUMP_SECONDS`` without
        progress the caller falls back to waiting for the dispatcher thread.
        """
        with self._cond:
            self._pumping += 1
        try:
            last = time.perf_counter()
            while not done():
                if self._progress():
                    last = time.perf_counter()
                elif time.perf_counter() - last > PUMP_SECONDS:
                    return
        finally:
            with self._cond:
                self._pumping -= 1

    def _dispatch(self) -> None:
        idle = 0
        while True:
            active = False if self._pumping else self._progress()
            with self._cond:
                if self._stopping and not self._inflight and not any(self._targeted.values()):
                    return
                if self._pumping or (not active and not self._inflight):
                    # nothing running, or a user thread drives the loop: wait for a change
                    self._cond.wait(timeout=0.05 if not self._pumping else 1e-3)
                    continue
            if active:
                idle = 0
            else:
                idle += 1
                if idle > 50:
                    time.sleep(min(5e-4, 1e-5 * (idle - 50)))
