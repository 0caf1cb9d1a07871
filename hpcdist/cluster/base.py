"""The `ClusterResolver` interface shared by every resolver, and TF's role rules."""

from __future__ import annotations

import abc
from collections.abc import Mapping

from hpcdist.cluster.spec import ClusterSpec
from hpcdist.errors import ClusterConfigError
from hpcdist.settings import get_settings

__all__ = [
    "ROLES",
    "ClusterResolver",
    "assign_jobs",
    "default_jobs",
    "format_master_url",
    "is_chief",
]

#: The roles hpcdist knows. ``jobs`` given to a resolver may use only these names.
ROLES = ("chief", "worker", "ps", "evaluator")


def format_master_url(address: str, rpc_layer: str | None = None) -> str:
    """Return ``rpc_layer://address``, or the bare address without an rpc layer."""
    return f"{rpc_layer}://{address}" if rpc_layer else address


def is_chief(cluster_spec: ClusterSpec, task_type: str | None, task_id: int | None) -> bool:
    """TF's chief rule: the ``chief`` task if the cluster has one, else worker 0.

    A process without a cluster (or without a task) is its own chief.
    """
    if not cluster_spec or task_type is None:
        return True
    if task_type == "chief":
        return True
    if "chief" in cluster_spec.jobs:
        return False
    return task_type == "worker" and task_id == 0


def default_jobs(world_size: int) -> dict[str, int] | None:
    """The jobs of a resolver built without ``jobs``: set by ``HPCDIST_NUM_PS``, else None.

    With ``HPCDIST_NUM_PS=n`` (`hpcdist.settings.Settings.num_ps`), rank 0 is the chief (the
    parameter-server coordinator), ranks 1..n are ps and the rest workers:
    ``{"chief": 1, "ps": n, "worker": world_size - 1 - n}``. Without it, None (every rank a
    worker, see `assign_jobs`).

    Args:
        world_size: Number of ranks.

    Returns:
        ``{role: count}``, or None.

    Raises:
        ClusterConfigError: ``HPCDIST_NUM_PS`` leaves no worker among ``world_size`` ranks.
    """
    num_ps = get_settings().num_ps
    if num_ps is None:
        return None
    workers = world_size - 1 - num_ps
    if workers < 1:
        raise ClusterConfigError(
            f"HPCDIST_NUM_PS={num_ps} leaves no worker among {world_size} ranks (one "
            f"coordinator, {num_ps} ps): launch at least {num_ps + 2} ranks"
        )
    return {"chief": 1, "ps": num_ps, "worker": workers}


def assign_jobs(jobs: Mapping[str, int] | None, world_size: int) -> list[tuple[str, int]]:
    """Assign ranks to jobs: jobs in sorted name order, ranks in order (TF's Slurm rule).

    Sorted order puts ``chief`` first, then ``evaluator``, ``ps``, ``worker``; so with a chief
    job, rank 0 is the chief. With ``jobs={"ps": 2, "worker": 3}``, ranks 0-1 are ps 0-1 and
    ranks 2-4 are workers 0-2.

    Args:
        jobs: ``{role: number_of_tasks}``; None makes every rank a worker.
        world_size: Number of ranks.

    Returns:
        ``(task_type, task_id)`` for each rank.

    Raises:
        ClusterConfigError: An unknown role, a negative count, more than one chief, or counts
            that do not add up to ``world_size``.
    """
    if jobs is None:
        return [("worker", i) for i in range(world_size)]
    if not isinstance(jobs, Mapping):
        raise ClusterConfigError(f"jobs must be a dict {{role: count}}, got {jobs!r}")
    for role, count in jobs.items():
        if role not in ROLES:
            raise ClusterConfigError(f"unknown role {role!r} in jobs {dict(jobs)}; known: {ROLES}")
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise ClusterConfigError(
                f"task count of role {role!r} must be a non-negative int, got {count!r}"
            )
    if jobs.get("chief", 0) > 1:
        raise ClusterConfigError(f"at most one chief task is allowed, jobs={dict(jobs)}")
    total = sum(jobs.values())
    if total != world_size:
        raise ClusterConfigError(
            f"jobs {dict(jobs)} ask for {total} tasks but the job has {world_size} ranks"
        )
    out = []
    for role in sorted(jobs):
        out.extend((role, i) for i in range(jobs[role]))
    return out


class ClusterResolver(abc.ABC):
    """Where this process sits in the cluster.

    Subclasses fill in the topology; `task_type` and `task_id` may be overridden by
    assignment, as in TensorFlow.
    """

    rpc_layer: str | None = None

    @abc.abstractmethod
    def cluster_spec(self) -> ClusterSpec:
        """Return the current cluster description."""

    _task_type: str | None = None
    _task_id: int | None = None

    @property
    def environment(self) -> str:
        """The environment the cluster runs in; ``""`` (TF's default for its resolvers)."""
        return ""

    @property
    def task_type(self) -> str | None:
        """This process's job name (assignable, as in TF)."""
        return self._task_type

    @task_type.setter
    def task_type(self, value: str | None) -> None:
        self._task_type = value

    @property
    def task_id(self) -> int | None:
        """This process's index within its job (assignable, as in TF)."""
        return self._task_id

    @task_id.setter
    def task_id(self, value: int | None) -> None:
        self._task_id = value

    @property
    @abc.abstractmethod
    def rank(self) -> int:
        """This process's rank among all tasks."""

    @property
    @abc.abstractmethod
    def world_size(self) -> int:
        """Number of tasks."""

    @property
    def local_rank(self) -> int:
        """Index of this process among the tasks on its node."""
        return 0

    @property
    def local_size(self) -> int:
        """Number of tasks on this process's node."""
        return 1

    @property
    def node_rank(self) -> int:
        """Index of this process's node, in the cluster's node order."""
        return 0

    @property
    def num_nodes(self) -> int:
        """Number of nodes."""
        return 1

    @property
    def is_chief(self) -> bool:
        """Whether this process is the chief (TF's rule, see `is_chief`)."""
        return is_chief(self.cluster_spec(), self.task_type, self.task_id)

    def num_accelerators(
        self, task_type: str | None = None, task_id: int | None = None
    ) -> dict[str, int]:
        """Return the accelerators this task uses, e.g. ``{"GPU": 1}``."""
        del task_type, task_id
        return {"GPU": 0}

    def master(
        self,
        task_type: str | None = None,
        task_id: int | None = None,
        rpc_layer: str | None = None,
    ) -> str:
        """Return the address of a task (this one by default), prefixed by the rpc layer.

        Returns ``""`` when there is no task or the cluster has a single task, as in TF.
        """
        spec = self.cluster_spec()
        explicit = task_type is not None and task_id is not None
        task_type = self.task_type if task_type is None else task_type
        task_id = self.task_id if task_id is None else task_id
        if task_type is None or task_id is None:
            return ""
        if not explicit and spec.num_tasks_total() <= 1:
            return ""
        return format_master_url(spec.task_address(task_type, task_id), rpc_layer or self.rpc_layer)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(task_type={self.task_type!r}, task_id={self.task_id}, "
            f"rank={self.rank}, world_size={self.world_size}, local_rank={self.local_rank}, "
            f"local_size={self.local_size}, node_rank={self.node_rank}, "
            f"num_nodes={self.num_nodes})"
        )
