"""The GPU paths on a machine without a usable GPU: clear errors on every rank, never a hang."""

import numpy as np
import pytest

import hpcdist as hd
from hpcdist.cluster.gpus import visible_gpu_count
from hpcdist.comm.nccl_backend import NcclBackend
from hpcdist.errors import UnavailableError

pytestmark = [
    pytest.mark.mpi(min_size=2),
    pytest.mark.skipif(visible_gpu_count() > 0, reason="a GPU is visible: tests/gpu covers it"),
]


def test_nccl_backend_that_cannot_start_fails_on_every_rank():
    comm = hd.comm.world()
    # Every rank fails to reach CuPy or a device; they agree before joining NCCL, so every
    # rank raises one error that names each rank's reason instead of waiting in ncclCommInit.
    with pytest.raises(
        UnavailableError, match=r"the NCCL backend cannot start \(rank 0: .*; rank 1: "
    ):
        NcclBackend(comm.mpi_comm, 0)
    out = comm.allreduce(np.ones(3), "sum")  # the communicator is still usable
    np.testing.assert_array_equal(out, np.full(3, comm.size))


def test_nccl_implementation_with_host_arrays_uses_the_host_backends():
    comm = hd.comm.world()
    options = hd.CommunicationOptions(implementation="nccl")
    x = np.arange(6.0).reshape(2, 3) * (comm.rank + 1)
    expected = np.arange(6.0).reshape(2, 3) * sum(range(1, comm.size + 1))
    np.testing.assert_array_equal(comm.allreduce(x, "sum", options), expected)
    reduced = comm.grouped_allreduce([x, x[0]], "mean", options)
    np.testing.assert_allclose(reduced[1], expected[0] / comm.size)
