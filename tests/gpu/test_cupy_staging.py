"""CuPy arrays through the host-staged collectives (skipped without CuPy or a GPU)."""

import numpy as np
import pytest

cupy = pytest.importorskip("cupy", reason="CuPy is not installed (GPU tests need it)")
try:
    GPUS = cupy.cuda.runtime.getDeviceCount()
except Exception:  # no driver
    GPUS = 0
pytestmark = pytest.mark.skipif(GPUS == 0, reason="no CUDA device visible")


def test_cupy_in_cupy_out_on_one_rank():
    import hpcdist as hd

    comm = hd.comm.world()
    x = cupy.arange(10, dtype=cupy.float32)
    y = comm.allreduce(x, "sum")
    assert isinstance(y, cupy.ndarray)
    np.testing.assert_allclose(cupy.asnumpy(y), np.arange(10) * comm.size)
    z = comm.grouped_allreduce([x, x * 2])
    assert all(isinstance(a, cupy.ndarray) for a in z)
    assert isinstance(comm.broadcast(x), cupy.ndarray)
