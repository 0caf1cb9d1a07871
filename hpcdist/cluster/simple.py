"""`SimpleClusterResolver`: a resolver built from explicit values."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hpcdist.cluster.base import ClusterResolver
from hpcdist.cluster.spec import ClusterSpec

__all__ = ["SimpleClusterResolver"]


class SimpleClusterResolver(ClusterResolver):
    """Holds a cluster spec and a task as given.

    Args:
        cluster_spec: The cluster (a `ClusterSpec` or a dict).
        task_type: This process's job.
        task_id: This process's index in its job.
        master: Returned by `master()` when no task is named; derived from the task otherwise.
        num_accelerators: For example ``{"GPU": 1}``.
        rpc_layer: Prefix of `master` addresses.
        rank: Rank of this task; default its position in sorted job order.
        local_rank: Index of this task on its node.
        local_size: Tasks on this node.
        node_rank: Index of this node.
        num_nodes: Number of nodes.
    """

    def __init__(
        self,
        cluster_spec: ClusterSpec | Mapping[str, Any],
        task_type: str | None = None,
        task_id: int | None = None,
        master: str = "",
        num_accelerators: Mapping[str, int] | None = None,
        rpc_layer: str | None = None,
        rank: int | None = None,
        local_rank: int = 0,
        local_size: int = 1,
        node_rank: int = 0,
        num_nodes: int = 1,
    ) -> None:
        self._spec = ClusterSpec(cluster_spec)
        self._task_type = task_type
        self._task_id = task_id
        self._master = master
        self._accelerators = dict(num_accelerators or {"GPU": 0})
        self.rpc_layer = rpc_layer
        self._rank = rank
        self._local = (local_rank, local_size, node_rank, num_nodes)

    def cluster_spec(self) -> ClusterSpec:
        """Return the cluster given."""
        return self._spec

    @property
    def rank(self) -> int:
        """The rank given, else the task's position in sorted job order."""
        if self._rank is not None:
            return self._rank
        pos = 0
        for job in sorted(self._spec.jobs):
            for i in self._spec.task_indices(job):
                if (job, i) == (self._task_type, self._task_id):
                    return pos
                pos += 1
        return 0

    @property
    def world_size(self) -> int:
        """Tasks in the cluster (at least 1)."""
        return max(1, self._spec.num_tasks_total())

    @property
    def local_rank(self) -> int:
        """As given."""
        return self._local[0]

    @property
    def local_size(self) -> int:
        """As given."""
        return self._local[1]

    @property
    def node_rank(self) -> int:
        """As given."""
        return self._local[2]

    @property
    def num_nodes(self) -> int:
        """As given."""
        return self._local[3]

    def num_accelerators(
        self, task_type: str | None = None, task_id: int | None = None
    ) -> dict[str, int]:
        """Return the accelerators given."""
        del task_type, task_id
        return dict(self._accelerators)

    def master(
        self,
        task_type: str | None = None,
        task_id: int | None = None,
        rpc_layer: str | None = None,
    ) -> str:
        """Return the master given, or a task's address."""
        if (task_type is None or task_id is None) and self._master:
            return self._master
        return super().master(task_type, task_id, rpc_layer)
