"""`ScalarValue`: a Python float that also answers TF's tensor methods (``.numpy()``).

Keras returns a metric's `result()` and an optimizer's `learning_rate` as float32 tensors, and
ported programs call ``.numpy()`` on them; they stay usable everywhere a float is.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["ScalarValue"]


class ScalarValue(float):
    """A float with ``numpy()`` (float32, as TF's) and, when it has a setter, ``assign``.

    Args:
        value: The number.
        setter: Called by `assign` with the new value (e.g. to set a learning rate).
    """

    dtype = np.dtype(np.float32)

    def __new__(cls, value: Any, setter: Callable[[float], None] | None = None) -> ScalarValue:
        """A new value."""
        out = super().__new__(cls, float(value))
        out._setter = setter
        return out

    def numpy(self) -> np.float32:
        """The value as a numpy float32 scalar."""
        return np.float32(self)

    def assign(self, value: Any, read_value: bool = True) -> Any:
        """Set what this value was read from (a learning rate, ...).

        Raises:
            TypeError: The value was not read from something assignable.
        """
        if self._setter is None:
            raise TypeError("this value is a result, not a variable: it cannot be assigned")
        self._setter(float(value))
        return ScalarValue(value, self._setter) if read_value else None
