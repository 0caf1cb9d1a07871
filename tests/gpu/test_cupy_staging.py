"""CuPy arrays through the host backends: staged through pinned memory, results on the GPU."""

import numpy as np
import pytest

import hpcdist as hd
from hpcdist.comm.arrays import stage_to_host

cupy = pytest.importorskip("cupy", reason="CuPy is not installed (GPU tests need it)")

STAGED = hd.CommunicationOptions(implementation="mpi")


def test_cupy_in_cupy_out_through_the_host():
    comm = hd.comm.world()
    x = cupy.arange(10, dtype=cupy.float32)
    y = comm.allreduce(x, "sum", STAGED)
    assert isinstance(y, cupy.ndarray)
    np.testing.assert_allclose(cupy.asnumpy(y), np.arange(10) * comm.size)
    z = comm.grouped_allreduce([x, x * 2], options=STAGED)
    assert all(isinstance(a, cupy.ndarray) for a in z)
    assert isinstance(comm.broadcast(x, options=STAGED), cupy.ndarray)
    # in place, staged through the host: the results are copied back into the device arrays
    pair = [cupy.arange(4, dtype=cupy.float64), cupy.ones((2, 3), dtype=cupy.float32)]
    assert comm.allreduce_(pair[0], options=STAGED) is pair[0]
    np.testing.assert_array_equal(cupy.asnumpy(pair[0]), np.arange(4) * comm.size)
    got = comm.grouped_allreduce_(pair, options=STAGED)
    assert got[0] is pair[0] and got[1] is pair[1]
    np.testing.assert_array_equal(cupy.asnumpy(pair[0]), np.arange(4) * comm.size**2)
    np.testing.assert_array_equal(cupy.asnumpy(pair[1]), np.full((2, 3), comm.size))
    with pytest.raises(TypeError, match=r"numpy or CuPy arrays only, got list"):
        comm.allreduce_([1.0, 2.0], options=STAGED)


def test_staging_uses_pinned_memory_and_keeps_values():
    x = cupy.arange(12, dtype=cupy.float64).reshape(3, 4)[:, 1:]  # not contiguous
    host = stage_to_host(x)
    np.testing.assert_array_equal(host, cupy.asnumpy(x))
    if getattr(cupy, "__devicesim__", False):
        return  # the device simulator cannot pin memory
    pointer = host.ctypes.data
    attributes = cupy.cuda.runtime.pointerGetAttributes(pointer)
    assert attributes.type == cupy.cuda.runtime.memoryTypeHost  # page-locked, CUDA-registered
