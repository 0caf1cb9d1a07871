"""Arrays on the host (numpy) or on a GPU (CuPy), with CuPy imported only when it is used.

hpcdist's numerical code is written once against the numpy API and runs on CuPy arrays by
asking `array_module` which module holds its inputs (CuPy's own ``get_array_module`` rule).
Values move between host and device only where these helpers are called: reading a variable
with ``numpy()``, a metric, a checkpoint, an MPI message without CUDA-aware MPI.
"""

from __future__ import annotations

import contextlib
import sys
from types import ModuleType
from typing import Any

import numpy as np

from hpcdist.errors import UnavailableError

__all__ = [
    "array_module",
    "as_array",
    "as_array_like",
    "current_gpu",
    "device_of",
    "device_scope",
    "import_cupy",
    "is_device_array",
    "parse_gpu",
    "put",
    "scatter_add",
    "to_numpy",
]


def is_device_array(x: Any) -> bool:
    """Whether ``x`` is a CuPy array (checked without importing CuPy)."""
    return type(x) is not np.ndarray and type(x).__module__.partition(".")[0] == "cupy"


def array_module(*arrays: Any) -> ModuleType:
    """``cupy`` when any of ``arrays`` is a CuPy array, else ``numpy``."""
    for x in arrays:
        if type(x) is not np.ndarray and is_device_array(x):
            return sys.modules["cupy"]
    return np


def to_numpy(x: Any) -> np.ndarray:
    """A host numpy array of ``x`` (a device-to-host copy for CuPy arrays)."""
    if type(x) is np.ndarray:
        return x
    if is_device_array(x):
        return x.get()
    return np.asarray(x)


def parse_gpu(device: str | None) -> int | None:
    """The CUDA ordinal of a ``"gpu:N"`` device name, or None for a CPU device (or None)."""
    if device is None:
        return None
    kind, _, index = str(device).lower().lstrip("/").replace("device:", "").partition(":")
    return int(index) if kind == "gpu" else None


def device_of(x: Any) -> str:
    """``"gpu:N"`` for a CuPy array on device N, else ``"cpu:0"``."""
    if is_device_array(x):
        return f"gpu:{x.device.id}"
    return "cpu:0"


def device_scope(device: str | None) -> contextlib.AbstractContextManager:
    """Make ``device`` CuPy's current device inside the block (nothing for a CPU device)."""
    gpu = parse_gpu(device)
    if gpu is None:
        return contextlib.nullcontext()
    return import_cupy(f"device {device!r}").cuda.Device(gpu)


def current_gpu() -> str | None:
    """CuPy's current device as ``"gpu:N"`` (per thread), or None when CuPy is not in use."""
    cupy = sys.modules.get("cupy")
    if cupy is None:
        return None
    try:
        return f"gpu:{cupy.cuda.Device().id}"
    except Exception:  # CuPy without a driver or device
        return None


def put(value: Any, device: str | None, dtype: Any = None, copy: bool = True) -> Any:
    """``value`` as an array on ``device`` (``"cpu:N"``/None: numpy; ``"gpu:N"``: CuPy).

    Raises:
        UnavailableError: A GPU device is named but CuPy is not installed.
    """
    gpu = parse_gpu(device)
    if gpu is None:
        host = to_numpy(value)
        return np.array(host, dtype=dtype, copy=True) if copy else np.asarray(host, dtype=dtype)
    cupy = import_cupy(f"device {device!r}")
    with cupy.cuda.Device(gpu):
        if copy or not is_device_array(value) or value.device.id != gpu:
            return cupy.array(value, dtype=dtype, copy=True)
        return value if dtype is None else value.astype(dtype, copy=False)


def as_array(value: Any, dtype: Any = None) -> Any:
    """``value`` as an array: CuPy arrays stay on their device, anything else becomes numpy."""
    if is_device_array(value):
        return value if dtype is None else value.astype(dtype, copy=False)
    return np.asarray(value, dtype=dtype)


def as_array_like(x: Any, like: Any, dtype: Any = None) -> Any:
    """``x`` in the array module (and on the device) of ``like``; no copy when already there."""
    if isinstance(x, (int, float, bool)) and dtype is None:
        return x
    if type(like) is np.ndarray or not is_device_array(like):
        return np.asarray(to_numpy(x), dtype=dtype)
    if is_device_array(x) and x.device.id == like.device.id:
        return x if dtype is None else x.astype(dtype, copy=False)
    cupy = sys.modules["cupy"]
    with cupy.cuda.Device(like.device.id):
        return cupy.asarray(x, dtype=dtype)


def scatter_add(out: Any, index: Any, values: Any) -> None:
    """``out[index] += values`` with repeated indices adding up (``np.add.at``), in place."""
    if is_device_array(out):
        import cupyx

        cupyx.scatter_add(out, index, values)
    else:
        np.add.at(out, index, values)


def import_cupy(what: str) -> ModuleType:
    """Import CuPy for ``what``, or raise `UnavailableError` saying how to install it."""
    try:
        import cupy
    except ImportError:
        raise UnavailableError(
            f"{what} needs CuPy, which is not installed; pip install 'hpcdist[gpu]'"
        ) from None
    return cupy
