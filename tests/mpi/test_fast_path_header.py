"""The small all-reduce's fast path and the general path speak the same protocol.

On one node a small contiguous numpy array takes the one-barrier fast path; the same call on a
non-contiguous view of the same shape and dtype takes the general path (contiguity decides,
nothing else differs). Mixing the two across ranks in one call therefore meets only if both
paths post the same header (sequence number, kind, op, dtype, shape) in the same barrier, and
reduce in the same order: equal results, bitwise, on every rank; different shapes raise the same
mismatch on every rank, describing the same collective number.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
from mpi4py import MPI

import hpcdist as hd
from hpcdist.comm.checks import KINDS, Header, dtype_code, fingerprint
from hpcdist.errors import CollectiveMismatchError

pytestmark = pytest.mark.mpi(min_size=2)

OPS = ["sum", "mean", "min", "max", "prod"]
DTYPES = [np.float32, np.float64, np.float16, np.int32, np.uint8]
SHAPES = [(7,), (3, 4), (2, 1, 5)]


@pytest.fixture(autouse=True)
def _one_node(comm):
    if comm.num_nodes != 1:
        pytest.skip("the fast path serves one node only (HPCDIST_RANKS_PER_NODE splits it)")


def strided(a: np.ndarray) -> np.ndarray:
    """A writeable, non-contiguous array equal to ``a`` (same shape and dtype)."""
    buf = np.zeros((*a.shape, 2), dtype=a.dtype)
    buf[..., 0] = a
    view = buf[..., 0]
    assert not view.flags.c_contiguous and view.shape == a.shape
    return view


def inputs(rank: int, shape: tuple[int, ...], dtype: type) -> np.ndarray:
    """Small values whose product and sum stay exact in every dtype used here."""
    n = int(np.prod(shape))
    return ((np.arange(n) + rank) % 3 + 1).astype(dtype).reshape(shape)


def expected(size: int, shape: tuple[int, ...], dtype: type, op: str) -> np.ndarray:
    stack = np.stack([inputs(r, shape, dtype).astype(np.float64) for r in range(size)])
    value = {
        "sum": stack.sum(0),
        "mean": stack.sum(0) / size,
        "min": stack.min(0),
        "max": stack.max(0),
        "prod": stack.prod(0),
    }[op]
    if np.dtype(dtype).kind in "iu":
        value = np.floor(value)  # MEAN of integers rounds down
    return value.astype(dtype)


def every_rank(value: object) -> list:
    return MPI.COMM_WORLD.allgather(value)


def test_the_fast_path_fingerprint_is_the_headers():
    """The fingerprint the fast path posts is the one the general path's header posts."""
    for op in hd.ReduceOp:
        for dtype in DTYPES:
            for shape in [*SHAPES, (), (1, 2, 3, 4, 5, 6, 7, 8)]:
                code = dtype_code(np.dtype(dtype))
                header = Header(17, KINDS["allreduce"], op.code, code, shape)
                assert header.fingerprint() == fingerprint(
                    17, KINDS["allreduce"], op.code, code, shape
                )


@pytest.mark.parametrize("in_place", [False, True], ids=["new", "in_place"])
@pytest.mark.parametrize("op", OPS)
def test_fast_and_general_path_meet_in_one_call(comm, op, in_place):
    """Even ranks take the fast path, odd ranks the general one, in the same calls."""
    fast = comm.rank % 2 == 0
    for dtype in DTYPES:
        for shape in SHAPES:
            x = inputs(comm.rank, shape, dtype)
            arg = x if fast else strided(x)
            out = comm.allreduce_(arg, op) if in_place else comm.allreduce(arg, op)
            if in_place:
                assert out is arg
            assert out.shape == shape and out.dtype == np.dtype(dtype)
            np.testing.assert_array_equal(out, expected(comm.size, shape, dtype, op))
            # both paths reduce the same slots in rank order: bitwise the same everywhere
            assert len(set(every_rank(np.ascontiguousarray(out).tobytes()))) == 1
    # the sequence numbers stayed in step: a checked collective of another kind still meets
    assert (
        comm.broadcast(np.full(3, comm.rank, np.int64), root=comm.size - 1).tolist()
        == [comm.size - 1] * 3
    )


def test_paths_alternating_between_calls(comm):
    """Which rank takes which path changes from call to call (both buffer parities)."""
    for i in range(8):
        fast = (comm.rank + i) % 2 == 0
        x = np.full(5, comm.rank + i, np.float64)
        out = comm.allreduce(x if fast else strided(x))
        assert out.tolist() == [sum(range(comm.size)) + comm.size * i] * 5


def test_a_mismatch_between_the_paths_names_the_same_collective(comm):
    """The fast rank's and the general ranks' headers describe one collective number."""
    last = comm.size - 1
    n = 4 if comm.rank != last else 5
    x = np.ones(n, np.float32)
    with pytest.raises(CollectiveMismatchError) as info:
        comm.allreduce(x if comm.rank == 0 else strided(x), "max")
    text = str(info.value)
    assert len(set(every_rank(text))) == 1, "every rank must report the same mismatch"
    described = info.value.descriptions
    assert len(described) == comm.size
    assert all(d.startswith("allreduce #") for d in described), described
    numbers = {d.split("#")[1].split()[0] for d in described}
    assert len(numbers) == 1, f"the paths disagree on the collective number: {described}"
    assert described[0].endswith("MAX float32[4]") and described[last].endswith("MAX float32[5]")
    # the communicator stays usable, on both paths
    y = np.ones(3)
    assert (comm.allreduce(y if comm.rank % 2 else strided(y)) == comm.size).all()


def test_checks_off_the_paths_still_meet():
    """Without header checks neither path compares fingerprints, whatever the segment holds.

    The object collectives always compare headers, so they leave fingerprints in the segment
    (both buffer parities); a fast-path rank must not compare with them when the other ranks'
    general path posts none.
    """
    settings = hd.settings.Settings.from_env(check_collectives=False)
    short = hd.CommunicationOptions(timeout_seconds=20)
    unchecked = hd.Communicator(options=short, settings=settings)
    try:
        for i in range(6):
            assert unchecked.allgather_object(i) == [i] * unchecked.size
            for j in range(i % 3):  # 0, 1 or 2 phases after the object's: either parity
                fast = (unchecked.rank + i + j) % 2 == 0
                x = np.full(6, unchecked.rank + 1, np.float32)
                out = unchecked.allreduce(x if fast else strided(x))
                assert out.tolist() == [unchecked.size * (unchecked.size + 1) / 2] * 6
    finally:
        unchecked.close()


def test_the_fast_path_holds_the_runner_lock_against_async_collectives(comm):
    """Another thread's async all-reduces run while this thread takes the fast path.

    Every call is the same all-reduce (the fast and the general path post the same header),
    so any interleaving meets across ranks, provided each collective runs whole before the
    next starts: the fast path must hold the lock that the background thread holds.
    """
    if MPI.Query_thread() < MPI.THREAD_MULTIPLE:
        pytest.skip("async collectives run in the caller's thread below MPI_THREAD_MULTIPLE")
    calls = 300
    handles: list = []

    def start_async() -> None:
        for _ in range(calls):
            handles.append(comm.allreduce_async(np.ones(16)))

    thread = threading.Thread(target=start_async)
    thread.start()
    results = [comm.allreduce(np.ones(16)) for _ in range(calls)]
    thread.join()
    results += [handle.wait() for handle in handles]
    assert len(results) == 2 * calls
    assert all((r == comm.size).all() for r in results)
    assert (comm.allreduce(np.ones(3)) == comm.size).all()


def test_more_shapes_than_the_fast_path_keeps_plans_for(comm):
    """Each op, dtype and shape gets a plan; past 256 they are dropped and made again.

    300 shapes in turn, each twice (both buffer parities), then the first ones again, every
    result exact and the general path still meeting the fast one on the shapes made anew.
    """
    for round_ in range(2):
        for n in range(2, 302):
            x = np.full(n, comm.rank + 1, np.int64)
            for _ in range(2):
                arg = x if (comm.rank + n + round_) % 2 else strided(x)
                out = comm.allreduce(arg, "sum")
                assert out.shape == (n,) and (out == comm.size * (comm.size + 1) // 2).all()
    scalar = comm.allreduce(np.float64(comm.rank).reshape(()), "max")
    assert scalar.shape == () and isinstance(scalar, np.ndarray) and scalar == comm.size - 1
