"""``cupy.random.default_rng`` of the device simulator."""

from __future__ import annotations

import numpy as np

import cupy


class _Generator:
    def __init__(self, seed: int | None) -> None:
        self._rng = np.random.default_rng(seed)

    def random(self, size=None, dtype=np.float64):
        return cupy.ndarray(self._rng.random(size, dtype=dtype))

    def standard_normal(self, size=None, dtype=np.float64):
        return cupy.ndarray(self._rng.standard_normal(size, dtype=dtype))


def default_rng(seed: int | None = None) -> _Generator:
    return _Generator(seed)
