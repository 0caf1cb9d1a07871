"""TF1's initializer objects (``tf.zeros_initializer()``, ...) for ``tf.get_variable``.

Each is called as TF's are, ``initializer(shape, dtype=None, partition_info=None)``, and
returns the initial array.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["constant_initializer", "ones_initializer", "zeros_initializer"]


class _Fill:
    """An initializer filling the shape with one value (cast to the dtype)."""

    def __init__(self, value: Any, dtype: Any) -> None:
        self.value, self.dtype = value, dtype

    def __call__(self, shape: Any, dtype: Any = None, partition_info: Any = None) -> np.ndarray:
        del partition_info
        dtype = np.dtype(dtype or self.dtype or np.float32)
        return np.broadcast_to(np.asarray(self.value, dtype), tuple(shape or ())).copy()


def zeros_initializer(dtype: Any = np.float32) -> _Fill:
    """``tf.zeros_initializer()``."""
    return _Fill(0, dtype)


def ones_initializer(dtype: Any = np.float32) -> _Fill:
    """``tf.ones_initializer()``."""
    return _Fill(1, dtype)


def constant_initializer(value: Any = 0, dtype: Any = np.float32) -> _Fill:
    """``tf.constant_initializer(value)``: a scalar fill, or an array of the variable's shape."""
    return _Fill(value, dtype)
