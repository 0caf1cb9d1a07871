"""A CPU stand-in for the parts of CuPy that hpcdist uses: the *device simulator*.

It exists because CI has no GPU. It is not CuPy and proves nothing about CUDA; it checks that
hpcdist's GPU code keeps to CuPy's rules, which are where host-only code breaks:

- a device array refuses implicit conversion to numpy (``np.asarray(x)`` raises ``TypeError``,
  as CuPy does) and refuses numpy arrays as operands (``TypeError: Unsupported type``);
- every array lives on a device (``x.device.id``), made current with ``cupy.cuda.Device(i)``
  (per thread); an operation on an array of another device raises ``ValueError``;
- ``x.data.ptr`` is a real address, so the simulated NCCL (``cupy.cuda.nccl``) reads and writes
  the buffers hpcdist hands it by pointer, as NCCL does, and reduces them across processes
  over MPI.

Arrays hold numpy arrays; arithmetic is numpy's. Use it with ``PYTHONPATH=tests/devicesim``.
``cupy.__devicesim__`` is True so tests can skip what only real hardware shows (pinned memory).
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
from numpy import (  # CuPy re-exports numpy's scalar types and dtype
    bool_,
    complex64,
    complex128,
    dtype,
    float16,
    float32,
    float64,
    int8,
    int16,
    int32,
    int64,
    uint8,
    uint16,
    uint32,
    uint64,
)

__version__ = "0.0-devicesim"
__devicesim__ = True
_state = threading.local()

__all__ = [
    "bool_",
    "complex64",
    "complex128",
    "dtype",
    "float16",
    "float32",
    "float64",
    "int8",
    "int16",
    "int32",
    "int64",
    "ndarray",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
]


def _current() -> int:
    return getattr(_state, "device", 0)


class _Device:
    __slots__ = ("id",)

    def __init__(self, i: int) -> None:
        self.id = i

    def __repr__(self) -> str:
        return f"<CUDA Device {self.id}>"


class _Data:
    __slots__ = ("ptr",)

    def __init__(self, ptr: int) -> None:
        self.ptr = ptr


class _Flags:
    def __init__(self, a: np.ndarray) -> None:
        self.c_contiguous = a.flags.c_contiguous
        self.f_contiguous = a.flags.f_contiguous


def _unwrap(x: Any, device: int) -> Any:
    """An operand's numpy value; device arrays must be on ``device``; numpy arrays are refused."""
    if isinstance(x, ndarray):
        if x.device.id != device:
            raise ValueError(
                f"The device where the array resides ({x.device.id}) is different from the "
                f"current device ({device})."
            )
        return x._a
    if isinstance(x, np.ndarray):
        raise TypeError(f"Unsupported type {type(x)}")
    if isinstance(x, (list, tuple)):
        return type(x)(_unwrap(v, device) for v in x)
    return x


def _wrap(x: Any, device: int) -> Any:
    if isinstance(x, np.ndarray):
        return ndarray(x, device)
    if isinstance(x, np.generic):  # CuPy returns 0-d arrays where numpy returns scalars
        return ndarray(np.asarray(x), device)
    if isinstance(x, tuple):
        return tuple(_wrap(v, device) for v in x)
    return x


def _apply(fn: Any, *args: Any, **kwargs: Any) -> Any:
    device = _current()
    args = tuple(_unwrap(a, device) for a in args)
    kwargs = {k: _unwrap(v, device) for k, v in kwargs.items()}
    return _wrap(fn(*args, **kwargs), device)


class ndarray:  # noqa: N801 - CuPy's name
    """A device array: a numpy array that lives on a simulated device."""

    __array_priority__ = 200

    def __init__(self, a: np.ndarray, device: int | None = None) -> None:
        self._a = a
        self.device = _Device(_current() if device is None else device)

    # -- what CuPy refuses ---------------------------------------------------------------
    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        raise TypeError(
            "Implicit conversion to a NumPy array is not allowed. Please use `.get()` to "
            "construct a NumPy array explicitly."
        )

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        if method != "__call__":
            raise TypeError(f"the device simulator does not support ufunc.{method}")
        for x in inputs:
            if isinstance(x, (list, tuple)):
                raise TypeError(f"Unsupported type {type(x)}")
        out = kwargs.pop("out", None)
        result = _apply(ufunc, *inputs, **kwargs)
        if out is not None:
            target = out[0] if isinstance(out, tuple) else out
            target[...] = result
            return target
        return result

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        mine = globals().get(func.__name__)
        if mine is None:
            raise TypeError(f"the device simulator does not implement numpy.{func.__name__}")
        return mine(*args, **kwargs)

    # -- attributes ----------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return self._a.shape

    @property
    def dtype(self) -> np.dtype:
        return self._a.dtype

    @property
    def size(self) -> int:
        return self._a.size

    @property
    def ndim(self) -> int:
        return self._a.ndim

    @property
    def nbytes(self) -> int:
        return self._a.nbytes

    @property
    def itemsize(self) -> int:
        return self._a.itemsize

    @property
    def strides(self) -> tuple[int, ...]:
        return self._a.strides

    @property
    def flags(self) -> _Flags:
        return _Flags(self._a)

    @property
    def data(self) -> _Data:
        return _Data(self._a.ctypes.data)

    @property
    def __cuda_array_interface__(self) -> dict:
        # Lets mpi4py hand the buffer to MPI by pointer, as with real CuPy arrays and a
        # CUDA-aware MPI (here the "device" memory is host memory, which any MPI can read).
        if not self._a.flags.c_contiguous:
            raise AttributeError("only contiguous arrays export a buffer")
        return {
            "shape": self._a.shape,
            "typestr": self._a.dtype.str,
            "data": (self._a.ctypes.data, False),
            "version": 3,
            "strides": None,
        }

    @property
    def T(self) -> ndarray:  # noqa: N802
        return ndarray(self._a.T, self.device.id)

    def __len__(self) -> int:
        return len(self._a)

    def __repr__(self) -> str:
        return f"devicesim.array({self._a!r}, device={self.device.id})"

    # -- conversions (explicit, like CuPy) -----------------------------------------------
    def get(self, stream: Any = None, order: str = "C", out: Any = None, blocking: bool = True):
        if out is not None:
            out[...] = self._a
            return out
        return np.array(self._a, copy=True)

    def set(self, arr: np.ndarray) -> None:
        if not isinstance(arr, np.ndarray):
            raise TypeError("set() takes a numpy array")
        self._a[...] = arr

    def __float__(self) -> float:
        return float(self._a)

    def __int__(self) -> int:
        return int(self._a)

    def __bool__(self) -> bool:
        return bool(self._a)

    def item(self) -> Any:
        return self._a.item()

    # -- indexing ------------------------------------------------------------------------
    def _check(self) -> int:
        device = _current()
        if device != self.device.id:
            raise ValueError(
                f"The device where the array resides ({self.device.id}) is different from the "
                f"current device ({device})."
            )
        return device

    def __getitem__(self, index: Any) -> ndarray:
        device = self._check()
        return ndarray(self._a[_unwrap(index, device)], device)

    def __setitem__(self, index: Any, value: Any) -> None:
        device = self._check()
        self._a[_unwrap(index, device)] = _unwrap(value, device)

    # -- methods -------------------------------------------------------------------------
    def _method(self, name: str, *args: Any, **kwargs: Any) -> Any:
        device = self._check()
        args = tuple(_unwrap(a, device) for a in args)
        return _wrap(getattr(self._a, name)(*args, **kwargs), device)

    def reshape(self, *shape: Any, **kwargs: Any) -> ndarray:
        return self._method("reshape", *shape, **kwargs)

    def astype(self, dtype: Any, copy: bool = True, **kwargs: Any) -> ndarray:
        return self._method("astype", dtype, copy=copy, **kwargs)

    def copy(self, order: str = "C") -> ndarray:
        return self._method("copy", order)

    def ravel(self) -> ndarray:
        return self._method("ravel")

    def view(self, dtype: Any) -> ndarray:
        return self._method("view", dtype)

    def sum(self, *args: Any, **kwargs: Any) -> ndarray:
        return self._method("sum", *args, **kwargs)

    def mean(self, *args: Any, **kwargs: Any) -> ndarray:
        return self._method("mean", *args, **kwargs)

    def max(self, *args: Any, **kwargs: Any) -> ndarray:
        return self._method("max", *args, **kwargs)

    def min(self, *args: Any, **kwargs: Any) -> ndarray:
        return self._method("min", *args, **kwargs)

    def all(self, *args: Any, **kwargs: Any) -> ndarray:
        return self._method("all", *args, **kwargs)

    def any(self, *args: Any, **kwargs: Any) -> ndarray:
        return self._method("any", *args, **kwargs)

    def fill(self, value: Any) -> None:
        self._check()
        self._a.fill(value)


def _binary(name: str, reflected: bool = False, inplace: bool = False) -> Any:
    ufunc = getattr(np, name)

    def op(self: ndarray, other: Any) -> Any:
        if inplace:
            device = self._check()
            ufunc(self._a, _unwrap(other, device), out=self._a)
            return self
        return _apply(ufunc, other, self) if reflected else _apply(ufunc, self, other)

    return op


for _dunder, _ufunc in {
    "add": "add",
    "sub": "subtract",
    "mul": "multiply",
    "truediv": "true_divide",
    "floordiv": "floor_divide",
    "mod": "remainder",
    "pow": "power",
    "matmul": "matmul",
    "and": "bitwise_and",
    "or": "bitwise_or",
    "xor": "bitwise_xor",
    "lshift": "left_shift",
    "rshift": "right_shift",
}.items():
    setattr(ndarray, f"__{_dunder}__", _binary(_ufunc))
    setattr(ndarray, f"__r{_dunder}__", _binary(_ufunc, reflected=True))
    setattr(ndarray, f"__i{_dunder}__", _binary(_ufunc, inplace=True))
for _dunder, _ufunc in {
    "lt": "less",
    "le": "less_equal",
    "gt": "greater",
    "ge": "greater_equal",
    "eq": "equal",
    "ne": "not_equal",
}.items():
    setattr(ndarray, f"__{_dunder}__", _binary(_ufunc))
ndarray.__hash__ = None  # type: ignore[assignment]
ndarray.__neg__ = lambda self: _apply(np.negative, self)  # type: ignore[attr-defined]
ndarray.__abs__ = lambda self: _apply(np.absolute, self)  # type: ignore[attr-defined]
ndarray.__invert__ = lambda self: _apply(np.invert, self)  # type: ignore[attr-defined]


# -- creation ----------------------------------------------------------------------------


def array(obj: Any, dtype: Any = None, copy: bool = True, order: str = "K", **_: Any) -> ndarray:
    """A copy of ``obj`` (host data, or a device array of any device) on the current device."""
    if isinstance(obj, ndarray):
        value = np.array(obj._a, dtype=dtype, copy=True)
        if not copy and obj.device.id == _current() and value.dtype == obj.dtype:
            return obj
    elif isinstance(obj, (list, tuple)) and any(isinstance(v, ndarray) for v in obj):
        raise TypeError("the device simulator does not take lists of device arrays")
    else:
        value = np.array(obj, dtype=dtype, copy=True)
    return ndarray(value)


def asarray(a: Any, dtype: Any = None, order: Any = None) -> ndarray:
    if isinstance(a, ndarray) and a.device.id == _current() and (dtype is None or a.dtype == dtype):
        return a
    return array(a, dtype=dtype)


def ascontiguousarray(a: ndarray, dtype: Any = None) -> ndarray:
    device = a._check()
    return ndarray(np.ascontiguousarray(a._a, dtype=dtype), device)


def _creator(fn: Any) -> Any:
    return lambda *args, **kwargs: ndarray(fn(*args, **kwargs))


empty = _creator(np.empty)
zeros = _creator(np.zeros)
ones = _creator(np.ones)
full = _creator(np.full)
arange = _creator(np.arange)
linspace = _creator(np.linspace)


def _like(fn: Any) -> Any:
    return lambda a, *args, **kwargs: _apply(fn, a, *args, **kwargs)


empty_like = _like(np.empty_like)
zeros_like = _like(np.zeros_like)
ones_like = _like(np.ones_like)


def concatenate(arrays: Any, axis: int = 0, **kwargs: Any) -> ndarray:
    return _apply(np.concatenate, list(arrays), axis=axis, **kwargs)


def stack(arrays: Any, axis: int = 0) -> ndarray:
    return _apply(np.stack, list(arrays), axis=axis)


def asnumpy(a: Any) -> np.ndarray:
    return a.get() if isinstance(a, ndarray) else np.asarray(a)


def get_array_module(*args: Any) -> Any:
    import sys

    return sys.modules[__name__] if any(isinstance(a, ndarray) for a in args) else np


for _name in (
    "add",
    "subtract",
    "multiply",
    "equal",
    "greater",
    "result_type",
    "matmul",
    "exp",
    "log",
    "sqrt",
    "tanh",
    "logaddexp",
    "maximum",
    "minimum",
    "where",
    "swapaxes",
    "expand_dims",
    "broadcast_to",
    "mean",
    "sum",
    "abs",
    "sign",
    "argmax",
    "isfinite",
    "allclose",
    "pad",
    "take_along_axis",
):
    globals()[_name] = (lambda fn: lambda *args, **kwargs: _apply(fn, *args, **kwargs))(
        getattr(np, _name)
    )

from cupy import cuda, random, testing  # noqa: E402,F401


def shape(a: Any) -> tuple[int, ...]:
    return a.shape if isinstance(a, ndarray) else np.shape(a)
