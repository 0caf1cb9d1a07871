"""``tf.train.Server`` on MPI: each rank runs one task of the cluster.

``Server(cluster, job_name, task_index)`` is collective over the ranks of the job when the
cluster has more than one task (`hpcdist.compat.v1.task_cluster.TaskCluster.create`): the ranks
check that together they run every task exactly once, and the ps tasks expose the RMA memory
that will hold the variables. ``join()`` on a ps serves that memory and, unlike TF's, returns
once every other task has finished, so a job ends by itself.
"""

from __future__ import annotations

from collections import namedtuple
from typing import Any

from hpcdist.cluster.spec import ClusterSpec
from hpcdist.compat.v1 import task_cluster
from hpcdist.errors import InvalidArgumentError

__all__ = ["Server", "ServerDef"]

ServerDef = namedtuple("ServerDef", ["cluster", "job_name", "task_index", "protocol"])


def _check_address(job: str, task: int, address: str) -> None:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise InvalidArgumentError(
            f"Could not parse port for {job}:{task} from address {address!r}: addresses are "
            "host:port (MPI ignores them, but they must be well formed)"
        )


class Server:
    """One task of a cluster, run by this MPI rank.

    Args:
        server_or_cluster_def: A `ClusterSpec`, a dict ``{job: [addresses]}``, or a `ServerDef`.
        job_name: This task's job (may be omitted when the cluster has one job).
        task_index: This task's index (may be omitted when its job has one task).
        protocol: Accepted (``"grpc"``); MPI carries the traffic.
        config: Accepted and unused.
        start: Accepted (the server starts at once).

    Raises:
        ValueError: TF's "Must specify an explicit `job_name`." / "`task_index`." messages.
        InvalidArgumentError: An address without a port.
        ClusterConfigError: On every rank: the ranks do not run exactly the cluster's tasks.
    """

    def __init__(
        self,
        server_or_cluster_def: Any,
        job_name: str | None = None,
        task_index: int | None = None,
        protocol: str | None = None,
        config: Any = None,
        start: bool = True,
    ) -> None:
        del config, start
        if isinstance(server_or_cluster_def, ServerDef):
            job_name = job_name or server_or_cluster_def.job_name
            if task_index is None:
                task_index = server_or_cluster_def.task_index
            server_or_cluster_def = server_or_cluster_def.cluster
        cluster = ClusterSpec(server_or_cluster_def)
        if job_name is None:
            if len(cluster.jobs) != 1:
                raise ValueError("Must specify an explicit `job_name`.")
            job_name = cluster.jobs[0]
        if task_index is None:
            indices = cluster.task_indices(job_name)
            if len(indices) != 1:
                raise ValueError("Must specify an explicit `task_index`.")
            task_index = indices[0]
        task_index = int(task_index)
        _check_address(job_name, task_index, cluster.task_address(job_name, task_index))
        self.server_def = ServerDef(cluster, job_name, task_index, protocol or "grpc")
        self._cluster: task_cluster.TaskCluster | None = None
        if cluster.num_tasks_total() > 1:
            self._cluster = task_cluster.TaskCluster.create(cluster, job_name, task_index)
            task_cluster.set_current(self._cluster)

    @property
    def target(self) -> str:
        """A session target naming this task (``hpcdist://worker:0``)."""
        return f"hpcdist://{self.server_def.job_name}:{self.server_def.task_index}"

    @staticmethod
    def create_local_server(config: Any = None, start: bool = True) -> Server:
        """A one-task server in this process (no other rank is involved)."""
        return Server({"localhost": ["localhost:0"]}, protocol="grpc", config=config, start=start)

    def start(self) -> None:
        """Nothing to do: the server started when it was created."""

    def join(self) -> None:
        """Serve this task until the job ends.

        On a ps: serve the variables' memory until every other task has finished, then free it
        with them (collective) and return. On any other task: say this task is done and wait
        for the others. A one-task server returns at once.
        """
        if self._cluster is not None:
            self._cluster.close()
