"""Softmax as a layer (``tf.keras.layers.Softmax``): normalise over any axis, with a mask."""

from __future__ import annotations

from typing import Any

import numpy as np

from hpcdist.core import math_ops as ops
from hpcdist.core.tensors import Tensor, as_tensor
from hpcdist.nn import activations
from hpcdist.nn.base_layer import Layer
from hpcdist.utils.xp import array_module, as_array_like

__all__ = ["Softmax"]


def _large_negative(dtype: np.dtype) -> float:
    """Keras' value for masked logits: -3e4 in float16, -1e9 otherwise."""
    return -3e4 if dtype == np.float16 else -1e9


class Softmax(Layer):
    """``softmax(inputs, axis)`` (``keras.layers.Softmax``).

    Args:
        axis: An axis or a list of axes to normalise over (default the last).
        **kwargs: `Layer` arguments.

    Call arguments:
        inputs: The logits.
        mask: Broadcastable to ``inputs``: true (or > 0.5) where a logit counts. Masked logits
            become -1e9 before the softmax and their outputs 0 after it, as Keras 3 (so a row
            masked entirely gives zeros).
    """

    def __init__(self, axis: Any = -1, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.axis = int(axis) if isinstance(axis, (int, np.integer)) else [int(a) for a in axis]

    def call(self, inputs: Any, training: bool | None = None, mask: Any = None) -> Tensor:
        """Masked softmax.

        Raises:
            ValueError: A mask of higher rank than ``inputs`` or that does not broadcast to it.
        """
        x = as_tensor(inputs)
        axis = self.axis if isinstance(self.axis, int) else tuple(self.axis)
        if isinstance(axis, tuple) and len(axis) == 1:
            axis = axis[0]
        if mask is None:
            return activations.softmax(x, axis=axis)
        keep = self._mask(x, mask)
        masked = ops.add(ops.multiply(x, keep), (1 - keep) * _large_negative(x.dtype))
        return ops.multiply(ops.softmax(masked, axis=axis), keep)

    def _mask(self, x: Tensor, mask: Any) -> Any:
        m = as_array_like(mask.value if isinstance(mask, Tensor) else mask, x.value)
        if m.ndim > x.ndim or any(
            md != 1 and md != xd for md, xd in zip(m.shape[::-1], x.shape[::-1], strict=False)
        ):
            raise ValueError(
                f"{self.name}: the mask must be broadcastable to the inputs and must not have "
                f"more dimensions; got inputs.shape={x.shape}, mask.shape={m.shape}"
            )
        keep = m if m.dtype == bool else m > 0.5
        return array_module(x.value).asarray(keep, dtype=x.dtype)

    def get_config(self) -> dict[str, Any]:
        """Constructor arguments (JSON-able)."""
        return {**super().get_config(), "axis": self.axis}
