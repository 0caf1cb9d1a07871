"""The MPI side of a TF1 cluster: which rank runs which task, and the ps ranks' RMA memory.

`TaskCluster.create` is collective over ``COMM_WORLD``: every rank says which task it runs
(``tf.train.Server(cluster, job_name, task_index)``); every task of the cluster must be claimed
by exactly one rank, with the same cluster everywhere, or every rank raises the same
`ClusterConfigError`. The ps ranks then expose one RMA segment each
(``HPCDIST_PS_SEGMENT_BYTES``) in which the variables of every worker's graph are placed.

The end of the job: every other rank tells each ps that it is done (``leave``); a ps serving
its memory (``Server.join()``, or at exit) returns once every other rank has left, and the
segments are freed by all ranks together. Ranks that leave early wait there for the others.
The messages travel on a `hpcdist.comm.p2p.Channel` under its tag ``TAG_TF1_LEAVE``; the
memory is `hpcdist.comm.rma` windows over the channel's ranks.
A task that dies of an uncaught exception aborts the whole job (`hpcdist.abort`, exit code 17;
``HPCDIST_ABORT_ON_EXCEPTION=0`` turns that off).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hpcdist import abort, timeline
from hpcdist.cluster.spec import ClusterSpec
from hpcdist.comm import lifetime
from hpcdist.comm.p2p import ANY_SOURCE, TAG_TF1_LEAVE, Channel
from hpcdist.errors import ClusterConfigError
from hpcdist.settings import get_settings
from hpcdist.strategies.ps.store import RmaStorage, RmaStore
from hpcdist.utils.waiting import Waiter

__all__ = ["HEADER_BYTES", "PS_JOB", "TaskCluster", "current", "set_current"]

#: The job whose tasks hold variables (TF's convention; replica_device_setter's default).
PS_JOB = "ps"
#: Bytes at the start of ps 0's memory kept for the session header (ready word, graph hash,
#: graph generation; `hpcdist.compat.v1.session_manager`).
HEADER_BYTES = 64


class TaskCluster:
    """Tasks, ranks and RMA memory of a TF1 cluster on MPI (one per process).

    Args:
        cluster: The cluster.
        job_name: This rank's job.
        task_index: This rank's task.
        tasks: ``tasks[r]`` = ``(job, task)`` of rank ``r``.
        channel: A private channel over every rank (freed by `close`).
    """

    def __init__(
        self, cluster: ClusterSpec, job_name: str, task_index: int, tasks: list, channel: Channel
    ) -> None:
        self.cluster, self.job_name, self.task_index = cluster, job_name, task_index
        self.tasks = tasks
        self.channel = channel
        self.rank = channel.rank
        ps = sorted((t, r) for r, (j, t) in enumerate(tasks) if j == PS_JOB)
        self.ps_ranks = [r for _, r in ps]
        self.is_ps = self.rank in self.ps_ranks
        self.others = [r for r in range(len(tasks)) if r not in self.ps_ranks]
        self.segment_bytes = get_settings().ps_segment_bytes
        self.store = RmaStore(channel, self.ps_ranks)
        self._left = False
        self.closed = False
        #: The session header's graph generation this worker found at its last session.
        self.seen_generation = 0
        if self.ps_ranks:
            self.store.create_segment([self.segment_bytes] * len(self.ps_ranks))
            if self.is_ps:
                memory = np.frombuffer(self.store.local_memory(0), np.uint8)
                memory[:] = 0
            channel.barrier()
        lifetime.register(self)

    @classmethod
    def create(cls, cluster: ClusterSpec, job_name: str, task_index: int) -> TaskCluster:
        """Collective over ``COMM_WORLD``: check every rank's task, then set up the memory.

        Raises:
            ClusterConfigError: On every rank: the ranks do not run exactly the cluster's tasks
                (a task claimed twice or by none, more ranks than tasks), the ranks were given
                different clusters, or a ps job without any other job.
        """
        channel = Channel()
        claims = channel.allgather((job_name, int(task_index), cluster.as_dict()))
        try:
            check_claims(cluster, claims)
        except ClusterConfigError:
            channel.free()  # every rank raises the same error, so every rank frees
            raise
        if get_settings().abort_on_exception:
            abort.install()  # a task that dies must end the job, not strand the others
        timeline.start_from_environment()
        return cls(cluster, job_name, task_index, [(j, t) for j, t, _ in claims], channel)

    # -- memory -------------------------------------------------------------------------------

    def storage(self, ps: int, offset: int, shape: tuple, dtype: Any, name: str) -> RmaStorage:
        """The memory of a variable at ``offset`` bytes in ps ``ps``'s segment."""
        return RmaStorage(self.store, 0, ps, offset, shape, dtype, name)

    # -- end of the job -------------------------------------------------------------------------

    def leave(self) -> None:
        """Tell every ps this rank is done (once; ps ranks have nothing to say)."""
        if self._left or self.is_ps or not self.ps_ranks:
            return
        self._left = True
        for rank in self.ps_ranks:
            self.channel.send(None, rank, TAG_TF1_LEAVE)

    def serve(self) -> None:
        """On a ps: keep the memory served until every other rank has left (no deadline)."""
        gone: set[int] = set()
        waiter = Waiter()  # probing drives MPI's progress of the workers' RMA
        while len(gone) < len(self.others):
            waiter.restart()
            got = waiter.wait_value(lambda: self.channel.poll(ANY_SOURCE, TAG_TF1_LEAVE))
            assert got is not None  # a waiter without a timeout never gives up
            gone.add(got[0])

    def close(self) -> None:
        """Leave, serve (ps) until everyone left, then free the memory (collective)."""
        if self.closed:
            return
        self.closed = True
        lifetime.unregister(self)
        self.leave()
        if self.is_ps:
            self.serve()
        self.store.free()
        self.channel.free()


def check_claims(cluster: ClusterSpec, claims: list[tuple[str, int, dict]]) -> None:
    """Raise the same `ClusterConfigError` on every rank when the claims do not fit.

    Args:
        cluster: This rank's cluster.
        claims: ``(job, task, cluster dict)`` of every rank, by rank.
    """
    for rank, (_, _, spec) in enumerate(claims):
        if ClusterSpec(spec) != ClusterSpec(claims[0][2]):
            raise ClusterConfigError(
                f"ranks were given different clusters: rank 0 has {claims[0][2]}, rank {rank} "
                f"has {spec}"
            )
    spec = ClusterSpec(claims[0][2])
    owner: dict[tuple[str, int], int] = {}
    for rank, (job, task, _) in enumerate(claims):
        if job not in spec.jobs or task not in spec.task_indices(job):
            raise ClusterConfigError(
                f"rank {rank} claims task {job}:{task}, which is not in the cluster "
                f"{spec.as_dict()}"
            )
        if (job, task) in owner:
            raise ClusterConfigError(
                f"ranks {owner[(job, task)]} and {rank} both claim task {job}:{task}; each task "
                "of the cluster must run on exactly one rank"
            )
        owner[(job, task)] = rank
    missing = [f"{j}:{t}" for j in spec.jobs for t in spec.task_indices(j) if (j, t) not in owner]
    if missing:
        raise ClusterConfigError(
            f"the cluster has {spec.num_tasks_total()} tasks but the job has {len(claims)} ranks: "
            f"no rank runs {', '.join(missing)}; launch one rank per task (e.g. mpiexec -n "
            f"{spec.num_tasks_total()})"
        )
    if PS_JOB in spec.jobs and len(spec.jobs) == 1:
        raise ClusterConfigError(
            f"the cluster has a {PS_JOB!r} job but no other job: nothing would use the "
            f"parameter servers ({spec.as_dict()}); add a 'worker' job"
        )
    del cluster


_current: list[TaskCluster | None] = [None]


def current() -> TaskCluster | None:
    """This process's cluster (set by ``tf.train.Server``), or None."""
    cluster = _current[0]
    return cluster if cluster is not None and not cluster.closed else None


def set_current(cluster: TaskCluster) -> None:
    """Make ``cluster`` this process's cluster.

    Raises:
        RuntimeError: The process has a different live cluster already.
    """
    if current() is not None and current() is not cluster:
        raise RuntimeError("a process runs one task: tf.train.Server was already created")
    _current[0] = cluster
