"""``cupy.cuda`` of the device simulator: devices, streams, events, pinned memory."""

from __future__ import annotations

import os
from typing import Any

import cupy as _cupy
from cupy.cuda import nccl, runtime


class Device:
    """A simulated device; ``with Device(i):`` and ``use()`` make it current (per thread)."""

    def __init__(self, device: int | None = None) -> None:
        self.id = _cupy._current() if device is None else int(device)
        if not 0 <= self.id < runtime.getDeviceCount():
            raise runtime.CUDARuntimeError(f"cudaErrorInvalidDevice: invalid device {self.id}")
        self._saved: list[int] = []

    def use(self) -> None:
        _cupy._state.device = self.id

    def __enter__(self) -> Device:
        self._saved.append(_cupy._current())
        self.use()
        return self

    def __exit__(self, *exc: object) -> None:
        _cupy._state.device = self._saved.pop()

    @property
    def pci_bus_id(self) -> str:
        # One simulated machine per host: the bus id names the device index.
        return f"0000:{self.id + 1:02x}:00.0"


class Stream:
    """Work runs synchronously in the simulator: a stream only has to exist."""

    ptr = 0

    def synchronize(self) -> None:
        """Nothing to wait for."""


_stream = Stream()


def get_current_stream() -> Stream:
    return _stream


class Event:
    def __init__(self, block: bool = False, disable_timing: bool = False, interprocess=False):
        self.done = False

    def record(self, stream: Any = None) -> None:
        self.done = True


def alloc_pinned_memory(nbytes: int) -> bytearray:
    """Host memory (the simulator cannot pin; ``__devicesim__`` tells tests so)."""
    return bytearray(nbytes)


__all__ = ["Device", "Event", "Stream", "alloc_pinned_memory", "get_current_stream", "nccl"]
_ = os
