"""Hashing (``tf.keras.layers.Hashing``): strings and integers to hash bins, as TF hashes them.

Without a salt a value's bin is FarmHash ``Fingerprint64`` of its bytes modulo the bins
(``tf.strings.to_hash_bucket_fast``); with one, keyed SipHash-2-4 (``to_hash_bucket_strong``).
Integers are hashed as their decimal strings and floats are truncated to integers first, as in
Keras, so every id equals TensorFlow's. The layer has no weights: it runs in a model and in a
dataset's ``map`` alike.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hpcdist.nn.base_layer import Layer
from hpcdist.nn.category_encoding import ENCODINGS, check_output_mode, encode_categorical_inputs
from hpcdist.nn.string_hash import to_hash_bucket_fast, to_hash_bucket_strong, unique_keys

__all__ = ["Hashing", "salt_key"]


def salt_key(salt: Any, where: str) -> list[int] | None:
    """Keras' salt as SipHash's two key words: an int ``s`` is ``[s, s]``.

    Raises:
        ValueError: Neither None, an int, nor a pair of ints.
    """
    if salt is None:
        return None
    if isinstance(salt, (tuple, list)) and len(salt) == 2:
        return [int(s) for s in salt]
    if isinstance(salt, (int, np.integer)) and not isinstance(salt, bool):
        return [int(salt), int(salt)]
    raise ValueError(f"{where}: salt must be an int or a pair of ints, got {salt!r}")


class Hashing(Layer):
    """Hash strings or integers into ``num_bins`` bins.

    Args:
        num_bins: Number of bins, the mask's bin 0 included when ``mask_value`` is set.
        mask_value: A value mapped to bin 0 (the others then hash into ``1..num_bins-1``).
        salt: None (FarmHash ``Fingerprint64``), an int, or a pair of ints (SipHash's key).
        output_mode: ``"int"`` (bin ids), ``"one_hot"``, ``"multi_hot"`` or ``"count"``.
        sparse: Must be False (hpcdist has no sparse tensors).
        **kwargs: `Layer` arguments; ``dtype`` defaults to int64 for ``"int"`` and float32
            otherwise, as in Keras.

    Raises:
        ValueError: ``num_bins`` not positive, an unknown mode, a non-integer dtype in
            ``"int"`` mode, ``sparse``, or a bad ``salt``.
    """

    def __init__(
        self,
        num_bins: int,
        mask_value: Any = None,
        salt: Any = None,
        output_mode: str = "int",
        sparse: bool = False,
        **kwargs: Any,
    ) -> None:
        if kwargs.get("dtype") is None:
            kwargs["dtype"] = "int64" if output_mode == "int" else "float32"
        super().__init__(**kwargs)
        if num_bins is None or num_bins <= 0:
            raise ValueError(f"{self.name}: num_bins must be a positive int, got {num_bins!r}")
        self.output_mode = check_output_mode(output_mode, ENCODINGS, self.name)
        if self.output_mode == "int" and self.dtype not in (np.int32, np.int64):
            raise ValueError(
                f'{self.name}: with output_mode="int" dtype must be int32 or int64, '
                f"got {self.dtype.name}"
            )
        if sparse:
            raise ValueError(f"{self.name}: sparse=True is not supported (dense outputs only)")
        self.num_bins = int(num_bins)
        self.mask_value = mask_value
        self.salt = salt_key(salt, self.name)
        self.sparse = False

    def _convert_inputs(self, inputs: Any) -> Any:
        """Inputs as given (Keras converts no inputs of preprocessing layers)."""
        return inputs

    def _bins(self, keys: list[Any], bins: int) -> np.ndarray:
        if self.salt is not None:
            return to_hash_bucket_strong(keys, bins, self.salt)
        return to_hash_bucket_fast(keys, bins)

    def hash_values(self, values: Any) -> np.ndarray:
        """The bin of each value (int64, the shape of ``values``)."""
        keys, inverse, shape = unique_keys(values, "hash")
        bins = self.num_bins
        masked = self.mask_value is not None and bins > 1
        out = self._bins(keys, bins - 1 if masked else bins)
        if masked:
            mask = _mask_key(self.mask_value)
            out = np.array(
                [0 if k == mask else int(b) + 1 for k, b in zip(keys, out, strict=True)],
                dtype=np.int64,
            )
        return out[inverse].reshape(shape) if keys else np.zeros(shape, np.int64)

    def call(self, inputs: Any) -> np.ndarray:
        """Bin ids, or their encoding in ``output_mode``."""
        values = np.asarray(inputs.numpy() if hasattr(inputs, "numpy") else inputs)
        if self.output_mode == "one_hot" and values.ndim and values.shape[-1] == 1:
            values = values.reshape(values.shape[:-1])
        ids = self.hash_values(values)
        return encode_categorical_inputs(ids, self.output_mode, self.num_bins, self.dtype)

    def get_config(self) -> dict[str, Any]:
        """Constructor arguments (JSON-able)."""
        return {
            **super().get_config(),
            "num_bins": self.num_bins,
            "salt": self.salt,
            "mask_value": self.mask_value,
            "output_mode": self.output_mode,
            "sparse": self.sparse,
        }


def _mask_key(mask_value: Any) -> Any:
    """The mask as `unique_keys` writes keys (bytes for strings, int for numbers)."""
    if isinstance(mask_value, str):
        return mask_value.encode("utf-8")
    if isinstance(mask_value, bytes):
        return mask_value
    return int(mask_value)
