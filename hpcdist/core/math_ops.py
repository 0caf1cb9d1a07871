"""Differentiable operations on `Tensor` (numpy or CuPy forward, hand-written backward).

Each operation computes in the array module of its inputs (`hpcdist.utils.xp.array_module`); a
host operand meeting a device one is moved to the device first.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hpcdist.core.autodiff import Tensor, as_tensor, record, register_operator, unbroadcast
from hpcdist.utils.xp import array_module, as_array_like, is_device_array, scatter_add

__all__ = [
    "abs",
    "add",
    "cast",
    "divide",
    "exp",
    "gather",
    "getitem",
    "log",
    "log_softmax",
    "matmul",
    "maximum",
    "multiply",
    "negative",
    "power",
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


def _binary(a: Any, b: Any) -> tuple[Tensor, Tensor]:
    a, b = as_tensor(a), as_tensor(b)
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
    """Convert to ``dtype`` (the gradient is converted back)."""
    a = as_tensor(a)
    if a.dtype == np.dtype(dtype):
        return a
    return record(a.value.astype(dtype), (a,), lambda g: (g.astype(a.dtype),))


def add(a: Any, b: Any) -> Tensor:
    """``a + b`` with broadcasting."""
    a, b = _binary(a, b)
    return record(
        a.value + b.value,
        (a, b),
        lambda g: (unbroadcast(g, a.shape), unbroadcast(g, b.shape)),
    )


def subtract(a: Any, b: Any) -> Tensor:
    """``a - b`` with broadcasting."""
    a, b = _binary(a, b)
    return record(
        a.value - b.value,
        (a, b),
        lambda g: (unbroadcast(g, a.shape), unbroadcast(-g, b.shape)),
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
    a = as_tensor(a)
    return record(-a.value, (a,), lambda g: (-g,))


def abs(a: Any) -> Tensor:
    """``|a|``; the gradient is ``sign(a)``, so 0 at 0 (as TF's)."""
    a = as_tensor(a)
    xp = array_module(a.value)
    return record(xp.abs(a.value), (a,), lambda g: (g * xp.sign(a.value),))


def power(a: Any, exponent: float) -> Tensor:
    """``a ** exponent`` for a constant exponent."""
    a = as_tensor(a)
    return record(a.value**exponent, (a,), lambda g: (g * exponent * a.value ** (exponent - 1),))


def square(a: Any) -> Tensor:
    """``a ** 2``."""
    a = as_tensor(a)
    return record(a.value * a.value, (a,), lambda g: (2 * g * a.value,))


def sqrt(a: Any) -> Tensor:
    """Square root."""
    a = as_tensor(a)
    out = array_module(a.value).sqrt(a.value)
    return record(out, (a,), lambda g: (g / (2 * out),))


def exp(a: Any) -> Tensor:
    """Exponential."""
    a = as_tensor(a)
    out = array_module(a.value).exp(a.value)
    return record(out, (a,), lambda g: (g * out,))


def log(a: Any) -> Tensor:
    """Natural logarithm."""
    a = as_tensor(a)
    return record(array_module(a.value).log(a.value), (a,), lambda g: (g / a.value,))


def tanh(a: Any) -> Tensor:
    """Hyperbolic tangent."""
    a = as_tensor(a)
    out = array_module(a.value).tanh(a.value)
    return record(out, (a,), lambda g: (g * (1 - out * out),))


def sigmoid(a: Any) -> Tensor:
    """Logistic sigmoid (numerically stable)."""
    a = as_tensor(a)
    xp = array_module(a.value)
    out = xp.exp(-xp.logaddexp(0, -a.value)).astype(a.dtype, copy=False)
    return record(out, (a,), lambda g: (g * out * (1 - out),))


def softplus(a: Any) -> Tensor:
    """``log(1 + exp(a))`` (numerically stable)."""
    a = as_tensor(a)
    xp = array_module(a.value)
    out = xp.logaddexp(0, a.value).astype(a.dtype, copy=False)
    sig = xp.exp(-xp.logaddexp(0, -a.value))
    return record(out, (a,), lambda g: (g * sig,))


def relu(a: Any) -> Tensor:
    """``max(a, 0)``."""
    a = as_tensor(a)
    mask = a.value > 0
    return record(a.value * mask, (a,), lambda g: (g * mask,))


def maximum(a: Any, b: Any) -> Tensor:
    """Element-wise maximum (ties send the gradient to ``a``)."""
    a, b = _binary(a, b)
    mask = a.value >= b.value
    return record(
        array_module(a.value).where(mask, a.value, b.value),
        (a, b),
        lambda g: (unbroadcast(g * mask, a.shape), unbroadcast(g * ~mask, b.shape)),
    )


def matmul(a: Any, b: Any) -> Tensor:
    """Matrix product of 2-D (or batched) arrays."""
    a, b = _binary(a, b)
    xp = array_module(a.value)

    def backward(g: np.ndarray) -> tuple[np.ndarray | None, np.ndarray | None]:
        # Skip the product for an operand that needs no gradient (a layer's input data).
        ga = unbroadcast(g @ xp.swapaxes(b.value, -1, -2), a.shape) if a.trace else None
        gb = unbroadcast(xp.swapaxes(a.value, -1, -2) @ g, b.shape) if b.trace else None
        return ga, gb

    return record(a.value @ b.value, (a, b), backward)


def _expand(g: np.ndarray, shape: tuple[int, ...], axis: Any, keepdims: bool) -> np.ndarray:
    xp = array_module(g)
    if axis is not None and not keepdims:
        axes = (axis,) if isinstance(axis, int) else tuple(axis)
        axes = tuple(ax % len(shape) for ax in axes)
        g = xp.expand_dims(g, axes)
    return xp.broadcast_to(g, shape)


def reduce_sum(a: Any, axis: Any = None, keepdims: bool = False) -> Tensor:
    """Sum over ``axis`` (all axes by default)."""
    a = as_tensor(a)
    return record(
        a.value.sum(axis=axis, keepdims=keepdims),
        (a,),
        lambda g: (_expand(g, a.shape, axis, keepdims).copy(),),
    )


def reduce_mean(a: Any, axis: Any = None, keepdims: bool = False) -> Tensor:
    """Mean over ``axis`` (all axes by default)."""
    a = as_tensor(a)
    out = array_module(a.value).mean(a.value, axis=axis, keepdims=keepdims)
    count = a.value.size // max(out.size, 1) if a.value.size else 1
    return record(out, (a,), lambda g: (_expand(g, a.shape, axis, keepdims) / count,))


def reshape(a: Any, shape: Any) -> Tensor:
    """Reshape."""
    a = as_tensor(a)
    return record(a.value.reshape(shape), (a,), lambda g: (g.reshape(a.shape),))


def getitem(a: Any, index: Any) -> Tensor:
    """``a[index]`` (basic and integer-array indexing)."""
    a = as_tensor(a)
    index = _index_like(index, a.value)

    def backward(g: np.ndarray) -> tuple[np.ndarray]:
        out = array_module(a.value).zeros_like(a.value)
        scatter_add(out, index, g)
        return (out,)

    return record(a.value[index], (a,), backward)


def gather(params: Any, ids: Any) -> Tensor:
    """Rows of ``params`` at integer ``ids`` (any shape); the gradient is scattered back."""
    params = as_tensor(params)
    ids = as_array_like(ids.value if isinstance(ids, Tensor) else ids, params.value)
    if ids.dtype.kind not in "iu":
        raise TypeError(f"gather needs integer ids, got dtype {ids.dtype}")

    def backward(g: np.ndarray) -> tuple[np.ndarray]:
        out = array_module(params.value).zeros_like(params.value)
        scatter_add(out, ids.reshape(-1), g.reshape(-1, *params.shape[1:]))
        return (out,)

    return record(params.value[ids], (params,), backward)


def log_softmax(a: Any, axis: int = -1) -> Tensor:
    """``log(softmax(a))`` computed stably."""
    a = as_tensor(a)
    xp = array_module(a.value)
    shifted = a.value - a.value.max(axis=axis, keepdims=True)
    out = shifted - xp.log(xp.exp(shifted).sum(axis=axis, keepdims=True))
    soft = xp.exp(out)
    return record(out, (a,), lambda g: (g - soft * g.sum(axis=axis, keepdims=True),))


def softmax(a: Any, axis: int = -1) -> Tensor:
    """Softmax along ``axis``."""
    a = as_tensor(a)
    shifted = array_module(a.value).exp(a.value - a.value.max(axis=axis, keepdims=True))
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
