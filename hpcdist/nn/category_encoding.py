"""CategoryEncoding (``tf.keras.layers.CategoryEncoding``) and the encoding it shares.

`encode_categorical_inputs` is Keras' function of the same name with its TensorFlow backend:
the lookup layers and `Hashing` encode their ids with it. ``"one_hot"`` encodes each id (an
input whose last axis has size 1 loses that axis first); ``"multi_hot"`` and ``"count"`` encode
the last axis of a rank-1 or rank-2 input as one sample (TF's ``bincount``: ids outside
``[0, depth)`` are not counted); on rank 3 and more they reduce axis 1, as Keras does. A
scalar is a sample of one id.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hpcdist.nn.base_layer import Layer

__all__ = ["CategoryEncoding", "encode_categorical_inputs", "integer_ids"]

ENCODINGS = ("int", "one_hot", "multi_hot", "count")


def integer_ids(values: Any, where: str) -> np.ndarray:
    """``values`` as an int64 array.

    Raises:
        TypeError: Values that are not integers (floats must hold whole numbers).
    """
    array = np.asarray(values.numpy() if hasattr(values, "numpy") else values)
    if array.dtype.kind == "f" and np.array_equal(array, np.trunc(array)):
        return array.astype(np.int64)
    if array.dtype.kind not in "iub":
        raise TypeError(f"{where}: expected integer ids, got an array of dtype {array.dtype}")
    return array.astype(np.int64, copy=False)


def _one_hot(ids: np.ndarray, depth: int, dtype: Any) -> np.ndarray:
    """``tf.one_hot``: a new last axis of ``depth``; ids outside ``[0, depth)`` give zeros."""
    out = np.zeros((*ids.shape, depth), dtype=dtype)
    valid = (ids >= 0) & (ids < depth)
    index = np.nonzero(valid)
    out[(*index, ids[valid])] = 1
    return out


def _bincount(
    ids: np.ndarray, depth: int, binary: bool, dtype: Any, weights: np.ndarray | None
) -> np.ndarray:
    """``tf.math.bincount(..., minlength=depth, maxlength=depth, axis=-1)`` of rank 1 or 2.

    Raises:
        ValueError: A negative id (TF's bincount rejects them).
    """
    if ids.size and ids.min() < 0:
        raise ValueError(f"bincount needs non-negative ids, got {int(ids.min())}")
    rows = ids.reshape(-1, ids.shape[-1]) if ids.ndim == 2 else ids.reshape(1, -1)
    w = None if weights is None else np.broadcast_to(weights, ids.shape).reshape(rows.shape)
    out = np.zeros((rows.shape[0], depth), dtype=np.float64 if w is not None else np.int64)
    keep = rows < depth
    row_index = np.broadcast_to(np.arange(rows.shape[0])[:, None], rows.shape)
    np.add.at(out, (row_index[keep], rows[keep]), 1 if w is None else w[keep])
    if binary:
        out = (out > 0).astype(out.dtype)
    out = out.astype(dtype)
    return out if ids.ndim == 2 else out[0]


def encode_categorical_inputs(
    ids: np.ndarray,
    output_mode: str,
    depth: int,
    dtype: Any,
    count_weights: np.ndarray | None = None,
) -> np.ndarray:
    """Keras' ``numerical_utils.encode_categorical_inputs`` (TensorFlow backend) on numpy ids.

    Args:
        ids: Integer ids.
        output_mode: ``"int"``, ``"one_hot"``, ``"multi_hot"`` or ``"count"``.
        depth: Size of the encoded axis.
        dtype: Dtype of the result.
        count_weights: Weights of each id in ``"count"`` mode (the shape of ``ids``).

    Returns:
        The encoded ids.
    """
    if output_mode == "int":
        return ids.astype(dtype)
    if ids.ndim == 0:
        ids = ids.reshape(1)
        if count_weights is not None:
            count_weights = np.reshape(count_weights, (1,))
    if output_mode in ("multi_hot", "count") and ids.ndim <= 2:
        return _bincount(ids, depth, output_mode == "multi_hot", dtype, count_weights)
    axis = 1 if ids.ndim > 1 else 0
    if output_mode == "multi_hot":
        return _one_hot(ids, depth, dtype).max(axis=axis)
    if output_mode == "one_hot":
        if ids.ndim > 1 and ids.shape[-1] == 1:
            ids = ids.reshape(ids.shape[:-1])
        return _one_hot(ids, depth, dtype)
    if count_weights is not None:
        weights = np.asarray(count_weights)
        return (_one_hot(ids, depth, weights.dtype) * weights[..., None]).sum(axis=axis)
    return _one_hot(ids, depth, dtype).sum(axis=axis).astype(dtype)


def check_output_mode(output_mode: str, allowed: tuple[str, ...], where: str) -> str:
    """``output_mode`` with Keras' old name ``"binary"`` read as ``"multi_hot"``.

    Raises:
        ValueError: A mode outside ``allowed``.
    """
    mode = "multi_hot" if output_mode == "binary" else output_mode
    if mode not in allowed:
        raise ValueError(
            f"{where}: invalid output_mode, expected one of {allowed}, got {output_mode!r}"
        )
    return mode


class CategoryEncoding(Layer):
    """Encode integer ids in ``[0, num_tokens)`` as one-hot, multi-hot or count vectors.

    Args:
        num_tokens: Size of the encoded axis (ids must lie in ``[0, num_tokens)``).
        output_mode: ``"multi_hot"`` (default), ``"one_hot"`` or ``"count"``.
        sparse: Must be False (hpcdist has no sparse tensors).
        **kwargs: `Layer` arguments (``dtype`` is the output's, float32 by default).

    Raises:
        ValueError: No or a non-positive ``num_tokens``, an unknown mode, or ``sparse``.
    """

    def __init__(
        self,
        num_tokens: int | None = None,
        output_mode: str = "multi_hot",
        sparse: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.output_mode = check_output_mode(output_mode, ENCODINGS[1:], self.name)
        if num_tokens is None:
            raise ValueError(
                f"{self.name}: num_tokens must be set (use IntegerLookup when the number of "
                "tokens is not known beforehand)"
            )
        if num_tokens < 1:
            raise ValueError(f"{self.name}: num_tokens must be >= 1, got {num_tokens}")
        if sparse:
            raise ValueError(f"{self.name}: sparse=True is not supported (dense outputs only)")
        self.num_tokens = int(num_tokens)
        self.sparse = False

    def _convert_inputs(self, inputs: Any) -> Any:
        """Inputs as given (Keras converts no inputs of preprocessing layers)."""
        return inputs

    def call(self, inputs: Any, count_weights: Any = None) -> np.ndarray:
        """The encoded ids (``count_weights`` weigh each id in ``"count"`` mode).

        Raises:
            ValueError: ``count_weights`` in another mode.
        """
        if count_weights is not None:
            if self.output_mode != "count":
                raise ValueError(
                    f"{self.name}: count_weights are used only when output_mode is 'count', "
                    f"got output_mode={self.output_mode!r}"
                )
            count_weights = np.asarray(count_weights, dtype=self.dtype)
        ids = integer_ids(inputs, self.name)
        return encode_categorical_inputs(
            ids, self.output_mode, self.num_tokens, self.dtype, count_weights
        )

    def get_config(self) -> dict[str, Any]:
        """Constructor arguments (JSON-able)."""
        return {
            **super().get_config(),
            "num_tokens": self.num_tokens,
            "output_mode": self.output_mode,
            "sparse": self.sparse,
        }
