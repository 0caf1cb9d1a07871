"""`ClusterCoordinator`: schedule functions on the workers of a `ParameterServerStrategy`.

``schedule(fn, args, kwargs)`` queues a closure and returns a `RemoteValue` at once. One pass
at a time of the **dispatch loop** sends queued closures to idle workers and receives results,
driven by the thread that schedules (an idle worker gets the function at once), by a thread
waiting in ``fetch``/``join`` (for up to `PUMP_SECONDS` without progress, then it sleeps on a
condition), else by the dispatcher thread, asleep while a user thread drives or nothing is
pending (woken by `schedule` and, in a fault-tolerant job, by each join or death). Short
functions travel in **batches** (`hpcdist.strategies.ps.functions.take_batch`): one message
carries several closures to a worker, one message all their results back.
Functions travel with cloudpickle, once per worker; arguments are pickled when scheduled (none:
nothing pickled). Variables travel as handles (`hpcdist.strategies.ps.variables`).

Error contract (TF's): each `RemoteValue` gets its own function's result or error; the first
error of a scheduled function (other than `WorkerPreemptedError`, which re-runs the function on
another worker: at-least-once) is raised once, by the next `schedule`, `join` or `done`; at that
point functions still queued are cancelled (their `RemoteValue` raises `CancelledError`),
functions already sent (the rest of a batch too) finish, and the error is cleared.

Threads: ``_lock`` guards the loop's state and MPI calls; reads outside it are hints, re-checked.

Liveness (`hpcdist.strategies.ps.liveness`), checked every `CHECK_SECONDS`: a function running
longer than ``HPCDIST_STALL_WARNING_SECONDS`` is named in a warning; past
``HPCDIST_TIMEOUT_SECONDS`` it fails with `DeadlineExceededError` (an error like any other under
the contract above) and its worker is not used again. A worker gives back the functions of its
batch behind one that runs long (`hpcdist.strategies.ps.runtime.WATCH_SECONDS`), and they are
queued again at the front; those still unanswered at the deadline too (a stopped process).
"""

from __future__ import annotations

import collections
import functools
import itertools
import pickle
import threading
import time
from collections.abc import Callable
from typing import Any

from hpcdist import timeline
from hpcdist.errors import CancelledError, WorkerPreemptedError
from hpcdist.settings import get_settings
from hpcdist.strategies.ps.functions import FunctionCache, WorkerFunctions, finished, take_batch
from hpcdist.strategies.ps.liveness import Liveness, Running
from hpcdist.strategies.ps.rejoin import Rejoins, fail_all, fail_each, requeue, take_back
from hpcdist.strategies.ps.remote_values import (
    Closure,
    PerWorkerDataset,
    PerWorkerIterator,
    PerWorkerValues,
    RemoteValue,
    RemoteValueStatus,
    call_dataset_fn,
    fetch_structure,
    store_resource,
)
from hpcdist.strategies.ps.runtime import coordinator_runtime
from hpcdist.strategies.ps.strategy import ParameterServerStrategy

__all__ = [
    "CHECK_SECONDS",
    "PUMP_SECONDS",
    "ClusterCoordinator",
    "PerWorkerDataset",
    "PerWorkerIterator",
    "PerWorkerValues",
    "RemoteValue",
    "RemoteValueStatus",
]

#: How long a thread waiting for a result drives the dispatch loop itself without progress
#: before it sleeps until the dispatcher thread wakes it.
PUMP_SECONDS = 2e-3
#: How often the dispatch loop looks for stalled functions and deadlines.
CHECK_SECONDS = 1e-2
#: The dispatcher thread stays asleep while a user thread drove the loop this recently.
DRIVE_SECONDS = 2e-3
#: Passes without progress before the dispatcher thread sleeps between passes.
SPIN_PASSES = 50
#: While every worker is busy, `schedule` looks for results at most this often.
POLL_SECONDS = 5e-5
#: Sleeping threads are woken by every change; they also look after this long (a safety net).
SAFETY_SECONDS = 1.0


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
        rt = coordinator_runtime()
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
        self.strategy, self._rt = strategy, rt
        workers = list(rt.roles.workers)
        self._lock = threading.Lock()  # one pass at a time; needed for all but queue appends
        self._changed = threading.Condition(threading.Lock())  # values resolved (to sleepers)
        self._waiting = 0
        self._queue: collections.deque[Closure] = collections.deque()
        self._targeted = {w: collections.deque[Closure]() for w in workers}
        self._targeted_count = 0
        self._inflight: dict[int, Running] = {}
        self._error: BaseException | None = None
        self._stopping = False  # the job ends
        self._functions = FunctionCache()
        self._held = {w: WorkerFunctions() for w in workers}
        settings = get_settings()
        self._liveness = Liveness(workers, settings.timeout_seconds, settings.stall_warning_seconds)
        self._rejoins = Rejoins(workers, rt.present_workers())  # fault-tolerant jobs
        self._live = self._live_workers()
        self._checked = time.monotonic()
        self._resources = itertools.count()
        self._thread: threading.Thread | None = None
        self._driving = 0  # user threads driving the loop now
        self._driven = self._polled = 0.0  # when a user thread last drove it, polled
        self._wake = threading.Event()  # wakes the dispatcher thread
        self._asleep = False
        rt.on_membership_change(self._wake.set)  # a worker joined or died: take it in now

    # -- scheduling ----------------------------------------------------------------------------

    def schedule(
        self, fn: Callable[..., Any], args: Any = None, kwargs: dict[str, Any] | None = None
    ) -> RemoteValue:
        """Queue ``fn(*args, **kwargs)`` for some worker; returns at once.

        Raises:
            The pending error of an earlier function (once; queued functions are cancelled).
            TypeError: ``fn`` or its arguments cannot be sent (e.g. a `RemoteValue` argument).
            UnavailableError: Every worker was lost to a deadline.
        """
        if self._error is not None:
            self._raise_if_error()
        if not self._live and not self._rejoins.absent:  # absent workers may come back
            raise self._liveness.unavailable(f"cannot schedule {fn!r}")
        closure = Closure.make(self._functions.entry, fn, args, kwargs, None, self._wait_for)
        self._queue.append(closure)
        if self._thread is None:
            self._start()
        elif self._asleep:
            self._wake.set()
        self._driven = now = time.perf_counter()
        # An idle worker gets it now, from this thread; with every worker busy, look for their
        # results only every POLL_SECONDS.
        if len(self._inflight) < len(self._live) or now - self._polled > POLL_SECONDS:
            self._polled = now
            self._progress()
        return closure.remote_value

    def join(self) -> None:
        """Wait until every scheduled function has run.

        Raises:
            The first error of a scheduled function (once; queued functions are cancelled).
        """
        self._wait_for(lambda: self._error is not None or self._idle())
        self._raise_if_error()

    def done(self) -> bool:
        """Whether every scheduled function has run (raises a pending error, once)."""
        self._progress()
        self._raise_if_error()
        return self._idle()

    def fetch(self, value: Any) -> Any:
        """``value`` with every `RemoteValue` fetched and every variable read."""
        return fetch_structure(value)

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
        build = functools.partial(call_dataset_fn, dataset_fn)
        return PerWorkerDataset(self, self.create_per_worker_resources(build, dataset_fn=True))

    def create_per_worker_resources(self, build: Any, dataset_fn: bool) -> PerWorkerValues:
        """Run ``build()`` on every live worker; each keeps its result (blocks until built).

        Args:
            build: Builds one worker's resource (a dataset, an iterator).
            dataset_fn: ``build`` runs a ``dataset_fn`` (where creating variables is an error).

        Raises:
            The error of ``build`` on a worker.
            UnavailableError: Every worker was lost to a deadline.
        """
        self._raise_if_error()
        resource = next(self._resources)
        fn = functools.partial(store_resource, resource, build, dataset_fn)
        with self._lock:
            workers = list(self._live)  # a lost worker gets no function: it needs none
            if not workers and not self._rejoins.absent:
                raise self._liveness.unavailable("cannot create per-worker resources")
            closures = [
                Closure.make(self._functions.entry, fn, (), {}, w, self._wait_for) for w in workers
            ]
            if self._rt.fault_tolerant:  # a worker that joins later builds it then
                self._rejoins.record(fn)
            del fn  # single job: its pickle travels with the closures, then is forgotten
            for w, c in zip(workers, closures, strict=True):
                self._targeted[w].append(c)
            self._targeted_count += len(closures)
        if self._thread is None:
            self._start()
        self._wait_for(lambda: all(c.remote_value.is_ready() for c in closures))
        for c in closures:
            c.remote_value.fetch()  # the first worker's error, if any
        return PerWorkerValues(resource, tuple(c.remote_value for c in closures))

    # -- waiting and errors --------------------------------------------------------------------

    def _idle(self) -> bool:
        with self._lock:  # a pass moves closures from the queue to a worker: see it done
            return not self._queue and not self._inflight and not self._targeted_count

    def _has_work(self) -> bool:  # whether a pass may have something to receive, send or admit
        if self._inflight or self._targeted_count or (self._queue and self._error is None):
            return True
        return self._rt.membership_pending()  # a worker joined or died (a fault-tolerant job)

    def _wait_for(self, ready: Callable[[], bool]) -> None:
        """Return once ``ready()``: drive the loop from this thread, then sleep until a change."""
        if ready():
            return
        with self._changed:
            self._driving += 1
        try:
            last = time.perf_counter()
            while not ready():
                if self._progress():
                    last = time.perf_counter()
                elif time.perf_counter() - last > PUMP_SECONDS:
                    break
        finally:
            with self._changed:
                self._driving -= 1
        if ready():
            self._driven = time.perf_counter()
            return
        self._driven = 0.0
        self._wake.set()  # the dispatcher thread drives from now on
        while not ready():
            with self._changed:
                self._waiting += 1
                woke = ready() or self._changed.wait(SAFETY_SECONDS)
                self._waiting -= 1
            if not woke:
                self._progress()  # in case no thread drives

    def _notify(self) -> None:
        if self._waiting:
            with self._changed:
                self._changed.notify_all()

    def _raise_if_error(self) -> None:
        if self._error is None:
            return
        self._wait_for(lambda: not self._inflight)  # functions already sent finish
        with self._lock:
            error, self._error = self._error, self._rt.fatal  # a dead ps: raised every time
            if error is not None:
                self._cancel_queued()
        self._notify()
        if error is not None:
            raise error

    def _cancel_queued(self) -> None:
        message = "cancelled: an earlier scheduled function failed"
        fail_each(self._queue, lambda: CancelledError(message))

    def _fail(self, closure: Closure, error: BaseException) -> None:
        """Fail one closure; the first failure of a scheduled one is raised by join."""
        closure.remote_value.set_error(error)
        if closure.worker is None and self._error is None:
            self._error = error

    # -- the dispatch loop ---------------------------------------------------------------------

    def _progress(self) -> bool:
        """One pass of the dispatch loop, unless another thread is in one; whether it did work.

        Receives every result that arrived, takes in the workers that joined or died (a
        fault-tolerant job), forgets dead functions, checks deadlines (every `CHECK_SECONDS`),
        and sends a batch to each idle worker.
        """
        if not self._lock.acquire(blocking=False):
            return False
        try:
            changed = False
            poll = self._rt.poll_result
            while (result := poll()) is not None:
                self._receive(*result)
                changed = True
            if self._rt.fault_tolerant:
                changed = self._membership() or changed
            for key in self._functions.drain_dead():
                for held in self._held.values():
                    held.drop(key)
            if self._inflight:
                now = time.monotonic()
                if now - self._checked > CHECK_SECONDS:
                    self._checked = now
                    changed = self._check_running() or changed
            sent = (self._queue or self._targeted_count) and self._assign()
        finally:
            self._lock.release()
        if changed:
            self._notify()
        return changed or bool(sent)

    def _live_workers(self) -> list[int]:
        return [w for w in self._liveness.live() if w not in self._rejoins.absent]

    def _membership(self) -> bool:
        """Take in joined and dead workers (with the lock; `hpcdist.strategies.ps.rejoin`)."""
        changes = self._rt.membership_changes()
        for kind, w in changes:
            if kind == "ps_dead":  # the job cannot go on: every later call raises it
                self._error, self._targeted_count = self._rt.fatal, 0
                fail_all(self._rt.fatal, self._inflight, self._targeted, self._queue)
            elif kind == "dead":
                self._rejoins.absent.add(w)
                closures = getattr(self._inflight.pop(w, None), "closures", ())
                self._targeted_count -= take_back(closures, self._targeted[w], self._queue)
                self._held[w] = WorkerFunctions()
                self._rt.lost.pop(w, None)
                self._liveness.forget(w)
            else:
                builds = self._rejoins.joined(w, self._functions.entry, self._wait_for)
                self._targeted[w].extend(builds)
                self._targeted_count += len(builds)
        if changes:
            self._live = self._live_workers()
        return bool(changes)

    def _assign(self) -> bool:
        """Send a batch to each idle live worker that has work (with the lock)."""
        sent = False
        for worker in self._live:
            if worker in self._inflight:
                continue
            targeted = self._targeted[worker]
            if targeted:
                batch = [targeted.popleft()]
                self._targeted_count -= 1
            elif self._error is not None or self._stopping:
                continue
            else:
                batch = take_batch(self._queue, worker, len(self._live))
                if not batch:
                    continue
            self._send(worker, batch)
            sent = True
        return sent

    def _send(self, worker: int, batch: list[Closure]) -> None:
        held = self._held[worker]
        items = []
        sent = timeline.now() if timeline.active() else 0.0
        for closure in batch:
            blob, forget = held.message(closure.function)
            items.append((closure.function.key, blob, closure.args, forget))
            closure.sent = sent
        try:
            self._rt.send_command(worker, ("batch", items))
        except Exception as exc:  # not sent: the functions fail, the worker holds none of them
            for closure in batch:
                held.drop(closure.function.key)
                self._fail(closure, exc)
            return
        self._inflight[worker] = Running(batch)

    def _receive(self, worker: int, reply: bytes) -> None:
        results, given_back = pickle.loads(reply)
        if worker in self._liveness.lost:  # its batch failed at the deadline already
            if self._liveness.answered(worker, len(results) + given_back):
                self._rt.lost.pop(worker, None)
            return
        batch = self._inflight[worker]
        closures, again = batch.closures, []
        for kind, payload, remote_tb, seconds in results:
            closure = closures.popleft()
            finished(closure, worker, kind, seconds)
            if kind == "ok":
                closure.remote_value.set_value(payload)
            elif isinstance(payload, WorkerPreemptedError):
                closure.avoid = worker  # at-least-once: run it again, elsewhere
                again.append(closure)
            else:
                if remote_tb:
                    payload.add_note(f"raised on {self._liveness.who(worker)}:\n{remote_tb}")
                self._fail(closure, payload)
        again += reversed([closures.pop() for _ in range(given_back)])  # not run: queued again
        self._targeted_count += requeue(again, self._queue, self._targeted[worker])
        if closures:
            batch.started()
        else:
            del self._inflight[worker]

    def _check_running(self) -> bool:
        """Warn about stalled functions; fail those past the deadline, drop their workers.

        (Under ``hpcdist run --workers``, `rt.hung`: killed, replaced, functions requeued.)
        """
        overdue = self._liveness.overdue(self._inflight)
        for worker, error in overdue:
            if self._rt.hung(worker):  # killed and restarted: its functions go back on death
                continue
            self._rt.lost[worker] = self._liveness.lost[worker]
            closures = self._inflight.pop(worker).closures
            self._liveness.unanswered[worker] = len(closures)
            self._fail(closures.popleft(), error)
            if closures:  # not started yet, or done but unanswered: run them elsewhere
                self._queue.extendleft(reversed(closures))
                self._rt.cancel(worker)
            self._targeted_count -= fail_each(self._targeted[worker], lambda e=error: e)
            self._live = self._live_workers()
            if not self._live and not self._rejoins.absent:
                make = functools.partial(self._liveness.unavailable, "cannot run a queued function")
                fail_each(self._queue, make)
        return bool(overdue)

    # -- the dispatcher thread -----------------------------------------------------------------

    def _start(self) -> None:
        with self._lock:
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
        with self._lock:
            self._cancel_queued()
            self._stopping = True
        self._notify()
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
        self._liveness.end_job(self._rt.poll_result, self._rt.rank)

    def _dispatch(self) -> None:
        idle = 0
        while True:
            if self._stopping and not self._inflight and not self._targeted_count:
                return
            if not self._has_work():
                self._asleep = True  # then look again: `schedule` reads it after appending
                if not self._has_work():
                    self._wake.wait(SAFETY_SECONDS)
                self._asleep = False
                self._wake.clear()
            elif self._driving or time.perf_counter() - self._driven < DRIVE_SECONDS:
                self._wake.wait(DRIVE_SECONDS)  # a user thread drives the loop
                self._wake.clear()
                idle = 0
            elif self._progress():
                idle = 0
            else:
                idle += 1
                if idle > SPIN_PASSES:
                    time.sleep(min(5e-4, 1e-5 * (idle - SPIN_PASSES)))
