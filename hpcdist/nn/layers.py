"""Keras-shaped layers (``tf.keras.layers``) on `hpcdist.nn.ops`.

Dense, Embedding, Dropout, Flatten, Activation and ReLU here; LayerNormalization and
BatchNormalization (`hpcdist.nn.normalization`), MultiHeadAttention (`hpcdist.nn.attention`),
EinsumDense (`hpcdist.nn.einsum_dense`), Conv2D, DepthwiseConv2D and MaxPooling2D
(`hpcdist.nn.conv_layers`),
Reshape (`hpcdist.nn.reshaping`), InputLayer (`hpcdist.nn.input_layer`), the merge layers
(`hpcdist.nn.merge`), the average and global poolings (`hpcdist.nn.pooling`), ZeroPadding2D
(`hpcdist.nn.reshaping`), Softmax (`hpcdist.nn.activation_layers`) and the `Layer` base class
(`hpcdist.nn.base_layer`) are exported here too, as Keras groups them; so are the preprocessing
layers StringLookup and IntegerLookup (`hpcdist.nn.lookups`), Hashing (`hpcdist.nn.hashing`) and
CategoryEncoding (`hpcdist.nn.category_encoding`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hpcdist.core import math_ops as ops
from hpcdist.core.tensors import Tensor, as_tensor
from hpcdist.nn import activations, initializers
from hpcdist.nn.activation_layers import Softmax
from hpcdist.nn.attention import MultiHeadAttention
from hpcdist.nn.base_layer import Layer, float_input
from hpcdist.nn.category_encoding import CategoryEncoding
from hpcdist.nn.conv_layers import Conv2D, DepthwiseConv2D, MaxPooling2D
from hpcdist.nn.einsum_dense import EinsumDense
from hpcdist.nn.embedding import embedding_lookup
from hpcdist.nn.hashing import Hashing
from hpcdist.nn.input_layer import Input, InputLayer
from hpcdist.nn.kernel_bias import KernelBiasLayer
from hpcdist.nn.layer_config import (
    activation_config,
    config_value,
    regularizer_config,
    regularizer_from_config,
)
from hpcdist.nn.lookups import IntegerLookup, StringLookup
from hpcdist.nn.merge import (
    Add,
    Average,
    Concatenate,
    Maximum,
    Minimum,
    Multiply,
    Subtract,
    add,
    average,
    concatenate,
    maximum,
    minimum,
    multiply,
    subtract,
)
from hpcdist.nn.normalization import BatchNormalization, LayerNormalization
from hpcdist.nn.pooling import (
    AveragePooling2D,
    GlobalAveragePooling1D,
    GlobalAveragePooling2D,
    GlobalMaxPooling1D,
    GlobalMaxPooling2D,
)
from hpcdist.nn.reshaping import Reshape, ZeroPadding2D
from hpcdist.utils.xp import to_numpy

__all__ = [
    "Activation",
    "Add",
    "Average",
    "AveragePooling2D",
    "BatchNormalization",
    "CategoryEncoding",
    "Concatenate",
    "Conv2D",
    "Dense",
    "DepthwiseConv2D",
    "Dropout",
    "EinsumDense",
    "Embedding",
    "Flatten",
    "GlobalAveragePooling1D",
    "GlobalAveragePooling2D",
    "GlobalMaxPooling1D",
    "GlobalMaxPooling2D",
    "Hashing",
    "Input",
    "InputLayer",
    "IntegerLookup",
    "Layer",
    "LayerNormalization",
    "MaxPooling2D",
    "Maximum",
    "Minimum",
    "MultiHeadAttention",
    "Multiply",
    "ReLU",
    "Reshape",
    "Softmax",
    "StringLookup",
    "Subtract",
    "ZeroPadding2D",
    "add",
    "average",
    "concatenate",
    "get_activation",
    "maximum",
    "minimum",
    "multiply",
    "subtract",
]

get_activation = activations.get


class Dense(KernelBiasLayer):
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
        self._init_kernel_bias(
            activation,
            use_bias,
            kernel_initializer,
            bias_initializer,
            kernel_regularizer,
            bias_regularizer,
        )

    def get_config(self) -> dict[str, Any]:
        """Constructor arguments (JSON-able)."""
        return {**super().get_config(), "units": self.units, **self._kernel_bias_config()}

    def build(self, input_shape: tuple[int, ...]) -> None:
        """Kernel ``(features, units)`` and bias ``(units,)``."""
        self._build_kernel_bias((input_shape[-1], self.units), self.units)

    def call(self, inputs: Any, training: bool | None = None) -> Tensor:
        """Affine map then activation."""
        out = ops.matmul(float_input(inputs, self.dtype), self.kernel)
        return self._bias_and_activation(out)


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
        self.embeddings_regularizer = regularizer_from_config(embeddings_regularizer)

    def get_config(self) -> dict[str, Any]:
        """Constructor arguments (JSON-able)."""
        n = self.name
        return {
            **super().get_config(),
            "input_dim": self.input_dim,
            "output_dim": self.output_dim,
            "embeddings_initializer": config_value(n, "initializer", self.embeddings_initializer),
            "embeddings_regularizer": regularizer_config(n, self.embeddings_regularizer),
        }

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
        self.seed = seed
        seed = seed if seed is not None else int(initializers.generator().integers(2**31))
        self._rng = np.random.default_rng(seed)

    def get_config(self) -> dict[str, Any]:
        """Constructor arguments (JSON-able)."""
        return {**super().get_config(), "rate": self.rate, "seed": self.seed}

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
        return ops.reshape(x, (x.shape[0], int(np.prod(x.shape[1:]))))


class Activation(Layer):
    """Apply an activation by name or callable."""

    def __init__(self, activation: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.activation = get_activation(activation)

    def get_config(self) -> dict[str, Any]:
        """Constructor arguments (JSON-able)."""
        return {**super().get_config(), "activation": activation_config(self.name, self.activation)}

    def call(self, inputs: Any, training: bool | None = None) -> Tensor:
        """``activation(inputs)``."""
        return self.activation(inputs)


class ReLU(Activation):
    """``max(x, 0)``."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.pop("activation", None)  # from a saved config
        super().__init__("relu", **kwargs)
