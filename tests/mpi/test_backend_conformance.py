"""One conformance test for every backend: the whole `Backend` contract, run against each.

The backends come from the public registry (`hpcdist.comm.available_backends`): the host ones
always, the GPU ones (NCCL, hierarchical NCCL, CUDA-aware MPI) where CuPy sees a GPU per rank,
which in CI is the device simulator (``PYTHONPATH=tests/devicesim DEVICESIM_GPUS=4``).
Each backend is checked on what it declares: every collective, every declared dtype, in place
and out of place, its compression formats, and a header mismatch raising
`CollectiveMismatchError` on every rank for every collective.
"""

import numpy as np
import pytest

import hpcdist.comm as hc
from hpcdist.cluster.devices import visible_gpu_count
from hpcdist.cluster.gpus import bind_gpu
from hpcdist.comm import Backend, ReduceOp, available_backends
from hpcdist.comm.backend import COLLECTIVES
from hpcdist.comm.checks import KINDS, Header
from hpcdist.comm.compression import CompressedBackend, get_codec, unit_roundoff
from hpcdist.comm.deadline import Deadline
from hpcdist.errors import CollectiveMismatchError

pytestmark = pytest.mark.mpi(min_size=2)

NAMES = ["mpi", "ring", "hierarchical", "shm", "nccl", "nccl-hierarchical", "cuda-aware-mpi"]
GPU_NAMES = {"nccl", "nccl-hierarchical", "cuda-aware-mpi"}
OPS = [ReduceOp.SUM, ReduceOp.MIN, ReduceOp.MAX, ReduceOp.PROD]


@pytest.fixture(scope="module")
def comm():
    world = hc.world()
    if visible_gpu_count() >= world.local_size:
        bind_gpu(world.local_rank)  # one GPU per rank, as NCCL needs
    return world


@pytest.fixture(scope="module")
def registry(comm):
    return available_backends(comm)


def get_backend(comm, registry, name):
    backend = registry.get(name)
    if backend is None:
        if name == "shm":
            pytest.skip("the plain shared-memory backend spans one node only")
        pytest.skip(f"{name} needs CuPy with a GPU per rank (or the device simulator)")
    if name == "cuda-aware-mpi":
        cupy = pytest.importorskip("cupy")
        if not (comm.settings.cuda_aware_mpi or getattr(cupy, "__devicesim__", False)):
            pytest.skip("the MPI library is not declared CUDA-aware (HPCDIST_CUDA_AWARE_MPI)")
    return backend


def xp_of(backend):
    if "gpu" in backend.devices:
        return pytest.importorskip("cupy")
    return np


def host(a):
    return a.get() if hasattr(a, "get") and not isinstance(a, np.ndarray) else np.asarray(a)


def values(count, rank, dtype):
    """Small values, so that products over 4 ranks fit every integer dtype."""
    return ((np.arange(count) % 3) + rank % 2).astype(dtype)


def header(seq, kind, dtype="d", shape=(), op=0, extra=0):
    return Header(seq, KINDS[kind], op, ord(np.dtype(dtype).char), tuple(shape), extra)


def deadline():
    return Deadline(30, None)


def test_registry_lists_backends_that_declare_the_contract(comm, registry):
    assert {"mpi", "ring", "hierarchical"} <= set(registry)
    assert ("shm" in registry) == (comm.num_nodes == 1)
    if visible_gpu_count() >= comm.local_size and hc.nccl_backend.nccl_available():
        assert set(registry) >= GPU_NAMES
    for name, backend in registry.items():
        assert isinstance(backend, Backend)
        assert backend.name == name
        assert backend.collectives <= COLLECTIVES
        assert backend.devices and backend.devices <= {"host", "gpu"}
        assert backend.dtypes
        assert isinstance(backend.in_place, bool)
        assert backend.compression <= {"fp16", "bf16"}
        for collective in COLLECTIVES:  # every collective, carried or delegated
            assert callable(getattr(type(backend), collective))


@pytest.mark.parametrize("name", NAMES)
def test_allreduce_every_declared_dtype(comm, registry, name):
    backend = get_backend(comm, registry, name)
    xp = xp_of(backend)
    seq = 0
    for char in sorted(backend.dtypes):
        dtype = np.dtype(char)
        ops = [ReduceOp.SUM, ReduceOp.PROD] if dtype.kind == "c" else OPS
        counts = [0, 1, 5, 1000, 70001] + ([600000] if char == "d" else [])
        for count in counts:
            for op in ops:
                if op is ReduceOp.PROD and count > 1000:
                    continue
                seq += 1
                stacked = np.stack([values(count, r, np.float64) for r in range(comm.size)])
                ref = {"SUM": stacked.sum(0), "MIN": stacked.min(0), "MAX": stacked.max(0)}.get(
                    op.name, stacked.prod(0)
                )
                rtol = 2e-3 if dtype == np.float16 else 1e-6
                src = xp.asarray(values(count, comm.rank, dtype))
                keep = host(src).copy()
                dst = xp.empty_like(src)
                h = header(seq, "allreduce", dtype, src.shape, op.code)
                backend.allreduce(src, dst, op, h, deadline())
                np.testing.assert_allclose(host(dst).astype(np.complex128), ref, rtol=rtol)
                assert np.array_equal(host(src), keep)  # out of place leaves the input alone
                if backend.in_place:
                    buf = src.copy()
                    backend.allreduce(buf, buf, op, None, deadline())
                    np.testing.assert_allclose(host(buf).astype(np.complex128), ref, rtol=rtol)


@pytest.mark.parametrize("name", NAMES)
def test_compressed_allreduce_for_every_declared_format(comm, registry, name):
    backend = get_backend(comm, registry, name)
    if not backend.compression:
        with pytest.raises(TypeError, match="cannot reduce"):
            CompressedBackend(backend, get_codec("fp16"))
        return
    xp = xp_of(backend)
    xs = [np.linspace(-2, 2, 5001, dtype=np.float32) * (r + 1) for r in range(comm.size)]
    exact = np.sum([x.astype(np.float64) for x in xs], axis=0)
    for fmt in sorted(backend.compression):
        wrapped = CompressedBackend(backend, get_codec(fmt))
        bound = (comm.size + 1) * unit_roundoff(fmt) * np.sum(np.abs(xs), axis=0) * 1.01
        src = xp.asarray(xs[comm.rank])
        dst = xp.empty_like(src)
        h = header(1, "allreduce", np.float32, src.shape, ReduceOp.SUM.code)
        wrapped.allreduce(src, dst, ReduceOp.SUM, h, deadline())
        got = host(dst)
        assert got.dtype == np.float32
        assert np.all(np.abs(got - exact) <= bound + 1e-6)
        everyone = comm.allgather(got[None])
        assert np.array_equal(everyone.min(0), everyone.max(0))  # identical on every rank


@pytest.mark.parametrize("name", NAMES)
def test_broadcast_allgather_reduce_scatter_alltoall_barrier(comm, registry, name):
    backend = get_backend(comm, registry, name)
    xp = xp_of(backend)
    n, r = comm.size, comm.rank
    for count in [0, 1, 1000, 300001]:
        buf = xp.asarray(np.full(count, r, np.float64))
        backend.broadcast(buf, n - 1, header(1, "broadcast", "d", (count,), 0, n), deadline())
        assert (host(buf) == n - 1).all()
    # all-gather of uneven blocks: rank q sends q + 1 elements
    counts = [q + 1 for q in range(n)]
    for dtype in (np.float32, np.int64, np.uint8):
        src = xp.asarray(np.full(r + 1, r, dtype))
        dst = xp.empty(sum(counts), dtype=dtype)
        backend.allgather(src, dst, counts, header(2, "allgather", dtype), deadline())
        assert host(dst).tolist() == [q for q in range(n) for _ in range(q + 1)]
    # reduce-scatter of uneven blocks, every declared op
    for char in sorted(backend.dtypes & set("ifdbBlq")):
        dtype = np.dtype(char)
        for op in OPS:
            full = np.stack([values(sum(counts), q, np.float64) for q in range(n)])
            ref = {"SUM": full.sum(0), "MIN": full.min(0), "MAX": full.max(0)}.get(
                op.name, full.prod(0)
            )
            src = xp.asarray(values(sum(counts), r, dtype))
            dst = xp.empty(counts[r], dtype=dtype)
            h = header(3, "reduce_scatter", dtype, (sum(counts),), op.code)
            backend.reduce_scatter(src, dst, counts, op, h, deadline())
            start = sum(counts[:r])
            np.testing.assert_allclose(host(dst), ref[start : start + counts[r]])
    # all-to-all: rank r sends q + 1 elements of value 100 r + q to rank q
    send = xp.asarray(np.concatenate([np.full(q + 1, 100 * r + q) for q in range(n)]))
    recv = xp.empty(n * (r + 1), dtype=send.dtype)
    send_counts, recv_counts = [q + 1 for q in range(n)], [r + 1] * n
    backend.alltoall(send, recv, send_counts, recv_counts, header(4, "alltoall"), deadline())
    assert host(recv).tolist() == [100 * q + r for q in range(n) for _ in range(r + 1)]
    backend.barrier(header(5, "barrier"), deadline())
    backend.barrier(None, deadline())


def _mismatch_cases(backend, xp, comm):
    """Each collective with a header whose shape differs on rank 0 (valid buffers everywhere)."""
    n, r = comm.size, comm.rank
    shape = (5,) if r == 0 else (4,)
    op = ReduceOp.SUM
    ones = xp.asarray(np.ones(4 * n))
    yield (
        "allreduce",
        lambda: backend.allreduce(
            ones, xp.empty_like(ones), op, header(1, "allreduce", "d", shape, op.code), deadline()
        ),
    )
    yield (
        "broadcast",
        lambda: backend.broadcast(
            ones.copy(), 0, header(2, "broadcast", "d", shape, 0, 1), deadline()
        ),
    )
    yield (
        "allgather",
        lambda: backend.allgather(
            ones[:4], xp.empty(4 * n), [4] * n, header(3, "allgather", "d", shape), deadline()
        ),
    )
    yield (
        "reduce_scatter",
        lambda: backend.reduce_scatter(
            ones, xp.empty(4), [4] * n, op, header(4, "reduce_scatter", "d", shape, 1), deadline()
        ),
    )
    yield (
        "alltoall",
        lambda: backend.alltoall(
            ones, xp.empty(4 * n), [4] * n, [4] * n, header(5, "alltoall", "d", shape), deadline()
        ),
    )
    yield "barrier", lambda: backend.barrier(header(6, "barrier", "d", shape), deadline())


@pytest.mark.parametrize("name", NAMES)
def test_mismatch_raises_on_every_rank_for_every_collective(comm, registry, name):
    backend = get_backend(comm, registry, name)
    xp = xp_of(backend)
    seen = set()
    for collective, call in _mismatch_cases(backend, xp, comm):
        seen.add(collective)
        with pytest.raises(
            CollectiveMismatchError, match=r"float64\[4\].*float64\[5\]|float64\[5\].*float64\[4\]"
        ):
            call()
    assert seen == COLLECTIVES
    ok = xp.ones(3)
    backend.allreduce(ok, ok, ReduceOp.SUM, header(7, "allreduce", "d", (3,), 1), deadline())
    assert (host(ok) == comm.size).all()  # still usable
