"""The gallery's networks and synthetic data, written once for any Keras-shaped module.

Each ``build_*`` function takes the module to build with: ``hpcdist.nn``, or Keras 3 itself
(``benchmarks/peers/models.py`` builds both from this code). This module imports numpy only.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = [
    "build_mnist_cnn",
    "build_resnet20",
    "build_transformer_encoder",
    "synthetic_images",
    "synthetic_tokens",
]


def build_mnist_cnn(keras: Any, image_size: int = 28, classes: int = 10) -> Any:
    """The tutorials' MNIST CNN: Conv2D 32, MaxPool, Conv2D 64, MaxPool, Dense 128, Dense 10."""
    layers = keras.layers
    return keras.Sequential(
        [
            keras.Input((image_size, image_size, 1)),
            layers.Conv2D(32, 3, activation="relu"),
            layers.MaxPooling2D(),
            layers.Conv2D(64, 3, activation="relu"),
            layers.MaxPooling2D(),
            layers.Flatten(),
            layers.Dense(128, activation="relu"),
            layers.Dense(classes),
        ]
    )


def build_resnet20(
    keras: Any, width: int = 16, blocks: int = 3, image_size: int = 32, classes: int = 10
) -> Any:
    """ResNet-20, the CIFAR-10 network of He et al. (2016), at ``blocks=3``.

    Three stages of ``blocks`` basic residual blocks (3x3 conv, BatchNormalization, ReLU, 3x3
    conv, BatchNormalization, Add with the shortcut, ReLU; a strided 1x1 conv with
    BatchNormalization as the shortcut where the shape changes) with ``width``, 2x and 4x
    filters, then GlobalAveragePooling2D and a Dense classifier: ``6 * blocks + 2`` layers.
    """
    layers = keras.layers

    def conv_bn(x: Any, filters: int, kernel: int, strides: int) -> Any:
        x = layers.Conv2D(filters, kernel, strides, padding="same", use_bias=False)(x)
        return layers.BatchNormalization()(x)

    inputs = keras.Input((image_size, image_size, 3))
    x = layers.Activation("relu")(conv_bn(inputs, width, 3, 1))
    channels = width
    for stage in range(3):
        filters = width * 2**stage
        for block in range(blocks):
            strides = 2 if stage and not block else 1
            y = layers.Activation("relu")(conv_bn(x, filters, 3, strides))
            y = conv_bn(y, filters, 3, 1)
            shortcut = (
                x if strides == 1 and channels == filters else conv_bn(x, filters, 1, strides)
            )
            x = layers.Activation("relu")(layers.Add()([y, shortcut]))
            channels = filters
    x = layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, layers.Dense(classes)(x))


def build_transformer_encoder(
    keras: Any,
    vocab: int = 64,
    seq_len: int = 16,
    dim: int = 32,
    heads: int = 2,
    ff: int = 64,
    blocks: int = 2,
    classes: int = 2,
) -> Any:
    """A transformer encoder classifier over ``(batch, seq_len)`` int32 token ids.

    Embedding plus a learned position embedding, then ``blocks`` encoder blocks
    (MultiHeadAttention, Add, LayerNormalization; Dense with GELU, Dense, Add,
    LayerNormalization), GlobalAveragePooling1D and a Dense classifier.
    """
    layers = keras.layers

    class PositionEmbedding(layers.Layer):
        """Adds a learned ``(steps, features)`` embedding of each position."""

        def build(self, input_shape: Any) -> None:
            self.position = self.add_weight(
                name="position",
                shape=(int(input_shape[1]), int(input_shape[2])),
                initializer="glorot_uniform",
            )

        def call(self, inputs: Any) -> Any:
            return inputs + self.position

    tokens = keras.Input((seq_len,), dtype="int32")
    x = PositionEmbedding()(layers.Embedding(vocab, dim)(tokens))
    for _ in range(blocks):
        attended = layers.MultiHeadAttention(heads, dim // heads)(x, x)
        x = layers.LayerNormalization(epsilon=1e-6)(layers.Add()([x, attended]))
        hidden = layers.Dense(ff, activation="gelu")(x)
        x = layers.LayerNormalization(epsilon=1e-6)(layers.Add()([x, layers.Dense(dim)(hidden)]))
    x = layers.GlobalAveragePooling1D()(x)
    return keras.Model(tokens, layers.Dense(classes)(x))


def synthetic_images(
    examples: int, image_size: int = 32, channels: int = 3, classes: int = 10, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Float32 images (each class adds its own fixed pattern to Gaussian noise), int64 labels."""
    rng = np.random.default_rng(seed)
    shape = (image_size, image_size, channels)
    patterns = rng.standard_normal((classes, *shape)).astype(np.float32)
    labels = rng.integers(0, classes, examples)
    noise = rng.standard_normal((examples, *shape)).astype(np.float32)
    return noise + 0.5 * patterns[labels], labels


def synthetic_tokens(
    examples: int, vocab: int = 64, seq_len: int = 16, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """``(examples, seq_len)`` int32 token ids and int64 labels.

    The label says whether a sequence holds more tokens from the lower half of the vocabulary
    than from the upper half.
    """
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, vocab, (examples, seq_len)).astype(np.int32)
    labels = ((tokens < vocab // 2).sum(axis=1) > seq_len // 2).astype(np.int64)
    return tokens, labels
