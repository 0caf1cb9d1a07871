"""``cupyx.scatter_add`` of the device simulator."""

from __future__ import annotations

import cupy
import numpy as np


def scatter_add(a, slices, value):
    device = a._check()
    np.add.at(a._a, cupy._unwrap(slices, device), cupy._unwrap(value, device))
