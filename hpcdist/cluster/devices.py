"""GPU discovery without importing a GPU framework unless one is installed."""

from __future__ import annotations

import importlib.util
import os

__all__ = ["parse_visible_devices", "visible_gpu_count"]


def parse_visible_devices(value: str | None) -> list[str] | None:
    """Parse ``CUDA_VISIBLE_DEVICES``; None when unset, ``[]`` when set but empty."""
    if value is None:
        return None
    return [d.strip() for d in value.split(",") if d.strip()]


def visible_gpu_count() -> int:
    """Return the number of CUDA devices this process can use (0 without CuPy or devices)."""
    visible = parse_visible_devices(os.environ.get("CUDA_VISIBLE_DEVICES"))
    if visible == []:
        return 0
    if importlib.util.find_spec("cupy") is None:
        return 0
    try:
        import cupy

        return int(cupy.cuda.runtime.getDeviceCount())
    except Exception:  # no driver, no device: CuPy raises its own runtime errors
        return 0
