"""`ParameterServerStrategy`: variables in one-sided RMA windows on ps ranks, async workers.

Every rank runs the same script. Constructing the strategy is collective and splits the job by
role (from the cluster resolver's jobs, or ``HPCDIST_NUM_PS``):

* the **coordinator** (the ``chief`` task) returns from the constructor and runs the program:
  it creates variables and schedules functions with `ClusterCoordinator`;
* **ps** ranks hold the variables' memory (`hpcdist.strategies.ps.store`) and otherwise only
  keep MPI progressing; **workers** run scheduled functions. Neither returns from the
  constructor: they serve until the coordinator's program ends, then exit with status 0.

Standard MPI cannot survive the loss of a process: if any rank dies, the launcher ends the job.
Process loss is handled by checkpoints and restart (see ``docs/parameter-server.md``);
`hpcdist.errors.WorkerPreemptedError` raised inside a scheduled function re-runs it elsewhere.
"""

from __future__ import annotations

import atexit
import itertools
import pickle
import signal
import sys
import threading
import time
import traceback
from typing import Any

import numpy as np

from hpcdist.cluster.base import ClusterResolver
from hpcdist.core.variables import (
    VariableAggregation,
    VariableSynchronization,
    initial_array,
    unique_name,
    variable_options,
)
from hpcdist.errors import ClusterConfigError, OutOfRangeError
from hpcdist.settings import get_settings
from hpcdist.strategies.ps.partitioners import validate_partitions
from hpcdist.strategies.ps.store import RmaStorage, RmaStore, SegmentAllocator, mpi_datatype
from hpcdist.strategies.ps.variables import PSVariable, ShardedVariable
from hpcdist.strategies.strategy import Strategy, StrategyExtended

__all__ = ["ParameterServerStrategy", "runtime"]

TAG_COMMAND = 71
TAG_RESULT = 72

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


class _Roles:
    """Which rank is the coordinator, which are ps and workers (same on every rank)."""

    def __init__(self, tasks: list[tuple[str, int]]) -> None:
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
        chief = by_role.get("chief", [])
        if len(chief) != 1:
            raise ClusterConfigError(
                "ParameterServerStrategy needs exactly one chief task (the coordinator), got "
                f"jobs {jobs}; set HPCDIST_NUM_PS=<n> (rank 0 coordinates, ranks 1..n are ps) "
                "or give the resolver jobs={'chief': 1, 'ps': n, 'worker': m}"
            )
        for role in ("ps", "worker"):
            if not by_role.get(role):
                raise ClusterConfigError(
                    f"ParameterServerStrategy needs at least one {role} task, got jobs {jobs} "
                    f"({len(tasks)} ranks); set HPCDIST_NUM_PS or the resolver's jobs"
                )
        self.coordinator = chief[0][1]
        self.ps = [rank for _, rank in sorted(by_role["ps"])]
        self.workers = [rank for _, rank in sorted(by_role["worker"])]
        self.others = [r for r in range(len(tasks)) if r != self.coordinator]
        self.jobs = jobs


class _Runtime:
    """Communicators, RMA segments and caches of one rank of a parameter-server job."""

    def __init__(self, strategy: ParameterServerStrategy, comm: Any, roles: _Roles) -> None:
        self.strategy = strategy
        self.roles = roles
        self.ctrl = comm
        self.rank = comm.Get_rank()
        self.is_coordinator = self.rank == roles.coordinator
        self.store = RmaStore(comm.Dup(), roles.ps)
        self.allocator = SegmentAllocator(len(roles.ps), get_settings().ps_segment_bytes)
        self.send_lock = threading.Lock()
        self.variables: dict[int, Any] = {}  # uid -> variable (workers: rebuilt ones)
        self.functions: dict[int, Any] = {}  # workers: function key -> function
        self.resources: dict[int, Any] = {}  # workers: per-worker datasets and iterators
        self._uids = itertools.count()
        self._next_ps = 0
        self.closed = False

    # -- coordinator --------------------------------------------------------------------------

    def command(self, message: tuple[Any, ...]) -> None:
        """Send a command to every other rank."""
        with self.send_lock:
            for rank in self.roles.others:
                self.ctrl.send(message, dest=rank, tag=TAG_COMMAND)

    def new_uid(self) -> int:
        """A fresh variable identity."""
        return next(self._uids)

    def place(self, nbytes: int) -> tuple[int, int, int]:
        """``(segment, ps, offset)`` for a new variable: ps chosen round-robin."""
        ps = self._next_ps
        self._next_ps = (ps + 1) % len(self.roles.ps)
        placed = self.allocator.place(ps, nbytes)
        if placed is None:
            sizes = self.allocator.new_segment_sizes(ps, nbytes)
            self.command(("segment", sizes))
            segment = self.store.create_segment(sizes)
            self.allocator.add_segment(segment, sizes)
            placed = self.allocator.place(ps, nbytes)
            assert placed is not None
        return placed[0], ps, placed[1]

    def shutdown(self) -> None:
        """Coordinator: finish scheduled work, release every rank, free the windows."""
        if self.closed:
            return
        coordinator = getattr(self.strategy, "_cluster_coordinator", None)
        if coordinator is not None:
            coordinator._stop()
        self.command(("stop",))
        self._close()

    def _close(self) -> None:
        self.closed = True
        self.store.free()
        self.store.comm.Free()
        self.ctrl.Free()

    # -- ps and workers -----------------------------------------------------------------------

    def serve(self) -> None:
        """Run commands from the coordinator until it stops the job.

        SIGUSR2 (Slurm's preemption warning) is ignored here: the coordinator handles it
        (checkpoint, then stop every rank).
        """
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGUSR2, signal.SIG_IGN)
        source = self.roles.coordinator
        idle = 0
        while True:
            if not self.ctrl.Iprobe(source=source, tag=TAG_COMMAND):
                # Probing keeps MPI progressing; back off to 1 ms so idle ranks leave the CPU.
                idle += 1
                if idle > 200:
                    time.sleep(min(1e-3, 2e-5 * (idle - 200)))
                continue
            idle = 0
            message = self.ctrl.recv(source=source, tag=TAG_COMMAND)
            kind = message[0]
            if kind == "segment":
                self.store.create_segment(message[1])
            elif kind == "run":
                self._run(*message[1:])
            elif kind == "stop":
                break
        self._close()

    def _run(self, key: int, blob: bytes | None, args_blob: bytes) -> None:
        """Run one scheduled function and send back ``("ok", value)`` or ``("error", exc)``."""
        import cloudpickle

        try:
            if blob is not None:
                self.functions[key] = cloudpickle.loads(blob)
            fn = self.functions[key]
            args, kwargs = pickle.loads(args_blob)
            with self.strategy.scope():
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
            reply = cloudpickle.dumps(("ok", _to_host(value), None))
        except Exception as exc:  # sent to the coordinator, raised there
            reply = cloudpickle.dumps(("error", _portable(exc), traceback.format_exc()))
        self.ctrl.send(reply, dest=self.roles.coordinator, tag=TAG_RESULT)


def _to_host(value: Any) -> Any:
    """Plain numpy values of a function's result (tensors and variables read)."""
    from hpcdist.core.autodiff import Tensor
    from hpcdist.core.variables import Variable
    from hpcdist.data.nest import map_structure
    from hpcdist.strategies.values import DistributedValues

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
    import cloudpickle

    try:
        pickle.loads(cloudpickle.dumps(exc))
        return exc
    except Exception:
        return RuntimeError(f"{type(exc).__name__}: {exc}")


def _local_strategy() -> ParameterServerStrategy:
    return runtime().strategy


class _PSExtended(StrategyExtended):
    def __init__(self, strategy: Strategy, roles: _Roles, rank: int) -> None:
        super().__init__(strategy, None)
        self.parameter_devices = tuple(
            f"/job:ps/replica:0/task:{i}/device:CPU:0" for i in range(len(roles.ps))
        )
        self._roles = roles
        if rank in roles.workers:
            self.worker_index = roles.workers.index(rank)

    @property
    def should_checkpoint(self) -> bool:
        """The coordinator writes checkpoints."""
        return True


class ParameterServerStrategy(Strategy):
    """Asynchronous training with variables on parameter servers (``tf.distribute`` PSS v2).

    Collective over every rank of the job. On ps and worker ranks the constructor serves the
    coordinator and then ends the process (exit status 0); only the coordinator returns.

    Args:
        cluster_resolver: Gives each rank its task (``chief``, ``ps``, ``worker``); by default
            `hpcdist.cluster.resolve` with jobs ``{"chief": 1, "ps": HPCDIST_NUM_PS,
            "worker": rest}``.
        variable_partitioner: Called as ``partitioner(shape, dtype)`` for every variable with
            at least one axis; a first entry above 1 makes a `ShardedVariable`.

    Raises:
        ClusterConfigError: No chief, no ps or no worker task, or one process in the job.
    """

    _is_parameter_server = True

    def __init__(
        self,
        cluster_resolver: ClusterResolver | None = None,
        variable_partitioner: Any = None,
    ) -> None:
        global _runtime
        from mpi4py import MPI

        if _runtime is not None:
            raise RuntimeError("a job can create one ParameterServerStrategy")
        settings = get_settings()
        comm = MPI.COMM_WORLD.Dup()
        if cluster_resolver is None:
            cluster_resolver = _default_resolver(comm.Get_size(), settings.num_ps)
        tasks = comm.allgather((cluster_resolver.task_type, int(cluster_resolver.task_id)))
        try:
            roles = _Roles([(str(t), i) for t, i in tasks])
        except ClusterConfigError:
            comm.Free()
            raise
        self._cluster_resolver = cluster_resolver
        self._variable_partitioner = variable_partitioner
        self._num_ps = len(roles.ps)
        self._num_workers = len(roles.workers)
        self._cluster_coordinator = None
        self.extended = _PSExtended(self, roles, comm.Get_rank())
        _runtime = _Runtime(self, comm, roles)
        if settings.abort_on_exception:
            from hpcdist import abort

            abort.install()
        if not _runtime.is_coordinator:
            _runtime.serve()
            sys.exit(0)
        atexit.register(_runtime.shutdown)

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return _local_strategy, ()

    def Variable(  # noqa: N802 - TF's name
        self,
        initial_value: Any,
        name: str | None = None,
        trainable: bool | None = None,
        synchronization: Any = None,
        aggregation: Any = None,
        dtype: Any = None,
    ) -> Any:
        """Create a variable on the parameter servers (sharded if the partitioner says so).

        Returns:
            A `PSVariable`, or a `ShardedVariable` of them.

        Raises:
            RuntimeError: Called on a worker (inside a scheduled function).
            ValueError: Called inside a ``dataset_fn``, or the partitioner returned nonsense.
            TypeError: The dtype has no MPI datatype.
        """
        rt = runtime()
        if getattr(_creating, "dataset_fn", False):
            raise ValueError(
                "creating variables inside a dataset_fn is not allowed: create them on the "
                "coordinator, under strategy.scope(), before create_per_worker_dataset"
            )
        if not rt.is_coordinator:
            raise RuntimeError(
                f"variable {name!r} created on a worker: with ParameterServerStrategy variables "
                "are created on the coordinator only (build models and call "
                "optimizer.build(model.trainable_variables) before scheduling functions)"
            )
        synchronization, aggregation, trainable = variable_options(
            name, synchronization, aggregation, trainable
        )
        value = initial_array(initial_value, dtype)
        name = unique_name(name)
        mpi_datatype(value.dtype, name)
        shards = 1
        if self._variable_partitioner is not None and value.ndim >= 1 and value.shape[0] > 0:
            parts = self._variable_partitioner(shape=value.shape, dtype=value.dtype)
            shards = validate_partitions(parts, value.shape, name)
        make = (rt, trainable, synchronization, aggregation)
        if shards == 1:
            return _new_ps_variable(*make, value, name)
        from hpcdist.utils.split import balanced_bounds

        pieces = [
            _new_ps_variable(*make, value[lo:hi], f"{name}/part_{i}")
            for i, (lo, hi) in enumerate(balanced_bounds(value.shape[0], shards))
        ]
        var = ShardedVariable(pieces, name, rt.new_uid())
        rt.variables[var._key[1]] = var
        return var

    def distribute_datasets_from_function(self, dataset_fn: Any, options: Any = None) -> Any:
        """On a worker: ``dataset_fn(InputContext)`` for this worker (a plain dataset)."""
        from hpcdist.data.options import InputContext

        del options
        ext = self.extended
        return dataset_fn(InputContext(self._num_workers, ext.worker_index, 1))

    def experimental_distribute_dataset(self, dataset: Any, options: Any = None) -> Any:
        """The dataset itself: with asynchronous workers, each reads whole batches."""
        del options
        return dataset


def _new_ps_variable(
    rt: _Runtime,
    trainable: bool,
    synchronization: VariableSynchronization,
    aggregation: VariableAggregation,
    value: np.ndarray,
    name: str,
) -> PSVariable:
    segment, ps, offset = rt.place(value.nbytes)
    storage = RmaStorage(rt.store, segment, ps, offset, value.shape, value.dtype, name)
    uid = rt.new_uid()
    var = PSVariable(storage, name, trainable, synchronization, aggregation, uid)
    storage.write(value)
    rt.variables[uid] = var
    return var


def _default_resolver(size: int, num_ps: int | None) -> ClusterResolver:
    from hpcdist.cluster.resolve import resolve

    if num_ps is None:
        return resolve()
    workers = size - 1 - num_ps
    if workers < 1:
        raise ClusterConfigError(
            f"HPCDIST_NUM_PS={num_ps} leaves no worker among {size} ranks (one coordinator, "
            f"{num_ps} ps): launch at least {num_ps + 2} ranks"
        )
    return resolve(jobs={"chief": 1, "ps": num_ps, "worker": workers})
