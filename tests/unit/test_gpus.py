"""GPU binding rules, GPU settings and the array-module helpers (no GPU needed)."""

import importlib.util

import numpy as np
import pytest

import hpcdist as hd
from hpcdist.cluster.gpus import parse_visible_devices, pick_gpu
from hpcdist.errors import UnavailableError
from hpcdist.settings import Settings
from hpcdist.utils import xp as _xp

NO_CUPY = importlib.util.find_spec("cupy") is None


def test_pick_gpu_rules():
    assert pick_gpu(0, 0) is None  # no device
    assert pick_gpu(5, 1) == 0  # Slurm (or the resolver) bound the task to one device
    assert [pick_gpu(r, 4) for r in range(4)] == [0, 1, 2, 3]  # one per local rank
    assert [pick_gpu(r, 2) for r in range(4)] == [0, 1, 0, 1]  # more ranks than GPUs: shared
    assert pick_gpu(3, 4, requested=1) == 1  # HPCDIST_GPU wins


def test_pick_gpu_bad_input():
    with pytest.raises(ValueError, match=r"HPCDIST_GPU=4 but this rank sees 2 GPU\(s\)"):
        pick_gpu(0, 2, requested=4)
    with pytest.raises(ValueError, match="local rank must be >= 0, got -1"):
        pick_gpu(-1, 2)


def test_visible_devices_parsing():
    assert parse_visible_devices(None) is None
    assert parse_visible_devices("") == []
    assert parse_visible_devices("0, 2,GPU-abc") == ["0", "2", "GPU-abc"]


def test_gpu_settings_from_the_environment():
    s = Settings.from_env({"HPCDIST_CUDA_AWARE_MPI": "1", "HPCDIST_GPU": "2"})
    assert s.cuda_aware_mpi is True and s.gpu == 2 and s.nccl_hierarchical is False
    assert Settings.from_env({"HPCDIST_NCCL_HIERARCHICAL": "yes"}).nccl_hierarchical
    with pytest.raises(ValueError, match="HPCDIST_CUDA_AWARE_MPI='maybe'"):
        Settings.from_env({"HPCDIST_CUDA_AWARE_MPI": "maybe"})
    with pytest.raises(ValueError, match="HPCDIST_GPU='-1'"):
        Settings.from_env({"HPCDIST_GPU": "-1"})


def test_array_module_helpers_on_the_host():
    x = np.arange(6.0)
    assert _xp.array_module(x, 3) is np and not _xp.is_device_array(x)
    assert _xp.to_numpy(x) is x and _xp.device_of(x) == "cpu:0"
    assert _xp.parse_gpu("/GPU:3") == 3 and _xp.parse_gpu("cpu:1") is None
    copied = _xp.put(x, "cpu:0", dtype=np.float32)
    assert copied.dtype == np.float32 and not np.shares_memory(copied, x)
    assert _xp.as_array_like([1, 2], x).dtype.kind == "i"
    out = np.zeros(3)
    _xp.scatter_add(out, np.array([0, 2, 0]), np.array([1.0, 2.0, 3.0]))
    np.testing.assert_array_equal(out, [4.0, 0.0, 2.0])


@pytest.mark.skipif(not NO_CUPY, reason="CuPy is installed: tests/gpu covers the GPU paths")
def test_gpu_device_without_cupy_is_a_clear_error():
    with pytest.raises(UnavailableError, match=r"device 'gpu:0' needs CuPy.*hpcdist\[gpu\]"):
        _xp.put(np.ones(2), "gpu:0")
    with pytest.raises(ValueError, match=r"'gpu:0'.*sees 0 GPU.*hpcdist\[gpu\]"):
        hd.OneDeviceStrategy("gpu:0")
