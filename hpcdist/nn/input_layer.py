"""`InputLayer` and `Input` (``tf.keras.Input``): where a model's inputs come in.

``Input(shape)`` returns a `KerasTensor` for the functional API (``Model(inputs, outputs)``);
as the first entry of a `Sequential` (an `Input` or an `InputLayer`) it fixes the input shape,
which builds the model at once, as in Keras.
"""

from __future__ import annotations

from typing import Any

from hpcdist.core.tensors import as_tensor
from hpcdist.nn.base_layer import Layer
from hpcdist.nn.keras_tensor import KerasTensor

__all__ = ["Input", "InputLayer"]


class InputLayer(Layer):
    """The entry of a model: passes its input through.

    Args:
        shape: Shape of one example (without the batch axis); ``input_shape`` is the same.
        batch_size: Fixed batch size (recorded only).
        dtype: Dtype of the inputs.
        name: Name.
        **kwargs: ``input_shape`` (Keras 2's spelling) or ``batch_shape``.

    Raises:
        ValueError: No shape given.
    """

    def __init__(
        self,
        shape: Any = None,
        batch_size: int | None = None,
        dtype: Any = "float32",
        name: str | None = None,
        **kwargs: Any,
    ) -> None:
        batch_shape = kwargs.pop("batch_shape", None)
        input_shape = kwargs.pop("input_shape", None)
        if shape is None:
            shape = input_shape if input_shape is not None else None
        if shape is None and batch_shape is not None:
            batch_size, shape = batch_shape[0], tuple(batch_shape[1:])
        if shape is None:
            raise ValueError("InputLayer needs shape= (the shape of one example)")
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        super().__init__(name=name, input_shape=shape, dtype=dtype, **kwargs)
        self.batch_size = batch_size
        self.output = KerasTensor((batch_size, *shape), self.dtype, self)
        self.built = True

    def call(self, inputs: Any, training: bool | None = None) -> Any:
        """The input itself."""
        return as_tensor(inputs)

    def get_config(self) -> dict[str, Any]:
        """Constructor arguments (JSON-able)."""
        config = super().get_config()
        config["shape"] = config.pop("input_shape")
        return {**config, "batch_size": self.batch_size}


def Input(  # noqa: N802 - Keras' name
    shape: Any = None,
    batch_size: int | None = None,
    dtype: Any = "float32",
    name: str | None = None,
    **kwargs: Any,
) -> KerasTensor:
    """A symbolic input of examples of ``shape`` (``tf.keras.Input``)."""
    return InputLayer(shape, batch_size, dtype, name, **kwargs).output
