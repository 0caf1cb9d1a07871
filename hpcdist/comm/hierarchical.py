"""Hierarchical all-reduce for jobs that span several nodes.

Inside each node the ranks reduce through shared memory (`ShmBackend`); the node leaders
(local rank 0) all-reduce the node sums over MPI; each leader then broadcasts the result to its
node through shared memory. Only one rank per node sends over the network. The header check is
done once over the whole communicator before any data moves.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
from mpi4py import MPI

from hpcdist.comm.backend import HOST_DTYPES, DelegatingBackend, unsupported_codec
from hpcdist.comm.checks import Header, verify_headers
from hpcdist.comm.counters import COUNTING, add
from hpcdist.comm.deadline import Deadline
from hpcdist.comm.mpi_backend import MpiBackend, wait_request
from hpcdist.comm.reduce_op import ReduceOp
from hpcdist.comm.shm_backend import ShmBackend

if TYPE_CHECKING:
    from hpcdist.comm.compression import Codec

__all__ = ["HierarchicalBackend"]


class HierarchicalBackend(DelegatingBackend):
    """Node-local shared memory plus MPI between node leaders.

    All-gather, reduce-scatter, all-to-all and the barrier go to an `MpiBackend` on ``comm``.

    Args:
        comm: The library's communicator.
        node_comm: The ranks of this node (split from ``comm``).
        leader_comm: The node leaders, or ``MPI.COMM_NULL`` on other ranks.
        shm: The node's shared-memory backend over ``node_comm``.
        ranks: Global rank of each member of ``comm`` (for messages).
    """

    name = "hierarchical"
    collectives = frozenset({"allreduce", "broadcast"})
    dtypes = HOST_DTYPES

    def __init__(
        self,
        comm: MPI.Intracomm,
        node_comm: MPI.Intracomm,
        leader_comm: MPI.Intracomm,
        shm: ShmBackend,
        ranks: Sequence[int] | None = None,
    ) -> None:
        self.comm = comm
        self.node_comm = node_comm
        self.leader_comm = leader_comm
        self.shm = shm
        self.ranks = list(range(comm.Get_size())) if ranks is None else list(ranks)
        self.fallback = MpiBackend(comm, self.ranks)

    def allreduce(
        self,
        src: np.ndarray,
        dst: np.ndarray,
        op: ReduceOp,
        header: Header | None,
        deadline: Deadline,
        codec: Codec | None = None,
    ) -> None:
        """Node reduce, leaders' all-reduce, node broadcast."""
        unsupported_codec(self, codec)
        if header is not None:
            verify_headers(self.comm, header, deadline, self.ranks)
        self.shm.allreduce(src, dst, op, None, deadline)
        if self.leader_comm != MPI.COMM_NULL and self.leader_comm.Get_size() > 1:
            if COUNTING:
                add("collective.leader_allreduce", dst.nbytes)
            request = self.leader_comm.Iallreduce(MPI.IN_PLACE, dst, op=op.mpi)
            wait_request(request, deadline, deadline.timeout is None)
        self.shm.broadcast(dst, 0, None, deadline)

    def broadcast(
        self, buf: np.ndarray, root: int, header: Header | None, deadline: Deadline
    ) -> None:
        """Broadcast with the MPI library (one hop from the root, whatever its node)."""
        if header is not None:
            verify_headers(self.comm, header, deadline, self.ranks)
        if COUNTING:
            add("collective.bcast", buf.nbytes)
        wait_request(self.comm.Ibcast(buf, root=root), deadline, deadline.timeout is None)

    def close(self) -> None:
        """The shared-memory backend is closed by its owner."""
