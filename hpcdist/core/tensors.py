"""`Tensor` and what makes tensors: operators, sparse slices, and TF's conversion rules.

`Tensor` is an array that remembers how it was computed while a `GradientTape`
(`hpcdist.core.autodiff`) records; `IndexedSlices` is the sparse gradient of a row read.
Operators (``+``, ``@``, ``[]``, ...) dispatch through a table that `hpcdist.core.math_ops`
fills (`register_operator`); other types become tensors through `as_tensor` and the hooks of
`register_tensor_conversion` (variables register there).

``tf.constant`` and ``tf.convert_to_tensor``: Python floats become float32 and Python ints
int32 (int64 when a value does not fit), as in TF; numpy arrays and scalars keep their dtype;
strings become TF's string dtype (numpy object arrays of ``bytes``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from hpcdist.core.dtypes import as_dtype, string
from hpcdist.utils.rows import sum_rows
from hpcdist.utils.xp import array_module, as_array_like, is_device_array, scatter_add, to_numpy

__all__ = [
    "IndexedSlices",
    "Node",
    "Operators",
    "RowsOf",
    "Tensor",
    "as_tensor",
    "constant",
    "convert_to_tensor",
    "is_python_data",
    "python_array",
    "register_operator",
    "register_tensor_conversion",
]

_operators: dict[str, Callable[..., Any]] = {}


def register_operator(name: str, fn: Callable[..., Any]) -> None:
    """Implement operator ``name`` (``"add"``, ``"matmul"``, ``"getitem"``, ...) with ``fn``.

    `hpcdist.core.math_ops` registers every operator once, when ``hpcdist.core`` is imported
    (TF's ``Tensor._override_operator``); tensors and variables dispatch through this table.
    """
    _operators[name] = fn


class Operators:
    """Python's arithmetic operators as differentiable operations (tensors and variables)."""

    __slots__ = ()

    def __add__(self, other: Any) -> Tensor:
        return _operators["add"](self, other)

    def __radd__(self, other: Any) -> Tensor:
        return _operators["add"](other, self)

    def __sub__(self, other: Any) -> Tensor:
        return _operators["subtract"](self, other)

    def __rsub__(self, other: Any) -> Tensor:
        return _operators["subtract"](other, self)

    def __mul__(self, other: Any) -> Tensor:
        return _operators["multiply"](self, other)

    def __rmul__(self, other: Any) -> Tensor:
        return _operators["multiply"](other, self)

    def __truediv__(self, other: Any) -> Tensor:
        return _operators["divide"](self, other)

    def __rtruediv__(self, other: Any) -> Tensor:
        return _operators["divide"](other, self)

    def __neg__(self) -> Tensor:
        return _operators["negative"](self)

    def __abs__(self) -> Tensor:
        return _operators["abs"](self)

    def __pow__(self, exponent: float) -> Tensor:
        return _operators["power"](self, exponent)

    def __matmul__(self, other: Any) -> Tensor:
        return _operators["matmul"](self, other)

    def __rmatmul__(self, other: Any) -> Tensor:
        return _operators["matmul"](other, self)

    def __getitem__(self, index: Any) -> Tensor:
        return _operators["getitem"](self, index)


class Node:
    """A tensor's place in the recorded graph, without its value: what a child refers to.

    A recorded operation refers to its inputs' nodes, not to the input tensors: an input's
    array then lives only as long as the tensor itself or a ``backward`` that captured it (a
    ReLU keeps its mask, not its input; an ``Add`` keeps nothing), as TF's tape keeps only
    what each gradient function needs.

    Args:
        parents: The nodes of the tensors this one was computed from.
        backward: Maps the gradient of this tensor to the gradients of ``parents``.
        source: The variable this tensor reads, for leaves.
        trace: Whether gradients flow to this tensor.
    """

    __slots__ = ("backward", "parents", "source", "trace")

    def __init__(
        self,
        parents: tuple[Node, ...],
        backward: Callable[[np.ndarray], Sequence[np.ndarray | None]] | None,
        source: Any,
        trace: bool,
    ) -> None:
        self.parents, self.backward, self.source, self.trace = parents, backward, source, trace


class Tensor(Operators):
    """An array that remembers how it was computed (when a tape records).

    Args:
        value: The array.
        parents: The nodes (`Node`) of the tensors this one was computed from.
        backward: Maps the gradient of this tensor to the gradients of ``parents``.
        source: The variable this tensor reads, for leaves.
    """

    __slots__ = ("__weakref__", "node", "source", "trace", "value")
    __array_priority__ = 100

    def __init__(
        self,
        value: Any,
        parents: tuple[Node, ...] = (),
        backward: Callable[[np.ndarray], Sequence[np.ndarray | None]] | None = None,
        source: Any = None,
    ) -> None:
        self.value = (
            value if isinstance(value, np.ndarray) or is_device_array(value) else np.asarray(value)
        )
        self.source = source
        self.trace = bool(parents) or source is not None
        #: Where it sits in the recorded graph (made at once for an operation's result, for a
        #: leaf when an operation first records it).
        self.node: Node | None = Node(parents, backward, source, True) if parents else None

    @property
    def parents(self) -> tuple[Node, ...]:
        """The nodes of the tensors this one was computed from (none for a leaf)."""
        return self.node.parents if self.node is not None else ()

    @property
    def backward(self) -> Callable[[np.ndarray], Sequence[np.ndarray | None]] | None:
        """Maps this tensor's gradient to its parents' (None for a leaf)."""
        return self.node.backward if self.node is not None else None

    def graph_node(self) -> Node:
        """This tensor's `Node` (a leaf's is made when an operation first records it)."""
        node = self.node
        if node is None:
            node = self.node = Node((), None, self.source, self.trace)
        return node

    # -- array protocol -----------------------------------------------------------------------

    def numpy(self) -> np.ndarray:
        """The value on the host (not a copy for numpy values; copied from a GPU)."""
        return to_numpy(self.value)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        value = to_numpy(self.value)
        return value if dtype is None else value.astype(dtype)

    @property
    def shape(self) -> tuple[int, ...]:
        """Shape of the value."""
        return self.value.shape

    @property
    def dtype(self) -> np.dtype:
        """Dtype of the value."""
        return self.value.dtype

    @property
    def ndim(self) -> int:
        """Rank of the value."""
        return self.value.ndim

    def __len__(self) -> int:
        return len(self.value)

    def __float__(self) -> float:
        return float(self.value)

    def __repr__(self) -> str:
        return f"Tensor({self.value!r})"

    # Comparisons give plain boolean arrays (not differentiable), element-wise as in TF.
    __hash__ = object.__hash__

    def __eq__(self, other: object) -> np.ndarray:  # type: ignore[override]
        return self.value == _operand(other, self.value)

    def __ne__(self, other: object) -> np.ndarray:  # type: ignore[override]
        return self.value != _operand(other, self.value)

    def __lt__(self, other: Any) -> np.ndarray:
        return self.value < _operand(other, self.value)

    def __le__(self, other: Any) -> np.ndarray:
        return self.value <= _operand(other, self.value)

    def __gt__(self, other: Any) -> np.ndarray:
        return self.value > _operand(other, self.value)

    def __ge__(self, other: Any) -> np.ndarray:
        return self.value >= _operand(other, self.value)

    def sum(self, axis: Any = None, keepdims: bool = False) -> Tensor:
        """Sum (recorded)."""
        return _operators["reduce_sum"](self, axis, keepdims)

    def mean(self, axis: Any = None, keepdims: bool = False) -> Tensor:
        """Mean (recorded)."""
        return _operators["reduce_mean"](self, axis, keepdims)

    def reshape(self, *shape: Any) -> Tensor:
        """Reshape (recorded)."""
        return _operators["reshape"](self, shape[0] if len(shape) == 1 else shape)


class IndexedSlices:
    """A sparse gradient: ``values[i]`` belongs to row ``indices[i]`` of a ``dense_shape`` array.

    Indices may repeat (their rows add up); `deduplicate` sums them.
    """

    def __init__(self, values: np.ndarray, indices: np.ndarray, dense_shape: tuple[int, ...]):
        self.values = values if is_device_array(values) else np.asarray(values)
        self.indices = as_array_like(indices, self.values, np.int64)
        self.dense_shape = tuple(dense_shape)

    @property
    def dtype(self) -> np.dtype:
        """Dtype of the values."""
        return self.values.dtype

    def deduplicate(self) -> IndexedSlices:
        """Sorted unique indices with the rows of repeated ones summed."""
        unique, values = sum_rows(self.indices, self.values)
        return IndexedSlices(values, unique, self.dense_shape)

    def dense(self) -> Any:
        """The dense array, in the array module of the values."""
        out = array_module(self.values).zeros(self.dense_shape, self.values.dtype)
        scatter_add(out, self.indices, self.values)
        return out

    def numpy(self) -> np.ndarray:
        """The dense array on the host."""
        return to_numpy(self.dense())

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = self.numpy()
        return out if dtype is None else out.astype(dtype)

    def __repr__(self) -> str:
        return f"IndexedSlices(rows={len(self.indices)}, dense_shape={self.dense_shape})"


class RowsOf:
    """The source of a leaf holding rows ``ids`` of ``variable`` (a sparse read)."""

    __slots__ = ("ids", "variable")

    def __init__(self, variable: Any, ids: np.ndarray) -> None:
        self.variable, self.ids = variable, ids


def _operand(other: Any, like: Any) -> Any:
    """The other side of a comparison, in ``like``'s array module."""
    if isinstance(other, Tensor):
        other = other.value
    return as_array_like(other, like)


def as_tensor(x: Any) -> Tensor:
    """Return ``x`` as a `Tensor`, converting registered types (variables) by their hook."""
    if isinstance(x, Tensor):
        return x
    convert = _conversion_for(type(x))
    if convert is not None:
        return convert(x)
    return Tensor(x if is_device_array(x) else np.asarray(x))


def register_tensor_conversion(cls: type, convert: Callable[[Any], Tensor]) -> None:
    """Make `as_tensor` turn instances of ``cls`` (and its subclasses) into tensors.

    Variables register here, as TF's do with ``register_tensor_conversion_function``: the tape
    never imports the variable classes.
    """
    _conversions[cls] = convert
    _conversion_cache.clear()


def _conversion_for(cls: type) -> Callable[[Any], Tensor] | None:
    try:
        return _conversion_cache[cls]
    except KeyError:
        found = next((_conversions[k] for k in cls.__mro__ if k in _conversions), None)
        _conversion_cache[cls] = found
        return found


_conversions: dict[type, Callable[[Any], Tensor]] = {}
_conversion_cache: dict[type, Callable[[Any], Tensor] | None] = {}


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
