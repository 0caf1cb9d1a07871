"""``cupy.cuda.runtime`` of the device simulator (``DEVICESIM_GPUS`` devices, default 2)."""

from __future__ import annotations

import os


class CUDARuntimeError(RuntimeError):
    """CuPy's runtime error type."""


def getDeviceCount() -> int:  # noqa: N802 - CUDA's name
    return int(os.environ.get("DEVICESIM_GPUS", "2"))


def runtimeGetVersion() -> int:  # noqa: N802
    return 0


def getDeviceProperties(device: int) -> dict:  # noqa: N802
    return {"name": b"devicesim"}
