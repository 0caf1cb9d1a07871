"""``tf.constant`` and ``tf.convert_to_tensor``: Python data becomes tensors by TF's rules.

Python floats become float32 and Python ints int32 (int64 when a value does not fit), as in
TF; numpy arrays and scalars keep their dtype; strings become TF's string dtype (numpy object
arrays of ``bytes``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hpcdist.core.autodiff import Tensor, as_tensor
from hpcdist.core.dtypes import as_dtype, string
from hpcdist.utils.xp import is_device_array

__all__ = ["constant", "convert_to_tensor", "is_python_data", "python_array"]

_INT32 = np.iinfo(np.int32)


def is_python_data(value: Any) -> bool:
    """Whether ``value`` is Python data (numbers, strings, nested lists), not numpy's."""
    if isinstance(value, (list, tuple)):
        return all(is_python_data(v) for v in value)
    return type(value) in (int, float, bool, complex, str, bytes)


def python_array(value: Any) -> np.ndarray:
    """``value`` as a numpy array with TF's dtype for Python data (float32, int32, bytes)."""
    array = np.asarray(value)
    if not is_python_data(value):
        return array
    if array.dtype == np.float64:
        return array.astype(np.float32)
    if array.dtype.kind == "i" and array.dtype.itemsize == 8:
        if array.size == 0 or (array.min() >= _INT32.min and array.max() <= _INT32.max):
            return array.astype(np.int32)
        return array
    if array.dtype.kind == "U":
        return np.char.encode(array, "utf-8").astype(object)
    if array.dtype.kind == "S":
        return array.astype(object)
    return array


def constant(value: Any, dtype: Any = None, shape: Any = None, name: str | None = None) -> Tensor:
    """A tensor holding ``value`` (``tf.constant``).

    Args:
        value: A number, a nested list, a numpy array or a tensor.
        dtype: The dtype (`hpcdist.core.dtypes.as_dtype` names); by default TF's rule:
            float32 for Python floats, int32 for Python ints, the array's own dtype otherwise.
        shape: Fill this shape with a single value, or reshape ``value`` to it.
        name: Accepted for TF compatibility (tensors have no names here).

    Raises:
        TypeError: ``value`` does not fit ``shape``, or converting it to an integer ``dtype``
            would drop a fraction (TF refuses both).
    """
    del name
    if isinstance(value, Tensor) or is_device_array(value):
        array = value.value if isinstance(value, Tensor) else value
    elif hasattr(value, "numpy") and not isinstance(value, np.ndarray):
        array = np.asarray(value.numpy())
    else:
        array = python_array(value)
    if dtype is not None:
        target = as_dtype(dtype)
        if target == string or array.dtype == string:
            array = array.astype(target) if array.dtype != target else array
        else:
            if array.dtype.kind in "fc" and target.kind in "iub" and np.any(array != array.round()):
                raise TypeError(
                    f"cannot convert {value!r} to a tensor of dtype {target}: a value has a "
                    "fraction (use hd.cast to truncate)"
                )
            array = array.astype(target)
    if shape is not None:
        shape = tuple(int(d) for d in shape)
        size = int(np.prod(shape))
        if array.size == 1:
            array = np.full(shape, array.reshape(()), dtype=array.dtype)
        elif array.size == size:
            array = array.reshape(shape)
        else:
            raise TypeError(
                f"constant of shape {shape} needs 1 or {size} values, got {array.size} "
                f"(an array of shape {array.shape})"
            )
    return Tensor(array)


def convert_to_tensor(value: Any, dtype: Any = None, dtype_hint: Any = None) -> Tensor:
    """``value`` as a tensor (``tf.convert_to_tensor``): tensors and variables as they are.

    Args:
        value: A tensor, a variable, an array or Python data.
        dtype: The dtype the result must have (converted when ``value`` is data).
        dtype_hint: The dtype for Python data when ``dtype`` is None.

    Raises:
        ValueError: A tensor or variable whose dtype differs from ``dtype``.
    """
    if not isinstance(value, (np.ndarray, np.generic)) and not is_python_data(value):
        tensor = as_tensor(value)
        if dtype is not None and tensor.dtype != as_dtype(dtype):
            raise ValueError(
                f"tensor conversion requested dtype {as_dtype(dtype)} for a tensor of dtype "
                f"{tensor.dtype}"
            )
        return tensor
    if dtype is None and dtype_hint is not None and is_python_data(value):
        dtype = dtype_hint
    return constant(value, dtype=dtype)
