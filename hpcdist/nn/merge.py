"""Merge layers (``tf.keras.layers.Add``, ``Concatenate``, ...): one output from a list of inputs.

As in Keras 3, a merge layer is called on a list of tensors with one batch size. The
element-wise ones (`Add`, `Subtract`, `Multiply`, `Average`, `Maximum`, `Minimum`) accept shapes
that broadcast; an input of lower rank gets axes of size 1 inserted after its batch axis until
the ranks agree (Keras' rule: ``(batch, 3)`` meets ``(batch, 4, 3)`` as ``(batch, 1, 3)``).
`Concatenate` joins along ``axis``. The lower-case functions (`add`, `concatenate`, ...) build
the layer and call it, as Keras' ``keras.layers.add``.
"""

from __future__ import annotations

from typing import Any

from hpcdist.core import array_ops
from hpcdist.core import math_ops as ops
from hpcdist.core.tensors import Tensor, as_tensor
from hpcdist.nn.base_layer import Layer

__all__ = [
    "Add",
    "Average",
    "Concatenate",
    "Maximum",
    "Minimum",
    "Multiply",
    "Subtract",
    "add",
    "average",
    "concatenate",
    "maximum",
    "minimum",
    "multiply",
    "subtract",
]


def _shape_list(layer: Layer, input_shape: Any) -> list[tuple[Any, ...]]:
    """The input shapes as a list of tuples.

    Raises:
        ValueError: Not a list of at least one shape.
    """
    if (
        not isinstance(input_shape, (list, tuple))
        or not input_shape
        or not all(isinstance(s, (list, tuple)) for s in input_shape)
    ):
        raise ValueError(
            f"{layer.name}: a merge layer should be called on a list of at least 1 input, got "
            f"input_shape={input_shape!r}"
        )
    return [tuple(s) for s in input_shape]


def _broadcast_shape(layer: Layer, a: tuple[Any, ...], b: tuple[Any, ...]) -> tuple[Any, ...]:
    """Keras' element-wise output shape of two example shapes (trailing axes aligned)."""
    if len(a) < len(b):
        a, b = b, a
    if not b:
        return a
    out = list(a[: len(a) - len(b)])
    for i, j in zip(a[len(a) - len(b) :], b, strict=True):
        if i is None or j is None:
            out.append(None)
        elif i == 1 or j == 1:
            out.append(j if i == 1 else i)
        elif i != j:
            raise ValueError(f"{layer.name}: inputs have incompatible shapes {a} and {b}")
        else:
            out.append(i)
    return tuple(out)


class _Merge(Layer):
    """Base of the element-wise merge layers: checks shapes, aligns ranks, merges."""

    def build(self, input_shape: Any) -> None:
        """Check the shapes (Keras' rules; merge layers have no weights).

        Raises:
            ValueError: Not a list of shapes, different batch sizes, or shapes that do not
                broadcast.
        """
        shapes = _shape_list(self, input_shape)
        batch_sizes = {s[0] for s in shapes if s} - {None}
        if len(batch_sizes) > 1:
            raise ValueError(
                f"{self.name}: cannot merge tensors with different batch sizes, got shapes {shapes}"
            )
        out = shapes[0][1:]
        for shape in shapes[1:]:
            out = _broadcast_shape(self, out, shape[1:])
        self.built = True

    def call(self, inputs: Any, training: bool | None = None) -> Tensor:
        """Merge ``inputs`` (a list of tensors).

        Raises:
            ValueError: ``inputs`` is not a list or tuple.
        """
        if not isinstance(inputs, (list, tuple)):
            raise ValueError(
                f"{self.name}: a merge layer should be called on a list of inputs, got "
                f"{type(inputs).__name__}"
            )
        tensors = [as_tensor(x) for x in inputs]
        rank = max(t.ndim for t in tensors)
        aligned = []
        for t in tensors:
            for _ in range(rank - t.ndim):
                t = array_ops.expand_dims(t, 1)
            aligned.append(t)
        return self._merge(aligned)

    def _merge(self, inputs: list[Tensor]) -> Tensor:
        raise NotImplementedError


class Add(_Merge):
    """Element-wise sum of the inputs (``keras.layers.Add``)."""

    def _merge(self, inputs: list[Tensor]) -> Tensor:
        out = inputs[0]
        for x in inputs[1:]:
            out = ops.add(out, x)
        return out


class Subtract(_Merge):
    """``inputs[0] - inputs[1]`` (``keras.layers.Subtract``): exactly two inputs."""

    def build(self, input_shape: Any) -> None:
        """Raises ValueError: not exactly two inputs (or a `_Merge` shape error)."""
        super().build(input_shape)
        if len(input_shape) != 2:
            raise ValueError(
                f"{self.name}: a Subtract layer should be called on exactly 2 inputs, got "
                f"{len(input_shape)} (input_shape={input_shape!r})"
            )

    def _merge(self, inputs: list[Tensor]) -> Tensor:
        if len(inputs) != 2:
            raise ValueError(
                f"{self.name}: a Subtract layer should be called on exactly 2 inputs, got "
                f"{len(inputs)}"
            )
        return ops.subtract(inputs[0], inputs[1])


class Multiply(_Merge):
    """Element-wise product of the inputs (``keras.layers.Multiply``)."""

    def _merge(self, inputs: list[Tensor]) -> Tensor:
        out = inputs[0]
        for x in inputs[1:]:
            out = ops.multiply(out, x)
        return out


class Average(_Merge):
    """Element-wise mean of the inputs (``keras.layers.Average``): their sum over their count."""

    def _merge(self, inputs: list[Tensor]) -> Tensor:
        out = inputs[0]
        for x in inputs[1:]:
            out = ops.add(out, x)
        return ops.divide(out, len(inputs))


class Maximum(_Merge):
    """Element-wise maximum (``keras.layers.Maximum``); ties send the gradient to the first."""

    def _merge(self, inputs: list[Tensor]) -> Tensor:
        out = inputs[0]
        for x in inputs[1:]:
            out = ops.maximum(out, x)
        return out


class Minimum(_Merge):
    """Element-wise minimum (``keras.layers.Minimum``); ties send the gradient to the first."""

    def _merge(self, inputs: list[Tensor]) -> Tensor:
        out = inputs[0]
        for x in inputs[1:]:
            out = ops.minimum(out, x)
        return out


class Concatenate(Layer):
    """Join the inputs along ``axis`` (``keras.layers.Concatenate``).

    Args:
        axis: The axis to join along (batch axis included in the count; default the last).
        **kwargs: `Layer` arguments.
    """

    def __init__(self, axis: int = -1, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.axis = int(axis)

    def build(self, input_shape: Any) -> None:
        """Check that the shapes agree off ``axis``.

        Raises:
            ValueError: Not a list of shapes, different ranks, or sizes that differ off ``axis``.
        """
        shapes = _shape_list(self, input_shape)
        if len({len(s) for s in shapes}) != 1:
            raise ValueError(
                f"{self.name}: a Concatenate layer requires inputs of one rank, got {shapes}"
            )
        axis = self.axis % len(shapes[0])
        rest = {s[:axis] + s[axis + 1 :] for s in shapes}
        if len(rest) != 1:
            raise ValueError(
                f"{self.name}: a Concatenate layer requires inputs with matching shapes except "
                f"for the concatenation axis {self.axis}, got input_shape={shapes}"
            )
        self.built = True

    def call(self, inputs: Any, training: bool | None = None) -> Tensor:
        """``concat(inputs, axis)``."""
        if not isinstance(inputs, (list, tuple)):
            raise ValueError(
                f"{self.name}: a Concatenate layer should be called on a list of inputs, got "
                f"{type(inputs).__name__}"
            )
        return array_ops.concat(list(inputs), axis=self.axis)

    def get_config(self) -> dict[str, Any]:
        """Constructor arguments (JSON-able)."""
        return {**super().get_config(), "axis": self.axis}


def add(inputs: Any, **kwargs: Any) -> Any:
    """``Add(**kwargs)(inputs)`` (``keras.layers.add``)."""
    return Add(**kwargs)(inputs)


def subtract(inputs: Any, **kwargs: Any) -> Any:
    """``Subtract(**kwargs)(inputs)`` (``keras.layers.subtract``)."""
    return Subtract(**kwargs)(inputs)


def multiply(inputs: Any, **kwargs: Any) -> Any:
    """``Multiply(**kwargs)(inputs)`` (``keras.layers.multiply``)."""
    return Multiply(**kwargs)(inputs)


def average(inputs: Any, **kwargs: Any) -> Any:
    """``Average(**kwargs)(inputs)`` (``keras.layers.average``)."""
    return Average(**kwargs)(inputs)


def maximum(inputs: Any, **kwargs: Any) -> Any:
    """``Maximum(**kwargs)(inputs)`` (``keras.layers.maximum``)."""
    return Maximum(**kwargs)(inputs)


def minimum(inputs: Any, **kwargs: Any) -> Any:
    """``Minimum(**kwargs)(inputs)`` (``keras.layers.minimum``)."""
    return Minimum(**kwargs)(inputs)


def concatenate(inputs: Any, axis: int = -1, **kwargs: Any) -> Any:
    """``Concatenate(axis, **kwargs)(inputs)`` (``keras.layers.concatenate``)."""
    return Concatenate(axis=axis, **kwargs)(inputs)
