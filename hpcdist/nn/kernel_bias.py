"""What Dense and Conv2D share: a kernel, an optional bias, an activation, and their options."""

from __future__ import annotations

from typing import Any

from hpcdist.core import math_ops as ops
from hpcdist.core.tensors import Tensor
from hpcdist.nn import activations
from hpcdist.nn.base_layer import Layer
from hpcdist.nn.layer_config import (
    activation_config,
    config_value,
    regularizer_config,
    regularizer_from_config,
)

__all__ = ["KernelBiasLayer"]


class KernelBiasLayer(Layer):
    """Base of layers computing ``activation(op(inputs, kernel) + bias)``."""

    def _init_kernel_bias(
        self,
        activation: Any,
        use_bias: bool,
        kernel_initializer: Any,
        bias_initializer: Any,
        kernel_regularizer: Any,
        bias_regularizer: Any,
    ) -> None:
        self.activation = activations.get(activation)
        self.use_bias = use_bias
        self.kernel_initializer, self.bias_initializer = kernel_initializer, bias_initializer
        self.kernel_regularizer = regularizer_from_config(kernel_regularizer)
        self.bias_regularizer = regularizer_from_config(bias_regularizer)

    def _kernel_bias_config(self) -> dict[str, Any]:
        """The shared constructor arguments (JSON-able)."""
        n = self.name
        return {
            "activation": activation_config(n, self.activation),
            "use_bias": self.use_bias,
            "kernel_initializer": config_value(n, "initializer", self.kernel_initializer),
            "bias_initializer": config_value(n, "initializer", self.bias_initializer),
            "kernel_regularizer": regularizer_config(n, self.kernel_regularizer),
            "bias_regularizer": regularizer_config(n, self.bias_regularizer),
        }

    def _build_kernel_bias(self, kernel_shape: tuple[int, ...], units: int) -> None:
        """Create the kernel and (with ``use_bias``) the ``(units,)`` bias."""
        self.kernel = self.add_weight(
            "kernel", kernel_shape, self.kernel_initializer, self.kernel_regularizer
        )
        self.bias = (
            self.add_weight("bias", (units,), self.bias_initializer, self.bias_regularizer)
            if self.use_bias
            else None
        )
        self.built = True

    def _bias_and_activation(self, out: Tensor) -> Tensor:
        if self.bias is not None:
            out = ops.add(out, self.bias)
        return self.activation(out)
