"""TensorFlow's dtype names (``tf.float32``, ``tf.dtypes.int64``, ...) as numpy dtypes.

``hd.float32`` is ``numpy.dtype("float32")``: it compares equal to ``np.float32`` and to a
tensor's ``dtype``, and numpy accepts it wherever a dtype goes. `as_dtype` follows
``tf.as_dtype``: names, numpy dtypes and types, and Python's ``float`` (float32) and ``bool``.
TF's ``string`` is numpy's object dtype (TF's string tensors read back as ``bytes`` objects).
Not provided: ``bfloat16`` and the quantized types (numpy has no such dtypes).
"""

from __future__ import annotations

import builtins
from typing import Any

import numpy as np

__all__ = [
    "as_dtype",
    "bool",
    "complex64",
    "complex128",
    "double",
    "float16",
    "float32",
    "float64",
    "half",
    "int8",
    "int16",
    "int32",
    "int64",
    "string",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
]

float16 = np.dtype("float16")
float32 = np.dtype("float32")
float64 = np.dtype("float64")
half = float16
double = float64
complex64 = np.dtype("complex64")
complex128 = np.dtype("complex128")
int8 = np.dtype("int8")
int16 = np.dtype("int16")
int32 = np.dtype("int32")
int64 = np.dtype("int64")
uint8 = np.dtype("uint8")
uint16 = np.dtype("uint16")
uint32 = np.dtype("uint32")
uint64 = np.dtype("uint64")
bool = np.dtype("bool")  # TF's name (tf.bool)
string = np.dtype(object)

_BY_NAME = {
    "float16": float16,
    "half": float16,
    "float32": float32,
    "float": float32,
    "float64": float64,
    "double": float64,
    "complex64": complex64,
    "complex128": complex128,
    "int8": int8,
    "int16": int16,
    "int32": int32,
    "int64": int64,
    "uint8": uint8,
    "uint16": uint16,
    "uint32": uint32,
    "uint64": uint64,
    "bool": bool,
    "string": string,
}
_SUPPORTED = frozenset(_BY_NAME.values())


def as_dtype(type_value: Any) -> np.dtype:
    """The numpy dtype for a TF dtype name, a numpy dtype or type, or Python's float/bool.

    Follows ``tf.as_dtype``: ``"float32"``, ``np.float64``, ``hd.int64`` and ``float`` (which
    TF reads as float32) are accepted; Python's ``int`` is not (TF has no default for it).

    Raises:
        TypeError: ``type_value`` names no dtype that TF and numpy share.
    """
    if isinstance(type_value, str):
        found = _BY_NAME.get(type_value)
        if found is None:
            raise TypeError(
                f"cannot convert {type_value!r} to a dtype: expected one of {sorted(_BY_NAME)}"
            )
        return found
    if type_value is float:
        return float32
    if type_value is builtins.bool:
        return bool
    if type_value is str or type_value is bytes:
        return string
    if type_value is int:
        raise TypeError(
            "cannot convert Python's int to a dtype (TF has no default for it): pass "
            "hd.int32 or hd.int64"
        )
    try:
        dtype = np.dtype(type_value)
    except TypeError as exc:
        raise TypeError(
            f"cannot convert {type_value!r} to a dtype: expected a dtype name such as "
            "'float32', a numpy dtype, or hd.float32-style names"
        ) from exc
    if dtype.kind in "SU":
        return string
    if dtype not in _SUPPORTED:
        raise TypeError(f"dtype {dtype} has no TensorFlow counterpart")
    return dtype
