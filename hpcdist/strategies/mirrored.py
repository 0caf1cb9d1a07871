"""`MirroredStrategy`: several local devices in one process, one replica each."""

from __future__ import annotations

from collections.abc import Sequence

from hpcdist.cluster.gpus import visible_gpu_count
from hpcdist.strategies.cross_device_ops import CrossDeviceOps
from hpcdist.strategies.strategy import Strategy, StrategyExtended

__all__ = ["MirroredStrategy", "local_devices", "parse_device"]


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


def local_devices(devices: Sequence[str] | None, what: str) -> tuple[str, ...]:
    """Normalised, distinct local device names; default every visible GPU, else ``cpu:0``.

    Raises:
        ValueError: No device, a malformed name, or a repeated one (``what`` names the argument).
    """
    if devices is None:
        gpus = visible_gpu_count()
        devices = [f"gpu:{i}" for i in range(gpus)] if gpus else ["cpu:0"]
    names = tuple(parse_device(d) for d in devices)
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
        ValueError: A device name is malformed or repeated.
    """

    def __init__(
        self, devices: Sequence[str] | None = None, cross_device_ops: CrossDeviceOps | None = None
    ) -> None:
        names = local_devices(devices, "devices")
        self.extended = StrategyExtended(
            self, None, devices=names, cross_device_ops=cross_device_ops
        )
