"""`ParameterServerStrategy`: variables in one-sided RMA windows on ps ranks, async workers.

Every rank runs the same script. Constructing the strategy is collective and splits the job by
role (from the cluster resolver's jobs, or ``HPCDIST_NUM_PS``):

* the **coordinator** (the ``chief`` task) returns from the constructor and runs the program:
  it creates variables and schedules functions with `ClusterCoordinator`;
* **ps** ranks hold the variables' memory (`hpcdist.strategies.ps.store`) and otherwise only
  keep MPI progressing; **workers** run scheduled functions. Neither returns from the
  constructor: it runs `hpcdist.strategies.ps.runtime.serve` until the coordinator's program
  ends, then exits the process with status 0.

`runtime` and `coordinator_only` are defined in `hpcdist.strategies.ps.runtime` and re-exported
here.

Standard MPI cannot survive the loss of a process: if any rank of one job dies, the launcher
ends the job. ``hpcdist run --ps P --workers W`` (``HPCDIST_PS_LAUNCH``) makes each worker an
MPI job of its own, so that a worker can die alone (`hpcdist.strategies.ps.membership`);
otherwise process loss is handled by checkpoints and restart (see ``docs/parameter-server.md``).
`hpcdist.errors.WorkerPreemptedError` raised inside a scheduled function re-runs it elsewhere.
"""

from __future__ import annotations

import atexit
import os
import signal
import socket
import sys
from pathlib import Path
from typing import Any

import numpy as np

from hpcdist import abort
from hpcdist.cluster.base import ClusterResolver
from hpcdist.cluster.launched import PSLaunch, launched_resolver, read_launch
from hpcdist.cluster.resolve import resolve
from hpcdist.comm.p2p import Channel, threads_supported
from hpcdist.core.variables import (
    VariableAggregation,
    VariableSynchronization,
    initial_array,
    unique_name,
    variable_options,
)
from hpcdist.data.options import InputContext
from hpcdist.errors import ClusterConfigError
from hpcdist.settings import get_settings
from hpcdist.strategies.ps.admission import request_admission, watch_coordinator
from hpcdist.strategies.ps.control import CoordinatorRuntime
from hpcdist.strategies.ps.membership import (
    FaultTolerantCoordinatorRuntime,
    FaultTolerantServingRuntime,
    launch_roles,
    worker_rank,
)
from hpcdist.strategies.ps.partitioners import validate_partitions
from hpcdist.strategies.ps.remote_store import RemoteStore
from hpcdist.strategies.ps.roles import Roles
from hpcdist.strategies.ps.runtime import (
    coordinator_only,
    coordinator_runtime,
    has_runtime,
    install_runtime,
    is_creating_dataset,
    runtime,
)
from hpcdist.strategies.ps.serving import ServingRuntime
from hpcdist.strategies.ps.store import RmaStorage, RmaStore, SegmentAllocator, mpi_datatype
from hpcdist.strategies.ps.variables import PSVariable, ShardedVariable
from hpcdist.strategies.strategy import Strategy, StrategyExtended
from hpcdist.utils.files import write_private_text
from hpcdist.utils.split import balanced_bounds

#: Test hook (not an HPCDIST_ setting): worker ``<index>`` of this variable, on its first
#: start, exits after admission and before its MPI ``Connect``
#: (tests/faults/test_ps_fault_tolerance.py).
DIE_BEFORE_CONNECT = "HD_TEST_PS_DIE_BEFORE_CONNECT"

__all__ = [
    "DIE_BEFORE_CONNECT",
    "JOIN_SECONDS",
    "ParameterServerStrategy",
    "coordinator_only",
    "runtime",
]

#: How long the coordinator of ``hpcdist run --workers`` waits for its workers to join
#: (``HPCDIST_TIMEOUT_SECONDS`` instead, when set).
JOIN_SECONDS = 120.0


def _local_strategy() -> ParameterServerStrategy:
    return runtime().strategy


class _PSExtended(StrategyExtended):
    def __init__(self, strategy: Strategy, roles: Roles, rank: int) -> None:
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

    Collective over every rank of the job. On ps and worker ranks the constructor runs
    `hpcdist.strategies.ps.runtime.serve` and, when it returns (the coordinator ended the job),
    calls ``sys.exit(0)``: the rest of the script is the coordinator's program, so those
    processes end there. Only the coordinator returns.

    Args:
        cluster_resolver: Gives each rank its task (``chief``, ``ps``, ``worker``); by default
            `hpcdist.cluster.resolve` with jobs ``{"chief": 1, "ps": HPCDIST_NUM_PS,
            "worker": rest}``.
        variable_partitioner: Called as ``partitioner(shape, dtype)`` for every variable with
            at least one axis; a first entry above 1 makes a `ShardedVariable`.

    Raises:
        ClusterConfigError: No chief, no ps or no worker task, or one process in the job.
        RuntimeError: This process already created a `ParameterServerStrategy`.
    """

    _is_parameter_server = True

    def __init__(
        self,
        cluster_resolver: ClusterResolver | None = None,
        variable_partitioner: Any = None,
    ) -> None:
        if has_runtime():
            raise RuntimeError("a job can create one ParameterServerStrategy")
        settings = get_settings()
        self._variable_partitioner = variable_partitioner
        if settings.ps_launch is not None:  # `hpcdist run --ps P --workers W`
            self._start_fault_tolerant(read_launch(settings.ps_launch), cluster_resolver)
            return
        channel = Channel()  # the control channel, over every rank of the job
        if cluster_resolver is None:
            cluster_resolver = _default_resolver(channel.size, settings.num_ps)
        me = (cluster_resolver.task_type, cluster_resolver.task_id, threads_supported())
        gathered = channel.allgather(me)
        tasks = [(t, i) for t, i, _ in gathered]
        try:
            _check_tasks(tasks, cluster_resolver)
            _check_thread_level([multiple for _, _, multiple in gathered], channel.rank)
            roles = Roles.from_tasks([(str(t), int(i)) for t, i in tasks])
        except ClusterConfigError:
            channel.free()
            raise
        self._cluster_resolver = cluster_resolver
        self._num_ps = len(roles.ps)
        self._num_workers = len(roles.workers)
        self.extended = _PSExtended(self, roles, channel.rank)
        store = RmaStore(channel.dup(), roles.ps)
        if channel.rank != roles.coordinator:
            server = ServingRuntime(self, channel, roles, store)
            install_runtime(server)
            if settings.abort_on_exception:
                abort.install()
            server.serve()
            sys.exit(0)  # a ps or worker process has nothing left to do once the job ends
        allocator = SegmentAllocator(len(roles.ps), settings.ps_segment_bytes)
        coordinator = CoordinatorRuntime(self, channel, roles, store, allocator)
        install_runtime(coordinator)
        if settings.abort_on_exception:
            abort.install()
        atexit.register(coordinator.shutdown)

    def _start_fault_tolerant(self, launch: PSLaunch, resolver: ClusterResolver | None) -> None:
        """The constructor under ``hpcdist run --workers``: one job per failure domain.

        The server job (coordinator + ps) builds its windows and, on the coordinator, waits
        for every worker to join; a worker joins the server job and serves it
        (`hpcdist.strategies.ps.membership`).
        """
        settings = get_settings()
        self._cluster_resolver = resolver if resolver is not None else launched_resolver(launch)
        roles = launch_roles(launch)
        self._num_ps, self._num_workers = len(roles.ps), len(roles.workers)
        if launch.role == "worker":
            rank = worker_rank(launch, launch.index)
            self.extended = _PSExtended(self, roles, rank)
            who = f"worker {launch.index}"
            sock, port = request_admission(
                launch.address_file, bytes.fromhex(launch.secret), launch.index
            )
            if os.environ.get(DIE_BEFORE_CONNECT) == str(launch.index) and (
                os.environ.get("HPCDIST_RESTART_COUNT", "0") == "0"
            ):  # a test hook: die in the window between the "C" byte and Connect
                os._exit(3)
            channel = Channel.connect(port)
            store = RemoteStore(channel, roles.ps, who)
            server = ServingRuntime(self, channel, roles, store, rank)
            install_runtime(server)
            if settings.abort_on_exception:
                abort.install()
            server.serve()
            sock.close()
            # Told to stop: the launcher tells this exit from a step that Slurm ended with
            # code 0 when the worker's node failed.
            stopped = Path(launch.address_file).parent / f"worker-{launch.index}.stopped"
            write_private_text(stopped, f"{os.environ.get('HPCDIST_RESTART_COUNT', '0')}\n")
            sys.exit(0)
        channel = Channel()  # the server job: coordinator and ps ranks
        try:  # its threads call MPI as in one job; a worker job may run below (no watchdog)
            _check_thread_level(channel.allgather(threads_supported()), channel.rank)
        except ClusterConfigError:
            channel.free()
            raise
        # The launcher runs the server job with ``-disable-auto-cleanup``: when a rank dies,
        # hydra signals the others with SIGUSR1 (fatal by default) instead of killing them,
        # so that the coordinator can report the dead ps (`membership.ps_failure`).
        signal.signal(signal.SIGUSR1, signal.SIG_IGN)
        _write_pid(Path(launch.address_file).parent / f"rank-{channel.rank}.pid")
        self.extended = _PSExtended(self, roles, channel.rank)
        store = RmaStore(channel.dup(), roles.ps)
        if channel.rank != roles.coordinator:
            secret = bytes.fromhex(launch.secret)
            watch_coordinator(launch.address_file, secret, launch.num_workers, channel.rank - 1)
            ps = FaultTolerantServingRuntime(self, channel, roles, store)
            install_runtime(ps)
            if settings.abort_on_exception:
                abort.install()
            ps.serve()
            sys.exit(0)
        allocator = SegmentAllocator(len(roles.ps), settings.ps_segment_bytes)
        coordinator = FaultTolerantCoordinatorRuntime(
            self, channel, roles, store, allocator, launch
        )
        install_runtime(coordinator)
        if settings.abort_on_exception:
            abort.install()
        atexit.register(coordinator.shutdown)
        coordinator.wait_for_workers(settings.timeout_seconds or JOIN_SECONDS)

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
        if is_creating_dataset():
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
        rt = coordinator_runtime()
        make = (rt, trainable, synchronization, aggregation)
        if shards == 1:
            return _new_ps_variable(*make, value, name)
        pieces = [
            _new_ps_variable(*make, value[lo:hi], f"{name}/part_{i}")
            for i, (lo, hi) in enumerate(balanced_bounds(value.shape[0], shards))
        ]
        var = ShardedVariable(pieces, name, rt.new_uid())
        rt.variables[var.uid] = var
        return var

    def distribute_datasets_from_function(self, dataset_fn: Any, options: Any = None) -> Any:
        """On a worker: ``dataset_fn(InputContext)`` for this worker (a plain dataset)."""
        del options
        ext = self.extended
        return dataset_fn(InputContext(self._num_workers, ext.worker_index, 1))

    def experimental_distribute_dataset(self, dataset: Any, options: Any = None) -> Any:
        """The dataset itself: with asynchronous workers, each reads whole batches."""
        del options
        return dataset


def _new_ps_variable(
    rt: CoordinatorRuntime,
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


def _write_pid(path: Path) -> None:
    """Write ``HOST PID`` of this process to ``path`` (0600): the launcher tells which died."""
    write_private_text(path, f"{socket.gethostname()} {os.getpid()}\n")


def _check_tasks(tasks: list[tuple[Any, Any]], resolver: ClusterResolver) -> None:
    """Every rank's resolver must name its task (the same check, so the same error, everywhere).

    TF's tutorial builds ``SimpleClusterResolver(cluster_spec, rpc_layer="grpc")`` without a
    task: its coordinator is the only TF process running the program, the servers run in other
    processes. Under MPI every rank runs the script and needs its own task.

    Raises:
        ClusterConfigError: Some rank's resolver names no task type or no integer task id.
    """
    bad = []
    for rank, (task_type, task_id) in enumerate(tasks):
        try:
            valid = task_type is not None and task_id is not None and int(task_id) >= 0
        except (TypeError, ValueError):
            valid = False
        if not valid:
            bad.append(f"rank {rank}: task_type={task_type!r}, task_id={task_id!r}")
    if not bad:
        return
    raise ClusterConfigError(
        f"ParameterServerStrategy needs each rank's task (chief, ps or worker) from its cluster "
        f"resolver; {type(resolver).__name__} gave no task on {len(bad)} of {len(tasks)} "
        f"rank(s) ({'; '.join(bad[:4])}{'; ...' if len(bad) > 4 else ''}). Every rank runs "
        "this script: pass task_type= and task_id= to SimpleClusterResolver on each rank, or "
        "use hd.cluster.MPIClusterResolver(jobs={'chief': 1, 'ps': P, 'worker': W}), or pass no "
        "resolver and set HPCDIST_NUM_PS=P (rank 0 is the chief, the next P ranks the ps)"
    )


def _check_thread_level(multiple: list[bool], rank: int) -> None:
    """Every rank must run under ``MPI_THREAD_MULTIPLE`` (the same check everywhere).

    The coordinator's dispatcher thread and the user's threads call MPI, and so do a
    worker's batch watchdog (`hpcdist.strategies.ps.serving`) and its functions. Under
    ``hpcdist run --workers`` the ranks of the server job (coordinator and ps) are checked
    together; a worker job below it runs without its watchdog.

    Raises:
        ClusterConfigError: Some rank runs below it (its ranks named).
    """
    low = [r for r, ok in enumerate(multiple) if not ok]
    if low:
        raise ClusterConfigError(
            f"rank {rank}: ParameterServerStrategy expected MPI_THREAD_MULTIPLE on every rank, "
            f"got a lower thread level (MPI.Query_thread()) on rank(s) {low}: do not lower "
            "mpi4py.rc.thread_level"
        )


def _default_resolver(size: int, num_ps: int | None) -> ClusterResolver:
    if num_ps is None:
        return resolve()
    workers = size - 1 - num_ps
    if workers < 1:
        raise ClusterConfigError(
            f"HPCDIST_NUM_PS={num_ps} leaves no worker among {size} ranks (one coordinator, "
            f"{num_ps} ps): launch at least {num_ps + 2} ranks"
        )
    return resolve(jobs={"chief": 1, "ps": num_ps, "worker": workers})
