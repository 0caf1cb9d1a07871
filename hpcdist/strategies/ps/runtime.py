"""The parameter-server runtime of one rank: roles, communicators, and the serve loop.

A `ParameterServerStrategy` job has one **coordinator** (it runs the user's program), **ps**
ranks (they expose the variables' memory) and **workers** (they run scheduled functions). Every
rank holds one `_Runtime`: the control communicator, the RMA segments (`RmaStore`) and the
caches a worker keeps between scheduled functions.

The coordinator talks to the other ranks with two message tags on the control communicator:

* ``TAG_COMMAND`` (coordinator to ps/worker): ``("segment", sizes)`` creates an RMA segment
  (collective over the job), ``("run", key, function_blob, args_blob, forget)`` runs a
  scheduled function on a worker (``function_blob`` is None when the worker holds ``key``; it
  drops the functions of the keys in ``forget`` afterwards, see
  `hpcdist.strategies.ps.functions`), ``("stop",)`` ends the job;
* ``TAG_RESULT`` (worker to coordinator): the pickled ``("ok", value, None)`` or
  ``("error", exception, traceback_text)`` of each ``run``.

`serve` is the loop of a ps or worker rank: it answers commands until ``stop`` and returns.
"""

from __future__ import annotations

import contextlib
import itertools
import pickle
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import cloudpickle
from mpi4py import MPI

from hpcdist import timeline
from hpcdist.abort import ABORT_EXIT_CODE
from hpcdist.core.autodiff import Tensor
from hpcdist.core.variables import Variable
from hpcdist.data.nest import map_structure
from hpcdist.errors import ClusterConfigError, OutOfRangeError, UnavailableError
from hpcdist.settings import get_settings
from hpcdist.strategies.values import DistributedValues

__all__ = [
    "SPIN_SECONDS",
    "TAG_COMMAND",
    "TAG_RESULT",
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
#: How long a ps or worker rank keeps probing for the next command without sleeping.
SPIN_SECONDS = 5e-4

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
        strategy: The strategy whose ``scope()`` scheduled functions run under (on workers)
            and which stands for the strategy when one is unpickled.
        comm: A private communicator over every rank of the job (freed when the job ends).
        roles: Who is who in ``comm``.
        store: This rank's RMA segments over a communicator of its own (freed with it).
        allocator: Where variables go in the segments (used on the coordinator).
    """

    def __init__(
        self, strategy: Any, comm: Any, roles: _Roles, store: Segments, allocator: Any
    ) -> None:
        self.strategy = strategy
        self.roles = roles
        self.ctrl = comm
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
        """``(worker rank, pickled reply)`` of a finished function, or None if none arrived.

        Call from one thread only.
        """
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

    def abort_job(self, message: str) -> None:
        """Coordinator: print ``message`` and abort every rank (``MPI_Abort``); no return."""
        sys.stderr.write(f"hpcdist: rank {self.rank}: {message}; aborting all ranks\n")
        sys.stderr.flush()
        sys.stdout.flush()
        time.sleep(0.5)  # let the launcher forward the message before every process is killed
        MPI.COMM_WORLD.Abort(ABORT_EXIT_CODE)

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

    def run(
        self, key: int, blob: bytes | None, args_blob: bytes, forget: tuple[int, ...] = ()
    ) -> None:
        """Run one scheduled function and send back ``("ok", value)`` or ``("error", exc)``.

        Args:
            key: The function's key (never given to another function).
            blob: The pickled function, or None when this worker holds ``key`` already.
            args_blob: The pickled ``(args, kwargs)``.
            forget: Keys whose functions this worker drops after the run (the coordinator
                sends them again when needed).
        """
        try:
            if blob is not None:
                self.functions[key] = cloudpickle.loads(blob)
            fn = self.functions.get(key)
            if fn is None:
                raise RuntimeError(
                    f"worker {self.roles.workers.index(self.rank)} (rank {self.rank}) was asked "
                    f"to run function #{key} without its pickle, and holds no function under "
                    f"that key (it holds {len(self.functions)}): the coordinator's record of "
                    "this worker's functions is wrong"
                )
            args, kwargs = pickle.loads(args_blob)
            traced = (
                timeline.span("ps", f"run {getattr(fn, '__qualname__', type(fn).__name__)}")
                if timeline._recorder is not None
                else contextlib.nullcontext()
            )
            with self.strategy.scope(), traced:
                try:
                    value = fn(*args, **kwargs)
                except StopIteration:
                    raise OutOfRangeError(
                        f"worker {self.roles.workers.index(self.rank)}: an iterator read in the "
                        "scheduled function is exhausted (end of its dataset)"
                    ) from None
                except SystemExit as exc:  # leaving would strand the coordinator: report it
                    raise RuntimeError(
                        f"a scheduled function called sys.exit({exc.code!r}) on worker "
                        f"{self.roles.workers.index(self.rank)}; workers keep serving"
                    ) from None
            reply = _dumps(("ok", _to_host(value), None))
        except Exception as exc:  # sent to the coordinator, raised there
            reply = cloudpickle.dumps(("error", _portable(exc), traceback.format_exc()))
        for old in forget:
            self.functions.pop(old, None)
        self.ctrl.send(reply, dest=self.roles.coordinator, tag=TAG_RESULT)


def serve(rt: _Runtime | None = None) -> None:
    """Run the coordinator's commands on this ps or worker rank until it stops the job.

    Returns after ``("stop",)``, once this rank's windows and communicators are freed. The
    calling process is then done with the job; `ParameterServerStrategy` ends it.

    SIGUSR2 (Slurm's preemption warning) is ignored here when called on the main thread: the
    coordinator handles it (checkpoint, then stop every rank).

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
            # Probing keeps MPI progressing. Right after a command the next one usually follows
            # within microseconds: keep probing for SPIN_SECONDS, then sleep between probes,
            # longer and longer up to 1 ms, so that an idle rank leaves the CPU.
            quiet = time.perf_counter() - last
            if quiet > SPIN_SECONDS:
                time.sleep(min(1e-3, quiet / 8))
            continue
        message = rt.ctrl.recv(source=source, tag=TAG_COMMAND)
        kind = message[0]
        if kind == "segment":
            rt.store.create_segment(message[1])
        elif kind == "run":
            rt.run(*message[1:])
        elif kind == "stop":
            break
        last = time.perf_counter()
    rt.close()


def _to_host(value: Any) -> Any:
    """Plain numpy values of a function's result (tensors and variables read)."""

    def leaf(v: Any) -> Any:
        if isinstance(v, Tensor):
            return v.value
        if isinstance(v, Variable):
            return v.read_value()
        if isinstance(v, DistributedValues):
            return leaf(v.values[0]) if len(v.values) == 1 else tuple(map(leaf, v.values))
        return v

    return map_structure(leaf, value)


def _portable(exc: BaseException) -> BaseException:
    """``exc`` if it survives pickling, else a RuntimeError carrying its text."""
    try:
        pickle.loads(cloudpickle.dumps(exc))
        return exc
    except Exception:
        return RuntimeError(f"{type(exc).__name__}: {exc}")


def _dumps(message: Any) -> bytes:
    """``pickle`` (fast, C) for plain results; cloudpickle for what only it can send."""
    try:
        return pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:
        return cloudpickle.dumps(message)
