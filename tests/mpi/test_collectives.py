"""Every collective against a numpy reference, for every op, dtype family and shape class.

Each rank can compute every rank's input (seeded by rank), so the expected result is computed
locally with numpy. Runs at any world size; `.ci/run` uses 2, 3 and 4 ranks, and 4 ranks in two
fake nodes (the hierarchical backend).
"""

import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mpi4py import MPI

import hpcdist as hd
import hpcdist.comm.collectives

pytestmark = pytest.mark.mpi(min_size=2)

IMPLS = ["auto", "mpi", "shm", "ring"]
DTYPES = [np.float32, np.float64, np.float16, np.int32, np.int64, np.uint8, np.int8, np.complex64]
SHAPES = [(), (0,), (1,), (7,), (3, 5), (2, 3, 4), (70000,), (300001,)]
REF = {
    "sum": lambda xs: np.sum(xs, axis=0),
    "mean": lambda xs: np.sum(xs, axis=0) / len(xs),
    "min": lambda xs: np.min(xs, axis=0),
    "max": lambda xs: np.max(xs, axis=0),
    "prod": lambda xs: np.prod(xs, axis=0),
}


def inputs(shape, dtype, size, seed=0):
    out = []
    for r in range(size):
        rng = np.random.default_rng(seed * 1000 + r)
        x = (
            rng.integers(-3, 4, size=shape)
            if np.dtype(dtype).kind in "iu"
            else rng.standard_normal(shape)
        )
        if np.dtype(dtype).kind == "u":
            x = np.abs(x)
        if np.dtype(dtype).kind == "c":
            x = x + 1j * rng.standard_normal(shape)
        out.append(np.asarray(x).astype(dtype))
    return out


def expected(op, xs, dtype):
    kind = np.dtype(dtype).kind
    wide = [x.astype(np.complex128 if kind == "c" else np.float64) for x in xs]
    ref = REF[op](wide)
    if op == "mean" and kind in "iu":
        ref = np.floor_divide(np.sum([x.astype(np.int64) for x in xs], axis=0), len(xs))
    return ref


def tolerance(dtype, size):
    return {"e": 2e-2 * size, "f": 1e-5 * size, "F": 1e-5 * size}.get(np.dtype(dtype).char, 1e-12)


def check_same_everywhere(result):
    digests = MPI.COMM_WORLD.allgather(np.ascontiguousarray(result).tobytes())
    assert all(d == digests[0] for d in digests), "ranks got different results"


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("op", ["sum", "mean", "min", "max", "prod"])
def test_allreduce_matches_numpy(comm, impl, dtype, op):
    if np.dtype(dtype).kind == "c" and op in ("min", "max"):
        pytest.skip("MIN/MAX of complex is undefined (tested as an error)")
    opts = hd.CommunicationOptions(implementation=impl)
    for shape in SHAPES:
        if op == "prod" and np.prod(shape, dtype=int) > 100:
            continue
        xs = inputs(shape, dtype, comm.size, seed=len(shape))
        mine = xs[comm.rank].copy()
        got = comm.allreduce(mine, op, opts)
        assert np.array_equal(mine, xs[comm.rank]), "input was modified"
        assert got.shape == shape and got.dtype == np.dtype(dtype)
        ref = expected(op, xs, dtype)
        np.testing.assert_allclose(
            got,
            ref.astype(got.dtype),
            rtol=tolerance(dtype, comm.size),
            atol=tolerance(dtype, comm.size),
        )
        check_same_everywhere(got)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("op", ["sum", "mean", "max"])
@pytest.mark.parametrize("shape", [(5,), (3, 4), (0,), (70000,)])
def test_in_place_writes_into_the_input(comm, impl, op, shape):
    opts = hd.CommunicationOptions(implementation=impl)
    for dtype in (np.float32, np.int64):
        xs = inputs(shape, dtype, comm.size, seed=3)
        x = xs[comm.rank].copy()
        returned = comm.allreduce_(x, op, opts)
        assert returned is x
        ref = expected(op, xs, dtype).astype(dtype)
        np.testing.assert_allclose(x, ref, rtol=1e-5, atol=1e-5)
        check_same_everywhere(x)


@pytest.mark.parametrize("impl", IMPLS)
def test_in_place_non_contiguous_and_bool(comm, impl):
    opts = hd.CommunicationOptions(implementation=impl)
    base = np.arange(40, dtype=np.float64).reshape(4, 10) * (comm.rank + 1)
    view = base[:, ::3]  # non-contiguous
    got = comm.allreduce(view, "sum", opts)
    assert np.allclose(got, np.arange(40).reshape(4, 10)[:, ::3] * comm.size * (comm.size + 1) / 2)
    comm.allreduce_(view, "sum", opts)
    assert np.allclose(base[:, ::3], got)
    assert np.allclose(base[:, 1], np.arange(40).reshape(4, 10)[:, 1] * (comm.rank + 1))
    flags = np.array([comm.rank == 0, True, False])
    assert comm.allreduce(flags, "max", opts).tolist() == [True, True, False]
    assert comm.allreduce(flags, "min", opts).tolist() == [False, True, False]
    scalar = comm.allreduce(np.float64(comm.rank), "sum", opts)
    assert float(scalar) == comm.size * (comm.size - 1) / 2


def test_broadcast_allgather_reduce_scatter_alltoall(comm):
    n, r = comm.size, comm.rank
    for shape in [(3,), (2, 3), (0,), (200000,)]:
        x = np.full(shape, r, dtype=np.float32)
        for root in range(n):
            assert (comm.broadcast(x, root=root) == root).all()
        y = x.copy()
        comm.broadcast_(y, root=n - 1)
        assert (y == n - 1).all()
    got = comm.allgather(np.full((r + 1, 2), r, dtype=np.int64))
    assert got.tolist() == [[i, i] for i in range(n) for _ in range(i + 1)]
    assert comm.allgather(np.array(r)).tolist() == list(range(n))
    rows = 2 * n + 1
    x = np.arange(rows * 3, dtype=np.float64).reshape(rows, 3) * (r + 1)
    part = comm.reduce_scatter(x, "sum")
    full = np.arange(rows * 3).reshape(rows, 3) * n * (n + 1) / 2
    bounds = np.cumsum([0] + [rows // n + (1 if i < rows % n else 0) for i in range(n)])
    assert np.allclose(part, full[bounds[r] : bounds[r + 1]])
    mean = comm.reduce_scatter(x, "mean")
    assert np.allclose(mean, full[bounds[r] : bounds[r + 1]] / n)
    send = np.array([[100 * r + d] for d in range(n)], dtype=np.int32)
    assert comm.alltoall(send).ravel().tolist() == [100 * s + r for s in range(n)]
    splits = [(d + r) % 2 + 1 for d in range(n)]
    x = np.repeat(np.arange(n), splits) + 1000 * r
    got = comm.alltoall(x, splits=splits)
    assert got.tolist() == [1000 * s + r for s in range(n) for _ in range((r + s) % 2 + 1)]


def test_objects_and_barrier(comm):
    objs = comm.allgather_object({"rank": comm.rank, "big": "x" * (comm.rank * 1000)})
    assert [o["rank"] for o in objs] == list(range(comm.size))
    assert comm.broadcast_object(("from", comm.rank), root=comm.size - 1) == ("from", comm.size - 1)
    comm.barrier()


@pytest.mark.parametrize("bytes_per_pack", [0, 64, 1 << 20])
def test_grouped_allreduce(comm, bytes_per_pack):
    opts = hd.CommunicationOptions(bytes_per_pack=bytes_per_pack)
    rng = np.random.default_rng(0)
    shapes = [tuple(rng.integers(1, 20, size=rng.integers(1, 3))) for _ in range(30)]
    dtypes = [np.float32, np.int64, np.float64]
    xs = [np.full(s, comm.rank + 1, dtype=dtypes[i % 3]) for i, s in enumerate(shapes)]
    got = comm.grouped_allreduce(xs, "sum", opts)
    total = comm.size * (comm.size + 1) // 2
    for x, g in zip(xs, got, strict=True):
        assert g.shape == x.shape and g.dtype == x.dtype
        assert (g == total).all()
    assert comm.grouped_allreduce([], "sum", opts) == []


def test_async_variants(comm):
    handles = [comm.allreduce_async(np.full(1000, comm.rank + i, np.float64)) for i in range(5)]
    x = np.ones(10)
    inplace = comm.allreduce_async_(x)
    gathered = comm.allgather_async(np.array([comm.rank]))
    grouped = comm.grouped_allreduce_async([np.ones(3), np.ones(4)])
    for i, h in enumerate(handles):
        assert np.allclose(h.wait(), sum(r + i for r in range(comm.size)))
        assert h.test()
    inplace.wait()
    assert (x == comm.size).all()
    assert gathered.wait().tolist() == list(range(comm.size))
    assert all((g == comm.size).all() for g in grouped.wait())
    # A synchronous call after async ones keeps the order on every rank.
    h = comm.broadcast_async(np.array([comm.rank]), root=0)
    assert comm.allreduce(np.array([1]))[0] == comm.size
    assert h.wait()[0] == 0


@pytest.mark.parametrize("compression", ["fp16", "bf16"])
@pytest.mark.parametrize("impl", ["auto", "mpi"])
def test_compression_error_bound(comm, compression, impl):
    from hpcdist.comm.compression import unit_roundoff

    xs = inputs((5000,), np.float32, comm.size, seed=7)
    opts = hd.CommunicationOptions(compression=compression, implementation=impl)
    got = comm.allreduce(xs[comm.rank], "sum", opts)
    exact = np.sum([x.astype(np.float64) for x in xs], axis=0)
    bound = (comm.size + 1) * unit_roundoff(compression) * np.sum(np.abs(xs), axis=0) * 1.01
    assert got.dtype == np.float32
    assert np.all(np.abs(got - exact) <= bound + 1e-6)
    assert np.abs(got - exact).max() > 0  # really compressed
    check_same_everywhere(got)
    mean = comm.allreduce(xs[comm.rank], "mean", opts)
    assert np.all(np.abs(mean - exact / comm.size) <= bound / comm.size + 1e-6)
    ints = comm.allreduce(np.arange(5), "sum", opts)  # integers are never compressed
    assert ints.tolist() == [i * comm.size for i in range(5)]


@settings(max_examples=25, deadline=None, derandomize=True, database=None)
@given(
    shape=st.lists(st.integers(0, 9), min_size=0, max_size=3).map(tuple),
    dtype=st.sampled_from([np.float64, np.int32, np.float32]),
    op=st.sampled_from(["sum", "min", "max", "mean"]),
    impl=st.sampled_from(IMPLS),
)
def test_property_random_shapes(shape, dtype, op, impl):
    comm = hd.comm.world()
    xs = inputs(shape, dtype, comm.size, seed=hash(shape) % 1000)
    got = comm.allreduce(xs[comm.rank], op, hd.CommunicationOptions(implementation=impl))
    np.testing.assert_allclose(got, expected(op, xs, dtype).astype(got.dtype), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("root", [0, -1])
def test_unpicklable_objects_raise_on_every_rank(comm, root):
    """Issue item 3: the rank whose object cannot be pickled raises its pickling error, every
    other rank `CollectiveMismatchError` naming it; the communicator stays usable."""
    root = root % comm.size
    lock = threading.Lock()
    bad = root
    for call in (
        lambda: comm.allgather_object(lock if comm.rank == bad else comm.rank),
        lambda: comm.broadcast_object(lock if comm.rank == root else None, root=root),
    ):
        if comm.rank == bad:
            with pytest.raises(TypeError, match="pickle") as info:
                call()
            assert any(f"rank {bad} could not pickle" in n for n in info.value.__notes__)
        else:
            with pytest.raises(hd.errors.CollectiveMismatchError, match=f"rank\\(s\\) {bad}"):
                call()
    assert comm.allgather_object(comm.rank) == list(range(comm.size))
    assert comm.broadcast_object({"root": root} if comm.rank == root else None, root) == {
        "root": root
    }


def test_objects_travel_in_rounds(comm, monkeypatch):
    monkeypatch.setattr(hpcdist.comm.collectives, "_OBJECT_ROUND_BYTES", 7)

    def obj(r):
        return {"r": r, "text": "x" * (3 * r), "array": np.arange(r * 10)}

    got = comm.allgather_object(obj(comm.rank))
    assert [g["r"] for g in got] == list(range(comm.size))
    assert all(g["text"] == obj(r)["text"] for r, g in enumerate(got))
    assert all(np.array_equal(g["array"], obj(r)["array"]) for r, g in enumerate(got))
    big = comm.broadcast_object(np.arange(1000) if comm.rank == 1 else None, root=1)
    assert np.array_equal(big, np.arange(1000))
