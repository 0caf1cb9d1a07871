import os
import socket

import pytest
from mpi4py import MPI

from hpcdist.cluster import MPIClusterResolver, node_layout, resolve
from hpcdist.cluster.gpus import visible_gpu_count

pytestmark = pytest.mark.mpi(min_size=2)


def test_mpi_resolver_agrees_with_mpi():
    comm = MPI.COMM_WORLD
    r = MPIClusterResolver()
    assert (r.rank, r.world_size) == (comm.rank, comm.size)
    assert (r.task_type, r.task_id) == ("worker", comm.rank)
    assert r.is_chief == (comm.rank == 0)
    assert r.cluster_spec().num_tasks("worker") == comm.size
    assert 0 <= r.local_rank < r.local_size
    assert r.num_accelerators() == {"GPU": visible_gpu_count()}  # 0 on CI
    sizes = comm.allgather(r.local_size)
    assert sum(1 for x in comm.allgather(r.local_rank) if x == 0) == r.num_nodes
    assert sum(sizes) / len(sizes) <= comm.size


def test_jobs_assign_ranks_in_sorted_role_order():
    comm = MPI.COMM_WORLD
    jobs = {"worker": comm.size - 1, "chief": 1}
    r = MPIClusterResolver(jobs=jobs)
    if comm.rank == 0:
        assert (r.task_type, r.task_id) == ("chief", 0)
        assert r.is_chief
    else:
        assert (r.task_type, r.task_id) == ("worker", comm.rank - 1)
        assert not r.is_chief


def test_resolve_picks_mpi_under_mpiexec():
    r = resolve()
    assert type(r).__name__ == "MPIClusterResolver"
    assert r.world_size == MPI.COMM_WORLD.size


def test_node_layout_and_fake_nodes():
    comm = MPI.COMM_WORLD
    layout = node_layout(comm)
    rpn = os.environ.get("HPCDIST_RANKS_PER_NODE")
    if rpn:
        rpn = int(rpn)
        assert layout.node_rank == comm.rank // rpn
        assert layout.local_rank == comm.rank % rpn
        assert layout.num_nodes == -(-comm.size // rpn)
    else:
        # the real layout: ranks with the same hostname share a node, nodes numbered in the
        # order of their lowest rank (one machine, or the namespace nodes of scripts/twonode.sh)
        hosts = comm.allgather(socket.gethostname())
        order = list(dict.fromkeys(hosts))
        mine = [r for r, h in enumerate(hosts) if h == hosts[comm.rank]]
        assert layout.num_nodes == len(order)
        assert layout.node_rank == order.index(hosts[comm.rank])
        assert (layout.local_rank, layout.local_size) == (mine.index(comm.rank), len(mine))
        assert layout.node_of_rank == tuple(order.index(h) for h in hosts)
    fake = node_layout(comm, ranks_per_node=1)
    assert (fake.num_nodes, fake.local_size, fake.node_rank) == (comm.size, 1, comm.rank)
