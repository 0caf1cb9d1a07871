"""Cross-rank checks: mismatches raise the same error on every rank, and the library goes on."""

import numpy as np
import pytest
from mpi4py import MPI

import hpcdist as hd
from hpcdist.errors import CollectiveMismatchError

pytestmark = pytest.mark.mpi(min_size=2)

IMPLS = ["auto", "mpi", "shm", "ring"]


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


def raises_everywhere(comm, bad, call, local_error, match):
    """``call()`` raises ``local_error`` on rank ``bad`` and names it on every other rank."""
    if comm.rank == bad:
        with pytest.raises(local_error, match=match):
            call()
    else:
        with pytest.raises(
            CollectiveMismatchError, match=f"invalid arguments on rank\\(s\\) {bad}"
        ):
            call()


@pytest.mark.parametrize("impl", IMPLS)
def test_a_local_failure_before_the_check_is_agreed_and_the_sequence_stays(comm, impl):
    """Issue items 4 and 8: an object array, a bad op or root on one rank fails on every rank
    at that call, with "invalid arguments" named (not the poison number), and the
    communicator stays in step."""
    opts = hd.CommunicationOptions(implementation=impl)
    bad = comm.size - 1
    x = np.ones(4)
    odd = np.array([1, "a", None, 2.0], dtype=object) if comm.rank == bad else x
    raises_everywhere(comm, bad, lambda: comm.allreduce(odd, options=opts), TypeError, "object")
    raises_everywhere(comm, bad, lambda: comm.broadcast(odd, options=opts), TypeError, "object")
    raises_everywhere(comm, bad, lambda: comm.allgather(odd, options=opts), TypeError, "object")
    raises_everywhere(
        comm, bad, lambda: comm.reduce_scatter(odd, options=opts), TypeError, "object"
    )
    raises_everywhere(comm, bad, lambda: comm.alltoall(odd[:0], options=opts), TypeError, "object")
    raises_everywhere(
        comm, bad, lambda: comm.grouped_allreduce([x, odd], options=opts), TypeError, "object"
    )
    op = "average" if comm.rank == bad else "sum"
    raises_everywhere(comm, bad, lambda: comm.allreduce(x, op, opts), ValueError, "reduce op")
    raises_everywhere(comm, bad, lambda: comm.reduce_scatter(x, op, opts), ValueError, "reduce op")
    raises_everywhere(comm, bad, lambda: comm.grouped_allreduce([x], op, opts), ValueError, "op")
    root = comm.size if comm.rank == bad else 0
    raises_everywhere(comm, bad, lambda: comm.broadcast(x, root, opts), ValueError, "root must be")
    raises_everywhere(
        comm, bad, lambda: comm.broadcast_object(1, root, opts), ValueError, "root must be"
    )
    # Every rank is at the same sequence number: the next collectives work.
    assert (comm.allreduce(np.ones(3), options=opts) == comm.size).all()
    assert comm.broadcast(np.array([comm.rank]), root=bad, options=opts)[0] == bad
    assert comm.allgather_object(comm.rank, opts) == list(range(comm.size))


@pytest.mark.parametrize("impl", IMPLS)
def test_non_numeric_arrays_are_a_type_error_on_every_rank(comm, impl):
    """Issue item 6: string arrays are not "added"."""
    opts = hd.CommunicationOptions(implementation=impl)
    for x in (np.array(["1", "2"]), np.array([b"a"]), np.array([1, 2], dtype="datetime64[s]")):
        with pytest.raises(TypeError, match="numeric or bool"):
            comm.allreduce(x, options=opts)
        with pytest.raises(TypeError, match="numeric or bool"):
            comm.broadcast(x, options=opts)
    assert comm.allreduce(np.array([1]), options=opts)[0] == comm.size


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("n", [5, 70000])
def test_byte_order_is_part_of_the_dtype(comm, impl, n):
    """Issue item 6: ``>f8`` and ``<f8`` differ (no silently wrong sums); big-endian arrays on
    every rank reduce correctly; ``int64`` and ``longlong`` are the same type."""
    opts = hd.CommunicationOptions(implementation=impl)
    values = np.arange(n, dtype=np.float64) + comm.rank
    total = sum(np.arange(n, dtype=np.float64) + r for r in range(comm.size))
    mixed = values.astype(">f8" if comm.rank == 0 else "<f8")
    with pytest.raises(CollectiveMismatchError, match=r"float64 \(big-endian\)\[\d+\]"):
        comm.allreduce(mixed, options=opts)
    big = values.astype(">f8")
    got = comm.allreduce(big, options=opts)
    assert got.dtype == big.dtype and np.array_equal(got, total)
    inplace = big.copy()
    comm.allreduce_(inplace, options=opts)
    assert np.array_equal(inplace, total)
    rows = comm.reduce_scatter(big.reshape(n, 1), "max", opts)
    assert rows.dtype == big.dtype and (rows[:, 0] >= 0).all()
    assert np.array_equal(comm.broadcast(big, root=0, options=opts), np.arange(n))
    gathered = comm.allgather(big, options=opts)
    assert gathered.dtype == big.dtype
    assert np.array_equal(
        gathered, np.concatenate([values - comm.rank + r for r in range(comm.size)])
    )
    swapped = comm.alltoall(np.repeat(big[:1], comm.size), options=opts)
    assert swapped.dtype == big.dtype and np.array_equal(swapped, np.arange(comm.size))
    ints = np.ones(n, dtype=np.longlong if comm.rank % 2 else np.int64)
    assert (comm.allreduce(ints, options=opts) == comm.size).all()
    assert comm.allgather(ints[:2], options=opts).shape == (2 * comm.size,)


def test_checks_off_still_agree_on_object_failures(comm):
    settings = hd.settings.Settings.from_env(check_collectives=False)
    fast = hd.Communicator(settings=settings)
    bad = fast.size - 1
    obj = (lambda: 1) if fast.rank == bad else 1
    raises_everywhere(fast, bad, lambda: fast.allgather_object(obj), Exception, "pickle")
    assert fast.allgather_object(fast.rank) == list(range(fast.size))
    fast.close()


def test_close_is_bounded_by_the_deadline_on_every_rank(comm):
    """A rank that closes alone gets a deadline error naming the others; the others, closing
    after it gave up, get one naming it (instead of freeing windows it never frees)."""
    short = hd.CommunicationOptions(timeout_seconds=1)
    doomed = hd.Communicator(options=short)
    others = ",".join(str(r) for r in range(1, comm.size))
    if comm.rank == 0:
        with pytest.raises(hd.errors.DeadlineExceededError, match=f"rank\\(s\\) {others} never"):
            doomed.close()
    MPI.COMM_WORLD.Barrier()  # the others close once rank 0 has given up
    if comm.rank != 0:
        with pytest.raises(
            hd.errors.DeadlineExceededError, match="rank 0 gave up closing the communicator"
        ):
            doomed.close()
    doomed.close()  # closing again does nothing
    assert (comm.allreduce(np.ones(2)) == comm.size).all()
