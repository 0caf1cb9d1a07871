"""Keras-shaped layers on `hpcdist.nn.ops`, and the `Layer` base class they share with models.

Dense, Embedding, Dropout, Flatten, Activation, ReLU and LayerNormalization.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from hpcdist.core import context
from hpcdist.core import math_ops as ops
from hpcdist.core.autodiff import Tensor, as_tensor
from hpcdist.nn import initializers, regularizers
from hpcdist.nn.embedding import embedding_lookup
from hpcdist.utils.xp import to_numpy

__all__ = [
    "Activation",
    "Dense",
    "Dropout",
    "Embedding",
    "Flatten",
    "Layer",
    "LayerNormalization",
    "ReLU",
    "get_activation",
]

_ACTIVATIONS: dict[str, Callable[[Any], Tensor]] = {
    "linear": as_tensor,
    "relu": ops.relu,
    "sigmoid": ops.sigmoid,
    "tanh": ops.tanh,
    "softmax": ops.softmax,
    "softplus": ops.softplus,
    "exponential": ops.exp,
}


def get_activation(identifier: Any) -> Callable[[Any], Tensor]:
    """An activation from None, a name or a callable.

    Raises:
        ValueError: Unknown name.
    """
    if identifier is None:
        return as_tensor
    if callable(identifier):
        return identifier
    try:
        return _ACTIVATIONS[str(identifier).lower()]
    except KeyError:
        raise ValueError(
            f"unknown activation {identifier!r}; known: {sorted(_ACTIVATIONS)}"
        ) from None


_names: dict[str, int] = {}


def _auto_name(prefix: str) -> str:
    _names[prefix] = _names.get(prefix, -1) + 1
    return prefix if _names[prefix] == 0 else f"{prefix}_{_names[prefix]}"


class Layer:
    """Base class of layers and models.

    Args:
        name: Layer name (unique default from the class name).
        trainable: Whether its weights are trainable.
        input_shape: Shape of one example (without the batch axis); builds the layer at once.
        dtype: Dtype of the weights and the computation.
    """

    def __init__(
        self,
        name: str | None = None,
        trainable: bool = True,
        input_shape: tuple[int, ...] | None = None,
        dtype: Any = "float32",
    ) -> None:
        snake = "".join("_" + c.lower() if c.isupper() else c for c in type(self).__name__)
        self.name = name or _auto_name(snake.lstrip("_"))
        self.trainable = trainable
        self.dtype = np.dtype(dtype)
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

    def __call__(self, inputs: Any, training: bool | None = None) -> Any:
        """Build on first use (once, in cross-replica context), then `call`."""
        shape = tuple(np.shape(inputs.value if isinstance(inputs, Tensor) else inputs))
        self._maybe_build(shape)
        return self.call(inputs, training=training)

    def count_params(self) -> int:
        """Number of scalars in all weights."""
        return int(sum(np.prod(w.shape) for w in self.weights))

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


def _float_input(x: Any, dtype: np.dtype) -> Tensor:
    x = as_tensor(x)
    return x if x.dtype == dtype else ops.cast(x, dtype)


class Dense(Layer):
    """``activation(inputs @ kernel + bias)``.

    Args:
        units: Output features.
        activation: Name or callable (None = linear).
        use_bias: Add a bias.
        kernel_initializer: Initializer of the kernel.
        bias_initializer: Initializer of the bias.
        kernel_regularizer: Penalty on the kernel (e.g. ``L2(0.01)``).
        bias_regularizer: Penalty on the bias.
        **kwargs: `Layer` arguments (``name``, ``input_shape``, ...).
    """

    def __init__(
        self,
        units: int,
        activation: Any = None,
        use_bias: bool = True,
        kernel_initializer: Any = "glorot_uniform",
        bias_initializer: Any = "zeros",
        kernel_regularizer: Any = None,
        bias_regularizer: Any = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if int(units) <= 0:
            raise ValueError(f"Dense units must be positive, got {units}")
        self.units = int(units)
        self.activation = get_activation(activation)
        self.use_bias = use_bias
        self.kernel_initializer, self.bias_initializer = kernel_initializer, bias_initializer
        self.kernel_regularizer, self.bias_regularizer = kernel_regularizer, bias_regularizer

    def build(self, input_shape: tuple[int, ...]) -> None:
        """Kernel ``(features, units)`` and bias ``(units,)``."""
        self.kernel = self.add_weight(
            "kernel",
            (input_shape[-1], self.units),
            self.kernel_initializer,
            self.kernel_regularizer,
        )
        self.bias = (
            self.add_weight("bias", (self.units,), self.bias_initializer, self.bias_regularizer)
            if self.use_bias
            else None
        )
        self.built = True

    def call(self, inputs: Any, training: bool | None = None) -> Tensor:
        """Affine map then activation."""
        out = ops.matmul(_float_input(inputs, self.dtype), self.kernel)
        if self.bias is not None:
            out = ops.add(out, self.bias)
        return self.activation(out)


class Embedding(Layer):
    """Rows of a ``(input_dim, output_dim)`` table at integer ids.

    Args:
        input_dim: Vocabulary size.
        output_dim: Embedding width.
        embeddings_initializer: Initializer of the table.
        embeddings_regularizer: Penalty on the table.
        **kwargs: `Layer` arguments.
    """

    def __init__(
        self,
        input_dim: int,
        output_dim: int,
        embeddings_initializer: Any = "uniform",
        embeddings_regularizer: Any = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.input_dim, self.output_dim = int(input_dim), int(output_dim)
        self.embeddings_initializer = embeddings_initializer
        self.embeddings_regularizer = embeddings_regularizer

    def build(self, input_shape: tuple[int, ...]) -> None:
        """The table."""
        self.embeddings = self.add_weight(
            "embeddings",
            (self.input_dim, self.output_dim),
            self.embeddings_initializer,
            self.embeddings_regularizer,
        )
        self.built = True

    def call(self, inputs: Any, training: bool | None = None) -> Tensor:
        """Look up rows.

        Raises:
            ValueError: An id is outside ``[0, input_dim)``.
        """
        ids = to_numpy(inputs.value if isinstance(inputs, Tensor) else inputs)
        if ids.size and (ids.min() < 0 or ids.max() >= self.input_dim):
            raise ValueError(
                f"{self.name}: ids must be in [0, {self.input_dim}), got min {ids.min()} "
                f"max {ids.max()}"
            )
        return embedding_lookup(self.embeddings, ids.astype(np.int64))


class Dropout(Layer):
    """Zero a fraction ``rate`` of inputs during training and scale the rest by ``1/(1-rate)``.

    Args:
        rate: Fraction dropped, in ``[0, 1)``.
        seed: Seed of this layer's mask generator (default: from the shared generator).
        **kwargs: `Layer` arguments.
    """

    def __init__(self, rate: float, seed: int | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if not 0 <= rate < 1:
            raise ValueError(f"Dropout rate must be in [0, 1), got {rate}")
        self.rate = float(rate)
        seed = seed if seed is not None else int(initializers.generator().integers(2**31))
        self._rng = np.random.default_rng(seed)

    def call(self, inputs: Any, training: bool | None = None) -> Tensor:
        """Identity unless ``training``."""
        x = as_tensor(inputs)
        if not training or self.rate == 0:
            return x
        keep = (self._rng.random(x.shape) >= self.rate).astype(x.dtype) / (1 - self.rate)
        return ops.multiply(x, keep)


class Flatten(Layer):
    """Reshape ``(batch, ...)`` to ``(batch, features)``."""

    def call(self, inputs: Any, training: bool | None = None) -> Tensor:
        """Flatten all but the first axis."""
        x = as_tensor(inputs)
        return ops.reshape(x, (x.shape[0], -1))


class Activation(Layer):
    """Apply an activation by name or callable."""

    def __init__(self, activation: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.activation = get_activation(activation)

    def call(self, inputs: Any, training: bool | None = None) -> Tensor:
        """``activation(inputs)``."""
        return self.activation(inputs)


class ReLU(Activation):
    """``max(x, 0)``."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__("relu", **kwargs)


class LayerNormalization(Layer):
    """Normalise over the last axis, then scale (``gamma``) and shift (``beta``).

    Args:
        epsilon: Added to the variance.
        **kwargs: `Layer` arguments.
    """

    def __init__(self, epsilon: float = 1e-3, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.epsilon = float(epsilon)

    def build(self, input_shape: tuple[int, ...]) -> None:
        """``gamma`` (ones) and ``beta`` (zeros) of the last axis' size."""
        self.gamma = self.add_weight("gamma", (input_shape[-1],), "ones")
        self.beta = self.add_weight("beta", (input_shape[-1],), "zeros")
        self.built = True

    def call(self, inputs: Any, training: bool | None = None) -> Tensor:
        """``(x - mean) / sqrt(var + eps) * gamma + beta`` over the last axis."""
        x = _float_input(inputs, self.dtype)
        mean = ops.reduce_mean(x, axis=-1, keepdims=True)
        centered = ops.subtract(x, mean)
        var = ops.reduce_mean(ops.square(centered), axis=-1, keepdims=True)
        normed = ops.divide(centered, ops.sqrt(ops.add(var, self.epsilon)))
        return ops.add(ops.multiply(normed, self.gamma), self.beta)
