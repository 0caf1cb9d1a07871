"""The parameter-server runtime of one rank: roles, communicators, and the serve loop.

A `ParameterServerStrategy` job has one **coordinator** (it runs the user's program), **ps**
ranks (they expose the variables' memory) and **workers** (they run scheduled functions). Every
rank holds one `_Runtime`: the control communicator, the RMA segments (`RmaStore`) and the
caches a worker keeps between scheduled functions.

Messages on the control communicator, in full in docs/parameter-server.md: ``TAG_COMMAND``
(``("segment", sizes)``, ``("batch", items)``, ``("run", *item)``, ``("stop",)``); ``TAG_RESULT``,
a batch's ``(results, given_back)``, sent at its end or, when an item runs past `WATCH_SECONDS`,
by a thread that gives back the items after it; ``TAG_CANCEL``: give back the rest of a batch.
`serve`, the loop of a ps or worker rank, answers commands until ``stop`` and returns.
"""

from __future__ import annotations

import contextlib
import itertools
import pickle
import signal
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import cloudpickle
import numpy as np
from mpi4py import MPI

from hpcdist import timeline
from hpcdist.core.autodiff import Tensor
from hpcdist.core.variables import Variable
from hpcdist.data.nest import map_structure
from hpcdist.errors import ClusterConfigError, OutOfRangeError, UnavailableError
from hpcdist.settings import get_settings
from hpcdist.strategies.values import DistributedValues

__all__ = [
    "SPIN_SECONDS",
    "TAG_CANCEL",
    "TAG_COMMAND",
    "TAG_RESULT",
    "WATCH_SECONDS",
    "coordinator_only",
    "creating_dataset",
    "has_runtime",
    "install_runtime",
    "is_creating_dataset",
    "runtime",
    "serve",
]

TAG_COMMAND = 71
TAG_RESULT = 72
TAG_CANCEL = 73
#: A worker whose batch item runs longer than this sends the results the batch has so far.
WATCH_SECONDS = 0.05
#: How long a ps or worker rank keeps probing for the next command without sleeping.
SPIN_SECONDS = 5e-4
_PLAIN = (int, float, bool, str, bytes, type(None), np.ndarray, np.generic)  # sent as they are

_runtime: _Runtime | None = None
_creating = threading.local()


def runtime() -> _Runtime:
    """This process's parameter-server runtime.

    Raises:
        RuntimeError: No `ParameterServerStrategy` was created in this process.
    """
    if _runtime is None:
        raise RuntimeError("no ParameterServerStrategy was created in this process")
    return _runtime


def coordinator_only() -> bool:
    """Whether this process is a parameter-server job's coordinator (no collectives allowed)."""
    return _runtime is not None and _runtime.is_coordinator


def has_runtime() -> bool:
    """Whether this process created a `ParameterServerStrategy` (and so has a runtime)."""
    return _runtime is not None


def install_runtime(
    strategy: Any, comm: Any, roles: _Roles, store: Segments, allocator: Any
) -> _Runtime:
    """Create this process's runtime (once per process) and make `runtime` return it.

    Args:
        strategy: The `ParameterServerStrategy` of this process.
        comm: A private communicator over every rank of the job (the runtime frees it).
        roles: Who is who in ``comm``.
        store: This rank's RMA segments (`hpcdist.strategies.ps.store.RmaStore`).
        allocator: The coordinator's placement of variables in segments
            (`hpcdist.strategies.ps.store.SegmentAllocator`).

    Raises:
        RuntimeError: This process already has a runtime.
    """
    global _runtime
    if _runtime is not None:
        raise RuntimeError("a job can create one ParameterServerStrategy")
    timeline.start_from_environment()
    _runtime = _Runtime(strategy, comm, roles, store, allocator)
    return _runtime


@contextlib.contextmanager
def creating_dataset() -> Iterator[None]:
    """Mark this thread as running a ``dataset_fn`` (where creating variables is an error)."""
    previous = getattr(_creating, "dataset_fn", False)
    _creating.dataset_fn = True
    try:
        yield
    finally:
        _creating.dataset_fn = previous


def is_creating_dataset() -> bool:
    """Whether this thread is inside `creating_dataset`."""
    return getattr(_creating, "dataset_fn", False)


class Segments(Protocol):
    """What the runtime needs of the RMA segments (`hpcdist.strategies.ps.store.RmaStore`)."""

    comm: Any

    def create_segment(self, sizes: list[int]) -> int:
        """Collective: a new segment where ps ``i`` exposes ``sizes[i]`` bytes; its index."""
        ...

    def free(self) -> None:
        """Collective: release every segment."""
        ...


class _Roles:
    """Which rank is the coordinator, which are ps and workers (same on every rank).

    Args:
        coordinator: Rank of the coordinator.
        ps: Ranks of the parameter servers, by ps index.
        workers: Ranks of the workers, by worker index.
        size: Number of ranks in the job.
        jobs: Number of tasks of each job name (for messages); by default counted from the
            other arguments.
    """

    def __init__(
        self,
        coordinator: int,
        ps: list[int],
        workers: list[int],
        size: int,
        jobs: dict[str, int] | None = None,
    ) -> None:
        self.coordinator = coordinator
        self.ps = list(ps)
        self.workers = list(workers)
        self.others = [r for r in range(size) if r != coordinator]
        self.jobs = (
            jobs if jobs is not None else {"chief": 1, "ps": len(ps), "worker": len(workers)}
        )

    @classmethod
    def from_tasks(cls, tasks: list[tuple[str, int]]) -> _Roles:
        """The roles of a job whose rank ``r`` runs task ``tasks[r]`` (``(job name, index)``).

        Raises:
            ClusterConfigError: Fewer than 3 ranks, two ranks with the same task, not exactly
                one ``chief``, or no ``ps`` or ``worker`` task.
        """
        if len(tasks) < 3:
            raise ClusterConfigError(
                f"ParameterServerStrategy needs at least 3 ranks (a coordinator, a ps and a "
                f"worker), got {len(tasks)}: launch with e.g. `HPCDIST_NUM_PS=1 mpiexec -n 3`"
            )
        seen: dict[tuple[str, int], int] = {}
        for rank, task in enumerate(tasks):
            if task in seen:
                raise ClusterConfigError(
                    f"ranks {seen[task]} and {rank} both claim task {task[0]}:{task[1]}"
                )
            seen[task] = rank
        by_role: dict[str, list[tuple[int, int]]] = {}
        for rank, (role, index) in enumerate(tasks):
            by_role.setdefault(role, []).append((index, rank))
        jobs = {role: len(v) for role, v in sorted(by_role.items())}
        num_ps = get_settings().num_ps
        if num_ps is None:
            fix = (
                "set HPCDIST_NUM_PS=<n> (rank 0 coordinates, ranks 1..n are ps) or give the "
                "resolver jobs={'chief': 1, 'ps': n, 'worker': m}"
            )
        else:
            fix = (
                f"HPCDIST_NUM_PS={num_ps} applies only to resolvers built without jobs; give "
                f"this resolver jobs={{'chief': 1, 'ps': {num_ps}, 'worker': m}}"
            )
        chief = by_role.get("chief", [])
        if len(chief) != 1:
            raise ClusterConfigError(
                "ParameterServerStrategy needs exactly one chief task (the coordinator), got "
                f"jobs {jobs}; {fix}"
            )
        for role in ("ps", "worker"):
            if not by_role.get(role):
                raise ClusterConfigError(
                    f"ParameterServerStrategy needs at least one {role} task, got jobs {jobs} "
                    f"({len(tasks)} ranks); {fix}"
                )
        return cls(
            chief[0][1],
            [rank for _, rank in sorted(by_role["ps"])],
            [rank for _, rank in sorted(by_role["worker"])],
            len(tasks),
            jobs,
        )


class _Runtime:
    """Communicators, RMA segments and caches of one rank of a parameter-server job.

    Args:
        strategy: The strategy scheduled functions run under, and the one unpickled ones get.
        comm: A private communicator over every rank of the job (freed when the job ends).
        roles: Who is who in ``comm``.
        store: This rank's RMA segments over a communicator of its own (freed with it).
        allocator: Where variables go in the segments (used on the coordinator).
    """

    def __init__(
        self, strategy: Any, comm: Any, roles: _Roles, store: Segments, allocator: Any
    ) -> None:
        self.strategy, self.roles, self.ctrl = strategy, roles, comm
        self.rank = comm.Get_rank()
        self.is_coordinator = self.rank == roles.coordinator
        self.store = store
        self.allocator = allocator
        self.send_lock = threading.Lock()
        self.variables: dict[int, Any] = {}  # uid -> variable (workers: rebuilt ones)
        self.functions: dict[int, Any] = {}  # workers: function key -> function (bounded)
        self.resources: dict[int, Any] = {}  # workers: per-worker datasets and iterators
        self._uids = itertools.count()
        self._next_ps = 0
        self._shutdown_hooks: list[Callable[[], None]] = []
        self.cluster_coordinator: Any = None  # coordinator: its ClusterCoordinator, once made
        self.lost: dict[int, str] = {}  # coordinator: stuck worker rank -> its function's name
        self._status = MPI.Status()
        self.closed = False
        self._results, self._back, self._end, self._running = None, 0, 0, 0  # with _reply_lock
        self._item_start, self._reply_lock, self._watchdog = 0.0, threading.Lock(), None

    # -- coordinator --------------------------------------------------------------------------

    def command(self, message: tuple[Any, ...]) -> None:
        """Send a command to every other rank."""
        with self.send_lock:
            for rank in self.roles.others:
                self.ctrl.send(message, dest=rank, tag=TAG_COMMAND)

    def send_command(self, rank: int, message: tuple[Any, ...]) -> None:
        """Send a command to one rank."""
        with self.send_lock:
            self.ctrl.send(message, dest=rank, tag=TAG_COMMAND)

    def poll_result(self) -> tuple[int, bytes] | None:
        """``(worker rank, pickled reply)`` that arrived, or None (one thread at a time)."""
        if not self.ctrl.Iprobe(source=MPI.ANY_SOURCE, tag=TAG_RESULT, status=self._status):
            return None
        source = self._status.Get_source()
        return source, self.ctrl.recv(source=source, tag=TAG_RESULT)

    def new_uid(self) -> int:
        """A fresh variable identity."""
        return next(self._uids)

    def place(self, nbytes: int) -> tuple[int, int, int]:
        """``(segment, ps, offset)`` for a new variable: ps chosen round-robin."""
        ps = self._next_ps
        self._next_ps = (ps + 1) % len(self.roles.ps)
        placed = self.allocator.place(ps, nbytes)
        if placed is None and self.lost:
            stuck = ", ".join(f"rank {r} in {name}" for r, name in self.lost.items())
            raise UnavailableError(
                f"a new variable of {nbytes} bytes needs a new RMA segment, which every rank "
                f"creates together, but worker(s) {stuck} are stuck past their deadline; "
                "create variables before scheduling functions"
            )
        if placed is None:
            sizes = self.allocator.new_segment_sizes(ps, nbytes)
            self.command(("segment", sizes))
            segment = self.store.create_segment(sizes)
            self.allocator.add_segment(segment, sizes)
            placed = self.allocator.place(ps, nbytes)
            assert placed is not None
        return placed[0], ps, placed[1]

    def add_shutdown_hook(self, hook: Callable[[], None]) -> None:
        """Call ``hook()`` first in `shutdown` (e.g. to finish scheduled work)."""
        self._shutdown_hooks.append(hook)

    def shutdown(self) -> None:
        """Coordinator: finish scheduled work, release every rank, free the windows."""
        if self.closed:
            return
        for hook in self._shutdown_hooks:
            hook()
        self.command(("stop",))
        self.close()

    def close(self) -> None:
        """Free the windows and communicators of this rank (collective over the job)."""
        self.closed = True
        self.store.free()
        self.store.comm.Free()
        self.ctrl.Free()

    # -- workers ------------------------------------------------------------------------------

    def run_batch(self, items: list[tuple[Any, ...]], single: bool = False) -> None:
        """Run a ``batch`` (``single``: a ``run``) in order and send the results (see above)."""
        if len(items) > 1 and self._watchdog is None:
            self._watchdog = threading.Thread(target=self._watch, daemon=True)
            self._watchdog.start()
        coordinator, looked = self.roles.coordinator, time.perf_counter()
        self._results, self._end, self._back = [], len(items), 0
        with self.strategy.scope():
            for i, (key, blob, args_blob, forget) in enumerate(items):
                with self._reply_lock:  # the watchdog may have given back the items from here
                    if i >= self._end:
                        break
                    self._running, self._item_start = i, time.perf_counter()
                result = self._run_one(key, blob, args_blob)
                for old in forget:
                    self.functions.pop(old, None)
                with self._reply_lock:
                    self._results.append(result)
                    self._item_start = 0.0
                    if time.perf_counter() - looked > WATCH_SECONDS:
                        looked = time.perf_counter()
                        if self.ctrl.Iprobe(source=coordinator, tag=TAG_CANCEL):
                            self.ctrl.recv(source=coordinator, tag=TAG_CANCEL)
                            self._back, self._end = self._back + self._end - i - 1, i + 1
        for key, blob, _, forget in items[self._end :]:  # given back: hold what the record says
            if blob is not None:
                with contextlib.suppress(Exception):
                    self.functions[key] = cloudpickle.loads(blob)
            for old in forget:
                self.functions.pop(old, None)
        with self._reply_lock:
            self._send_results(single)
            self._results = None

    def _send_results(self, single: bool = False) -> None:
        reply = self._results[0][:3] if single else (self._results, self._back)
        self.ctrl.send(_dumps_results(reply), self.roles.coordinator, TAG_RESULT)
        self._results, self._back = [], 0

    def _watch(self) -> None:
        """Thread: an item runs past `WATCH_SECONDS`: send results so far, give back the rest."""
        while not self.closed:
            time.sleep(WATCH_SECONDS)
            with self._reply_lock:
                late = self._item_start and time.perf_counter() - self._item_start > WATCH_SECONDS
                if self._results is not None and late:
                    self._back += self._end - self._running - 1
                    self._end = self._running + 1
                    if self._results or self._back:
                        self._send_results()

    def _run_one(self, key: int, blob: bytes | None, args_blob: bytes | None) -> tuple:
        """``(kind, value or exception, traceback or None, seconds)`` of one function."""
        start = time.perf_counter()
        try:
            if blob is not None:
                self.functions[key] = cloudpickle.loads(blob)
                start = time.perf_counter()  # the seconds of the call, not of loading it
            fn = self.functions.get(key)
            if fn is None:
                raise RuntimeError(
                    f"{self._who()} was asked to run function #{key} without its pickle and "
                    f"holds no such key (only {len(self.functions)} others): the coordinator's "
                    "record of this worker's functions is wrong"
                )
            args, kwargs = ((), {}) if args_blob is None else pickle.loads(args_blob)
            try:
                if timeline._recorder is None:
                    value = fn(*args, **kwargs)
                else:
                    name = getattr(fn, "__qualname__", type(fn).__name__)
                    with timeline.span("ps", f"run {name}"):
                        value = fn(*args, **kwargs)
            except StopIteration:
                raise OutOfRangeError(
                    f"{self._who()}: an iterator read in the scheduled function is exhausted "
                    "(end of its dataset)"
                ) from None
            except SystemExit as exc:  # leaving would strand the coordinator: report it
                raise RuntimeError(
                    f"a scheduled function called sys.exit({exc.code!r}) on {self._who()}; "
                    "workers keep serving"
                ) from None
            return ("ok", _to_host(value), None, time.perf_counter() - start)
        except Exception as exc:  # sent to the coordinator, raised there (if it unpickles)
            tb, seconds = traceback.format_exc(), time.perf_counter() - start
            with contextlib.suppress(Exception):
                pickle.loads(cloudpickle.dumps(exc))
                return ("error", exc, tb, seconds)
            return ("error", RuntimeError(f"{type(exc).__name__}: {exc}"), tb, seconds)

    def _who(self) -> str:
        return f"worker {self.roles.workers.index(self.rank)} (rank {self.rank})"


def serve(rt: _Runtime | None = None) -> None:
    """Run the coordinator's commands on this ps or worker rank until it stops the job.

    Returns after ``("stop",)``, once this rank's windows and communicators are freed (then
    `ParameterServerStrategy` ends the process). SIGUSR2 (Slurm's preemption warning) is
    ignored on the main thread: the coordinator handles it (checkpoint, then stop every rank).

    Args:
        rt: The runtime to serve; by default this process's (`runtime`).

    Raises:
        RuntimeError: ``rt`` is already closed.
    """
    rt = runtime() if rt is None else rt
    if rt.closed:
        raise RuntimeError(f"serve() on rank {rt.rank}: the job already ended")
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGUSR2, signal.SIG_IGN)
    source = rt.roles.coordinator
    last = time.perf_counter()
    while True:
        if not rt.ctrl.Iprobe(source=source, tag=TAG_COMMAND):
            # Probing keeps MPI progressing. The next command often follows within microseconds:
            # probe for SPIN_SECONDS, then sleep longer and longer, up to 1 ms, between probes.
            quiet = time.perf_counter() - last
            if quiet > SPIN_SECONDS:
                time.sleep(min(1e-3, quiet / 8))
            continue
        message = rt.ctrl.recv(source=source, tag=TAG_COMMAND)
        kind = message[0]
        if kind == "segment":
            rt.store.create_segment(message[1])
        elif kind == "batch":
            rt.run_batch(message[1])
        elif kind == "run":
            rt.run_batch([(*message[1:], ())[:4]], single=True)
        elif kind == "stop":
            while rt.ctrl.Iprobe(source=source, tag=TAG_CANCEL):  # came after its batch ended
                rt.ctrl.recv(source=source, tag=TAG_CANCEL)
            break
        last = time.perf_counter()
    rt.close()


def _to_host(value: Any) -> Any:
    """Plain numpy values of a function's result (tensors and variables read)."""
    if isinstance(value, _PLAIN):
        return value

    def leaf(v: Any) -> Any:
        if isinstance(v, Tensor):
            return v.value
        if isinstance(v, Variable):
            return v.read_value()
        if isinstance(v, DistributedValues):
            return leaf(v.values[0]) if len(v.values) == 1 else tuple(map(leaf, v.values))
        return v

    return map_structure(leaf, value)


def _dumps(message: Any) -> bytes:
    """``pickle`` (fast, C) for plain results; cloudpickle for what only it can send."""
    with contextlib.suppress(Exception):
        return pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return cloudpickle.dumps(message)


def _dumps_results(reply: Any) -> bytes:
    """The pickled reply; a result that cannot be sent becomes its item's error."""
    with contextlib.suppress(Exception):
        return _dumps(reply)
    results = reply[0] if isinstance(reply[0], list) else [reply]
    for i, item in enumerate(results):
        try:
            _dumps(item)
        except Exception as exc:
            error = RuntimeError(f"the result of a scheduled function cannot be sent: {exc}")
            results[i] = ("error", error, traceback.format_exc(), *item[3:])
    return _dumps(reply if isinstance(reply[0], list) else results[0])
