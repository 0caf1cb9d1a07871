"""``grouped_allreduce_``: tensor fusion that writes each result into its own input.

On one node through shared memory the results go from the segment straight into the arrays
(`ShmBackend.allreduce_gather` with no result buffer); elsewhere (MPI, ring, compression, other
nodes, non-contiguous arrays) a pack is reduced and copied back. Either way the results must be
those of one ``allreduce`` per tensor, bit for bit, and bad input (read-only arrays, arrays
sharing memory) must raise on every rank and leave the communicator usable. Runs at any world
size.
"""

from __future__ import annotations

import numpy as np
import pytest

import hpcdist as hd
from hpcdist.errors import CollectiveMismatchError
from tests.fusion_cases import MPI_OPTS, tensors

pytestmark = pytest.mark.mpi(min_size=2)

PACKS = [64 << 10, 1 << 20, 0]


@pytest.mark.parametrize("bytes_per_pack", PACKS)
@pytest.mark.parametrize(
    ("dtype", "op"),
    [(np.float32, "sum"), (np.float64, "mean"), (np.int32, "max"), (np.int64, "mean")],
)
def test_each_input_receives_what_allreduce_returns(comm, bytes_per_pack, dtype, op) -> None:
    xs = tensors(comm.rank, dtype, count=40, strided=False)
    want = [comm.allreduce(x, op, MPI_OPTS) for x in xs]
    addresses = [x.__array_interface__["data"][0] for x in xs]
    got = comm.grouped_allreduce_(xs, op, hd.CommunicationOptions(bytes_per_pack=bytes_per_pack))
    assert all(g is x for g, x in zip(got, xs, strict=True))
    assert [x.__array_interface__["data"][0] for x in xs] == addresses
    for i, (x, w) in enumerate(zip(xs, want, strict=True)):
        assert x.dtype == w.dtype and x.shape == w.shape, i
        np.testing.assert_array_equal(x, w, err_msg=f"tensor {i}")


@pytest.mark.parametrize("impl", ["mpi", "ring", "shm"])
def test_other_paths_copy_the_pack_back(comm, impl) -> None:
    """Non-contiguous arrays, bool, compression and other backends: pack, reduce, copy back."""
    base = np.arange(40, dtype=np.float32).reshape(8, 5) * (comm.rank + 1)
    strided = base[:, ::2]  # not contiguous: written back through its view
    flags = np.array([comm.rank == 0, True, False])
    plain = np.full(70_000, comm.rank + 1, np.float64)
    opts = hd.CommunicationOptions(implementation=impl, bytes_per_pack=1 << 16)
    comm.grouped_allreduce_([strided, plain], "sum", opts)
    comm.grouped_allreduce_([flags], "max", opts)
    total = comm.size * (comm.size + 1) // 2
    np.testing.assert_array_equal(strided, np.arange(40.0).reshape(8, 5)[:, ::2] * total)
    untouched = np.arange(40.0).reshape(8, 5)[:, 1::2] * (comm.rank + 1)
    np.testing.assert_array_equal(base[:, 1::2], untouched)
    assert flags.tolist() == [True, True, False] and (plain == total).all()
    halves = [np.full(n, comm.rank + 1, np.float32) for n in (10, 100_000)]
    comp = hd.CommunicationOptions(implementation=impl, compression="fp16", bytes_per_pack=0)
    comm.grouped_allreduce_(halves, "sum", comp)
    assert all((h == total).all() for h in halves)


def test_views_of_one_buffer_that_do_not_overlap(comm) -> None:
    flat = np.arange(3000, dtype=np.float32) * (comm.rank + 1)
    parts = [flat[:1000], flat[1000:2500].reshape(3, 500), flat[2500:], flat[::3][:0]]
    interleaved = np.arange(20.0) * (comm.rank + 1)
    comm.grouped_allreduce_([*parts, interleaved[::2], interleaved[1::2]])
    total = comm.size * (comm.size + 1) // 2
    np.testing.assert_array_equal(flat, np.arange(3000, dtype=np.float32) * total)
    np.testing.assert_array_equal(interleaved, np.arange(20.0) * total)


def test_every_rank_gets_the_same_bits(comm) -> None:
    rng = np.random.default_rng(comm.rank)
    xs = [rng.standard_normal(s).astype(np.float32) for s in (300_000, 5, 70_000, 1 << 19)]
    comm.grouped_allreduce_(xs)
    flat = np.concatenate([x.ravel() for x in xs])
    everyone = comm.allgather(flat[None, :])
    for r in range(comm.size):
        assert everyone[r].tobytes() == flat.tobytes(), r


def _bad_on_last_rank(comm, bad) -> list[np.ndarray]:
    good = [np.ones(100, np.float32), np.ones(200_000, np.float32)]
    return bad(good) if comm.rank == comm.size - 1 else good


def test_a_read_only_array_raises_on_every_rank(comm) -> None:
    def bad(xs):
        xs[1].flags.writeable = False
        return xs

    xs = _bad_on_last_rank(comm, bad)
    kind = TypeError if comm.rank == comm.size - 1 else CollectiveMismatchError
    with pytest.raises(kind, match=r"writeable numpy|rank"):
        comm.grouped_allreduce_(xs)
    assert (xs[0] == 1).all() and (xs[1] == 1).all()  # nothing was reduced
    with pytest.raises(TypeError, match=r"got list at index 0"):
        comm.grouped_allreduce_([[1.0, 2.0]])
    ok = [np.ones(5)]
    comm.grouped_allreduce_(ok)
    assert (ok[0] == comm.size).all()


def test_arrays_sharing_memory_raise_on_every_rank(comm) -> None:
    buf = np.ones(1000, np.float32)
    for xs in ([buf, buf], [buf[:600], buf[500:]], [buf, buf[10:20].reshape(2, 5)]):
        with pytest.raises(ValueError, match=r"share no memory, but arrays 0 and 1 overlap"):
            comm.grouped_allreduce_(xs)
    assert (buf == 1).all()
    comm.grouped_allreduce_([buf[:500], buf[500:]])
    assert (buf == comm.size).all()


def test_empty_list_and_async(comm) -> None:
    assert comm.grouped_allreduce_([]) == []
    xs = [np.full(7, comm.rank + 1.0), np.full((300, 300), 2.0, np.float32)]
    handle = comm.grouped_allreduce_async_(xs, "mean")
    got = handle.wait()
    assert got[0] is xs[0] and got[1] is xs[1]
    np.testing.assert_allclose(xs[0], (comm.size + 1) / 2)
    assert (xs[1] == 2.0).all()
