"""Node topology of an MPI communicator: which ranks share a node, one leader per node.

Real node boundaries come from ``MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)``. Setting
``ranks_per_node`` (``HPCDIST_RANKS_PER_NODE``) splits consecutive ranks into fake nodes instead,
so that multi-node code paths run, and are tested, on one machine.
"""

from __future__ import annotations

import dataclasses

from mpi4py import MPI

from hpcdist.settings import get_settings

__all__ = ["NodeLayout", "node_layout", "split_node"]


@dataclasses.dataclass(frozen=True)
class NodeLayout:
    """Where each rank of a communicator sits.

    Attributes:
        rank: This process's rank.
        size: Number of ranks.
        local_rank: Index of this rank on its node.
        local_size: Number of ranks on this node.
        node_rank: Index of this node; nodes are numbered by their lowest rank.
        num_nodes: Number of nodes.
        hosts: Host name of every rank.
        node_of_rank: Node index of every rank.
    """

    rank: int
    size: int
    local_rank: int
    local_size: int
    node_rank: int
    num_nodes: int
    hosts: tuple[str, ...]
    node_of_rank: tuple[int, ...]

    @property
    def is_leader(self) -> bool:
        """Whether this rank is its node's leader (local rank 0)."""
        return self.local_rank == 0


def split_node(comm: MPI.Comm, ranks_per_node: int | None = None) -> MPI.Comm:
    """Return a new communicator of the ranks on this rank's node (collective).

    Args:
        comm: The communicator to split.
        ranks_per_node: Fake node size; defaults to ``HPCDIST_RANKS_PER_NODE``, else real nodes.
    """
    rpn = get_settings().ranks_per_node if ranks_per_node is None else ranks_per_node
    if rpn:
        return comm.Split(comm.Get_rank() // rpn, comm.Get_rank())
    return comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.Get_rank())


def node_layout(comm: MPI.Comm, ranks_per_node: int | None = None) -> NodeLayout:
    """Compute the node layout of a communicator (collective over ``comm``).

    Args:
        comm: The communicator.
        ranks_per_node: Fake node size; defaults to ``HPCDIST_RANKS_PER_NODE``.

    Returns:
        The layout.
    """
    node = split_node(comm, ranks_per_node)
    try:
        leader = node.bcast(comm.Get_rank(), root=0)
        info = comm.allgather((MPI.Get_processor_name(), leader))
    finally:
        node.Free()
    leaders = sorted({leader for _, leader in info})
    node_of_rank = tuple(leaders.index(leader) for _, leader in info)
    rank = comm.Get_rank()
    mine = node_of_rank[rank]
    same = [r for r, n in enumerate(node_of_rank) if n == mine]
    return NodeLayout(
        rank=rank,
        size=comm.Get_size(),
        local_rank=same.index(rank),
        local_size=len(same),
        node_rank=mine,
        num_nodes=len(leaders),
        hosts=tuple(host for host, _ in info),
        node_of_rank=node_of_rank,
    )
