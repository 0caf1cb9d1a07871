"""Cross-rank checks: mismatches raise the same error on every rank, and the library goes on."""

import numpy as np
import pytest
from mpi4py import MPI

import hpcdist as hd
from hpcdist.errors import CollectiveMismatchError

pytestmark = pytest.mark.mpi(min_size=2)

IMPLS = ["auto", "mpi", "shm", "ring"]


@pytest.fixture(scope="module")
def comm():
    return hd.comm.world()


def all_messages(text):
    return MPI.COMM_WORLD.allgather(text)


@pytest.mark.parametrize("impl", IMPLS)
def test_shape_mismatch_on_every_rank(comm, impl):
    opts = hd.CommunicationOptions(implementation=impl)
    last = comm.size - 1
    x = np.ones((4, 4 if comm.rank != last else 3), np.float32)
    with pytest.raises(CollectiveMismatchError) as info:
        comm.allreduce(x, options=opts)
    text = str(info.value)
    assert "sent allreduce #" in text
    assert "float32[4, 4]" in text and "float32[4, 3]" in text
    assert f"rank {last} sent" in text or f"ranks {last} sent" in text
    assert len(set(all_messages(text))) == 1, "every rank must report the same mismatch"
    # Still usable afterwards.
    assert (comm.allreduce(np.ones(3), options=opts) == comm.size).all()


@pytest.mark.parametrize("impl", IMPLS)
def test_dtype_and_op_mismatch(comm, impl):
    opts = hd.CommunicationOptions(implementation=impl)
    dtype = np.float64 if comm.rank == 0 else np.float32
    with pytest.raises(CollectiveMismatchError, match=r"float64.*float32|float32.*float64"):
        comm.allreduce(np.ones(5, dtype), options=opts)
    op = "max" if comm.rank == 0 else "sum"
    with pytest.raises(CollectiveMismatchError, match="MAX"):
        comm.allreduce(np.ones(5), op, options=opts)
    assert comm.allreduce(np.array([2.0]), "prod", opts)[0] == 2.0**comm.size


def test_different_collectives(comm):
    with pytest.raises(CollectiveMismatchError, match=r"broadcast.*allreduce|allreduce.*broadcast"):
        if comm.rank == 0:
            comm.broadcast(np.ones(3))
        else:
            comm.allreduce(np.ones(3))
    with pytest.raises(CollectiveMismatchError, match="allgather"):
        if comm.rank == 0:
            comm.allgather(np.ones((2, 3)))
        else:
            comm.allgather(np.ones((2, 4)))
    with pytest.raises(CollectiveMismatchError, match=r"broadcast #\d+ float64\[2\] \(1\)"):
        comm.broadcast(np.ones(2), root=comm.rank % 2)


def test_invalid_arguments_on_one_rank_fail_everywhere(comm):
    bad = comm.size - 1
    splits = [99] * comm.size if comm.rank == bad else None
    x = np.zeros(comm.size)
    if comm.rank == bad:
        with pytest.raises(ValueError, match=f"rank {bad}: alltoall splits"):
            comm.alltoall(x, splits=splits)
    else:
        with pytest.raises(
            CollectiveMismatchError, match=f"invalid arguments on rank\\(s\\) {bad}"
        ):
            comm.alltoall(x, splits=splits)
    with pytest.raises(TypeError, match="bool"):
        comm.allreduce(np.ones(3, bool), "sum")
    with pytest.raises(TypeError, match="complex"):
        comm.allreduce(np.ones(3, np.complex64), "max")
    with pytest.raises(ValueError, match="root must be in"):
        comm.broadcast(np.ones(3), root=comm.size)
    assert comm.allreduce(np.array([1]))[0] == comm.size


def test_checks_can_be_turned_off(comm):
    settings = hd.settings.Settings.from_env(check_collectives=False)
    fast = hd.Communicator(settings=settings)
    assert (fast.allreduce(np.ones(1000)) == comm.size).all()
    fast.barrier()
    fast.close()
