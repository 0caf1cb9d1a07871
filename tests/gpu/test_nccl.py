"""The NCCL backend on one GPU: the Backend contract and every collective on CuPy arrays.

With one rank NCCL still runs every operation (a one-rank communicator), so these tests
exercise the bootstrap over MPI, the device-side conversions and the stream handling for real.
Multi-GPU and multi-node NCCL need more GPUs than this test machine has.
"""

import numpy as np
import pytest
from mpi4py import MPI

import hpcdist as hd
from hpcdist.comm import Backend
from hpcdist.comm.checks import Header
from hpcdist.comm.deadline import Deadline
from hpcdist.comm.nccl_backend import NcclBackend, bf16_to_float32, float32_to_bf16

cupy = pytest.importorskip("cupy", reason="CuPy is not installed (GPU tests need it)")
NCCL = hd.CommunicationOptions(implementation="nccl")


@pytest.fixture(scope="module")
def comm():
    return hd.Communicator(options=NCCL)


def test_backend_contract_on_the_device():
    backend = NcclBackend(MPI.COMM_SELF, 0)
    assert isinstance(backend, Backend) and backend.name == "nccl"
    for count in [1, 5, 1000, 600000]:
        for dtype in (cupy.float64, cupy.int32, cupy.float32, cupy.float16):
            for op in (hd.ReduceOp.SUM, hd.ReduceOp.MIN, hd.ReduceOp.MAX, hd.ReduceOp.PROD):
                src = (cupy.arange(count) % 7).astype(dtype)
                keep = src.copy()
                dst = cupy.empty_like(src)
                header = Header(1, 1, op.code, ord(np.dtype(dtype).char), src.shape)
                backend.allreduce(src, dst, op, header, Deadline(30, None))
                cupy.testing.assert_array_equal(dst, keep)  # one rank: the reduction is x
                cupy.testing.assert_array_equal(src, keep)
    buf = cupy.arange(9, dtype=cupy.float32)
    backend.broadcast(buf, 0, None, Deadline(None, None))
    cupy.testing.assert_array_equal(buf, cupy.arange(9, dtype=cupy.float32))
    backend.close()


@pytest.mark.parametrize(
    "dtype", ["float16", "float32", "float64", "int8", "uint8", "int16", "int32", "int64"]
)
@pytest.mark.parametrize("op", ["sum", "mean", "min", "max", "prod"])
def test_allreduce_stays_on_the_device(comm, dtype, op):
    x = (cupy.arange(24) % 5 + 1).astype(dtype).reshape(2, 3, 4)
    keep = x.copy()
    out = comm.allreduce(x, op)
    cupy.testing.assert_array_equal(x, keep)  # the input is left alone
    assert isinstance(out, cupy.ndarray) and out.dtype == x.dtype and out.shape == x.shape
    assert out.device.id == x.device.id
    host = cupy.asnumpy(x)
    cupy.testing.assert_allclose(out, host if op != "prod" else host**comm.size, rtol=1e-3)
    assert type(comm.backends.nccl).__name__ == "NcclBackend"


def test_bool_complex_and_in_place(comm):
    flags = cupy.array([True, False, True])
    cupy.testing.assert_array_equal(comm.allreduce(flags, "max"), flags)
    z = cupy.array([1 + 2j, 3 - 1j], dtype=cupy.complex64)
    cupy.testing.assert_allclose(comm.allreduce(z, "mean"), z)
    with pytest.raises(TypeError, match="complex"):
        comm.allreduce(z, "prod")
    y = cupy.ones(1000, dtype=cupy.float32) * 3
    same = comm.allreduce_(y, "sum")
    assert same is y
    cupy.testing.assert_allclose(y, 3 * comm.size)
    strided = cupy.ones((6, 4), dtype=cupy.int16)[:, ::2]  # not contiguous, widened on the wire
    assert comm.allreduce_(strided, "mean") is strided
    cupy.testing.assert_array_equal(strided, cupy.ones((6, 2), dtype=cupy.int16))
    flags = cupy.array([True, False])
    assert comm.allreduce_(flags, "min") is flags


def test_compression_on_the_device(comm):
    x = cupy.linspace(-4, 4, 1001, dtype=cupy.float32)
    for codec, tol in (("fp16", 1e-3), ("bf16", 8e-3)):
        opts = hd.CommunicationOptions(implementation="nccl", compression=codec)
        out = comm.allreduce(x, "sum", opts)
        assert out.dtype == cupy.float32
        cupy.testing.assert_allclose(out, x * comm.size, rtol=tol, atol=tol)
    bits = float32_to_bf16(cupy.array([1.0, -2.5, 3.140625], dtype=cupy.float32))
    cupy.testing.assert_array_equal(bf16_to_float32(bits), cupy.array([1.0, -2.5, 3.140625]))


def test_fusion_packs_on_the_device(comm):
    xs = [cupy.full((k, 3), k, dtype=cupy.float32) for k in range(1, 40)]
    xs += [cupy.arange(k, dtype=cupy.int64) for k in range(1, 5)]
    out = comm.grouped_allreduce(xs, "sum", hd.CommunicationOptions(bytes_per_pack=256))
    assert all(isinstance(o, cupy.ndarray) for o in out)
    for a, b in zip(xs, out, strict=True):
        cupy.testing.assert_array_equal(b, a * comm.size)


def test_fusion_in_place_on_the_device(comm):
    xs = [cupy.full((k, 3), k, dtype=cupy.float32) for k in range(1, 30)]
    xs += [cupy.arange(k, dtype=cupy.int64) for k in range(1, 5)]
    want = [x * comm.size for x in xs]
    got = comm.grouped_allreduce_(xs, "sum", hd.CommunicationOptions(bytes_per_pack=256))
    assert all(g is x for g, x in zip(got, xs, strict=True))
    for x, w in zip(xs, want, strict=True):
        cupy.testing.assert_array_equal(x, w)


def test_fusion_in_place_refuses_overlapping_device_arrays(comm):
    buf = cupy.arange(12, dtype=cupy.float32)
    before = buf.copy()
    grid = buf.reshape(3, 4)
    for xs, pair in [
        ([buf[:5], cupy.ones(3), buf[4:]], "0 and 2"),  # contiguous slices sharing buf[4]
        ([cupy.ones(2), buf, buf], "1 and 2"),  # one array twice
        ([grid[:, 1], grid[1]], "0 and 1"),  # a column and a row cross at grid[1, 1]
        ([grid[:, ::-2], grid[2, :2]], "0 and 1"),  # negative strides reach back to grid[2, 1]
        ([buf[::2], cupy.ones(2), buf.view(cupy.uint8)[1::8]], "0 and 2"),  # bytes of buf[0]
        ([buf[8:], buf[:4], buf[2:3], buf[1:2]], "1 and 2"),  # the first pair by index
    ]:
        with pytest.raises(ValueError, match=f"share no memory, but arrays {pair} overlap"):
            comm.grouped_allreduce_(xs, "sum")
    cupy.testing.assert_array_equal(buf, before)  # refused before anything was reduced
    # interleaved views lie within each other's bounds but share no element: reduced
    xs = [buf[::2], buf[1::2], cupy.ones(3)]
    got = comm.grouped_allreduce_(xs, "sum")
    assert all(g is x for g, x in zip(got, xs, strict=True))
    cupy.testing.assert_array_equal(buf[::2], before[::2] * comm.size)
    cupy.testing.assert_array_equal(buf[1::2], before[1::2] * comm.size)


def test_broadcast_allgather_reduce_scatter_on_the_device(comm):
    x = cupy.arange(12, dtype=cupy.float32).reshape(4, 3) + comm.rank
    b = comm.broadcast(x, root=0)
    assert isinstance(b, cupy.ndarray)
    cupy.testing.assert_array_equal(b, cupy.arange(12, dtype=cupy.float32).reshape(4, 3))
    g = comm.allgather(x)
    assert isinstance(g, cupy.ndarray) and g.shape == (4 * comm.size, 3)
    r = comm.reduce_scatter(x, "sum")
    assert isinstance(r, cupy.ndarray) and r.shape[1:] == (3,)
    y = cupy.zeros(5, dtype=cupy.int32) + comm.rank
    assert comm.broadcast_(y, root=0) is y


def test_deadline_wait_completes(comm):
    timed = hd.CommunicationOptions(implementation="nccl", timeout_seconds=30)
    x = cupy.ones(1 << 20, dtype=cupy.float32)
    cupy.testing.assert_allclose(comm.allreduce(x, "sum", timed), comm.size)


def test_array_on_another_device_is_rejected(comm):
    if cupy.cuda.runtime.getDeviceCount() < 2:
        pytest.skip("needs two GPUs")
    comm.allreduce(cupy.ones(2), "sum")
    with cupy.cuda.Device(1):
        other = cupy.ones(2)
    with pytest.raises(ValueError, match="GPU 1"):
        comm.allreduce(other, "sum")


def test_nccl_asked_for_but_missing_is_unavailable_for_every_collective(monkeypatch):
    import hpcdist.comm.selection as selection

    monkeypatch.setattr(selection, "nccl_available", lambda: False)
    comm = hd.Communicator(options=NCCL)
    x = cupy.ones((4, 2), dtype=cupy.float32)
    calls = [
        lambda: comm.allreduce(x, "sum"),
        lambda: comm.grouped_allreduce([x, x[0]], "sum"),
        lambda: comm.broadcast(x),
        lambda: comm.allgather(x),
        lambda: comm.reduce_scatter(x, "sum"),
    ]
    for call in calls:
        with pytest.raises(hd.errors.UnavailableError, match="needs CuPy with NCCL"):
            call()
    staged = comm.allreduce(x, "sum", hd.CommunicationOptions(implementation="mpi"))
    assert isinstance(staged, cupy.ndarray)  # other implementations stage through the host
