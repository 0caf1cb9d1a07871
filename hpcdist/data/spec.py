"""`TensorSpec`: the shape and dtype of one component (``tf.TensorSpec``), and dtype conversion.

``Dataset.from_generator(output_signature=...)`` checks what the generator yields against
specs: any object with ``shape`` and ``dtype`` attributes works, TF's own ``tf.TensorSpec``
included (its ``tf.DType`` converts through ``as_numpy_dtype``; ``tf.string`` is numpy's object
dtype, values ``bytes``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["TensorSpec", "as_numpy_dtype", "as_shape"]


def as_numpy_dtype(dtype: Any) -> np.dtype:
    """A numpy dtype from a numpy dtype, a type, a name or a TF ``DType``."""
    dtype = getattr(dtype, "as_numpy_dtype", dtype)
    if dtype in ("string", str, bytes):
        return np.dtype(object)
    return np.dtype(dtype)


def as_shape(shape: Any) -> tuple[int | None, ...] | None:
    """A shape as a tuple with None for unknown dimensions (None: unknown rank)."""
    if shape is None:
        return None
    dims = getattr(shape, "as_list", None)
    if callable(dims):
        try:
            shape = dims()
        except ValueError:  # TF's TensorShape of unknown rank
            return None
    if isinstance(shape, (int, np.integer)):
        shape = (shape,)
    return tuple(None if d is None or int(d) < 0 else int(d) for d in shape)


class TensorSpec:
    """Shape and dtype of one component (``tf.TensorSpec``).

    Args:
        shape: Dimensions, None for an unknown one (or None for an unknown rank).
        dtype: A numpy dtype, `hpcdist.float32`-style dtype, name or TF ``DType``.
        name: Recorded.
    """

    def __init__(self, shape: Any, dtype: Any = np.float32, name: str | None = None) -> None:
        self.shape = as_shape(shape)
        self.dtype = as_numpy_dtype(dtype)
        self.name = name

    def is_compatible_with(self, value: Any) -> bool:
        """Whether ``value``'s shape fits this spec's (None dimensions match any)."""
        shape = np.shape(value)
        if self.shape is None:
            return True
        return len(shape) == len(self.shape) and all(
            want is None or want == got for want, got in zip(self.shape, shape, strict=True)
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TensorSpec) and (self.shape, self.dtype) == (
            other.shape,
            other.dtype,
        )

    def __hash__(self) -> int:
        return hash((self.shape, self.dtype))

    def __repr__(self) -> str:
        return f"TensorSpec(shape={self.shape}, dtype={self.dtype}, name={self.name!r})"
