"""`MirroredStrategy`: several local devices in one process, one replica each."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Sequence

from hpcdist.cluster.gpus import visible_gpu_count
from hpcdist.strategies.cross_device_ops import CrossDeviceOps
from hpcdist.strategies.strategy import Strategy, StrategyExtended

__all__ = ["MirroredStrategy", "check_device_exists", "local_devices", "parse_device"]


def parse_device(device: str) -> str:
    """Normalise ``"/gpu:0"``, ``"GPU:0"``, ``"/device:CPU:1"`` to ``"gpu:0"`` / ``"cpu:1"``.

    Raises:
        ValueError: Not ``cpu:N`` or ``gpu:N``.
    """
    name = str(device).lower().replace("/device:", "").replace("/job:localhost", "").lstrip("/")
    kind, _, index = name.partition(":")
    if kind not in ("cpu", "gpu") or not index.isdigit():
        raise ValueError(f"device must look like 'cpu:0' or 'gpu:1', got {device!r}")
    return f"{kind}:{int(index)}"


def check_device_exists(device: str, what: str) -> str:
    """`parse_device`, then check that a GPU device is one this process can see.

    Args:
        device: The device name as the user gave it.
        what: The argument it came from, for the message.

    Returns:
        The normalised name.

    Raises:
        ValueError: Malformed, or ``gpu:N`` with ``N`` not below the number of visible GPUs;
            the message names the device and how many GPUs are visible.
    """
    name = parse_device(device)
    kind, _, index = name.partition(":")
    if kind == "gpu":
        count = visible_gpu_count()
        if int(index) >= count:
            if importlib.util.find_spec("cupy") is None:
                why = "CuPy is not installed: pip install 'hpcdist[gpu]'"
            else:
                why = f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')}"
            visible = f"gpu:0 to gpu:{count - 1}" if count else "none"
            raise ValueError(
                f"{what} names device {device!r}, but this process sees {count} GPU(s) "
                f"(valid: {visible}; {why})"
            )
    return name


def local_devices(devices: Sequence[str] | None, what: str) -> tuple[str, ...]:
    """Normalised, distinct local device names; default every visible GPU, else ``cpu:0``.

    Raises:
        ValueError: No device, a malformed name, a GPU this process does not see, or a
            repeated name (``what`` names the argument).
    """
    if devices is None:
        gpus = visible_gpu_count()
        devices = [f"gpu:{i}" for i in range(gpus)] if gpus else ["cpu:0"]
    names = tuple(check_device_exists(d, what) for d in devices)
    if not names:
        raise ValueError(f"{what} must name at least one device")
    if len(set(names)) != len(names):
        raise ValueError(f"{what} must be distinct, got {list(devices)}")
    return names


class MirroredStrategy(Strategy):
    """Synchronous training on several local devices of one process.

    Replicas run one at a time, in order (see `hpcdist.strategies.mirrored_run`), so CPU
    "devices" ``cpu:0``, ``cpu:1`` give real multi-replica semantics on one core.

    Args:
        devices: Device names; default every visible GPU, else ``["cpu:0"]``.
        cross_device_ops: Combines the replicas' values; default `ReductionToOneDevice`.

    Raises:
        ValueError: A device name is malformed or repeated, or names a GPU this process does
            not see.
    """

    def __init__(
        self, devices: Sequence[str] | None = None, cross_device_ops: CrossDeviceOps | None = None
    ) -> None:
        names = local_devices(devices, "devices")
        self.extended = StrategyExtended(
            self, None, devices=names, cross_device_ops=cross_device_ops
        )
