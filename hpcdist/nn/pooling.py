"""Average and global poolings (``tf.keras.layers``), channels-last.

`AveragePooling2D` follows TF's ``avg_pool2d``: with ``padding="same"`` each window's mean is
over the input positions it covers (the padding is not counted). The global poolings reduce
every spatial axis, keeping them as size 1 with ``keepdims=True``. `MaxPooling2D` lives in
`hpcdist.nn.conv_layers`.
"""

from __future__ import annotations

from typing import Any

from hpcdist.core import math_ops as ops
from hpcdist.core import windows
from hpcdist.core.autodiff import record
from hpcdist.core.tensors import Tensor, as_tensor
from hpcdist.nn.base_layer import Layer
from hpcdist.utils.xp import array_module

__all__ = [
    "AveragePooling2D",
    "GlobalAveragePooling1D",
    "GlobalAveragePooling2D",
    "GlobalMaxPooling1D",
    "GlobalMaxPooling2D",
    "avg_pool2d",
]


def _channels_last(layer: str, data_format: str | None) -> str:
    """Raises ValueError: a data format other than channels_last."""
    if data_format not in (None, "channels_last"):
        raise ValueError(
            f"{layer}: only data_format='channels_last' is supported, got {data_format!r}"
        )
    return "channels_last"


def _window_sums(x: Any, window: tuple[int, int], strides: tuple[int, int], out: tuple) -> Any:
    """``(batch, oh, ow, channels)``: the sum of each window of (already padded) ``x``."""
    views = windows.window_views(x, window, strides, out)
    total = views[0].copy()
    for view in views[1:]:
        total = total + view
    return total


def avg_pool2d(x: Any, pool_size: Any = 2, strides: Any = None, padding: str = "valid") -> Tensor:
    """Mean over each window of NHWC ``x`` (``tf.nn.avg_pool2d``; padding is not counted).

    Args:
        x: ``(batch, height, width, channels)``, floating.
        pool_size: An int or ``(ph, pw)``.
        strides: An int or a pair; None means ``pool_size``.
        padding: ``"valid"`` or ``"same"``.

    Raises:
        ValueError: Not a 4-D input, or a bad pool size, stride or padding.
    """
    x = as_tensor(x)
    padding = windows.check_padding(padding)
    window = windows.int_pair(pool_size, "pool_size")
    strides = window if strides is None else windows.int_pair(strides, "strides")
    if x.ndim != 4:
        raise ValueError(f"avg_pool2d expects a 4-D input, got shape {x.shape}")
    xp = array_module(x.value)
    padded, out_hw, top_left = windows.padded_input(x.value, window, strides, padding, 0.0)
    ones = xp.ones((1, *x.shape[1:3], 1), x.dtype)
    counts = _window_sums(  # (1, oh, ow, 1)
        windows.padded_input(ones, window, strides, padding, 0.0)[0], window, strides, out_hw
    )
    value = _window_sums(padded, window, strides, out_hw) / counts

    def backward(g: Any) -> tuple[Any]:
        share = g / counts
        grad = xp.zeros(padded.shape, g.dtype)
        for view in windows.window_views(grad, window, strides, out_hw):
            view += share
        return (windows.unpad(grad, x.shape, top_left),)

    return record(value.astype(x.dtype, copy=False), (x,), backward)


class AveragePooling2D(Layer):
    """Mean over windows of ``(batch, height, width, channels)`` (Keras' AveragePooling2D).

    Args:
        pool_size: An int or ``(ph, pw)`` (required, as in Keras 3).
        strides: An int or a pair; None means ``pool_size`` (Keras' default).
        padding: ``"valid"`` or ``"same"`` (TF's rule; padded positions are not counted).
        data_format: ``"channels_last"`` (or None) only.
        **kwargs: `Layer` arguments.

    Raises:
        ValueError: A bad size, stride, padding or data format.
    """

    def __init__(
        self,
        pool_size: Any,
        strides: Any = None,
        padding: str = "valid",
        data_format: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.data_format = _channels_last(self.name, data_format)
        self.pool_size = windows.int_pair(pool_size, "pool_size")
        self.strides = self.pool_size if strides is None else windows.int_pair(strides, "strides")
        self.padding = windows.check_padding(padding)

    def call(self, inputs: Any, training: bool | None = None) -> Tensor:
        """Average pooling."""
        return avg_pool2d(inputs, self.pool_size, self.strides, self.padding)

    def get_config(self) -> dict[str, Any]:
        """Constructor arguments (JSON-able)."""
        return {
            **super().get_config(),
            "pool_size": list(self.pool_size),
            "strides": list(self.strides),
            "padding": self.padding,
            "data_format": self.data_format,
        }


class _GlobalPooling(Layer):
    """Reduce the spatial axes of ``(batch, *spatial, channels)`` inputs."""

    _rank = 4  # batch, two spatial axes, channels

    def __init__(
        self, data_format: str | None = None, keepdims: bool = False, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.data_format = _channels_last(self.name, data_format)
        self.keepdims = bool(keepdims)

    def _input(self, inputs: Any) -> Tensor:
        x = as_tensor(inputs)
        if x.ndim != self._rank:
            raise ValueError(
                f"{self.name}: {type(self).__name__} expects inputs of rank {self._rank} "
                f"(batch, {'steps' if self._rank == 3 else 'height, width'}, channels), got "
                f"shape {x.shape}"
            )
        return x

    def _axes(self) -> tuple[int, ...]:
        return tuple(range(1, self._rank - 1))

    def get_config(self) -> dict[str, Any]:
        """Constructor arguments (JSON-able)."""
        return {**super().get_config(), "data_format": self.data_format, "keepdims": self.keepdims}


class GlobalAveragePooling2D(_GlobalPooling):
    """Mean over height and width (``keras.layers.GlobalAveragePooling2D``).

    Args:
        data_format: ``"channels_last"`` (or None) only.
        keepdims: Keep the spatial axes (size 1): ``(batch, 1, 1, channels)``.
        **kwargs: `Layer` arguments.
    """

    def call(self, inputs: Any, training: bool | None = None) -> Tensor:
        """``reduce_mean`` over axes 1 and 2."""
        return ops.reduce_mean(self._input(inputs), axis=self._axes(), keepdims=self.keepdims)


class GlobalMaxPooling2D(_GlobalPooling):
    """Maximum over height and width (``keras.layers.GlobalMaxPooling2D``).

    The gradient of a window with several maxima is shared equally among them, as TF's
    ``reduce_max``.

    Args:
        data_format: ``"channels_last"`` (or None) only.
        keepdims: Keep the spatial axes (size 1).
        **kwargs: `Layer` arguments.
    """

    def call(self, inputs: Any, training: bool | None = None) -> Tensor:
        """``reduce_max`` over axes 1 and 2."""
        return ops.reduce_max(self._input(inputs), axis=self._axes(), keepdims=self.keepdims)


class GlobalAveragePooling1D(_GlobalPooling):
    """Mean over the steps of ``(batch, steps, features)`` (Keras' GlobalAveragePooling1D).

    ``mask`` (``(batch, steps)``, true where a step counts) averages over the kept steps only,
    as Keras.

    Args:
        data_format: ``"channels_last"`` (or None) only.
        keepdims: Keep the steps axis (size 1).
        **kwargs: `Layer` arguments.
    """

    _rank = 3

    def call(self, inputs: Any, training: bool | None = None, mask: Any = None) -> Tensor:
        """``reduce_mean`` over axis 1 (the kept steps when ``mask`` is given)."""
        x = self._input(inputs)
        if mask is None:
            return ops.reduce_mean(x, axis=1, keepdims=self.keepdims)
        m = mask.value if isinstance(mask, Tensor) else mask
        xp = array_module(x.value)
        weights = xp.asarray(m).astype(bool)[:, :, None].astype(x.dtype)
        total = ops.reduce_sum(ops.multiply(x, weights), axis=1, keepdims=self.keepdims)
        return ops.divide(total, weights.sum(axis=1, keepdims=self.keepdims))


class GlobalMaxPooling1D(_GlobalPooling):
    """Maximum over the steps of ``(batch, steps, features)`` (Keras' GlobalMaxPooling1D).

    Args:
        data_format: ``"channels_last"`` (or None) only.
        keepdims: Keep the steps axis (size 1).
        **kwargs: `Layer` arguments.
    """

    _rank = 3

    def call(self, inputs: Any, training: bool | None = None) -> Tensor:
        """``reduce_max`` over axis 1."""
        return ops.reduce_max(self._input(inputs), axis=1, keepdims=self.keepdims)
