"""Reshape (``tf.keras.layers.Reshape``): a new shape for each example."""

from __future__ import annotations

from typing import Any

import numpy as np

from hpcdist.core import math_ops as ops
from hpcdist.core.tensors import Tensor, as_tensor
from hpcdist.nn.base_layer import Layer

__all__ = ["Reshape"]


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
