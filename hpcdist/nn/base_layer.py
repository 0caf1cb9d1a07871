"""`Layer`: the base class of layers and models (weights, building, calling, configs).

Calling a layer converts floating-point inputs to its dtype (Keras' autocast: numpy float64
and Python floats become float32 by default), builds it from the real input's shapes on first
use, and on `KerasTensor` inputs records a functional-API call instead of computing. Every
subclass is registered by class name, so a saved model's config names its layers
(`get_registered_class`).
"""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Callable
from typing import Any

import numpy as np

from hpcdist.core import context
from hpcdist.core import math_ops as ops
from hpcdist.core.dtypes import as_dtype
from hpcdist.core.tensors import Tensor, as_tensor
from hpcdist.nn import initializers, regularizers
from hpcdist.nn.keras_tensor import is_symbolic, map_nested, symbolic_call

__all__ = ["Layer", "float_input", "get_registered_class", "input_shapes"]

_names: dict[str, int] = {}
_REGISTRY: dict[str, type] = {}


def snake_case(name: str) -> str:
    """Keras' default layer name of a class name (``Conv2D`` -> ``conv2d``)."""
    name = re.sub(r"(.)([A-Z][a-z]+)", r"\1_\2", name)
    return re.sub(r"([a-z])([A-Z])", r"\1_\2", name).lower()


def _auto_name(prefix: str) -> str:
    _names[prefix] = _names.get(prefix, -1) + 1
    return prefix if _names[prefix] == 0 else f"{prefix}_{_names[prefix]}"


def get_registered_class(name: str, custom_objects: dict[str, Any] | None = None) -> type:
    """The layer or model class called ``name``: ``custom_objects`` first, then hpcdist's.

    Raises:
        ValueError: Neither knows the name.
    """
    if custom_objects and name in custom_objects:
        return custom_objects[name]
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(
            f"unknown layer class {name!r}: pass it in custom_objects={{{name!r}: cls}}"
        ) from None


def float_input(x: Any, dtype: np.dtype) -> Tensor:
    """``x`` as a tensor of ``dtype`` (cast recorded when needed)."""
    x = as_tensor(x)
    return x if x.dtype == dtype else ops.cast(x, dtype)


def _autocast(x: Any, dtype: np.dtype) -> Any:
    """Floating-point host data (numpy arrays, Python floats) in ``dtype``; others unchanged.

    Tensors keep their dtype (a float64 computation stays float64 through layers that do not
    compute in their own dtype; Dense, Conv2D and LayerNormalization cast).
    """
    if isinstance(x, float):
        return np.asarray(x, dtype)
    if isinstance(x, np.ndarray) and x.dtype.kind == "f" and x.dtype != dtype:
        return x.astype(dtype)
    return x


def input_shapes(inputs: Any) -> Any:
    """The shape of ``inputs``, or the same structure of shapes for nested inputs."""
    if isinstance(inputs, (dict, list, tuple)) and not all(
        isinstance(v, (int, float, np.number)) for v in inputs
    ):
        return map_nested(lambda leaf: tuple(np.shape(_array_of(leaf))), inputs)
    return tuple(np.shape(_array_of(inputs)))


def _array_of(x: Any) -> Any:
    return x.value if isinstance(x, Tensor) else x


@functools.cache
def _takes_training(call: Callable[..., Any]) -> bool:
    """Whether a ``call`` accepts ``training`` (Keras passes it only then)."""
    try:
        params = inspect.signature(call).parameters
    except (TypeError, ValueError):
        return True
    return "training" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


class Layer:
    """Base class of layers and models.

    Args:
        name: Layer name (unique default from the class name).
        trainable: Whether its weights are trainable.
        input_shape: Shape of one example (without the batch axis); builds the layer at once.
        dtype: Dtype of the weights and the computation.
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.__module__.startswith("hpcdist."):
            _REGISTRY[cls.__name__] = cls

    def __init__(
        self,
        name: str | None = None,
        trainable: bool = True,
        input_shape: tuple[int, ...] | None = None,
        dtype: Any = "float32",
    ) -> None:
        self.name = name or _auto_name(snake_case(type(self).__name__))
        self._trainable = bool(trainable)
        self._created_trainable: list[Any] = []  # weights made trainable: `trainable` sets them
        self.dtype = as_dtype(dtype)  # TF names too: "string" is numpy object
        self.built = False
        self._weights: list[Any] = []
        self._regularized: list[tuple[Any, Callable[[Any], Tensor]]] = []
        self.input_shape = None if input_shape is None else tuple(input_shape)

    # -- weights -----------------------------------------------------------------------------

    def add_weight(
        self,
        name: str,
        shape: tuple[int, ...],
        initializer: Any = "glorot_uniform",
        regularizer: Any = None,
        trainable: bool = True,
        dtype: Any = None,
    ) -> Any:
        """Create a variable under the current strategy (collective under MPI)."""
        dtype = np.dtype(dtype or self.dtype)
        value = initializers.get(initializer)(tuple(shape), dtype)
        var = context.get_strategy().Variable(
            value, name=f"{self.name}/{name}", trainable=trainable and self.trainable, dtype=dtype
        )
        self._weights.append(var)
        if trainable:
            self._created_trainable.append(var)
        reg = regularizers.get(regularizer)
        if reg is not None:
            self._regularized.append((var, reg))
        return var

    def build(self, input_shape: tuple[int, ...]) -> None:
        """Create the weights for inputs of ``input_shape`` (batch axis included)."""
        self.built = True

    def _sublayers(self) -> list[Layer]:
        return []

    @property
    def trainable(self) -> bool:
        """Whether the layer's weights train (Keras 3's rule for setting it).

        Setting it sets every weight the layer created trainable (non-trainable ones, such as
        moving statistics, stay so) and, recursively, every sublayer: ``model.trainable =
        False`` freezes a whole model, nested models included, and ``True`` thaws it all.
        """
        return self._trainable

    @trainable.setter
    def trainable(self, value: bool) -> None:
        self._trainable = bool(value)
        for weight in self._created_trainable:
            weight.trainable = self._trainable
        for layer in self._sublayers():
            layer.trainable = self._trainable

    @property
    def weights(self) -> list[Any]:
        """All variables of this layer and its sublayers."""
        out = list(self._weights)
        for layer in self._sublayers():
            out.extend(layer.weights)
        return out

    @property
    def trainable_variables(self) -> list[Any]:
        """Variables the optimizer updates."""
        return [w for w in self.weights if w.trainable]

    trainable_weights = trainable_variables

    @property
    def non_trainable_variables(self) -> list[Any]:
        """Variables the optimizer leaves alone."""
        return [w for w in self.weights if not w.trainable]

    @property
    def variables(self) -> list[Any]:
        """Same as `weights`."""
        return self.weights

    @property
    def losses(self) -> list[Tensor]:
        """Regularization penalties of this layer and its sublayers (recorded under a tape)."""
        out = [reg(var) for var, reg in self._regularized]
        for layer in self._sublayers():
            out.extend(layer.losses)
        return out

    def checkpoint_children(self) -> dict[str, Any]:
        """Every weight, sublayers' included, as ``weights/<i>`` in `weights` order.

        The checkpoint protocol (`hpcdist.core.trackable.Trackable`).
        """
        return {f"weights/{i}": w for i, w in enumerate(self.weights)}

    def get_weights(self) -> list[np.ndarray]:
        """Copies of every weight's value."""
        return [w.numpy() for w in self.weights]

    def set_weights(self, weights: list[Any]) -> None:
        """Assign values to every weight, in `weights` order.

        Raises:
            ValueError: Wrong number of arrays or a shape that does not match.
        """
        mine = self.weights
        if len(weights) != len(mine):
            raise ValueError(f"expected {len(mine)} arrays for {self.name}, got {len(weights)}")
        for var, value in zip(mine, weights, strict=True):
            value = np.asarray(value)
            if value.shape != var.shape:
                raise ValueError(
                    f"weight {var.name} has shape {var.shape}, got an array of shape {value.shape}"
                )
            var.assign(value, read_value=False)

    # -- calling -----------------------------------------------------------------------------

    def call(self, inputs: Any, training: bool | None = None) -> Any:
        """The layer's computation (override)."""
        raise NotImplementedError(f"{type(self).__name__} must implement call()")

    def _maybe_build(self, shape: tuple[int, ...]) -> None:
        if self.built:
            return
        ctx = context.get_replica_context()
        if context.has_strategy() and ctx is not None:
            # First call inside strategy.run: create the weights once, in cross-replica context.
            ctx.merge_call(lambda _strategy: None if self.built else self.build(shape))
        else:
            self.build(shape)
        self.built = True

    def _convert_inputs(self, inputs: Any) -> Any:
        """Floating-point inputs in this layer's dtype (Keras' autocast)."""
        if self.dtype.kind != "f":
            return inputs
        return map_nested(lambda leaf: _autocast(leaf, self.dtype), inputs)

    def __call__(self, inputs: Any, training: bool | None = None, **kwargs: Any) -> Any:
        """Build on first use (once, in cross-replica context), then `call`.

        On `KerasTensor` inputs (the functional API) returns `KerasTensor` outputs instead.
        """
        if is_symbolic(inputs):
            return symbolic_call(self, inputs, kwargs)
        inputs = self._convert_inputs(inputs)
        self._maybe_build(input_shapes(inputs))
        if _takes_training(type(self).call):
            kwargs["training"] = training
        return self.call(inputs, **kwargs)

    # -- config --------------------------------------------------------------------------------

    def get_config(self) -> dict[str, Any]:
        """The constructor arguments that recreate this layer (JSON-able; extend in subclasses)."""
        config: dict[str, Any] = {
            "name": self.name,
            "trainable": self.trainable,
            "dtype": self.dtype.name,
        }
        if self.input_shape is not None:
            config["input_shape"] = list(self.input_shape)
        return config

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Layer:
        """A new layer from `get_config`'s output."""
        return cls(**config)

    def count_params(self) -> int:
        """Number of scalars in all weights."""
        return int(sum(np.prod(w.shape) for w in self.weights))

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"
