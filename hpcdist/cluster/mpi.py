"""`MPIClusterResolver`: the cluster is the ranks of an MPI communicator."""

from __future__ import annotations

from collections.abc import Mapping

from mpi4py import MPI

from hpcdist.cluster.base import ClusterResolver, assign_jobs, default_jobs
from hpcdist.cluster.devices import visible_gpu_count
from hpcdist.cluster.spec import ClusterSpec
from hpcdist.cluster.topology import node_layout

__all__ = ["MPIClusterResolver"]

_PORT_BASE = 8888


class MPIClusterResolver(ClusterResolver):
    """Rank, size and hosts from MPI (collective over ``comm`` at construction).

    Addresses in `cluster_spec` are ``host:port`` labels (port ``8888 + local_rank``) kept for
    compatibility with code that prints or compares them; hpcdist opens no sockets.

    Args:
        comm: The communicator; ``MPI.COMM_WORLD`` by default. It is only read from, never
            used for hpcdist's own traffic.
        jobs: ``{role: count}``; ranks are assigned in sorted role order (see
            `hpcdist.cluster.assign_jobs`). Default: `hpcdist.cluster.base.default_jobs` (the
            parameter-server layout when ``HPCDIST_NUM_PS`` is set, else every rank a worker).

    Raises:
        ClusterConfigError: The jobs do not fit the communicator (``HPCDIST_NUM_PS`` included).
    """

    def __init__(self, comm: MPI.Comm | None = None, jobs: Mapping[str, int] | None = None):
        comm = MPI.COMM_WORLD if comm is None else comm
        self._layout = node_layout(comm)
        if jobs is None:
            jobs = default_jobs(self._layout.size)
        self._assignment = assign_jobs(jobs, self._layout.size)
        self._task_type, self._task_id = self._assignment[self._layout.rank]
        local_index = [
            sum(1 for r in range(i) if self._layout.node_of_rank[r] == n)
            for i, n in enumerate(self._layout.node_of_rank)
        ]
        self._spec: dict[str, list[str]] = {}
        for r, (role, _) in enumerate(self._assignment):
            address = f"{self._layout.hosts[r]}:{_PORT_BASE + local_index[r]}"
            self._spec.setdefault(role, []).append(address)

    def cluster_spec(self) -> ClusterSpec:
        """Return the cluster: one task per rank, grouped by job."""
        return ClusterSpec(self._spec)

    @property
    def rank(self) -> int:
        """Rank in the communicator."""
        return self._layout.rank

    @property
    def world_size(self) -> int:
        """Size of the communicator."""
        return self._layout.size

    @property
    def local_rank(self) -> int:
        """Index on this node."""
        return self._layout.local_rank

    @property
    def local_size(self) -> int:
        """Ranks on this node."""
        return self._layout.local_size

    @property
    def node_rank(self) -> int:
        """Index of this node (nodes ordered by their lowest rank)."""
        return self._layout.node_rank

    @property
    def num_nodes(self) -> int:
        """Number of nodes."""
        return self._layout.num_nodes

    def num_accelerators(
        self, task_type: str | None = None, task_id: int | None = None
    ) -> dict[str, int]:
        """Return ``{"GPU": n}``: GPUs visible to this process (0 without CuPy or a device)."""
        del task_type, task_id
        return {"GPU": visible_gpu_count()}
