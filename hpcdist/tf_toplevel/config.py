"""``tf.config``: the devices this process can use.

CPU is always there; GPUs are those CuPy sees (after ``CUDA_VISIBLE_DEVICES``), as
`hpcdist.cluster.devices.visible_gpu_count` counts them. Device names follow TF's
(``/physical_device:GPU:0``) so that code testing ``len(...)`` or reading ``device_type``
runs unchanged.
"""

from __future__ import annotations

from typing import NamedTuple

from hpcdist.cluster.devices import visible_gpu_count

__all__ = ["LogicalDevice", "PhysicalDevice", "list_logical_devices", "list_physical_devices"]


class PhysicalDevice(NamedTuple):
    """A device of this machine (TF's ``PhysicalDevice``)."""

    name: str
    device_type: str


class LogicalDevice(NamedTuple):
    """A device as the runtime uses it (TF's ``LogicalDevice``)."""

    name: str
    device_type: str


def _counts(device_type: str | None) -> list[tuple[str, int]]:
    wanted = None if device_type is None else device_type.upper()
    counts = [("CPU", 1), ("GPU", visible_gpu_count())]
    return [(kind, n) for kind, n in counts if wanted is None or kind == wanted]


def list_physical_devices(device_type: str | None = None) -> list[PhysicalDevice]:
    """The devices of ``device_type`` ("CPU", "GPU"; case-insensitive), all when None.

    An unknown type gives an empty list, as in TF.
    """
    return [
        PhysicalDevice(f"/physical_device:{kind}:{i}", kind)
        for kind, n in _counts(device_type)
        for i in range(n)
    ]


def list_logical_devices(device_type: str | None = None) -> list[LogicalDevice]:
    """The logical devices: one per physical device (``/device:GPU:0``)."""
    return [
        LogicalDevice(f"/device:{kind}:{i}", kind)
        for kind, n in _counts(device_type)
        for i in range(n)
    ]
