"""Conv2D, DepthwiseConv2D, MaxPooling2D (``tf.keras.layers``), channels-last.

On `hpcdist.core.conv_ops` and `hpcdist.core.max_pool`.
"""

from __future__ import annotations

from typing import Any

from hpcdist.core import conv_ops, max_pool, windows
from hpcdist.core.array_ops import concat
from hpcdist.core.tensors import Tensor
from hpcdist.nn.base_layer import Layer, float_input
from hpcdist.nn.kernel_bias import KernelBiasLayer

__all__ = ["Conv2D", "DepthwiseConv2D", "MaxPooling2D"]


def _channels_last(layer: str, data_format: str | None) -> None:
    """Raises ValueError: a data format other than channels_last."""
    if data_format not in (None, "channels_last"):
        raise ValueError(
            f"{layer}: only data_format='channels_last' is supported, got {data_format!r}"
        )


def _image_channels(layer: str, kind: str, input_shape: tuple[int, ...]) -> int:
    """The channels of ``(batch, height, width, channels)`` inputs.

    Raises:
        ValueError: The inputs are not of rank 4.
    """
    if len(input_shape) != 4:
        raise ValueError(
            f"{layer}: {kind} expects inputs of rank 4 (batch, height, width, channels), got "
            f"shape {tuple(input_shape)}"
        )
    return int(input_shape[-1])


class Conv2D(KernelBiasLayer):
    """``activation(conv2d(inputs, kernel) + bias)`` on ``(batch, height, width, channels)``.

    Args:
        filters: Output channels.
        kernel_size: An int or ``(kh, kw)``.
        strides: An int or ``(sh, sw)``.
        padding: ``"valid"`` or ``"same"`` (TF's rule).
        data_format: ``"channels_last"`` (or None) only.
        activation: Name or callable (None = linear).
        use_bias: Add a bias per filter.
        kernel_initializer: Initializer of the ``(kh, kw, in_channels, filters)`` kernel.
        bias_initializer: Initializer of the bias.
        kernel_regularizer: Penalty on the kernel.
        bias_regularizer: Penalty on the bias.
        groups: Channel groups (Keras' ``groups``): input channels and filters are split into
            this many groups, group ``g`` of the filters sees only group ``g`` of the channels
            (kernel ``(kh, kw, channels // groups, filters)``).
        **kwargs: `Layer` arguments (``name``, ``input_shape``, ...).

    Raises:
        ValueError: Non-positive filters or groups, filters not divisible by the groups (or,
            at build, channels not), a bad size, stride, padding or data format.
    """

    def __init__(
        self,
        filters: int,
        kernel_size: Any,
        strides: Any = (1, 1),
        padding: str = "valid",
        data_format: str | None = None,
        activation: Any = None,
        use_bias: bool = True,
        kernel_initializer: Any = "glorot_uniform",
        bias_initializer: Any = "zeros",
        kernel_regularizer: Any = None,
        bias_regularizer: Any = None,
        groups: int = 1,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if int(filters) <= 0:
            raise ValueError(f"Conv2D filters must be positive, got {filters}")
        if int(groups) <= 0 or int(filters) % int(groups):
            raise ValueError(
                f"{self.name}: the number of filters must be evenly divisible by the number of "
                f"groups (a positive int), got filters={filters}, groups={groups}"
            )
        _channels_last(self.name, data_format)
        self.filters = int(filters)
        self.groups = int(groups)
        self.kernel_size = windows.int_pair(kernel_size, "kernel_size")
        self.strides = windows.int_pair(strides, "strides")
        self.padding = windows.check_padding(padding)
        self._init_kernel_bias(
            activation,
            use_bias,
            kernel_initializer,
            bias_initializer,
            kernel_regularizer,
            bias_regularizer,
        )

    def build(self, input_shape: tuple[int, ...]) -> None:
        """Kernel ``(kh, kw, channels, filters)`` and bias ``(filters,)``.

        Raises:
            ValueError: The input is not ``(batch, height, width, channels)``.
        """
        channels = _image_channels(self.name, "Conv2D", input_shape)
        if channels % self.groups:
            raise ValueError(
                f"{self.name}: the number of input channels must be evenly divisible by the "
                f"number of groups, got {channels} channels and groups={self.groups}"
            )
        self._build_kernel_bias(
            (*self.kernel_size, channels // self.groups, self.filters), self.filters
        )

    def call(self, inputs: Any, training: bool | None = None) -> Tensor:
        """Convolution with the bias added in place, then the activation.

        With groups, one convolution per group (its channels and its filters), joined.
        """
        x = float_input(inputs, self.dtype)
        if self.groups == 1:
            out = conv_ops.conv2d(x, self.kernel, self.strides, self.padding, self.bias)
            return self.activation(out)
        per_group, filters = self.kernel.shape[2], self.filters // self.groups
        parts = [
            conv_ops.conv2d(
                x[..., g * per_group : (g + 1) * per_group],
                self.kernel[..., g * filters : (g + 1) * filters],
                self.strides,
                self.padding,
            )
            for g in range(self.groups)
        ]
        return self._bias_and_activation(concat(parts, axis=-1))

    def get_config(self) -> dict[str, Any]:
        """Constructor arguments (JSON-able)."""
        return {
            **super().get_config(),
            "filters": self.filters,
            "kernel_size": list(self.kernel_size),
            "strides": list(self.strides),
            "padding": self.padding,
            "groups": self.groups,
            **self._kernel_bias_config(),
        }


class DepthwiseConv2D(KernelBiasLayer):
    """``activation(depthwise_conv2d(inputs, kernel) + bias)``: each channel filtered alone.

    Keras 3's layer: ``depth_multiplier`` filters per input channel, kernel ``(kh, kw,
    channels, depth_multiplier)``, output channels ``channels * depth_multiplier`` (channel
    ``c``'s filters at ``c * depth_multiplier ...``).

    Args:
        kernel_size: An int or ``(kh, kw)``.
        strides: An int or ``(sh, sw)``.
        padding: ``"valid"`` or ``"same"`` (TF's rule).
        depth_multiplier: Filters per input channel.
        data_format: ``"channels_last"`` (or None) only.
        dilation_rate: 1 (or ``(1, 1)``) only.
        activation: Name or callable (None = linear).
        use_bias: Add a bias per output channel.
        depthwise_initializer: Initializer of the kernel.
        bias_initializer: Initializer of the bias.
        depthwise_regularizer: Penalty on the kernel.
        bias_regularizer: Penalty on the bias.
        **kwargs: `Layer` arguments (``name``, ``input_shape``, ...).

    Raises:
        ValueError: A non-positive multiplier, a dilation other than 1, a bad size, stride,
            padding or data format.
    """

    def __init__(
        self,
        kernel_size: Any,
        strides: Any = (1, 1),
        padding: str = "valid",
        depth_multiplier: int = 1,
        data_format: str | None = None,
        dilation_rate: Any = (1, 1),
        activation: Any = None,
        use_bias: bool = True,
        depthwise_initializer: Any = "glorot_uniform",
        bias_initializer: Any = "zeros",
        depthwise_regularizer: Any = None,
        bias_regularizer: Any = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if int(depth_multiplier) <= 0:
            raise ValueError(
                f"{self.name}: depth_multiplier must be positive, got {depth_multiplier}"
            )
        if windows.int_pair(dilation_rate, "dilation_rate") != (1, 1):
            raise ValueError(f"{self.name}: only dilation_rate=1 is supported, got {dilation_rate}")
        _channels_last(self.name, data_format)
        self.kernel_size = windows.int_pair(kernel_size, "kernel_size")
        self.strides = windows.int_pair(strides, "strides")
        self.padding = windows.check_padding(padding)
        self.depth_multiplier = int(depth_multiplier)
        self._init_kernel_bias(
            activation,
            use_bias,
            depthwise_initializer,
            bias_initializer,
            depthwise_regularizer,
            bias_regularizer,
        )

    def build(self, input_shape: tuple[int, ...]) -> None:
        """Kernel ``(kh, kw, channels, depth_multiplier)``, bias ``(channels * multiplier,)``.

        Raises:
            ValueError: The input is not ``(batch, height, width, channels)``.
        """
        channels = _image_channels(self.name, "DepthwiseConv2D", input_shape)
        self._build_kernel_bias(
            (*self.kernel_size, channels, self.depth_multiplier), channels * self.depth_multiplier
        )

    def call(self, inputs: Any, training: bool | None = None) -> Tensor:
        """Depthwise convolution with the bias added, then the activation."""
        out = conv_ops.depthwise_conv2d(
            float_input(inputs, self.dtype), self.kernel, self.strides, self.padding, self.bias
        )
        return self.activation(out)

    def get_config(self) -> dict[str, Any]:
        """Constructor arguments (JSON-able), with Keras' names for the kernel's options."""
        shared = self._kernel_bias_config()
        return {
            **super().get_config(),
            "kernel_size": list(self.kernel_size),
            "strides": list(self.strides),
            "padding": self.padding,
            "depth_multiplier": self.depth_multiplier,
            "activation": shared["activation"],
            "use_bias": shared["use_bias"],
            "depthwise_initializer": shared["kernel_initializer"],
            "bias_initializer": shared["bias_initializer"],
            "depthwise_regularizer": shared["kernel_regularizer"],
            "bias_regularizer": shared["bias_regularizer"],
        }


class MaxPooling2D(Layer):
    """Maximum over windows of ``(batch, height, width, channels)``.

    Args:
        pool_size: An int or ``(ph, pw)``.
        strides: An int or a pair; None means ``pool_size`` (Keras' default).
        padding: ``"valid"`` or ``"same"``.
        data_format: ``"channels_last"`` (or None) only.
        **kwargs: `Layer` arguments.

    Raises:
        ValueError: A bad size, stride, padding or data format.
    """

    def __init__(
        self,
        pool_size: Any = (2, 2),
        strides: Any = None,
        padding: str = "valid",
        data_format: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        _channels_last(self.name, data_format)
        self.pool_size = windows.int_pair(pool_size, "pool_size")
        self.strides = self.pool_size if strides is None else windows.int_pair(strides, "strides")
        self.padding = windows.check_padding(padding)

    def call(self, inputs: Any, training: bool | None = None) -> Tensor:
        """Max pooling."""
        return max_pool.max_pool2d(inputs, self.pool_size, self.strides, self.padding)

    def get_config(self) -> dict[str, Any]:
        """Constructor arguments (JSON-able)."""
        return {
            **super().get_config(),
            "pool_size": list(self.pool_size),
            "strides": list(self.strides),
            "padding": self.padding,
        }
