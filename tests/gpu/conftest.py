"""GPU tests run only where CuPy sees a CUDA device; elsewhere they skip with the reason."""

from __future__ import annotations

import pytest

try:
    import cupy

    GPUS = int(cupy.cuda.runtime.getDeviceCount())
    WHY = "no CUDA device visible"
except ImportError:
    cupy = None
    GPUS, WHY = 0, "CuPy is not installed (GPU tests need it: pip install 'hpcdist[gpu]')"
except Exception as exc:  # CuPy without a driver or device raises its own runtime errors
    GPUS, WHY = 0, f"no usable CUDA device ({type(exc).__name__}: {exc})"


def pytest_collection_modifyitems(config, items):
    if GPUS:
        return
    skip = pytest.mark.skip(reason=WHY)
    for item in items:
        if "tests/gpu/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(skip)
