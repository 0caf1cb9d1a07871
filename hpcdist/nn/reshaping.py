"""Reshape and ZeroPadding2D (``tf.keras.layers``): new shapes for each example."""

from __future__ import annotations

from typing import Any

import numpy as np

from hpcdist.core import array_ops
from hpcdist.core import math_ops as ops
from hpcdist.core.tensors import Tensor, as_tensor
from hpcdist.nn.base_layer import Layer

__all__ = ["Reshape", "ZeroPadding2D"]


class Reshape(Layer):
    """Reshape each example to ``target_shape`` (the batch axis stays; one entry may be -1).

    Args:
        target_shape: Shape of one example.
        **kwargs: `Layer` arguments.

    Raises:
        ValueError: More than one -1, or a size that does not fit the input.
    """

    def __init__(self, target_shape: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.target_shape = tuple(int(d) for d in target_shape)
        if sum(d == -1 for d in self.target_shape) > 1:
            raise ValueError(f"{self.name}: at most one -1 in target_shape, got {target_shape}")

    def _example_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        size = int(np.prod(shape[1:]))
        known = int(np.prod([d for d in self.target_shape if d != -1]))
        target = tuple(size // known if d == -1 and known else d for d in self.target_shape)
        if int(np.prod(target)) != size:
            raise ValueError(
                f"{self.name}: cannot reshape examples of shape {tuple(shape[1:])} "
                f"({size} values) to {self.target_shape}"
            )
        return target

    def call(self, inputs: Any, training: bool | None = None) -> Tensor:
        """``reshape(inputs, (batch, *target_shape))``."""
        x = as_tensor(inputs)
        return ops.reshape(x, (x.shape[0], *self._example_shape(x.shape)))

    def get_config(self) -> dict[str, Any]:
        """Constructor arguments (JSON-able)."""
        return {**super().get_config(), "target_shape": list(self.target_shape)}


def _padding_pairs(padding: Any) -> tuple[tuple[int, int], tuple[int, int]]:
    """Keras' ``padding``: an int, ``(h, w)`` or ``((top, bottom), (left, right))``.

    Raises:
        ValueError: Anything else, or a negative amount.
    """
    try:
        if isinstance(padding, (int, np.integer)):
            pairs = ((int(padding),) * 2,) * 2
        elif all(isinstance(p, (int, np.integer)) for p in padding) and len(padding) == 2:
            pairs = ((int(padding[0]),) * 2, (int(padding[1]),) * 2)
        else:
            pairs = tuple(tuple(int(v) for v in p) for p in padding)
    except TypeError:
        pairs = ()
    if len(pairs) != 2 or any(len(p) != 2 or min(p) < 0 for p in pairs):
        raise ValueError(
            "ZeroPadding2D padding must be an int, a tuple of 2 ints or a tuple of 2 tuples of 2 "
            f"non-negative ints, got {padding!r}"
        )
    return pairs[0], pairs[1]


class ZeroPadding2D(Layer):
    """Zeros around the rows and columns of ``(batch, height, width, channels)`` inputs.

    Args:
        padding: An int (all four sides), ``(h, w)`` (top and bottom ``h``, left and right
            ``w``) or ``((top, bottom), (left, right))``, as ``keras.layers.ZeroPadding2D``.
        data_format: ``"channels_last"`` (or None) only.
        **kwargs: `Layer` arguments.

    Raises:
        ValueError: A bad padding or data format.
    """

    def __init__(self, padding: Any = (1, 1), data_format: str | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        if data_format not in (None, "channels_last"):
            raise ValueError(
                f"{self.name}: only data_format='channels_last' is supported, got {data_format!r}"
            )
        self.data_format = "channels_last"
        self.padding = _padding_pairs(padding)

    def call(self, inputs: Any, training: bool | None = None) -> Tensor:
        """``pad`` the height and width axes with zeros.

        Raises:
            ValueError: The input is not of rank 4.
        """
        x = as_tensor(inputs)
        if x.ndim != 4:
            raise ValueError(
                f"{self.name}: ZeroPadding2D expects inputs of rank 4 (batch, height, width, "
                f"channels), got shape {x.shape}"
            )
        return array_ops.pad(x, ((0, 0), *self.padding, (0, 0)))

    def get_config(self) -> dict[str, Any]:
        """Constructor arguments (JSON-able)."""
        return {
            **super().get_config(),
            "padding": [list(p) for p in self.padding],
            "data_format": self.data_format,
        }
