"""Differentiable operations on `Tensor` (numpy or CuPy forward, hand-written backward).

Each operation computes in the array module of its inputs (`hpcdist.utils.xp.array_module`); a
host operand meeting a device one is moved to the device first.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hpcdist.core.autodiff import record, unbroadcast
from hpcdist.core.dtypes import as_dtype
from hpcdist.core.reductions import max_last_axis
from hpcdist.core.tensors import Tensor, as_tensor, is_python_data, python_array, register_operator
from hpcdist.utils.xp import array_module, as_array_like, is_device_array, scatter_add

__all__ = [
    "abs",
    "add",
    "add_n",
    "cast",
    "clip_by_value",
    "divide",
    "equal",
    "exp",
    "gather",
    "getitem",
    "greater",
    "greater_equal",
    "less",
    "less_equal",
    "log",
    "log_softmax",
    "matmul",
    "maximum",
    "minimum",
    "multiply",
    "negative",
    "not_equal",
    "power",
    "reduce_max",
    "reduce_mean",
    "reduce_sum",
    "relu",
    "reshape",
    "sigmoid",
    "softmax",
    "softplus",
    "sqrt",
    "square",
    "subtract",
    "tanh",
]


def _tensor(x: Any) -> Tensor:
    """``x`` as a tensor; Python data by TF's rule (float32, int32), as `hd.constant` does."""
    return as_tensor(python_array(x) if is_python_data(x) else x)


def _python_scalar(x: Any) -> bool:
    return type(x) in (int, float, bool)


def _weak(x: Any, other: Any) -> Any:
    """A Python number meeting a tensor takes the tensor's dtype, as in TF (``x * 0.5``).

    Only where no precision is lost: a float or an int meeting a floating tensor, an int
    meeting an integer tensor; any other mix is left to numpy's promotion.
    """
    if not _python_scalar(x) or _python_scalar(other):
        return x
    dtype = _tensor(other).dtype
    if (dtype.kind in "fc" and type(x) is not bool) or (dtype.kind in "iu" and type(x) is int):
        return np.asarray(x, dtype=dtype)
    return x


def _binary(a: Any, b: Any) -> tuple[Tensor, Tensor]:
    a, b = _weak(a, b), _weak(b, a)
    return same_device(_tensor(a), _tensor(b))


def same_device(a: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
    """``a`` and ``b`` with the host one moved to the device when numpy meets CuPy."""
    if type(a.value) is not type(b.value):  # numpy meets CuPy: compute on the device
        if is_device_array(a.value) and not is_device_array(b.value):
            b = Tensor(as_array_like(b.value, a.value), b.parents, b.backward, b.source)
        elif is_device_array(b.value) and not is_device_array(a.value):
            a = Tensor(as_array_like(a.value, b.value), a.parents, a.backward, a.source)
    return a, b


def _index_like(index: Any, like: Any) -> Any:
    """``index`` with its integer arrays in the array module of ``like``."""
    if not is_device_array(like):
        return index
    if isinstance(index, tuple):
        return tuple(_index_like(i, like) for i in index)
    if isinstance(index, (list, np.ndarray)):
        return as_array_like(index, like)
    return index


def cast(a: Any, dtype: Any) -> Tensor:
    """Convert to ``dtype`` (the gradient is converted back), as ``tf.cast``.

    ``dtype`` is a dtype name (``"float32"``), a numpy dtype or ``hd.float32``-style name
    (`hpcdist.core.dtypes.as_dtype`). Floats become integers by truncation toward zero.
    """
    a = _tensor(a)
    dtype = as_dtype(dtype)
    if a.dtype == dtype:
        return a
    back = a.dtype  # the closures keep shapes and dtypes, not the inputs (their arrays)
    return record(a.value.astype(dtype), (a,), lambda g: (g.astype(back),))


def add_n(inputs: Any) -> Tensor:
    """The element-wise sum of tensors of one shape and dtype (``tf.add_n``; no broadcasting).

    Raises:
        ValueError: No input, or inputs whose shapes or dtypes differ (names them).
    """
    tensors = [_tensor(x) for x in inputs]
    if not tensors:
        raise ValueError("add_n needs at least one tensor, got an empty list")
    shapes = {t.shape for t in tensors}
    dtypes = {t.dtype for t in tensors}
    if len(shapes) != 1 or len(dtypes) != 1:
        raise ValueError(
            "add_n needs tensors of one shape and dtype, got "
            f"{[(t.shape, str(t.dtype)) for t in tensors]}"
        )
    out = tensors[0].value.copy()
    for t in tensors[1:]:
        out = out + t.value
    count = len(tensors)
    return record(out, tuple(tensors), lambda g: (g,) * count)


def add(a: Any, b: Any) -> Tensor:
    """``a + b`` with broadcasting."""
    a, b = _binary(a, b)
    sa, sb = a.shape, b.shape
    return record(a.value + b.value, (a, b), lambda g: (unbroadcast(g, sa), unbroadcast(g, sb)))


def subtract(a: Any, b: Any) -> Tensor:
    """``a - b`` with broadcasting."""
    a, b = _binary(a, b)
    sa, sb = a.shape, b.shape
    return record(
        a.value - b.value,
        (a, b),
        lambda g: (unbroadcast(g, sa), unbroadcast(-g, sb)),
    )


def multiply(a: Any, b: Any) -> Tensor:
    """``a * b`` with broadcasting."""
    a, b = _binary(a, b)
    return record(
        a.value * b.value,
        (a, b),
        lambda g: (unbroadcast(g * b.value, a.shape), unbroadcast(g * a.value, b.shape)),
    )


def divide(a: Any, b: Any) -> Tensor:
    """``a / b`` with broadcasting."""
    a, b = _binary(a, b)
    out = a.value / b.value
    return record(
        out,
        (a, b),
        lambda g: (unbroadcast(g / b.value, a.shape), unbroadcast(-g * out / b.value, b.shape)),
    )


def negative(a: Any) -> Tensor:
    """``-a``."""
    a = _tensor(a)
    return record(-a.value, (a,), lambda g: (-g,))


def abs(a: Any) -> Tensor:
    """``|a|``; the gradient is ``sign(a)``, so 0 at 0 (as TF's)."""
    a = _tensor(a)
    xp = array_module(a.value)
    return record(xp.abs(a.value), (a,), lambda g: (g * xp.sign(a.value),))


def power(a: Any, exponent: float) -> Tensor:
    """``a ** exponent`` for a constant exponent."""
    a = _tensor(a)
    return record(a.value**exponent, (a,), lambda g: (g * exponent * a.value ** (exponent - 1),))


def square(a: Any) -> Tensor:
    """``a ** 2``."""
    a = _tensor(a)
    return record(a.value * a.value, (a,), lambda g: (2 * g * a.value,))


def sqrt(a: Any) -> Tensor:
    """Square root."""
    a = _tensor(a)
    out = array_module(a.value).sqrt(a.value)
    return record(out, (a,), lambda g: (g / (2 * out),))


def exp(a: Any) -> Tensor:
    """Exponential."""
    a = _tensor(a)
    out = array_module(a.value).exp(a.value)
    return record(out, (a,), lambda g: (g * out,))


def log(a: Any) -> Tensor:
    """Natural logarithm."""
    a = _tensor(a)
    return record(array_module(a.value).log(a.value), (a,), lambda g: (g / a.value,))


def tanh(a: Any) -> Tensor:
    """Hyperbolic tangent."""
    a = _tensor(a)
    out = array_module(a.value).tanh(a.value)
    return record(out, (a,), lambda g: (g * (1 - out * out),))


def sigmoid(a: Any) -> Tensor:
    """Logistic sigmoid (numerically stable)."""
    a = _tensor(a)
    xp = array_module(a.value)
    out = xp.exp(-xp.logaddexp(0, -a.value)).astype(a.dtype, copy=False)
    return record(out, (a,), lambda g: (g * out * (1 - out),))


def softplus(a: Any) -> Tensor:
    """``log(1 + exp(a))`` (numerically stable)."""
    a = _tensor(a)
    xp = array_module(a.value)
    out = xp.logaddexp(0, a.value).astype(a.dtype, copy=False)
    sig = xp.exp(-xp.logaddexp(0, -a.value))
    return record(out, (a,), lambda g: (g * sig,))


def relu(a: Any) -> Tensor:
    """``max(a, 0)``."""
    a = _tensor(a)
    # The backward pass finds the mask in the output, which the next layer usually keeps:
    # no mask array is held, and the forward pass is one ``maximum`` (NaN stays NaN).
    out = array_module(a.value).maximum(a.value, 0)
    return record(out, (a,), lambda g: (g * (out > 0),))


def clip_by_value(a: Any, clip_value_min: float, clip_value_max: float) -> Tensor:
    """``a`` limited to ``[clip_value_min, clip_value_max]``.

    The gradient passes where ``a`` lies inside the bounds (bounds included) and is 0 outside,
    as TF's ``clip_by_value``: a probability clipped at 0 or 1 gets no gradient.
    """
    a = _tensor(a)
    xp = array_module(a.value)
    lo = xp.asarray(clip_value_min, dtype=a.dtype)
    hi = xp.asarray(clip_value_max, dtype=a.dtype)
    inside = (a.value >= lo) & (a.value <= hi)
    return record(xp.clip(a.value, lo, hi), (a,), lambda g: (g * inside,))


def maximum(a: Any, b: Any) -> Tensor:
    """Element-wise maximum (ties send the gradient to ``a``)."""
    a, b = _binary(a, b)
    mask = a.value >= b.value
    sa, sb = a.shape, b.shape
    return record(
        array_module(a.value).where(mask, a.value, b.value),
        (a, b),
        lambda g: (unbroadcast(g * mask, sa), unbroadcast(g * ~mask, sb)),
    )


def minimum(a: Any, b: Any) -> Tensor:
    """Element-wise minimum (ties send the gradient to ``a``, as TF's)."""
    a, b = _binary(a, b)
    mask = a.value <= b.value
    sa, sb = a.shape, b.shape
    return record(
        array_module(a.value).where(mask, a.value, b.value),
        (a, b),
        lambda g: (unbroadcast(g * mask, sa), unbroadcast(g * ~mask, sb)),
    )


def matmul(a: Any, b: Any) -> Tensor:
    """Matrix product of 2-D (or batched) arrays."""
    a, b = _binary(a, b)
    xp = array_module(a.value)

    def backward(g: np.ndarray) -> tuple[np.ndarray | None, np.ndarray | None]:
        # Skip the product for an operand that needs no gradient (a layer's input data).
        ga = unbroadcast(xp.matmul(g, xp.swapaxes(b.value, -1, -2)), a.shape) if a.trace else None
        gb = unbroadcast(xp.matmul(xp.swapaxes(a.value, -1, -2), g), b.shape) if b.trace else None
        return ga, gb

    return record(xp.matmul(a.value, b.value), (a, b), backward)


def _expand(g: np.ndarray, shape: tuple[int, ...], axis: Any, keepdims: bool) -> np.ndarray:
    xp = array_module(g)
    if axis is not None and not keepdims:
        axes = (axis,) if isinstance(axis, int) else tuple(axis)
        axes = tuple(ax % len(shape) for ax in axes)
        g = xp.expand_dims(g, axes)
    return xp.broadcast_to(g, shape)


def reduce_sum(a: Any, axis: Any = None, keepdims: bool = False) -> Tensor:
    """Sum over ``axis`` (all axes by default)."""
    a = _tensor(a)
    shape = a.shape
    return record(
        a.value.sum(axis=axis, keepdims=keepdims),
        (a,),
        lambda g: (_expand(g, shape, axis, keepdims).copy(),),
    )


def reduce_mean(a: Any, axis: Any = None, keepdims: bool = False) -> Tensor:
    """Mean over ``axis`` (all axes by default).

    The mean of integers is an integer, truncated toward zero, as in TF (``[1, 2]`` -> 1).
    """
    a = _tensor(a)
    xp = array_module(a.value)
    if a.dtype.kind in "iu":
        total = a.value.sum(axis=axis, keepdims=keepdims)
        count = a.value.size // max(np.size(total), 1) if a.value.size else 1
        out = (xp.sign(total) * (xp.abs(total) // count)).astype(a.dtype)
        return Tensor(out)
    out = xp.mean(a.value, axis=axis, keepdims=keepdims)
    count = a.value.size // max(out.size, 1) if a.value.size else 1
    shape = a.shape
    return record(out, (a,), lambda g: (_expand(g, shape, axis, keepdims) / count,))


def reduce_max(a: Any, axis: Any = None, keepdims: bool = False) -> Tensor:
    """Maximum over ``axis`` (all axes by default), as ``tf.reduce_max``.

    Tied maxima share the gradient equally, as in TF.
    """
    a = _tensor(a)
    top = a.value.max(axis=axis, keepdims=True)
    winners = a.value == top
    value = top if keepdims else a.value.max(axis=axis)

    def backward(g: np.ndarray) -> tuple[np.ndarray]:
        share = winners / winners.sum(axis=axis, keepdims=True)
        return ((g.reshape(top.shape) * share).astype(g.dtype, copy=False),)

    return record(value, (a,), backward)


def _compare(a: Any, b: Any, op: Any) -> Tensor:
    a, b = _binary(a, b)
    return Tensor(op(a.value, b.value))


def greater(a: Any, b: Any) -> Tensor:
    """``a > b`` element-wise with broadcasting: a boolean tensor (not differentiable)."""
    return _compare(a, b, lambda x, y: x > y)


def greater_equal(a: Any, b: Any) -> Tensor:
    """``a >= b`` element-wise: a boolean tensor."""
    return _compare(a, b, lambda x, y: x >= y)


def less(a: Any, b: Any) -> Tensor:
    """``a < b`` element-wise: a boolean tensor."""
    return _compare(a, b, lambda x, y: x < y)


def less_equal(a: Any, b: Any) -> Tensor:
    """``a <= b`` element-wise: a boolean tensor."""
    return _compare(a, b, lambda x, y: x <= y)


def equal(a: Any, b: Any) -> Tensor:
    """``a == b`` element-wise: a boolean tensor."""
    return _compare(a, b, lambda x, y: x == y)


def not_equal(a: Any, b: Any) -> Tensor:
    """``a != b`` element-wise: a boolean tensor."""
    return _compare(a, b, lambda x, y: x != y)


def reshape(a: Any, shape: Any) -> Tensor:
    """Reshape."""
    a = _tensor(a)
    before = a.shape
    return record(a.value.reshape(shape), (a,), lambda g: (g.reshape(before),))


def getitem(a: Any, index: Any) -> Tensor:
    """``a[index]`` (basic and integer-array indexing)."""
    a = _tensor(a)
    index = _index_like(index, a.value)

    def backward(g: np.ndarray) -> tuple[np.ndarray]:
        out = array_module(a.value).zeros_like(a.value)
        scatter_add(out, index, g)
        return (out,)

    return record(a.value[index], (a,), backward)


def gather(params: Any, ids: Any) -> Tensor:
    """Rows of ``params`` at integer ``ids`` (any shape); the gradient is scattered back."""
    params = _tensor(params)
    ids = as_array_like(ids.value if isinstance(ids, Tensor) else ids, params.value)
    if ids.dtype.kind not in "iu":
        raise TypeError(f"gather needs integer ids, got dtype {ids.dtype}")

    def backward(g: np.ndarray) -> tuple[np.ndarray]:
        out = array_module(params.value).zeros_like(params.value)
        scatter_add(out, ids.reshape(-1), g.reshape(-1, *params.shape[1:]))
        return (out,)

    return record(params.value[ids], (params,), backward)


def _max_keepdims(x: Any, axis: Any) -> Any:
    """``x.max(axis=axis, keepdims=True)``, the last axis by `reductions.max_last_axis`."""
    if axis == -1 or (isinstance(axis, int) and x.ndim and axis == x.ndim - 1):
        return max_last_axis(x)
    return x.max(axis=axis, keepdims=True)


def log_softmax(a: Any, axis: int = -1) -> Tensor:
    """``log(softmax(a))`` computed stably."""
    a = _tensor(a)
    xp = array_module(a.value)
    shifted = a.value - _max_keepdims(a.value, axis)
    out = shifted - xp.log(xp.exp(shifted).sum(axis=axis, keepdims=True))
    soft = xp.exp(out)
    return record(out, (a,), lambda g: (g - soft * g.sum(axis=axis, keepdims=True),))


def softmax(a: Any, axis: int = -1) -> Tensor:
    """Softmax along ``axis``."""
    a = _tensor(a)
    shifted = array_module(a.value).exp(a.value - _max_keepdims(a.value, axis))
    out = shifted / shifted.sum(axis=axis, keepdims=True)
    return record(out, (a,), lambda g: (out * (g - (g * out).sum(axis=axis, keepdims=True)),))


for _name, _fn in {
    "add": add,
    "subtract": subtract,
    "multiply": multiply,
    "divide": divide,
    "negative": negative,
    "abs": abs,
    "power": power,
    "matmul": matmul,
    "getitem": getitem,
    "reduce_sum": reduce_sum,
    "reduce_mean": reduce_mean,
    "reshape": reshape,
}.items():
    register_operator(_name, _fn)
